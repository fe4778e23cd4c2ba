// strata recover IMAGE -o DIR: the trace a crashed kernel's buffers held,
// read out of a physical memory image (docs/crash.md).  The recovery is the
// daemon's own (consumerd/recover.h: its reader, drain and metadata
// writer), run in this process; strata-consumerd --recover takes the same
// arguments through the same table.
#include "commands.h"
#include "recover.h"

int strata_cmd_recover(int argc, char **argv)
{
	strata::RecoverArgs a;
	if (const int r = strata::recover_parse(strata::recover_command(false), argc, argv, &a);
	    r != strata::cli::kParsed)
		return r;
	return strata::recover(a);
}
