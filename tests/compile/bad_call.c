/*
 * bad_call.c - negative compile cases, compiled as C and as C++ by
 * check_compile.py.  With no STRATA_BAD_CASE it must compile; with each case
 * it must fail with an error that names the argument.
 */
#include "sample_tp.h"

int use(void);
int use(void)
{
	uint32_t ids[2] = {1, 2};
	uint8_t mac[6] = {0};
	int value = 3;
	int wrong_int = 4;
	int wrong_ids[2] = {1, 2};
	double wrong_double = 2.5;
	int *wrong_ptr = &value;

	(void)wrong_ids;
	(void)wrong_double;
	(void)wrong_ptr;
	(void)wrong_int;
	strata_tracepoint(sample, all, 1u, -2, 0x10, 0.5, 1, "x", mac, ids, 2, "raw", 3);
	strata_tracepoint(sample, one, value);
	strata_tracepoint(sample, ping);
#if STRATA_BAD_CASE == 1 /* a pointer for an integer field */
	strata_tracepoint(sample, one, wrong_ptr);
#elif STRATA_BAD_CASE == 2 /* a double for an integer field */
	strata_tracepoint(sample, one, wrong_double);
#elif STRATA_BAD_CASE == 3 /* int * for a uint32_t sequence */
	strata_tracepoint(sample, all, 1u, -2, 0x10, 0.5, 1, "x", mac, wrong_ids, 2, "raw", 3);
#elif STRATA_BAD_CASE == 4 /* too few arguments */
	strata_tracepoint(sample, one);
#elif STRATA_BAD_CASE == 5 /* too many arguments */
	strata_tracepoint(sample, one, value, value);
#elif STRATA_BAD_CASE == 6 /* an integer for a string field */
	strata_tracepoint(sample, all, 1u, -2, 0x10, 0.5, 1, wrong_int, mac, ids, 2, "raw", 3);
#endif
	return value;
}
