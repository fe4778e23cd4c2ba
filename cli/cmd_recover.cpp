// strata recover IMAGE -o DIR: the trace a crashed kernel's buffers held,
// read out of a physical memory image (docs/crash.md).  The work is done by
// strata-consumerd --recover, which has the consumer's reader, drain and
// metadata writer: this command checks its arguments, finds it and hands
// over.
#include <cstdio>
#include <string>
#include <unistd.h>
#include <vector>

#include "commands.h"

namespace {

const strata::cli::Command kRecover = {
	"recover", "IMAGE -o DIR [--at PADDR]",
	"Write the Strata buffers a crashed kernel held to CTF traces in DIR\n"
	"(DIR/slot<N>/kernel, DIR/slot<N>/ust/pid/<comm>-<pid>: one trace per session).\n"
	"IMAGE: an ELF core of physical memory: /proc/vmcore in a kdump capture\n"
	"kernel, or qemu's dump-guest-memory (ELF).  The module's crash descriptor is\n"
	"found by scanning (or at PADDR, as printed by the module at load).\n"
	"See docs/crash.md."};

// strata-consumerd's arguments: --recover IMAGE -o DIR [--at PADDR].
// kParsed to go on, else the exit status.
int parse_args(int argc, char **argv, std::vector<std::string> &args)
{
	using namespace strata;
	std::string out, at;
	const std::vector<cli::Option> opts = {
		cli::text("output", 'o', "DIR", "a directory", "where the traces go", out),
		cli::custom("at", 0, "PADDR", "a physical address",
			    "the crash descriptor's physical address (page-aligned; decimal or 0x hex)",
			    [&at](const char *v) {
				    char *end;
				    const unsigned long long pa = strtoull(v, &end, 0);
				    if (!*v || *end || *v == '-' || pa % 4096)
					    return std::string("bad --at '") + v +
						   "' (a page-aligned address)";
				    at = v;
				    return std::string();
			    }),
	};
	std::vector<char *> operands;
	if (const int r = cli::parse(kRecover, opts, argc, argv, operands); r != cli::kParsed)
		return r;
	if (operands.size() != 1)
		return cli::usage_error(kRecover, operands.empty() ? "missing IMAGE" : "one IMAGE only");
	if (out.empty())
		return cli::usage_error(kRecover, "missing -o DIR");
	args = {"--recover", operands[0], "-o", out};
	if (!at.empty())
		args.insert(args.end(), {"--at", at});
	return cli::kParsed;
}

} // namespace

int strata_cmd_recover(int argc, char **argv)
{
	using namespace strata::cli;
	std::vector<std::string> args;
	if (const int r = parse_args(argc, argv, args); r != kParsed)
		return r;
	const std::string exe = find_consumerd();
	if (exe.empty()) {
		fprintf(stderr, "strata recover: strata-consumerd not found (set STRATA_CONSUMERD)\n");
		return kFail;
	}
	std::vector<char *> av;
	av.push_back(const_cast<char *>(exe.c_str()));
	for (std::string &a : args)
		av.push_back(&a[0]);
	av.push_back(nullptr);
	fflush(stdout);
	execv(exe.c_str(), av.data());
	perror("strata recover: exec strata-consumerd");
	return kFail;
}
