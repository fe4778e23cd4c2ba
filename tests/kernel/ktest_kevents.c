#include "ktest.h"

int kt_kevents(void)
{
	kt_fail("kernel event buffers not implemented yet");
	return -1;
}
