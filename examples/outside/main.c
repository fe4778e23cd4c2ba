/* strata-outside [N]: emits N outside:step events (default 10). */
#define STRATA_DEFINE_PROVIDERS
#include "outside_tp.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	unsigned n = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : 10;
	for (unsigned i = 0; i < n; i++)
		strata_tracepoint(outside, step, i, i % 2 ? "odd" : "even");
	printf("strata-outside: emitted %u outside:step events\n", n);
	return 0;
}
