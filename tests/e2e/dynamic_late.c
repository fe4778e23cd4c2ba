/*
 * dynamic_late.c - events declared at run time while `strata record`
 * records: one declared as main starts, one declared after the first has
 * written several packets.  Prints "first=N late=M".
 */
#include <stdio.h>
#include <stdlib.h>
#include <strata/dynamic.h>

int main(int argc, char **argv)
{
	uint64_t n1 = argc > 1 ? strtoull(argv[1], NULL, 0) : 20000;
	uint64_t n2 = argc > 2 ? strtoull(argv[2], NULL, 0) : 5000;
	static const struct strata_dyn_field f1[] = {
		{"seq", STRATA_FIELD_INTEGER, 8, 0, 10, 0},
		{"half", STRATA_FIELD_FLOAT, 8, 1, 0, 0},
	};
	static const struct strata_dyn_field f2[] = {
		{"seq", STRATA_FIELD_INTEGER, 4, 0, 10, 0},
		{"tag", STRATA_FIELD_STRING, 0, 0, 0, 0},
		{"neg", STRATA_FIELD_INTEGER, 2, 1, 10, 0},
	};
	strata_dyn_event *first, *late;
	int rc = strata_dyn_declare("dyn", "first", STRATA_LOGLEVEL_INFO, f1, 2, &first);
	if (rc < 0) {
		fprintf(stderr, "dyn:first: %s\n", strata_dyn_strerror(rc));
		return 1;
	}
	for (uint64_t i = 0; i < n1; i++) {
		union strata_dyn_value v[2];
		v[0].u = i;
		v[1].f = i / 2.0;
		strata_dyn_emit(first, v, 2);
	}
	rc = strata_dyn_declare("dyn", "late", STRATA_LOGLEVEL_NOTICE, f2, 3, &late);
	if (rc < 0) {
		fprintf(stderr, "dyn:late: %s\n", strata_dyn_strerror(rc));
		return 1;
	}
	for (uint64_t i = 0; i < n2; i++) {
		union strata_dyn_value v[3];
		v[0].u = i;
		v[1].s = i % 3 ? "three" : "zero";
		v[2].i = -(int64_t)(i % 1000);
		if (strata_dyn_enabled(late))
			strata_dyn_emit(late, v, 3);
	}
	strata_dyn_release(first);
	strata_dyn_release(late);
	printf("first=%llu late=%llu\n", (unsigned long long)n1, (unsigned long long)n2);
	return 0;
}
