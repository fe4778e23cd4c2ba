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

const char usage[] =
	"Usage: strata analyze mutex TRACE_DIR [--format=text|json] [--report=FILE.html] [--top N]\n"
	"       strata analyze monitor TRACE_DIR [same options]\n"
	"\n"
	"monitor: Java monitor contention of a trace recorded with strata record --jvm\n"
	"-e 'jvm:*' (docs/jvm.md): one row per monitor (class@identity hash) sorted by\n"
	"total wait: contended enters, wait statistics, waiting and holding threads\n"
	"(holders need STRATA_JVM_OWNER=1), Java call sites.\n"
	"\n"
	"mutex: "
	"lock contention of a trace recorded with the pthread preload library\n"
	"(strata record --preload pthread -- PROG): one row per lock, sorted by total\n"
	"wait time: acquisitions, contended acquisitions and their share, total, mean,\n"
	"p99 and max wait, max hold time, and the call sites that waited most\n"
	"(function+offset, file:line when debug info exists).\n"
	"\n"
	"  --format=text|json   output on stdout (default text)\n"
	"  --report=FILE.html   also write a self-contained HTML report (wait-time\n"
	"                       distributions and a per-thread timeline of waits and holds)\n"
	"  --top N              locks shown in text and HTML (default 10; JSON lists all)\n"
	"\n"
	"Environment for the traced program: STRATA_PTHREAD_STACK_DEPTH=N records N\n"
	"caller frames per acquisition (default 0).\n"
	"Exit status: 0 ok, 1 the trace could not be read, 2 usage error.\n";

int usage_error(const std::string &msg)
{
	return strata::cli::usage_error("analyze", msg);
}

} // namespace

int strata_cmd_analyze(int argc, char **argv)
{
	using namespace strata::analyze;
	// argv[0] is "analyze" (main passes argc - 1, argv + 1); tolerate a
	// caller that passes the arguments after it.
	int i = (argc > 0 && (!std::strcmp(argv[0], "mutex") || !std::strcmp(argv[0], "monitor"))) ? 0 : 1;
	if (i < argc && strata::cli::is_help(argv[i])) {
		std::cout << usage;
		return 0;
	}
	if (i >= argc)
		return usage_error("missing analysis name");
	std::string what = argv[i++];
	if (what != "mutex" && what != "monitor")
		return usage_error("unknown analysis '" + what + "' (available: mutex, monitor)");
	std::string dir, format = "text", report;
	Options opt;
	for (; i < argc; i++) {
		std::string a = argv[i];
		if (strata::cli::is_help(argv[i])) {
			std::cout << usage;
			return 0;
		} else if (a.rfind("--format=", 0) == 0) {
			format = a.substr(9);
		} else if (a == "--format" && i + 1 < argc) {
			format = argv[++i];
		} else if (a.rfind("--report=", 0) == 0) {
			report = a.substr(9);
		} else if (a == "--report" && i + 1 < argc) {
			report = argv[++i];
		} else if (a == "--top" || a.rfind("--top=", 0) == 0) {
			std::string v = a == "--top" ? (i + 1 < argc ? argv[++i] : "") : a.substr(6);
			char *end = nullptr;
			long n = std::strtol(v.c_str(), &end, 10);
			if (v.empty() || *end || n < 1 || n > 100000)
				return usage_error("--top needs a positive number");
			opt.top = static_cast<size_t>(n);
		} else if (!a.empty() && a[0] == '-') {
			return usage_error("unknown option " + a);
		} else if (dir.empty()) {
			dir = a;
		} else {
			return usage_error("more than one trace directory");
		}
	}
	if (dir.empty())
		return usage_error("missing TRACE_DIR");
	if (format != "text" && format != "json")
		return usage_error("--format must be text or json");
	// The timeline draws no more locks than the report shows ("top 5"
	// under --top 3 was wrong).
	opt.timeline_locks = std::min(opt.timeline_locks, opt.top);
	if (what == "monitor")
		return analyze_monitor(dir, format, report, opt.top);

	// Streaming: the reader hands each event to the model, which keeps
	// none (memory grows with locks, threads and waits); the symbols are
	// looked up once every mapping has been read.
	Input in;
	std::string err;
	bool ok = true;
	strata::rd::Source src("analyze");
	if (!src.open(dir))
		return strata::cli::kFail;
	strata::Progress progress = strata::progress_for("analyze", src);
	uint64_t seen = 0;
	const std::function<void(int64_t)> tick = [&](int64_t ts) { progress.update(++seen, ts); };
	std::unique_ptr<SymbolTable> syms;
	Report rep = analyze_feed(
		[&](const std::function<void(const Event &)> &on) {
			ok = read_trace_feed(src, &in, &on, &tick, &err);
		},
		in, opt,
		[&](uint32_t proc, uint64_t addr, bool code) {
			if (!syms)
				syms.reset(new SymbolTable(in.maps));
			return syms->lookup(proc, addr, code);
		});
	progress.done();
	src.finish();
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
	return 0;
}
