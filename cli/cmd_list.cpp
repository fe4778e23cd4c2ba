/*
 * cmd_list.cpp - `strata list`: tracepoints of the traced processes that
 * registered with the daemon and are still running.
 */
#include <cstdio>

#include "commands.h"
#include "control/ctl_client.h"

using namespace strata;

int strata_cmd_list(int argc, char **argv)
{
	const char *cmd = "list";
	for (int i = 1; i < argc; i++) {
		if (cli::is_help(argv[i])) {
			printf("Usage: strata list\n\n"
			       "List the tracepoints of running traced processes that registered with\n"
			       "the daemon (yours; every process for root).\n\n"
			       "Exit status: 0 ok, 1 runtime failure, 2 usage error.\n");
			return cli::kOk;
		}
		return cli::usage_error(cmd, std::string("unexpected argument '") + argv[i] + "'");
	}
	CtlClient cl;
	proto::Message ans;
	if (cli::query(cmd, cl, proto::List{}, proto::Type::ListReply, ans) != cli::kOk)
		return cli::kFail;
	const auto &entries = std::get<proto::ListReply>(ans.body).entries;
	if (entries.empty()) {
		printf("No traced process is registered.\n");
		return cli::kOk;
	}
	printf("%-8s %-16s %-40s %s\n", "PID", "PROCESS", "TRACEPOINT", "LOGLEVEL");
	for (const proto::ListEntry &e : entries)
		printf("%-8u %-16s %-40s %s\n", e.pid, e.comm.c_str(), e.event.c_str(), cli::loglevel_name(e.loglevel));
	return cli::kOk;
}
