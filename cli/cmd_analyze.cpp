// cmd_analyze.cpp - `strata analyze mutex TRACE_DIR [--format=text|json]
// [--report=FILE.html] [--top N]`: lock contention from the pthread
// preload library's events (docs/pthread.md).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <iostream>
#include <string>

#include "commands.h"

#include "analyze_model.h"
#include "analyze_monitor.h"
#include "analyze_reader.h"
#include "analyze_report.h"
#include "analyze_symbols.h"
#include "read_event.h"
#include "read_progress.h"
#include "view_graph.h"

namespace {

const strata::cli::Command kAnalyze = {
	"analyze",
	"mutex TRACE_DIR... [--format=text|json] [--report=FILE.html] [--top N]\n"
	"monitor TRACE_DIR... [same options]",
	"monitor: Java monitor contention of a trace recorded with strata record --jvm\n"
	"-e 'jvm:*' (docs/jvm.md): one row per monitor (class@identity hash) sorted by\n"
	"total wait: contended enters, wait statistics, waiting and holding threads\n"
	"(holders need STRATA_JVM_OWNER=1), Java call sites.\n"
	"\n"
	"mutex: lock contention of a trace recorded with the pthread preload library\n"
	"(strata record --preload pthread -- PROG): one row per lock, sorted by total\n"
	"wait time: acquisitions, contended acquisitions and their share, total, mean,\n"
	"p99 and max wait, max hold time, and the call sites that waited most\n"
	"(function+offset, file:line when debug info exists).\n"
	"\n"
	"Several TRACE_DIRs (a host's and its guests' traces) are read as one.",
	"Environment for the traced program: STRATA_PTHREAD_STACK_DEPTH=N records N\n"
	"caller frames per acquisition (default 0).",
	"Exit status: 0 ok, 1 the trace could not be read, or damage was skipped (the\n"
	"report of everything readable is written first; 'strata check' names it), 2 usage\n"
	"error."};

// What `analyze` was asked.
struct AnalyzeArgs {
	std::string what, dir, report; // dir: how messages name roots
	std::vector<std::string> roots;
	int format = 0; // text, json
	uint64_t top = 10;
};

// The command line into a: kParsed to go on, else the exit status.
int parse_args(int argc, char **argv, AnalyzeArgs &a)
{
	using namespace strata;
	const std::vector<cli::Option> opts = {
		cli::choice("format", 0, "text|json", "output on stdout (default text)", a.format,
			    {"text", "json"}),
		cli::text("report", 0, "FILE.html", "a file name",
			  "also write a self-contained HTML report (wait-time distributions and a "
			  "per-thread timeline of waits and holds)",
			  a.report),
		cli::number("top", 0, "N", "a positive number",
			    "locks shown in text and HTML (default 10; JSON "
			    "lists all)",
			    a.top, 1, 100000),
	};
	// argv[0] is "analyze" (main passes argc - 1, argv + 1); tolerate a
	// caller that passes the arguments after it.
	const bool bare = argc > 0 && (!std::strcmp(argv[0], "mutex") || !std::strcmp(argv[0], "monitor"));
	std::vector<char *> operands;
	if (bare)
		operands.push_back(argv[0]);
	if (const int r = cli::parse(kAnalyze, opts, argc, argv, operands); r != cli::kParsed)
		return r;
	if (operands.empty())
		return cli::usage_error(kAnalyze, "missing analysis name");
	a.what = operands[0];
	if (a.what != "mutex" && a.what != "monitor")
		return cli::usage_error(kAnalyze,
					"unknown analysis '" + a.what + "' (available: mutex, monitor)");
	if (operands.size() < 2)
		return cli::usage_error(kAnalyze, "missing TRACE_DIR");
	a.roots.assign(operands.begin() + 1, operands.end());
	a.dir = strata::roots_label(a.roots);
	return cli::kParsed;
}

} // namespace

int strata_cmd_analyze(int argc, char **argv)
{
	using namespace strata::analyze;
	AnalyzeArgs a;
	if (const int r = parse_args(argc, argv, a); r != strata::cli::kParsed)
		return r;
	const std::string &dir = a.dir, &report = a.report, format = a.format ? "json" : "text";
	Options opt;
	opt.top = static_cast<size_t>(a.top);
	// The timeline draws no more locks than the report shows ("top 5"
	// under --top 3 was wrong).
	opt.timeline_locks = std::min(opt.timeline_locks, opt.top);
	if (a.what == "monitor")
		return analyze_monitor(a.roots, format, report, opt.top);

	// Streaming: the reader hands each event to the model, which keeps
	// none (memory grows with locks, threads and waits); the symbols are
	// looked up once every mapping has been read.
	Input in;
	std::string err;
	bool ok = true;
	strata::rd::Source src("analyze");
	if (!src.open(a.roots))
		return strata::cli::kFail;
	strata::Progress progress = strata::progress_for("analyze", src);
	std::unique_ptr<SymbolTable> syms;
	Report rep = analyze_feed(
		[&](EventSink &on) { ok = read_trace_feed(src, &in, &on, &progress, &err); }, in, opt,
		[&](uint32_t proc, uint64_t addr, bool code) {
			if (!syms)
				syms.reset(new SymbolTable(in.maps));
			return syms->lookup(proc, addr, code);
		});
	progress.done();
	const bool whole = src.finish();
	if (!ok) {
		std::cerr << "strata analyze: " << err << "\n";
		if (!src.native())
			strata::cli::hint_torn("analyze", dir);
		return strata::cli::kFail;
	}
	if (syms)
		rep.missing_debug = syms->missing_debug();
	if (format == "json")
		write_json(std::cout, rep, opt);
	else
		write_text(std::cout, rep, opt);
	if (rep.events == 0)
		std::cerr << "strata analyze: no pthread events in " << dir
			  << " (was the program run with --preload pthread?)\n";
	if (!report.empty()) {
		std::ofstream f(report);
		write_html(f, rep, opt);
		f.close();
		if (!f) {
			std::cerr << "strata analyze: cannot write " << report << "\n";
			return 1;
		}
		if (format == "text")
			std::cout << "\nHTML report: " << report << "\n";
	}
	return whole ? 0 : strata::cli::kFail; // the report of what was readable, damage skipped
}
