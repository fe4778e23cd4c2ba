/*
 * read_entry.cpp - the entry point of libstrata-cli-read.so, the module
 * that holds the babeltrace2 readers (`strata view`, `strata analyze`);
 * loaded by cli/read_module.cpp.  Its only exported symbol.
 */
#include <cstring>

#include "commands.h"

extern "C" __attribute__((visibility("default"))) int strata_cli_read_main(const char *cmd, int argc,
									   char **argv)
{
	if (!strcmp(cmd, "view"))
		return strata_cmd_view(argc, argv);
	if (!strcmp(cmd, "analyze"))
		return strata_cmd_analyze(argc, argv);
	if (!strcmp(cmd, "export"))
		return strata_cmd_export(argc, argv);
	if (!strcmp(cmd, "check"))
		return strata_cmd_check(argc, argv);
	if (!strcmp(cmd, "query"))
		return strata_cmd_query(argc, argv);
	return strata::cli::kUsage;
}
