/*
 * cmd_snapshot.cpp - `strata snapshot [SESSION] [-o DIR]`, and
 * `strata snapshot --on PATTERN [--holdoff MS] [SESSION]` / `--off`.
 */
#include <cstdio>

#include "commands.h"

using namespace strata;

namespace {

const cli::Command kSnapshot = {"snapshot",
				"[SESSION] [-o DIR]\n--on PATTERN [--holdoff MS] [SESSION]\n--off [SESSION]",
				"Write the current content of every buffer of a running overwrite-mode\n"
				"(flight-recorder) session, user and kernel, to a new trace directory,\n"
				"without stopping the session or the traced processes.  Repeatable: each\n"
				"snapshot holds the newest complete packets of each buffer at that moment\n"
				"(open packets are closed first); what the ring overwrote before is counted\n"
				"as discarded events, and babeltrace2 reads the directory as it is.",
				"Prints the snapshot's directory (--on/--off: what was set)."};

struct SnapshotArgs {
	std::string session, out, on;
	bool off = false;
	uint32_t holdoff = 1000;
};

// kParsed to go on, else the exit status.
int parse_args(int argc, char **argv, SnapshotArgs &a)
{
	const std::vector<cli::Option> opts = {
		cli::path("output", 'o', "DIR", "a directory",
			  "the snapshot's directory (must not exist); default <session "
			  "output>-snapshot-<UTC time>",
			  a.out),
		cli::section("On an event:"),
		cli::text("on", 0, "PATTERN", "an event pattern",
			  "from now on, the session takes a snapshot by itself (named by time) whenever "
			  "an event matching PATTERN (provider:event, '*' globs; user or kernel) is "
			  "recorded; the snapshot holds that event.  Set before or while the session "
			  "runs; `strata stop` says how many were taken",
			  a.on),
		cli::number("holdoff", 0, "MS", "milliseconds",
			    "at most one such snapshot per MS milliseconds (default 1000; 0: one per "
			    "trigger seen, looked at every 50 ms)",
			    a.holdoff, 0u, proto::kMaxHoldoffMs),
		cli::flag("off", 0, "no more snapshots on an event", a.off),
	};
	std::vector<char *> operands;
	if (const int r = cli::parse(kSnapshot, opts, argc, argv, operands); r != cli::kParsed)
		return r;
	if (operands.size() > 1)
		return cli::usage_error(kSnapshot, "one session name only");
	if (!operands.empty())
		a.session = operands[0];
	return cli::kParsed;
}

} // namespace

int strata_cmd_snapshot(int argc, char **argv)
{
	const char *cmd = argv[0];
	SnapshotArgs a;
	if (const int r = parse_args(argc, argv, a); r != cli::kParsed)
		return r;
	std::string &session = a.session, &out = a.out, &on = a.on;
	const bool off = a.off;
	const uint32_t holdoff = a.holdoff;
	if (!cli::resolve_session(cmd, session))
		return cli::kFail;
	if (!proto::valid_session_name(session))
		return cli::usage_error(kSnapshot, "invalid session name '" + session + "'");
	if (out.size() > proto::kMaxPath)
		return cli::usage_error(kSnapshot, "output directory path too long");
	if (!on.empty() || off) {
		if (!on.empty() && off)
			return cli::usage_error(kSnapshot, "--on and --off together");
		if (!out.empty())
			return cli::usage_error(kSnapshot,
						"-o goes with a snapshot taken now, not with --on/--off");
		if (!off && (on.size() > proto::kMaxPattern || on.find(':') == std::string::npos))
			return cli::usage_error(kSnapshot,
						"--on wants an event pattern provider:event ('*' globs)");
		return cli::simple_command(cmd, proto::SnapshotOn{session, on, holdoff, off ? 1u : 0u});
	}
	return cli::simple_command(cmd, proto::Snapshot{session, out});
}
