/*
 * cmd_session.cpp - `strata start|stop|destroy SESSION`.
 */
#include <cstdio>

#include "commands.h"

using namespace strata;

namespace {

template <class Msg>
int session_command(int argc, char **argv, const char *what)
{
	const char *cmd = argv[0];
	std::string session;
	for (int i = 1; i < argc; i++) {
		if (cli::is_help(argv[i])) {
			printf("Usage: strata %s SESSION\n\n%s\n\nExit status: 0 ok, 1 runtime failure, 2 usage error.\n",
			       cmd, what);
			return cli::kOk;
		}
		if (argv[i][0] == '-')
			return cli::usage_error(cmd, std::string("unknown option '") + argv[i] + "'");
		if (!session.empty())
			return cli::usage_error(cmd, "one session name only");
		session = argv[i];
	}
	if (session.empty())
		return cli::usage_error(cmd, "missing session name");
	Msg m;
	m.session = session;
	return cli::simple_command(cmd, m);
}

} // namespace

int strata_cmd_start(int argc, char **argv)
{
	return session_command<proto::Start>(argc, argv,
		"Start recording: processes that start from now on join the session (they\n"
		"link tp-sync or tp-async), and running processes that link tp-async join\n"
		"it before this command returns (it reports how many did).");
}

int strata_cmd_stop(int argc, char **argv)
{
	return session_command<proto::Stop>(argc, argv,
		"Stop recording: flush every buffer of the session and complete its trace.\n"
		"Returns once the trace on disk is complete (and tp-async processes have\n"
		"left the session).");
}

int strata_cmd_destroy(int argc, char **argv)
{
	return session_command<proto::Destroy>(argc, argv,
		"Stop the session if needed and forget it.  The trace stays on disk.");
}
