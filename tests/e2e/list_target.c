/*
 * list_target.c - a program for check_list.py: four tracepoints, a probe of
 * its own on lt:a (count_a, exported so that the report names it: the
 * build hides symbols by default, and dladdr sees only exported ones), and
 * whatever STRATA_AGGREGATE adds.  Says "ready PID" and waits: a line on
 * stdin unregisters the probe ("unregistered"), end of input exits.  With
 * LIST_LATE_PROBE set it starts with no probe (no probe report, which
 * `strata list` must then not look for) and registers it at the first line
 * instead ("registered": the report made long after its start-up REGISTER).
 * Each further line fires lt:b once ("fired").
 * With LIST_NONDUMPABLE set it makes itself non-dumpable (prctl) after its
 * report is made: its descriptors are then out of reach of a reader that is
 * not privileged (no CAP_SYS_PTRACE).
 */
#define STRATA_DEFINE_PROVIDERS
#include <strata/tracepoint.h>
STRATA_EVENT(lt, a, STRATA_LOGLEVEL_INFO, strata_int(uint32_t, v))
STRATA_EVENT(lt, b, STRATA_LOGLEVEL_INFO, strata_int(uint32_t, v))
STRATA_EVENT(lt, c, STRATA_LOGLEVEL_INFO, strata_int(uint32_t, v))
STRATA_EVENT(lt, d, STRATA_LOGLEVEL_DEBUG, strata_int(uint32_t, v))

#include <strata/probe.h>

#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

unsigned long hits_a;

__attribute__((visibility("default"))) void count_a(const struct strata_probe_event *ev, void *priv);
void count_a(const struct strata_probe_event *ev, void *priv)
{
	(void)ev;
	(void)priv;
	hits_a++;
}

int main(void)
{
	strata_probe *p = NULL;
	const char *late = getenv("LIST_LATE_PROBE");
	const int is_late = late && *late;
	int rc = is_late ? 0 : strata_probe_register("lt:a", -1, count_a, NULL, &p);
	if (rc < 0) {
		fprintf(stderr, "probe: %s\n", strata_probe_strerror(rc));
		return 1;
	}
	strata_tracepoint(lt, a, 1);
	const char *nd = getenv("LIST_NONDUMPABLE");
	if (nd && *nd && prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
		perror("prctl");
		return 1;
	}
	printf("ready %d\n", (int)getpid());
	fflush(stdout);
	char buf[64];
	if (read(0, buf, sizeof buf) > 0) {
		if (is_late) {
			rc = strata_probe_register("lt:a", -1, count_a, NULL, &p);
			printf("%s\n", rc < 0 ? strata_probe_strerror(rc) : "registered");
		} else {
			strata_probe_unregister(p);
			printf("unregistered\n");
		}
		fflush(stdout);
		while (read(0, buf, sizeof buf) > 0) { // each further line: one lt:b event
			strata_tracepoint(lt, b, 2);
			printf("fired\n");
			fflush(stdout);
		}
	}
	return hits_a == (is_late ? 0u : 1u) ? 0 : 2;
}
