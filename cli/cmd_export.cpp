// cmd_export.cpp - `strata export [--format perfetto|json] [-o FILE] [DIR]`:
// one timeline of every sub-trace under DIR (user, kernel, JVM, several
// processes) in Perfetto's protobuf trace format or Chrome's JSON trace
// events, for ui.perfetto.dev, chrome://tracing, speedscope and the like.
// The command: its options, the output file, what is told at the end.  The
// conversion is the trace processor's (processor/export/export_timeline.h);
// what each Strata event becomes is documented in docs/viewing.md.
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "export_sink.h"
#include "export_timeline.h"
#include "read_event.h"
#include "read_progress.h"
#include "view_graph.h"

namespace strata {
namespace {

// With the output in a file (stdout free for it): what went in, and what
// was left out and why.
void report_export(const timeline::TimelineCounts &conv, const std::string &out_path)
{
	std::fprintf(stderr, "strata export: %" PRIu64 " events (%" PRIu64 " discarded) -> %s\n", conv.events,
		     conv.discarded, out_path.c_str());
	if (conv.unmatched_ends)
		std::fprintf(stderr,
			     "strata export: %" PRIu64
			     " syscall exits or unlocks had no beginning in the trace"
			     " (begun before it): left out\n",
			     conv.unmatched_ends);
	if (conv.counted_pairs)
		std::fprintf(stderr,
			     "strata export: %" PRIu64
			     " uncontended lock holds were counted (the preload's default), not "
			     "recorded one by one: not drawn; their counts are the pthread:mutex_counts "
			     "instants (STRATA_PTHREAD_COUNT=0 records every pair)\n",
			     conv.counted_pairs);
}

int run_export(const std::vector<std::string> &roots, bool json, const std::string &out_path)
{
	rd::Source src("export");
	if (!src.open(roots))
		return cli::kFail;
	const std::string dir = roots_label(roots);
	int64_t begin = 0, end = 0;
	const bool ranged = src.range(&begin, &end); // also the JSON's zero

	FILE *out = stdout;
	if (out_path != "-") {
		out = std::fopen(out_path.c_str(), "wb");
		if (!out) {
			std::fprintf(stderr, "strata export: cannot create '%s': %s\n", out_path.c_str(),
				     std::strerror(errno));
			return cli::kFail;
		}
	}
	std::unique_ptr<exp::Sink> sink =
		json ? exp::make_json_sink(out, ranged ? begin : 0) : exp::make_perfetto_sink(out);
	Progress progress("export", ranged && isatty(STDERR_FILENO), begin, end);
	timeline::TimelineCounts conv;
	const bool ok = timeline::convert_timeline(src, *sink, dir, progress, &conv);
	progress.done();
	if (conv.machines_over)
		std::fprintf(
			stderr,
			"strata export: more than %u machines: the last %u share the ids of machine %u\n",
			exp::kMaxMachine, conv.machines_over + 1, exp::kMaxMachine);
	const bool written = sink->finish();
	const bool closed = out == stdout ? std::fflush(out) == 0 : std::fclose(out) == 0;
	const bool whole = src.finish();
	if (!ok) {
		std::fprintf(stderr, "strata export: %s\n", src.why().c_str());
		if (!src.native())
			cli::hint_torn("export", dir);
		return cli::kFail;
	}
	if (!written || !closed) {
		std::fprintf(stderr, "strata export: cannot write '%s': %s\n", out_path.c_str(),
			     std::strerror(errno));
		return cli::kFail;
	}
	if (out != stdout)
		report_export(conv, out_path);
	return whole ? cli::kOk : cli::kFail; // everything readable written, damage skipped
}

} // namespace
} // namespace strata

namespace {

const strata::cli::Command kExport = {
	"export", "[--format perfetto|json] [-o FILE] [DIR...]",
	"Write every trace under DIR (default: the current directory; user, kernel and\n"
	"JVM sub-traces, several processes, relay and snapshot outputs) as one timeline;\n"
	"several DIRs (a host's and its guests' traces) are read as one.",
	"Processes and threads are named (Java threads by their Java names); kernel\n"
	"scheduling gives per-CPU tracks and thread states; syscalls are slices on their\n"
	"threads; an event pair NAME_begin/NAME_end (also _start/_end, _start/_finish,\n"
	"_entry/_exit, _enter/_exit) on one thread is a slice NAME, any other event an\n"
	"instant; pthread lock waits and holds and JVM monitor waits are slices, with a\n"
	"flow from the thread that released a lock to the waiter that got it (for\n"
	"JVM monitors, inferred: docs/viewing.md); lost\n"
	"events are a counter and a marker.  docs/viewing.md says more.\n"
	"A progress bar is drawn on standard error when it is a terminal.",
	"Exit status: 0 ok, 1 the trace cannot be read or the output written, or damage was\n"
	"skipped (everything readable is written first; 'strata check' names it), 2 usage error."};

// The command line: kParsed to go on, else the exit status.
int parse_export_args(int argc, char **argv, std::vector<std::string> &roots, std::string &out, int &format)
{
	using namespace strata;
	const std::vector<cli::Option> opts = {
		cli::choice("format", 0, "perfetto|json",
			    "perfetto: Perfetto's protobuf trace (default; FILE: DIR.perfetto-trace, the "
			    "first DIR's name, or trace.perfetto-trace); open it in https://ui.perfetto.dev\n"
			    "json: Chrome's JSON trace events (FILE: DIR.json); for small traces and viewers "
			    "that read only that (chrome://tracing, speedscope)",
			    format, {"perfetto", "json"}),
		cli::text("output", 'o', "FILE", "a file name", "where to write ('-': standard output)", out),
	};
	std::vector<char *> operands;
	if (const int r = cli::parse(kExport, opts, argc, argv, operands); r != cli::kParsed)
		return r;
	roots.assign(operands.begin(), operands.end());
	if (roots.empty())
		roots.push_back(".");
	return cli::kParsed;
}

} // namespace

int strata_cmd_export(int argc, char **argv)
{
	using namespace strata;
	std::vector<std::string> roots;
	std::string out;
	int format = 0;
	if (const int r = parse_export_args(argc, argv, roots, out, format); r != cli::kParsed)
		return r;
	const bool json = format == 1;
	if (out.empty()) {
		std::string base = roots[0];
		while (base.size() > 1 && base.back() == '/')
			base.pop_back();
		if (base == "." || base == "/")
			base = "trace";
		out = base + (json ? ".json" : ".perfetto-trace");
	}
	return run_export(roots, json, out);
}
