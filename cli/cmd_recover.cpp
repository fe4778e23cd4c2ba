// strata recover IMAGE -o DIR: the trace a crashed kernel's buffers held,
// read out of a physical memory image (docs/crash.md).  The work is done by
// strata-consumerd --recover, which has the consumer's reader, drain and
// metadata writer: this command only finds it and hands over.
#include <cstdio>
#include <string>
#include <unistd.h>
#include <vector>

#include "commands.h"

int strata_cmd_recover(int argc, char **argv)
{
	using namespace strata::cli;
	const std::string exe = strata::cli::find_consumerd();
	if (exe.empty()) {
		fprintf(stderr, "strata recover: strata-consumerd not found (set STRATA_CONSUMERD)\n");
		return kFail;
	}
	std::vector<char *> args;
	args.push_back(const_cast<char *>(exe.c_str()));
	args.push_back(const_cast<char *>("--recover"));
	for (int i = 1; i < argc; i++)
		args.push_back(argv[i]);
	args.push_back(nullptr);
	fflush(stdout);
	execv(exe.c_str(), args.data());
	perror("strata recover: exec strata-consumerd");
	return kFail;
}
