/*
 * read_module.cpp - `strata view`, `analyze`, `export`, `check` and `query`,
 * which read traces (Strata's reader, babeltrace2, SQLite), live in a module
 * of their own (libstrata-cli-read.so, cli/read_entry.cpp) that only these
 * commands load.  The control
 * commands (create, enable-event, start, ...) are process starts that a
 * user, a script or the enablement latency waits for; not mapping
 * libbabeltrace2, glib and pcre2 there saves about fifty page faults,
 * about 1 ms on a VM where a fault costs ~20 us (docs/benchmarks.md).
 */
#include <cstdio>
#include <string>
#include <dlfcn.h>

#include "commands.h"

namespace {

constexpr const char *kModule = "libstrata-cli-read.so";

int run_in_module(const char *cmd, int argc, char **argv)
{
	// The build tree keeps it beside strata (cli/), an install in
	// <libdir>/strata.
	const std::string path = strata::cli::find_library(kModule);
	if (path.empty()) {
		fprintf(stderr,
			"strata %s: %s not found next to strata, in ../lib/strata or in " STRATA_LIBDIR
			"/strata (the trace reader is not installed)\n",
			cmd, kModule);
		return strata::cli::kFail;
	}
	void *h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "strata %s: cannot load %s: %s\n", cmd, path.c_str(), dlerror());
		return strata::cli::kFail;
	}
	using Entry = int (*)(const char *, int, char **);
	auto entry = reinterpret_cast<Entry>(dlsym(h, "strata_cli_read_main"));
	if (!entry) {
		fprintf(stderr, "strata %s: %s has no entry point (a different build?)\n", cmd, path.c_str());
		return strata::cli::kFail;
	}
	return entry(cmd, argc, argv); // the module stays loaded until exit
}

} // namespace

int strata_cmd_view(int argc, char **argv)
{
	return run_in_module("view", argc, argv);
}

int strata_cmd_analyze(int argc, char **argv)
{
	return run_in_module("analyze", argc, argv);
}

int strata_cmd_export(int argc, char **argv)
{
	return run_in_module("export", argc, argv);
}

int strata_cmd_check(int argc, char **argv)
{
	return run_in_module("check", argc, argv);
}

int strata_cmd_query(int argc, char **argv)
{
	return run_in_module("query", argc, argv);
}
