/*
 * cmd_snapshot.cpp - `strata snapshot [SESSION] [-o DIR]`.
 */
#include <cstdio>
#include <cstring>

#include "commands.h"

using namespace strata;

int strata_cmd_snapshot(int argc, char **argv)
{
	const char *cmd = argv[0];
	std::string session, out;
	for (int i = 1; i < argc; i++) {
		if (cli::is_help(argv[i])) {
			printf("Usage: strata snapshot [SESSION] [-o DIR]\n\n"
			       "Write the current content of every buffer of a running overwrite-mode\n"
			       "(flight-recorder) session, user and kernel, to a new trace directory,\n"
			       "without stopping the session or the traced processes.  Repeatable: each\n"
			       "snapshot holds the newest complete packets of each buffer at that moment\n"
			       "(open packets are closed first); what the ring overwrote before is counted\n"
			       "as discarded events, and babeltrace2 reads the directory as it is.\n\n"
			       "  -o, --output DIR  the snapshot's directory (must not exist); default\n"
			       "                    <session output>-snapshot-<UTC time>\n\n"
			       "Prints the snapshot's directory.\n"
			       "Exit status: 0 ok, 1 runtime failure, 2 usage error.\n");
			return cli::kOk;
		}
		if (!strcmp(argv[i], "-o") || !strcmp(argv[i], "--output")) {
			if (i + 1 >= argc)
				return cli::usage_error(cmd, std::string(argv[i]) + " needs a directory");
			out = cli::absolute_path(argv[++i]);
			continue;
		}
		if (!strncmp(argv[i], "--output=", 9)) {
			out = cli::absolute_path(argv[i] + 9);
			continue;
		}
		if (argv[i][0] == '-')
			return cli::usage_error(cmd, std::string("unknown option '") + argv[i] + "'");
		if (!session.empty())
			return cli::usage_error(cmd, "one session name only");
		session = argv[i];
	}
	if (session.empty() && (session = cli::implicit_session(cmd)).empty())
		return cli::kFail;
	if (!proto::valid_session_name(session))
		return cli::usage_error(cmd, "invalid session name '" + session + "'");
	if (out.size() > proto::kMaxPath)
		return cli::usage_error(cmd, "output directory path too long");
	return cli::simple_command(cmd, proto::Snapshot{session, out});
}
