/*
 * cmd_snapshot.cpp - `strata snapshot [SESSION] [-o DIR]`, and
 * `strata snapshot --on PATTERN [--holdoff MS] [SESSION]` / `--off`.
 */
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "commands.h"

using namespace strata;

namespace {

void help()
{
	printf("Usage: strata snapshot [SESSION] [-o DIR]\n"
	       "       strata snapshot --on PATTERN [--holdoff MS] [SESSION]\n"
	       "       strata snapshot --off [SESSION]\n\n"
	       "Write the current content of every buffer of a running overwrite-mode\n"
	       "(flight-recorder) session, user and kernel, to a new trace directory,\n"
	       "without stopping the session or the traced processes.  Repeatable: each\n"
	       "snapshot holds the newest complete packets of each buffer at that moment\n"
	       "(open packets are closed first); what the ring overwrote before is counted\n"
	       "as discarded events, and babeltrace2 reads the directory as it is.\n\n"
	       "  -o, --output DIR  the snapshot's directory (must not exist); default\n"
	       "                    <session output>-snapshot-<UTC time>\n\n"
	       "  --on PATTERN      from now on, the session takes a snapshot by itself\n"
	       "                    (named by time) whenever an event matching PATTERN\n"
	       "                    (provider:event, '*' globs; user or kernel) is\n"
	       "                    recorded; the snapshot holds that event.  Set before\n"
	       "                    or while the session runs; `strata stop` says how\n"
	       "                    many were taken\n"
	       "  --holdoff MS      at most one such snapshot per MS milliseconds\n"
	       "                    (default 1000; 0: one per trigger seen, looked at\n"
	       "                    every 50 ms)\n"
	       "  --off             no more snapshots on an event\n\n"
	       "Prints the snapshot's directory (--on/--off: what was set).\n"
	       "Exit status: 0 ok, 1 runtime failure, 2 usage error.\n");
}

} // namespace

int strata_cmd_snapshot(int argc, char **argv)
{
	const char *cmd = argv[0];
	std::string session, out, on;
	bool off = false;
	long holdoff = 1000;
	for (int i = 1; i < argc; i++) {
		if (cli::is_help(argv[i])) {
			help();
			return cli::kOk;
		}
		if (!strcmp(argv[i], "-o") || !strcmp(argv[i], "--output")) {
			if (i + 1 >= argc || !*argv[i + 1])
				return cli::usage_error(cmd, std::string(argv[i]) + " needs a directory");
			out = cli::absolute_path(argv[++i]);
			continue;
		}
		if (!strcmp(argv[i], "--on") || !strcmp(argv[i], "--holdoff")) {
			if (i + 1 >= argc)
				return cli::usage_error(cmd, std::string(argv[i]) + " needs a value");
			if (!strcmp(argv[i], "--on")) {
				on = argv[++i];
				continue;
			}
			char *end = nullptr;
			holdoff = strtol(argv[++i], &end, 10);
			if (!*argv[i] || *end || holdoff < 0 ||
			    holdoff > static_cast<long>(proto::kMaxHoldoffMs))
				return cli::usage_error(cmd,
							std::string("--holdoff wants milliseconds, 0 to ") +
								std::to_string(proto::kMaxHoldoffMs));
			continue;
		}
		if (!strcmp(argv[i], "--off")) {
			off = true;
			continue;
		}
		if (!strncmp(argv[i], "--output=", 9)) {
			out = cli::absolute_path(argv[i] + 9);
			continue;
		}
		const int s = cli::session_argument(cmd, argv[i], session);
		if (s >= 0)
			return s;
	}
	if (!cli::resolve_session(cmd, session))
		return cli::kFail;
	if (!proto::valid_session_name(session))
		return cli::usage_error(cmd, "invalid session name '" + session + "'");
	if (out.size() > proto::kMaxPath)
		return cli::usage_error(cmd, "output directory path too long");
	if (!on.empty() || off) {
		if (!on.empty() && off)
			return cli::usage_error(cmd, "--on and --off together");
		if (!out.empty())
			return cli::usage_error(cmd,
						"-o goes with a snapshot taken now, not with --on/--off");
		if (!off && (on.size() > proto::kMaxPattern || on.find(':') == std::string::npos))
			return cli::usage_error(cmd,
						"--on wants an event pattern provider:event ('*' globs)");
		return cli::simple_command(
			cmd, proto::SnapshotOn{session, on, static_cast<uint32_t>(holdoff), off ? 1u : 0u});
	}
	return cli::simple_command(cmd, proto::Snapshot{session, out});
}
