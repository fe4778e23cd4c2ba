/*
 * ktest.c - in-guest tests of strata.ko (run inside the qemu guest by
 * run-vm.sh; needs the module loaded and root to start with).
 *
 *   strata-ktest [--cycles N] [--fuzz-iters N] TEST...   (TEST or "all")
 *
 * Prints one line per test: "PASS name[: figures]" or "FAIL name: why";
 * exits 1 if any test failed.  Oracles are exact: errno values, rule
 * contents read back, pids reported missing, object counts back to their
 * start value, kernel clock within the two clock_gettime() around it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "runtime.h"
#include "strata_kabi.h"
#include "strata_kclock.h"
#include "strata_kmod.h"
#include "ktest.h"

#define SIG_UPDATE (SIGRTMIN + 3)

static unsigned long g_cycles = 10000;
static unsigned long g_fuzz_iters = 200000;
static char g_why[512];

void kt_fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(g_why, sizeof(g_why), fmt, ap);
	va_end(ap);
}

#define CHECK(cond, ...)                      \
	do {                                  \
		if (!(cond)) {                \
			kt_fail(__VA_ARGS__); \
			goto out;             \
		}                             \
	} while (0)

int kt_open(void)
{
	return strata_kmod_open();
}

int kt_register(int fd, int signo)
{
	return strata_kmod_register(fd, signo, NULL);
}

static void one_rule(struct strata_kabi_rule *rule, const char *pattern)
{
	memset(rule, 0, sizeof(*rule));
	if (pattern)
		snprintf(rule->pattern, sizeof(rule->pattern), "%s", pattern);
	rule->loglevel_max = -1;
	rule->enable = 1;
}

int kt_set_rules_uid(int fd, unsigned slot, uint32_t uid, const char *pattern, uint64_t *gen,
		     uint32_t *n_signalled)
{
	struct strata_kabi_rule rule;

	one_rule(&rule, pattern);
	return strata_kmod_set_rules(fd, slot, &rule, pattern ? 1 : 0, STRATA_KABI_TARGET_UID, uid, NULL, 0,
				     gen, n_signalled);
}

static int set_rules_targets(int fd, unsigned slot, uint32_t kind, const void *targets, uint32_t n,
			     const char *pattern, uint64_t *gen, uint32_t *n_signalled)
{
	struct strata_kabi_rule rule;

	one_rule(&rule, pattern);
	return strata_kmod_set_rules(fd, slot, &rule, 1, kind, 0, targets, n, gen, n_signalled);
}

int kt_stats(int fd, struct strata_kabi_stats *st)
{
	return strata_kmod_stats(fd, st);
}

/* QUERY into buf; returns n_entries or -errno; *gen = generation. */
static int query(int fd, void *buf, uint32_t *size, uint64_t *gen)
{
	uint32_t n = 0;
	int ret = strata_kmod_query(fd, buf, size, gen, &n);

	return ret ? ret : (int)n;
}

/* Wait for SIG_UPDATE (blocked by the caller) for up to ms; 1 if received. */
static int got_signal(int ms)
{
	sigset_t set;
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

	sigemptyset(&set);
	sigaddset(&set, SIG_UPDATE);
	return sigtimedwait(&set, NULL, &ts) == SIG_UPDATE;
}

static void block_update_signal(void)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIG_UPDATE);
	sigaddset(&set, SIGUSR1);
	sigprocmask(SIG_BLOCK, &set, NULL);
}

/* 's' once SIG_UPDATE arrives; 'n' if SIGUSR1 (the parent's "done")
 * comes while SIG_UPDATE is not pending; 't' after 10 s. */
static char got_signal_or_end(void)
{
	sigset_t set, pend;
	struct timespec ts = {10, 0};
	int sig;

	sigemptyset(&set);
	sigaddset(&set, SIG_UPDATE);
	sigaddset(&set, SIGUSR1);
	sig = sigtimedwait(&set, NULL, &ts);
	if (sig == SIG_UPDATE)
		return 's';
	if (sig != SIGUSR1)
		return 't';
	sigpending(&pend);
	return sigismember(&pend, SIG_UPDATE) ? 's' : 'n';
}

static char read_char(int fd);

/* ---- abi: the uapi layout is what user space and runtime.h expect ---- */
static int t_abi(void)
{
	CHECK(sizeof(struct strata_kabi_rule) == sizeof(struct strata_rule) &&
		      offsetof(struct strata_kabi_rule, filter) == offsetof(struct strata_rule, filter) &&
		      offsetof(struct strata_kabi_rule, enable) == offsetof(struct strata_rule, enable),
	      "struct strata_kabi_rule differs from struct strata_rule");
	CHECK(STRATA_KABI_MAX_RULES == STRATA_MAX_RULES, "rule count differs");
	CHECK(sizeof(struct strata_kabi_register) == STRATA_KABI_REGISTER_SIZE_V1 &&
		      offsetof(struct strata_kabi_query, format) == STRATA_KABI_QUERY_SIZE_V1 &&
		      sizeof(struct strata_kabi_ack) == STRATA_KABI_ACK_SIZE_V1 &&
		      offsetof(struct strata_kabi_set_rules, session_id) == STRATA_KABI_SET_RULES_SIZE_V1 &&
		      sizeof(struct strata_kabi_wait) == STRATA_KABI_WAIT_SIZE_V1 &&
		      offsetof(struct strata_kabi_stats, slots_busy) == STRATA_KABI_STATS_SIZE_V1,
	      "V1 parts of the argument structs differ from the V1 sizes");
	CHECK(sizeof(struct strata_kabi_query) == STRATA_KABI_QUERY_SIZE_V2 &&
		      sizeof(struct strata_kabi_set_rules) == STRATA_KABI_SET_RULES_SIZE_V3 &&
		      offsetof(struct strata_kabi_set_rules, kbuf_subbuf_size) ==
			      STRATA_KABI_SET_RULES_SIZE_V2 &&
		      sizeof(struct strata_kabi_kbuf_open) == STRATA_KABI_KBUF_OPEN_SIZE_V2 &&
		      offsetof(struct strata_kabi_kbuf_open, flags) == STRATA_KABI_KBUF_OPEN_SIZE_V1 &&
		      sizeof(struct strata_kabi_stats) == STRATA_KABI_STATS_SIZE_V2 &&
		      sizeof(struct strata_kabi_grant) == STRATA_KABI_GRANT_SIZE &&
		      sizeof(struct strata_kabi_rule_target) == STRATA_KABI_RULE_TARGET_SIZE,
	      "argument struct sizes differ from the V2/V3 sizes");
	CHECK(sizeof(struct strata_kabi_channel) == sizeof(struct strata_channel_config) &&
		      offsetof(struct strata_kabi_channel, stream_id) ==
			      offsetof(struct strata_channel_config, stream_id) &&
		      offsetof(struct strata_kabi_channel, subbuf_size) ==
			      offsetof(struct strata_channel_config, subbuf_size) &&
		      STRATA_KABI_NAME_MAX == STRATA_NAME_MAX,
	      "struct strata_kabi_channel differs from struct strata_channel_config");
	return 0;
out:
	return -1;
}

/* ---- control: register, set rules, signal, query, ack, wait ---------- */
/* Rules set, signalled, read back (also through too small a buffer),
 * acknowledged; *genp: their generation. */
static int control_set_query_ack(int fd, int ctl, uint64_t *genp)
{
	int n;
	uint64_t gen, qgen;
	uint32_t nsig, size, missing[4], n_missing = 0;
	char buf[8192];
	struct strata_kabi_slot_rules *h = (void *)buf;
	struct strata_kabi_rule *r = (void *)(h + 1);

	size = sizeof(buf);
	n = query(fd, buf, &size, &qgen);
	CHECK(n == 0 && size == 0, "query before any rule: n=%d size=%u", n, size);

	CHECK(kt_set_rules_uid(ctl, 3, getuid(), "app:*", &gen, &nsig) == 0, "set_rules: %s",
	      strerror(errno));
	CHECK(nsig == 1, "n_signalled %u, want 1", nsig);
	CHECK(got_signal(2000), "no signal after set_rules");
	CHECK(gen > qgen, "generation did not grow (%llu after %llu)", (unsigned long long)gen,
	      (unsigned long long)qgen);

	/* Not acknowledged yet: WAIT with timeout 0 names us. */
	n = strata_kmod_wait(ctl, gen, 0, missing, 4, &n_missing);
	CHECK(n == -ETIMEDOUT && n_missing == 1 && missing[0] == (uint32_t)getpid(),
	      "wait before ack: ret %d n_missing %u pid %u", n, n_missing, missing[0]);

	/* Too small a buffer: -EMSGSIZE and the needed size. */
	size = 8;
	n = query(fd, buf, &size, &qgen);
	CHECK(n == -EMSGSIZE && size == sizeof(*h) + sizeof(*r), "small query: ret %d size %u", n, size);
	size = sizeof(buf);
	n = query(fd, buf, &size, &qgen);
	CHECK(n == 1 && size == sizeof(*h) + sizeof(*r) && h->slot == 3 && h->n_rules == 1 &&
		      h->generation == gen && !strcmp(r->pattern, "app:*") && r->enable == 1 &&
		      r->loglevel_max == -1 && qgen == gen,
	      "query read back: n=%d size=%u slot=%u n_rules=%u pattern=%.20s", n, size, h->slot, h->n_rules,
	      r->pattern);
	CHECK(strata_kmod_ack(fd, gen + 1000) == -EINVAL, "ack of a future generation accepted");
	CHECK(strata_kmod_ack(ctl, gen) == -ENOENT, "ack on an unregistered fd accepted");
	CHECK(strata_kmod_ack(fd, gen) == 0, "ack: %s", strerror(errno));
	n = strata_kmod_wait(ctl, gen, 1000, missing, 4, &n_missing);
	CHECK(n == 0 && n_missing == 0, "wait after ack: ret %d n_missing %u", n, n_missing);
	*genp = gen;
	return 0;
out:
	return -1;
}

/* A WAIT that a later ACK releases (from another process); *genp: the new
 * rules' generation. */
static int control_ack_other_group(int fd, int ctl, uint64_t *genp)
{
	int n, st;
	uint64_t gen;
	uint32_t nsig, missing[4], n_missing = 0;

	CHECK(kt_set_rules_uid(ctl, 3, getuid(), "app:other", &gen, &nsig) == 0 && nsig == 1,
	      "second set_rules");
	pid_t child = fork();
	if (child == 0) {
		_exit(strata_kmod_ack(fd, gen) == 0 ? 0 : 1);
	}
	/* The child shares fd but is another thread group: its ACK must fail
	 * (-ENOENT), so the parent's WAIT times out naming the parent. */
	n = strata_kmod_wait(ctl, gen, 300, missing, 4, &n_missing);
	waitpid(child, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1, "inherited fd could ack");
	CHECK(n == -ETIMEDOUT && n_missing == 1, "wait: ret %d n_missing %u", n, n_missing);
	CHECK(got_signal(1000), "no second signal");
	CHECK(strata_kmod_ack(fd, gen) == 0, "second ack");
	CHECK(strata_kmod_wait(ctl, gen, 1000, NULL, 0, &n_missing) == 0, "second wait");
	*genp = gen;
	return 0;
out:
	return -1;
}

/* An inherited registration: busy while its group lives, taken over once
 * the group is gone. */
static int control_takeover(uint64_t gen)
{
	int fd2 = kt_open(), go[2], done[2], st;

	CHECK(fd2 >= 0 && pipe(go) == 0 && pipe(done) == 0, "open/pipe");
	pid_t x = fork();
	if (x == 0) {
		char w = kt_register(fd2, SIGUSR2) == 0 ? 'r' : 'e';

		close(go[0]);
		close(done[1]);
		if (write(go[1], &w, 1) != 1 || read(done[0], &w, 1) != 0)
			_exit(1);
		_exit(0);
	}
	close(go[1]);
	close(done[0]);
	CHECK(read_char(go[0]) == 'r', "child could not register");
	CHECK(kt_register(fd2, SIG_UPDATE) == -EBUSY, "took over a live group's registration");
	close(done[1]);
	waitpid(x, &st, 0);
	close(go[0]);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child failed");
	CHECK(kt_register(fd2, SIG_UPDATE) == 0, "could not take over a dead group's registration");
	CHECK(strata_kmod_ack(fd2, gen) == 0, "ack after takeover");
	close(fd2);
	return 0;
out:
	return -1;
}

static int t_control(void)
{
	int fd = kt_open(), ctl = kt_open(), ret = -1;
	uint64_t gen, qgen;
	uint32_t nsig, size;
	char buf[8192];

	block_update_signal();
	CHECK(fd >= 0 && ctl >= 0, "open %s: %s", STRATA_KABI_DEVICE, strerror(errno));
	CHECK(kt_register(fd, SIG_UPDATE) == 0, "register: %s", strerror(errno));
	if (control_set_query_ack(fd, ctl, &gen) || control_ack_other_group(fd, ctl, &gen) ||
	    control_takeover(gen))
		goto out;

	/* Clearing the slot signals the process it targeted. */
	CHECK(kt_set_rules_uid(ctl, 3, 0, NULL, &gen, &nsig) == 0 && nsig == 1, "clear slot: n_signalled %u",
	      nsig);
	CHECK(got_signal(1000), "no signal on clear");
	size = sizeof(buf);
	CHECK(query(fd, buf, &size, &qgen) == 0 && qgen == gen, "query after clear");
	ret = 0;
out:
	close(fd);
	close(ctl);
	return ret;
}

/* ---- session: kabi 2 grants, per-rule targets, ownership ------------- */
static void a_session(struct strata_kmod_session *ss, uint64_t id)
{
	memset(ss, 0, sizeof(*ss));
	ss->session_id = id;
	strcpy(ss->channel.name, "channel0");
	ss->channel.mode = 1;
	ss->channel.n_subbuf = 4;
	ss->channel.subbuf_size = 65536;
	strcpy(ss->sock_path, "/run/strata/test.sock");
}

/* The grant of a session whose second rule targets another process:
 * session, channel, socket, and only the rule that targets us. */
static int session_grant(int fd, int ctl, struct strata_kmod_session *ss, struct strata_kabi_rule *rules,
			 struct strata_kabi_rule_target *tg)
{
	int n;
	uint64_t gen, qgen;
	uint32_t nsig = 0, size, ne = 0;
	char buf[8192];
	struct strata_kabi_grant *g = (void *)buf;
	struct strata_kabi_rule *r = (void *)(g + 1);

	one_rule(&rules[0], "all:*");
	one_rule(&rules[1], "mine:*");
	memset(tg, 0, 2 * sizeof(*tg));
	tg[1].n_pids = 1;
	tg[1].pids[0] = 1; /* init: not us */
	a_session(ss, 77);
	ss->rule_targets = tg;
	CHECK(strata_kmod_set_session(ctl, 4, ss, rules, 2, getuid(), &gen, &nsig) == 0, "set_session: %s",
	      strerror(errno));
	CHECK(nsig == 1 && got_signal(2000), "set_session: signalled %u", nsig);
	/* The grant: session, channel, socket, and only the rule that targets us. */
	size = sizeof(buf);
	n = strata_kmod_query_grants(fd, buf, &size, &qgen, &ne);
	CHECK(n == 0 && ne == 1 && size == sizeof(*g) + sizeof(*r) && g->slot == 4 && g->n_rules == 1 &&
		      g->session_id == 77 && g->generation == gen && !strcmp(g->channel.name, "channel0") &&
		      g->channel.mode == 1 && g->channel.n_subbuf == 4 && g->channel.subbuf_size == 65536 &&
		      !strcmp(g->sock_path, "/run/strata/test.sock") && !strcmp(r->pattern, "all:*"),
	      "grant: ret %d n %u size %u slot %u n_rules %u id %llu", n, ne, size, g->slot, g->n_rules,
	      (unsigned long long)g->session_id);
	size = sizeof(*g);
	n = strata_kmod_query_grants(fd, buf, &size, &qgen, &ne);
	CHECK(n == -EMSGSIZE && size == sizeof(*g) + sizeof(*r), "small grants: %d %u", n, size);
	CHECK(strata_kmod_ack(fd, qgen) == 0, "ack");
	return 0;
out:
	return -1;
}

/* Changes of the session's targets: signalled and owed only when they
 * change our answer. */
static int session_retarget(int fd, int ctl, struct strata_kmod_session *ss, struct strata_kabi_rule *rules,
			    struct strata_kabi_rule_target *tg)
{
	uint64_t gen, qgen;
	uint32_t nsig = 0, size, n_missing, ne = 0;
	char buf[8192];
	struct strata_kabi_grant *g = (void *)buf;
	struct strata_kabi_rule *r = (void *)(g + 1);

	/* A change that leaves our answer alone: not signalled, not owed. */
	tg[1].pids[0] = 2;
	CHECK(strata_kmod_set_session(ctl, 4, ss, rules, 2, getuid(), &gen, &nsig) == 0 && nsig == 0,
	      "unrelated change signalled %u", nsig);
	CHECK(strata_kmod_wait(ctl, gen, 0, NULL, 0, &n_missing) == 0, "unrelated change owed");
	/* The second rule by name: now both rules, in order. */
	memset(&tg[1], 0, sizeof(tg[1]));
	tg[1].n_comms = 1;
	CHECK(prctl(PR_GET_NAME, tg[1].comms[0]) == 0, "comm");
	CHECK(strata_kmod_set_session(ctl, 4, ss, rules, 2, getuid(), &gen, &nsig) == 0 && nsig == 1 &&
		      got_signal(2000),
	      "comm target: signalled %u", nsig);
	size = sizeof(buf);
	CHECK(strata_kmod_query_grants(fd, buf, &size, &qgen, &ne) == 0 && ne == 1 && g->n_rules == 2 &&
		      !strcmp(r[1].pattern, "mine:*"),
	      "comm target: %u rules", g->n_rules);
	/* The V1 format sees the same (filtered) rules. */
	size = sizeof(buf);
	CHECK(query(fd, buf, &size, &qgen) == 1 && ((struct strata_kabi_slot_rules *)buf)->n_rules == 2,
	      "v1 query after session");
	CHECK(strata_kmod_ack(fd, qgen) == 0, "ack 2");
	/* A session without rules grants everyone its slot targets. */
	ss->rule_targets = NULL;
	CHECK(strata_kmod_set_session(ctl, 4, ss, NULL, 0, getuid(), &gen, &nsig) == 0 && nsig == 1 &&
		      got_signal(2000),
	      "session without rules");
	size = sizeof(buf);
	CHECK(strata_kmod_query_grants(fd, buf, &size, &qgen, &ne) == 0 && ne == 1 && g->n_rules == 0 &&
		      g->session_id == 77,
	      "grant without rules: %u", ne);
	CHECK(strata_kmod_ack(fd, qgen) == 0, "ack 3");
	return 0;
out:
	return -1;
}

/* Ownership: another open file gets -EBUSY, the owner's close (of *ctl,
 * then -1) clears the slot and signals its processes. */
static int session_ownership(int fd, int *ctl, int ctl2, struct strata_kmod_session *ss,
			     struct strata_kabi_rule *rules, struct strata_kabi_rule_target *tg)
{
	struct strata_kabi_stats st;
	uint64_t qgen;
	uint32_t size, ne = 0;
	char buf[8192];

	ss->rule_targets = tg;
	CHECK(strata_kmod_set_session(ctl2, 4, ss, rules, 1, getuid(), NULL, NULL) == -EBUSY,
	      "another file took an owned slot");
	CHECK(kt_stats(fd, &st) == 0 && (st.slots_busy & (1u << 4)), "slots_busy 0x%llx",
	      (unsigned long long)st.slots_busy);
	close(*ctl);
	*ctl = -1;
	CHECK(got_signal(2000), "no signal when the owner closed");
	size = sizeof(buf);
	CHECK(strata_kmod_query_grants(fd, buf, &size, &qgen, &ne) == 0 && ne == 0,
	      "slot left after the owner closed: %u", ne);
	CHECK(kt_stats(fd, &st) == 0 && !(st.slots_busy & (1u << 4)), "slots_busy after close");
	CHECK(strata_kmod_set_session(ctl2, 4, ss, rules, 1, getuid(), NULL, NULL) == 0,
	      "free slot not taken: %s", strerror(errno));
	CHECK(got_signal(2000), "ctl2's set not signalled");
	return 0;
out:
	return -1;
}

/* Validation of every V2 field. */
static int session_validation(int fd, int ctl2, const struct strata_kmod_session *ss,
			      struct strata_kabi_rule *rules, struct strata_kabi_rule_target *tg)
{
	struct strata_kabi_set_rules a;
	struct strata_kabi_query q;

#define BAD(errv, what, ...)                                                                              \
	do {                                                                                              \
		memset(&a, 0, sizeof(a));                                                                 \
		a.size = sizeof(a);                                                                       \
		a.slot = 5;                                                                               \
		a.n_rules = 1;                                                                            \
		a.target_kind = STRATA_KABI_TARGET_UID;                                                   \
		a.target_uid = getuid();                                                                  \
		a.rules_ptr = (uintptr_t)rules;                                                           \
		a.session_id = 9;                                                                         \
		a.channel = ss->channel;                                                                  \
		memcpy(a.sock_path, ss->sock_path, sizeof(a.sock_path));                                  \
		__VA_ARGS__;                                                                              \
		CHECK(ioctl(ctl2, STRATA_IOC_SET_RULES, &a) < 0 && errno == (errv), "%s: errno %d", what, \
		      errno);                                                                             \
	} while (0)
	memset(tg, 0, 2 * sizeof(*tg));
	BAD(EINVAL, "mode 2", a.channel.mode = 2);
	BAD(EINVAL, "n_subbuf 3", a.channel.n_subbuf = 3);
	BAD(EINVAL, "subbuf_size 1000", a.channel.subbuf_size = 1000);
	BAD(EINVAL, "empty channel name", a.channel.name[0] = 0);
	BAD(EINVAL, "unterminated channel name", memset(a.channel.name, 'c', sizeof(a.channel.name)));
	BAD(EINVAL, "relative socket", strcpy(a.sock_path, "run/x.sock"));
	BAD(EINVAL, "unterminated socket", memset(a.sock_path, '/', sizeof(a.sock_path)));
	BAD(EINVAL, "channel without session", a.session_id = 0);
	BAD(EINVAL, "reserved2", a.reserved2 = 1);
	BAD(EFAULT, "bad rule_targets_ptr", a.rule_targets_ptr = 16);
	tg[0].n_pids = STRATA_KABI_RULE_PIDS + 1;
	BAD(EINVAL, "65 pids", a.rule_targets_ptr = (uintptr_t)tg);
	tg[0].n_pids = 1;
	tg[0].pids[0] = 1;
	tg[0].pids[1] = 2;
	BAD(EINVAL, "pid past n_pids", a.rule_targets_ptr = (uintptr_t)tg);
	tg[0].pids[1] = 0;
	tg[0].pids[0] = 0;
	BAD(EINVAL, "pid 0", a.rule_targets_ptr = (uintptr_t)tg);
	memset(tg, 0, 2 * sizeof(*tg));
	tg[0].n_comms = 1;
	BAD(EINVAL, "empty name", a.rule_targets_ptr = (uintptr_t)tg);
	memset(tg[0].comms[0], 'n', STRATA_KABI_COMM_MAX);
	BAD(EINVAL, "unterminated name", a.rule_targets_ptr = (uintptr_t)tg);
	memset(tg, 0, 2 * sizeof(*tg));
	tg[0].comms[3][0] = 'x';
	BAD(EINVAL, "name past n_comms", a.rule_targets_ptr = (uintptr_t)tg);
	BAD(EINVAL, "targets when clearing", a.session_id = 0; memset(&a.channel, 0, sizeof(a.channel));
	    memset(a.sock_path, 0, sizeof(a.sock_path)); a.n_rules = 0; a.rule_targets_ptr = (uintptr_t)tg);
#undef BAD
	memset(tg, 0, 2 * sizeof(*tg));
	memset(&q, 0, sizeof(q));
	q.size = sizeof(q);
	q.format = 1;
	CHECK(ioctl(fd, STRATA_IOC_QUERY, &q) < 0 && errno == EINVAL, "query format 1");
	q.format = STRATA_KABI_QUERY_GRANTS;
	q.reserved2 = 1;
	CHECK(ioctl(fd, STRATA_IOC_QUERY, &q) < 0 && errno == EINVAL, "query reserved2");
	return 0;
out:
	return -1;
}

/* A registration with signo 0 (tp-sync) is never signalled nor owed; our
 * own registration (*fd, closed and then -1) is left out of the count. */
static int session_signo0(int *fd, int ctl2, struct strata_kmod_session *ss, struct strata_kabi_rule *rules)
{
	int z = kt_open();
	uint64_t gen, qgen;
	uint32_t nsig = 0, size, n_missing, ne = 0;
	char buf[8192];

	CHECK(z >= 0 && *fd >= 0, "open");
	close(*fd); /* our own registration: out of the count below */
	*fd = -1;
	CHECK(kt_register(z, 0) == 0, "register signo 0");
	CHECK(strata_kmod_set_session(ctl2, 4, ss, rules, 2, getuid(), &gen, &nsig) == 0 && nsig == 0,
	      "signo 0 signalled: %u", nsig);
	CHECK(strata_kmod_wait(ctl2, gen, 0, NULL, 0, &n_missing) == 0, "signo 0 owed an ack");
	size = sizeof(buf);
	CHECK(strata_kmod_query_grants(z, buf, &size, &qgen, &ne) == 0 && ne == 1, "signo 0 query: %u", ne);
	close(z);
	return 0;
out:
	return -1;
}

static int t_session(void)
{
	int fd = kt_open(), ctl = kt_open(), ctl2 = kt_open(), ret = -1, n;
	static struct strata_kabi_rule_target tg[2];
	struct strata_kabi_rule rules[2];
	struct strata_kmod_session ss;

	block_update_signal();
	while (got_signal(0))
		;
	CHECK(fd >= 0 && ctl >= 0 && ctl2 >= 0, "open");
	n = strata_kmod_register_v(fd, SIG_UPDATE, NULL);
	CHECK(n == STRATA_KABI_VERSION, "register: kabi version %d", n);
	if (session_grant(fd, ctl, &ss, rules, tg) || session_retarget(fd, ctl, &ss, rules, tg) ||
	    session_ownership(fd, &ctl, ctl2, &ss, rules, tg) ||
	    session_validation(fd, ctl2, &ss, rules, tg) || session_signo0(&fd, ctl2, &ss, rules))
		goto out;
	CHECK(strata_kmod_set_rules(ctl2, 4, NULL, 0, STRATA_KABI_TARGET_UID, 0, NULL, 0, NULL, NULL) == 0,
	      "clear");
	ret = 0;
out:
	if (fd >= 0)
		close(fd);
	if (ctl >= 0)
		close(ctl);
	close(ctl2);
	while (got_signal(0))
		;
	return ret;
}

/* ---- errors: every ioctl validates its input ------------------------- */
/* Unknown commands, bad pointers and sizes, a struct straddling the end of
 * a mapping: STATS as the example. */
static int errors_stats(int fd)
{
	unsigned char big[256];
	struct strata_kabi_stats *st = (void *)big;
	void *bad = (void *)16;

	CHECK(ioctl(fd, _IO(STRATA_KABI_IOC_MAGIC, 99), big) < 0 && errno == ENOTTY, "unknown nr: errno %d",
	      errno);
	CHECK(ioctl(fd, _IO('T', 1), big) < 0 && errno == ENOTTY, "foreign magic: errno %d", errno);
	CHECK(ioctl(fd, STRATA_IOC_STATS, bad) < 0 && errno == EFAULT, "bad pointer: errno %d", errno);
	CHECK(ioctl(fd, STRATA_IOC_STATS, NULL) < 0 && errno == EFAULT, "NULL: errno %d", errno);
	memset(big, 0, sizeof(big));
	st->size = 8;
	CHECK(ioctl(fd, STRATA_IOC_STATS, st) < 0 && errno == EINVAL, "small size: errno %d", errno);
	st->size = 1 << 20;
	CHECK(ioctl(fd, STRATA_IOC_STATS, st) < 0 && errno == EINVAL, "huge size: errno %d", errno);
	/* A newer, bigger struct: zero tail accepted, non-zero tail refused. */
	st->size = sizeof(big);
	CHECK(ioctl(fd, STRATA_IOC_STATS, st) == 0, "bigger zero-tail size: errno %d", errno);
	CHECK(st->size == sizeof(big), "size field changed");
	big[200] = 1;
	st->size = sizeof(big);
	CHECK(ioctl(fd, STRATA_IOC_STATS, st) < 0 && errno == E2BIG, "non-zero tail: errno %d", errno);
	/* Struct straddling the end of a mapping. */
	char *page = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(page != MAP_FAILED, "mmap");
	munmap(page + 4096, 4096);
	struct strata_kabi_stats *edge = (void *)(page + 4096 - 8);
	edge->size = sizeof(*edge);
	CHECK(ioctl(fd, STRATA_IOC_STATS, edge) < 0 && errno == EFAULT, "straddling: errno %d", errno);
	munmap(page, 4096);
	return 0;
out:
	return -1;
}

static int t_errors(void)
{
	int fd = kt_open(), ret = -1, n;
	void *bad = (void *)16;

	CHECK(fd >= 0, "open");
	if (errors_stats(fd))
		goto out;

	struct strata_kabi_register r = {.size = sizeof(r), .signo = SIGKILL};
	CHECK(ioctl(fd, STRATA_IOC_REGISTER, &r) < 0 && errno == EINVAL, "SIGKILL accepted");
	r.signo = 65;
	CHECK(ioctl(fd, STRATA_IOC_REGISTER, &r) < 0 && errno == EINVAL, "signal 65 accepted");

	struct strata_kabi_rule rule;
	memset(&rule, 'x', sizeof(rule)); /* no terminating NUL */
	struct strata_kabi_set_rules s = {.size = sizeof(s),
					  .slot = 0,
					  .n_rules = 1,
					  .target_kind = STRATA_KABI_TARGET_UID,
					  .rules_ptr = (uintptr_t)&rule};
	CHECK(ioctl(fd, STRATA_IOC_SET_RULES, &s) < 0 && errno == EINVAL, "unterminated pattern");
	s.rules_ptr = (uintptr_t)bad;
	CHECK(ioctl(fd, STRATA_IOC_SET_RULES, &s) < 0 && errno == EFAULT, "bad rules_ptr");
	s.slot = STRATA_KABI_MAX_SLOTS;
	CHECK(ioctl(fd, STRATA_IOC_SET_RULES, &s) < 0 && errno == EINVAL, "bad slot");
	s.slot = 0;
	s.n_rules = STRATA_KABI_MAX_RULES + 1;
	CHECK(ioctl(fd, STRATA_IOC_SET_RULES, &s) < 0 && errno == EINVAL, "too many rules");
	memset(&rule, 0, sizeof(rule));
	strcpy(rule.pattern, "a:b");
	s.n_rules = 1;
	s.rules_ptr = (uintptr_t)&rule;
	s.target_kind = 42;
	CHECK(ioctl(fd, STRATA_IOC_SET_RULES, &s) < 0 && errno == EINVAL, "bad target kind");
	s.target_kind = STRATA_KABI_TARGET_PIDS;
	s.n_targets = 0;
	CHECK(ioctl(fd, STRATA_IOC_SET_RULES, &s) < 0 && errno == EINVAL, "no pids");
	s.n_targets = 1;
	s.targets_ptr = (uintptr_t)bad;
	CHECK(ioctl(fd, STRATA_IOC_SET_RULES, &s) < 0 && errno == EFAULT, "bad targets_ptr");

	struct strata_kabi_query q = {.size = sizeof(q), .buf_size = 1 << 20, .buf_ptr = (uintptr_t)bad};
	n = kt_set_rules_uid(fd, 0, getuid(), "q:q", NULL, NULL);
	CHECK(n == 0, "set_rules for query: %d", n);
	CHECK(ioctl(fd, STRATA_IOC_QUERY, &q) < 0 && errno == EFAULT, "bad query buffer");
	CHECK(kt_set_rules_uid(fd, 0, 0, NULL, NULL, NULL) == 0, "clear");

	struct strata_kabi_wait w = {.size = sizeof(w), .generation = ~0ull};
	CHECK(ioctl(fd, STRATA_IOC_WAIT, &w) < 0 && errno == EINVAL, "future generation");
	w.generation = 0;
	w.timeout_ms = 0xffffffffu;
	CHECK(ioctl(fd, STRATA_IOC_WAIT, &w) < 0 && errno == EINVAL, "huge timeout");
	ret = 0;
out:
	close(fd);
	return ret;
}

/* ---- targets: by pid list and by process name ------------------------ */
static pid_t spawn_waiter(const char *comm, int *pipe_rd)
{
	int p[2];
	pid_t pid;

	if (pipe(p))
		return -1;
	pid = fork();
	if (pid == 0) {
		int fd = kt_open();
		char c = 'r';

		prctl(PR_SET_NAME, comm);
		close(p[0]);
		if (fd < 0 || kt_register(fd, SIG_UPDATE))
			c = 'e';
		if (write(p[1], &c, 1) != 1)
			_exit(3);
		c = got_signal_or_end();
		if (write(p[1], &c, 1) != 1)
			_exit(3);
		_exit(0);
	}
	close(p[1]);
	*pipe_rd = p[0];
	return pid;
}

static char read_char(int fd)
{
	char c = '?';

	if (read(fd, &c, 1) != 1)
		return '?';
	return c;
}

static int t_targets(void)
{
	int ctl = kt_open(), ret = -1, rd[3] = {-1, -1, -1};
	pid_t pids[3] = {0, 0, 0};
	uint64_t gen;
	uint32_t nsig;
	char comms[1][16] = {"kt-named"};
	uint32_t pidv[1];

	block_update_signal();
	CHECK(ctl >= 0, "open");
	pids[0] = spawn_waiter("kt-plain", &rd[0]);
	pids[1] = spawn_waiter("kt-named", &rd[1]);
	pids[2] = spawn_waiter("kt-plain", &rd[2]);
	for (int i = 0; i < 3; i++)
		CHECK(read_char(rd[i]) == 'r', "waiter %d did not register", i);
	pidv[0] = (uint32_t)pids[2];
	CHECK(set_rules_targets(ctl, 5, STRATA_KABI_TARGET_PIDS, pidv, 1, "p:*", &gen, &nsig) == 0,
	      "set pids: %s", strerror(errno));
	CHECK(nsig == 1, "pids: signalled %u, want 1", nsig);
	CHECK(set_rules_targets(ctl, 6, STRATA_KABI_TARGET_COMMS, comms, 1, "c:*", &gen, &nsig) == 0,
	      "set comms");
	CHECK(nsig == 1, "comms: signalled %u, want 1", nsig);
	CHECK(read_char(rd[1]) == 's' && read_char(rd[2]) == 's', "targeted waiters not signalled");
	/* The signals are sent before SET_RULES returns: now tell the
	 * untargeted waiter to report whether one is pending. */
	kill(pids[0], SIGUSR1);
	CHECK(read_char(rd[0]) == 'n', "untargeted waiter signalled");
	CHECK(kt_set_rules_uid(ctl, 5, 0, NULL, NULL, NULL) == 0 &&
		      kt_set_rules_uid(ctl, 6, 0, NULL, NULL, NULL) == 0,
	      "clear");
	ret = 0;
out:
	for (int i = 0; i < 3; i++) {
		if (pids[i] > 0)
			waitpid(pids[i], NULL, 0);
		if (rd[i] >= 0)
			close(rd[i]);
	}
	close(ctl);
	return ret;
}

/* ---- tree: a pid and its descendants (TARGET_TREE) ------------------- */
static int t_tree(void)
{
	int ctl = kt_open(), ret = -1, rd = -1, ord = -1, p[2] = {-1, -1};
	pid_t mid = -1, outside = -1;
	uint64_t gen;
	uint32_t nsig, root, two[2] = {1, 1}, zero = 0;

	block_update_signal();
	CHECK(ctl >= 0, "open");
	CHECK(pipe(p) == 0, "pipe");
	/* mid, the tree's root, registers nothing; its child G (our
	 * grandchild) is a waiter, whose two characters mid passes on. */
	mid = fork();
	if (mid == 0) {
		int grd;
		pid_t g = spawn_waiter("kt-grand", &grd);
		char c;

		close(p[0]);
		for (int i = 0; i < 2; i++) {
			c = g > 0 ? read_char(grd) : 'e';
			if (write(p[1], &c, 1) != 1)
				_exit(3);
		}
		waitpid(g, NULL, 0);
		_exit(0);
	}
	close(p[1]);
	rd = p[0];
	outside = spawn_waiter("kt-outside", &ord); /* our child: outside mid's tree */
	CHECK(read_char(rd) == 'r' && read_char(ord) == 'r', "waiters did not register");
	root = (uint32_t)mid;
	CHECK(set_rules_targets(ctl, 7, STRATA_KABI_TARGET_TREE, &root, 1, "t:*", &gen, &nsig) == 0,
	      "set tree: %s", strerror(errno));
	CHECK(nsig == 1, "tree: signalled %u, want 1 (the grandchild)", nsig);
	CHECK(read_char(rd) == 's', "the root's child's child not signalled");
	kill(outside, SIGUSR1);
	CHECK(read_char(ord) == 'n', "a process outside the tree signalled");
	CHECK(kt_set_rules_uid(ctl, 7, 0, NULL, NULL, NULL) == 0, "clear");
	/* One pid, never 0, readable. */
	CHECK(set_rules_targets(ctl, 7, STRATA_KABI_TARGET_TREE, two, 2, "t:*", &gen, &nsig) < 0 &&
		      errno == EINVAL,
	      "two roots refused");
	CHECK(set_rules_targets(ctl, 7, STRATA_KABI_TARGET_TREE, &zero, 1, "t:*", &gen, &nsig) < 0 &&
		      errno == EINVAL,
	      "root 0 refused");
	CHECK(set_rules_targets(ctl, 7, STRATA_KABI_TARGET_TREE, NULL, 1, "t:*", &gen, &nsig) < 0 &&
		      errno == EINVAL,
	      "no root refused");
	CHECK(set_rules_targets(ctl, 7, STRATA_KABI_TARGET_TREE, (void *)8, 1, "t:*", &gen, &nsig) < 0 &&
		      errno == EFAULT,
	      "unreadable root refused");
	ret = 0;
out:
	if (mid > 0)
		waitpid(mid, NULL, 0);
	if (outside > 0)
		waitpid(outside, NULL, 0);
	if (rd >= 0)
		close(rd);
	if (ord >= 0)
		close(ord);
	close(ctl);
	return ret;
}

/* ---- perm: two unprivileged uids ------------------------------------- */
static void drop_to(uid_t uid)
{
	if (setresgid(uid, uid, uid) || setresuid(uid, uid, uid))
		_exit(90);
}

/* The processes of t_perm and their pipes, -1 once gone. */
struct perm_procs {
	int rd, bp[2], hold[2];
	pid_t a, b, keep;
};

/* A: uid ua, registered, reports whether it was signalled (on pp->rd). */
static int perm_start_a(struct perm_procs *pp, uid_t ua)
{
	int p[2] = {-1, -1};

	CHECK(pipe(p) == 0, "pipe");
	pp->a = fork();
	if (pp->a == 0) {
		char c = 'r';
		int fd;

		drop_to(ua);
		fd = kt_open();
		close(p[0]);
		if (fd < 0 || kt_register(fd, SIG_UPDATE))
			c = 'e';
		if (write(p[1], &c, 1) != 1)
			_exit(3);
		/* Signalled once: by the ua controller, not by ub's. */
		c = got_signal(30000) ? 's' : 'n';
		if (write(p[1], &c, 1) != 1)
			_exit(3);
		_exit(0);
	}
	close(p[1]);
	pp->rd = p[0];
	CHECK(read_char(pp->rd) == 'r', "A did not register");
	return 0;
out:
	return -1;
}

/* B's steps as a controller of uid ub: its exit code, 0 if all held. */
static int perm_b_steps(int fd, uid_t ua, uid_t ub, pid_t a)
{
	int n;
	uint64_t gen;
	uint32_t nsig, pid = (uint32_t)a, missing[2], n_missing;

	if (kt_set_rules_uid(fd, 7, ua, "x:*", NULL, NULL) != -EPERM)
		return 11;
	if (kt_set_rules_uid(fd, 7, STRATA_KABI_UID_ANY, "x:*", NULL, NULL) != -EPERM)
		return 12;
	if (kt_set_rules_uid(fd, 7, ub, "x:*", NULL, &nsig) || nsig != 0)
		return 13;
	if (set_rules_targets(fd, 8, STRATA_KABI_TARGET_PIDS, &pid, 1, "x:*", &gen, &nsig) || nsig != 0)
		return 14;
	/* A's missing ack is not B's business. */
	n = strata_kmod_wait(fd, gen, 0, missing, 2, &n_missing);
	if (n != 0 || n_missing != 0)
		return 15;
	return 0;
}

/* B: uid ub may not reach A in any way.  B stays alive (its fd owns
 * slots 7 and 8) until `hold` closes; then pp->keep is B. */
static int perm_controller_b(struct perm_procs *pp, uid_t ua, uid_t ub)
{
	int st;

	CHECK(pipe(pp->bp) == 0 && pipe(pp->hold) == 0, "pipe");
	pp->b = fork();
	if (pp->b == 0) {
		int fd, e;
		char w;

		drop_to(ub);
		fd = kt_open();
		if (fd < 0)
			_exit(10);
		e = perm_b_steps(fd, ua, ub, pp->a);
		if (e)
			_exit(e);
		close(pp->bp[0]);
		close(pp->hold[1]);
		if (write(pp->bp[1], "k", 1) != 1 || read(pp->hold[0], &w, 1) != 0)
			_exit(16);
		_exit(0);
	}
	close(pp->bp[1]);
	close(pp->hold[0]);
	pp->bp[1] = pp->hold[0] = -1;
	if (read_char(pp->bp[0]) != 'k') {
		waitpid(pp->b, &st, 0);
		pp->b = -1;
		CHECK(0, "controller B (other uid): step %d failed", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	}
	pp->keep = pp->b;
	pp->b = -1;
	return 0;
out:
	return -1;
}

/* A ua controller may not take B's slot 7, but reaches A. */
static int perm_controller_a2(struct perm_procs *pp, uid_t ua)
{
	int st;

	pp->b = fork();
	if (pp->b == 0) {
		int fd;
		uint32_t nsig;

		drop_to(ua);
		fd = kt_open();
		if (fd < 0)
			_exit(20);
		if (kt_set_rules_uid(fd, 7, ua, "y:*", NULL, NULL) != -EPERM)
			_exit(21);
		if (kt_set_rules_uid(fd, 9, ua, "y:*", NULL, &nsig) || nsig != 1)
			_exit(22);
		if (kt_set_rules_uid(fd, 9, 0, NULL, NULL, NULL))
			_exit(23);
		_exit(0);
	}
	waitpid(pp->b, &st, 0);
	pp->b = -1;
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "controller A' (same uid): step %d failed",
	      WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	CHECK(read_char(pp->rd) == 's', "A was not signalled by its own uid");
	return 0;
out:
	return -1;
}

static int t_perm(void)
{
	const uid_t ua = 40001, ub = 40002;
	struct perm_procs pp = {.rd = -1, .bp = {-1, -1}, .hold = {-1, -1}, .a = -1, .b = -1, .keep = -1};
	int ret = -1, fd = -1, st;

	block_update_signal();
	if (perm_start_a(&pp, ua) || perm_controller_b(&pp, ua, ub) || perm_controller_a2(&pp, ua))
		goto out;

	/* Root (CAP_SYS_ADMIN) may not set a slot B's open file owns (-EBUSY),
	 * but may clear it; then the slot is root's file's, and B's release
	 * (its exit) leaves it alone. */
	fd = kt_open();
	CHECK(fd >= 0, "open");
	CHECK(kt_set_rules_uid(fd, 7, STRATA_KABI_UID_ANY, "z:*", NULL, NULL) == -EBUSY,
	      "root set a slot owned by another open file");
	CHECK(kt_set_rules_uid(fd, 7, 0, NULL, NULL, NULL) == 0 &&
		      kt_set_rules_uid(fd, 8, 0, NULL, NULL, NULL) == 0,
	      "root could not clear");
	CHECK(kt_set_rules_uid(fd, 8, STRATA_KABI_UID_ANY, "z:*", NULL, NULL) == 0, "root set 8");
	close(pp.hold[1]);
	pp.hold[1] = -1;
	waitpid(pp.keep, &st, 0);
	pp.keep = -1;
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "controller B ended with %d", st);
	{
		struct strata_kabi_stats sst;

		CHECK(kt_stats(fd, &sst) == 0 && (sst.slots_busy & (3u << 7)) == (1u << 8),
		      "slots after B's exit: busy 0x%llx", (unsigned long long)sst.slots_busy);
	}
	CHECK(kt_set_rules_uid(fd, 8, 0, NULL, NULL, NULL) == 0, "root clear 8");
	ret = 0;
out:
	if (fd >= 0)
		close(fd);
	for (int i = 0; i < 2; i++) {
		if (pp.bp[i] >= 0)
			close(pp.bp[i]);
		if (pp.hold[i] >= 0)
			close(pp.hold[i]);
	}
	if (pp.a > 0)
		waitpid(pp.a, NULL, 0);
	if (pp.b > 0)
		waitpid(pp.b, NULL, 0);
	if (pp.keep > 0)
		waitpid(pp.keep, NULL, 0); /* hold closed above: B returns */
	if (pp.rd >= 0)
		close(pp.rd);
	return ret;
}

/* ---- leak: register/exit cycles leave nothing behind ----------------- */
static __attribute__((noinline)) int register_exit_cycle(void)
{
	int st;
	pid_t c = vfork();

	if (c == 0) {
		/* Exit with the fd still open: exit must unregister. */
		int cfd = open(STRATA_KABI_DEVICE, O_RDWR);

		_exit(cfd < 0 || kt_register(cfd, SIGUSR2) ? 1 : 0);
	}
	return c > 0 && waitpid(c, &st, 0) == c && WIFEXITED(st) && !WEXITSTATUS(st) ? 0 : -1;
}

static int t_leak(void)
{
	int fd = kt_open(), ret = -1;
	struct strata_kabi_stats s0, s1;
	unsigned long i;

	CHECK(fd >= 0 && kt_stats(fd, &s0) == 0, "stats");
	/* Two workers (the guest has two CPUs), each half of the cycles. */
	pid_t w[2];
	for (int k = 0; k < 2; k++) {
		w[k] = fork();
		if (w[k] == 0) {
			for (unsigned long j = k; j < g_cycles; j += 2)
				if (register_exit_cycle())
					_exit(1);
			_exit(0);
		}
	}
	for (int k = 0; k < 2; k++) {
		int st;

		CHECK(w[k] > 0 && waitpid(w[k], &st, 0) == w[k] && WIFEXITED(st) && !WEXITSTATUS(st),
		      "register/exit worker %d failed", k);
	}
	for (i = 0; i < g_cycles; i++) {
		int cfd = kt_open();

		CHECK(cfd >= 0 && kt_register(cfd, SIGUSR2) == 0, "open/register %lu", i);
		close(cfd);
	}
	CHECK(kt_stats(fd, &s1) == 0, "stats");
	CHECK(s1.procs_live == s0.procs_live, "procs_live %llu, was %llu", (unsigned long long)s1.procs_live,
	      (unsigned long long)s0.procs_live);
	CHECK(s1.procs_total == s0.procs_total + 2 * g_cycles, "procs_total grew by %llu",
	      (unsigned long long)(s1.procs_total - s0.procs_total));
	printf("info leak: %lu exit cycles + %lu close cycles, procs_live %llu\n", g_cycles, g_cycles,
	       (unsigned long long)s1.procs_live);
	ret = 0;
out:
	close(fd);
	return ret;
}

/* ---- clock: the clock page against clock_gettime ----------------------- */
static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Cross-thread monotonicity: every read is >= the largest value another
 * thread published before it (acquire load, then read, then CAS-max). */
struct clock_race {
	const struct strata_kclock *k;
	uint64_t published;
	int bad;
};

static void *clock_racer(void *p)
{
	struct clock_race *cr = p;

	for (int i = 0; i < 50000; i++) {
		/* Acquire: pairs with the release CAS below in the other thread. */
		uint64_t g = __atomic_load_n(&cr->published, __ATOMIC_ACQUIRE), v = 0;

		if (strata_kclock_now(cr->k, &v) || v < g) {
			__atomic_store_n(&cr->bad, 1, __ATOMIC_RELAXED);
			break;
		}
		while (g < v && !__atomic_compare_exchange_n(&cr->published, &g, v, 0, __ATOMIC_RELEASE,
							     __ATOMIC_ACQUIRE))
			;
	}
	return NULL;
}

static double ns_per_call(const struct strata_kclock *k, int use_page)
{
	const int n = 100000;
	uint64_t a = mono_ns(), v = 0, sink = 0;

	for (int i = 0; i < n; i++) {
		if (use_page)
			strata_kclock_now(k, &v);
		else
			v = mono_ns();
		sink += v;
	}
	__asm__ __volatile__("" : : "r"(sink));
	return (double)(mono_ns() - a) / n;
}

static int t_clock(void)
{
	int fd = kt_open(), ret = -1;
	const struct strata_kclock *k = NULL;
	uint64_t prev = 0, max_dev = 0, max_below = 0, max_above = 0;
	char cs[64] = "?";
	FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");

	if (f) {
		if (fscanf(f, "%63s", cs) != 1)
			strcpy(cs, "?");
		fclose(f);
	}
	CHECK(fd >= 0, "open");
	CHECK(mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED && errno == EPERM,
	      "writable mapping allowed");
	CHECK(mmap(NULL, 8192, PROT_READ, MAP_SHARED, fd, 0) == MAP_FAILED, "two-page mapping allowed");
	{ /* a read-only open maps the page too (the runtime opens it so) */
		int ro = open(STRATA_KABI_DEVICE, O_RDONLY | O_CLOEXEC);
		const struct strata_kclock *kro = ro >= 0 ? strata_kclock_map(ro) : NULL;

		CHECK(kro != NULL, "no clock page through an O_RDONLY fd: %s", strerror(errno));
		munmap((void *)kro, 4096);
		close(ro);
	}
	k = strata_kclock_map(fd);
	CHECK(k != NULL, "no clock page: %s", strerror(errno));
	CHECK(mprotect((void *)k, 4096, PROT_READ | PROT_WRITE) != 0, "mprotect to writable allowed");
	CHECK(k->flags & STRATA_KCLOCK_VALID, "clock page not valid (clock source %s)", cs);
	for (int i = 0; i < 200000; i++) {
		uint64_t t1 = mono_ns(), kn = 0, t2;

		CHECK(strata_kclock_now(k, &kn) == 0, "read failed at %d", i);
		t2 = mono_ns();
		CHECK(kn >= prev, "not monotonic: %llu after %llu", (unsigned long long)kn,
		      (unsigned long long)prev);
		prev = kn;
		if (kn < t1 && t1 - kn > max_below)
			max_below = t1 - kn;
		if (kn > t2 && kn - t2 > max_above)
			max_above = kn - t2;
		uint64_t mid = t1 / 2 + t2 / 2;
		uint64_t dev = kn > mid ? kn - mid : mid - kn;
		if (dev > max_dev)
			max_dev = dev;
	}
	/* Same parameters as the vDSO: the page's value lies between the two
	 * clock_gettime() calls around it. */
	CHECK(max_below == 0 && max_above == 0,
	      "outside [clock_gettime before, after]: below by %llu ns, above by %llu ns",
	      (unsigned long long)max_below, (unsigned long long)max_above);
	{
		struct clock_race cr = {k, 0, 0};
		pthread_t th[2];

		for (int i = 0; i < 2; i++)
			CHECK(pthread_create(&th[i], NULL, clock_racer, &cr) == 0, "thread");
		for (int i = 0; i < 2; i++)
			pthread_join(th[i], NULL);
		CHECK(!cr.bad, "a read went below a value another thread had published");
	}
	printf("info clock: clocksource %s, 200000 reads inside [clock_gettime before, after], "
	       "monotonic also across 2 threads x 50000; max |page - midpoint| %llu ns; "
	       "TCG cost: page %.0f ns/read, clock_gettime %.0f ns/read; %llu page updates\n",
	       cs, (unsigned long long)max_dev, ns_per_call(k, 1), ns_per_call(k, 0),
	       (unsigned long long)k->updates);
	ret = 0;
out:
	if (k)
		munmap((void *)k, 4096);
	close(fd);
	return ret;
}

/* ---- fuzz: random ioctls from concurrent threads ---------------------- */
struct fuzz_arg {
	int fd;
	unsigned seed;
	unsigned long iters;
};

/* The argument area's first 128 words at random: sizes mostly plausible,
 * pointers inside NULL, this buffer, unmapped or kernel-half. */
static void fuzz_fill(unsigned char *buf, unsigned r, unsigned *s)
{
	uint32_t *u = (uint32_t *)buf;

	for (size_t j = 0; j < 128; j++)
		u[j] = rand_r(s) % 5 == 0 ? (uint32_t)rand_r(s) : rand_r(s) % 2 ? 0 : (uint32_t)rand_r(s) % 4;
	/* Sizes: mostly plausible, sometimes anything. */
	u[0] = r % 3 ? 16u + 8u * ((uint32_t)rand_r(s) % 8) : (uint32_t)rand_r(s) % 8192;
	/* Pointers inside: NULL, this buffer, unmapped, kernel-half. */
	for (size_t j = 1; j < 8; j++) {
		unsigned k = rand_r(s) % 6;
		uint64_t v = k == 0   ? 0
			     : k == 1 ? (uintptr_t)(buf + 512)
			     : k == 2 ? 0x1000
			     : k == 3 ? 0xffff888000000000ull
			     : k == 4 ? (uintptr_t)(buf + 4090)
				      : (uint64_t)rand_r(s);
		if (rand_r(s) % 3 == 0)
			memcpy(buf + 8 * j, &v, 8);
	}
}

/* Well-formed calls too, so that state changes: kernel rules (buffers
 * allocated, probes armed and disarmed under load), buffer fds mapped and
 * dropped. */
static void fuzz_well_formed(int fd, unsigned *s)
{
	static const char *const pats[] = {"kernel:sched_*", "kernel:sys_e*", "kernel:*", "app:*"};
	unsigned sl = (unsigned)rand_r(s) % 4;

	if (rand_r(s) % 3)
		kt_set_rules_uid(fd, sl, STRATA_KABI_UID_ANY, pats[rand_r(s) % 4], NULL, NULL);
	else
		kt_set_rules_uid(fd, sl, 0, NULL, NULL, NULL);
	struct strata_kabi_kbuf_open ko = {.size = sizeof(ko), .slot = sl};
	int kfd = ioctl(fd, STRATA_IOC_KBUF_OPEN, &ko);
	if (kfd >= 0) {
		void *m = mmap(NULL, ko.total_size, PROT_READ | PROT_WRITE, MAP_SHARED, kfd, 0);
		close(kfd);
		if (m != MAP_FAILED) {
			/* A hostile consumer: scribble on the lanes. */
			memset((char *)m + 4096 * 5, rand_r(s) & 0xff, 4096);
			munmap(m, ko.total_size);
		}
	}
}

static void *fuzz_thread(void *p)
{
	struct fuzz_arg *fa = p;
	/* The kernel writes where the random arguments say (QUERY up to
	 * ~200 KiB at buf_ptr, argument structs past the end of buf): keep
	 * every pointer we hand out inside one big private area. */
	enum { AREA = 1 << 20 };
	unsigned char *buf = mmap(NULL, AREA, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	unsigned s = fa->seed;

	if (buf == MAP_FAILED)
		return NULL;
	static const unsigned cmds[] = {STRATA_IOC_REGISTER,  STRATA_IOC_QUERY, STRATA_IOC_ACK,
					STRATA_IOC_SET_RULES, STRATA_IOC_WAIT,  STRATA_IOC_STATS};

	for (unsigned long i = 0; i < fa->iters; i++) {
		unsigned r = rand_r(&s);
		unsigned cmd = cmds[r % 6];
		void *arg = buf;

		if (r % 97 == 0)
			cmd = (unsigned)rand_r(&s); /* any command */
		else if (r % 89 == 0)
			cmd = _IOC(_IOC_READ | _IOC_WRITE, STRATA_KABI_IOC_MAGIC, rand_r(&s) % 16,
				   rand_r(&s) % 512);
		fuzz_fill(buf, r, &s);
		if (cmd == STRATA_IOC_WAIT)
			((struct strata_kabi_wait *)buf)->timeout_ms = rand_r(&s) % 3;
		if (r % 37 == 0) {
			fuzz_well_formed(fa->fd, &s);
			continue;
		}
		switch (rand_r(&s) % 20) {
		case 0:
			arg = NULL;
			break;
		case 1:
			arg = (void *)0x10;
			break;
		case 2:
			arg = (void *)0xffffffffff600000ull;
			break;
		case 3:
			arg = buf + 4096 - 4;
			break;
		}
		ioctl(fa->fd, cmd, arg);
	}
	munmap(buf, AREA);
	return NULL;
}

static int t_fuzz_body(void)
{
	enum { NT = 4 };
	pthread_t th[NT];
	struct fuzz_arg fa[NT];
	int fd = kt_open(), ret = -1, sfd = -1;
	struct strata_kabi_stats s0, s1;

	CHECK(fd >= 0, "open");
	sfd = kt_open();
	CHECK(kt_stats(sfd, &s0) == 0, "stats");
	/* Threads share one fd (register/ack races) and two have their own. */
	for (int i = 0; i < NT; i++) {
		fa[i].fd = i < 2 ? fd : kt_open();
		fa[i].seed = 12345u + (unsigned)i;
		fa[i].iters = g_fuzz_iters / NT;
		CHECK(pthread_create(&th[i], NULL, fuzz_thread, &fa[i]) == 0, "thread");
	}
	/* Meanwhile processes come and go mid-fuzz holding registrations. */
	for (int i = 0; i < 200; i++) {
		pid_t c = fork();
		if (c == 0) {
			struct fuzz_arg f = {kt_open(), 777u + (unsigned)i, 200};
			fuzz_thread(&f);
			_exit(0);
		}
		waitpid(c, NULL, 0);
	}
	for (int i = 0; i < NT; i++) {
		pthread_join(th[i], NULL);
		if (i >= 2)
			close(fa[i].fd);
	}
	close(fd);
	fd = -1;
	/* Clear whatever slots the fuzzer set (root may). */
	for (unsigned sl = 0; sl < STRATA_KABI_MAX_SLOTS; sl++)
		CHECK(kt_set_rules_uid(sfd, sl, 0, NULL, NULL, NULL) == 0, "clear slot %u", sl);
	CHECK(kt_stats(sfd, &s1) == 0, "stats");
	CHECK(s1.procs_live == s0.procs_live && s1.slots_used == 0,
	      "after fuzz: procs_live %llu (was %llu), slots_used %llu", (unsigned long long)s1.procs_live,
	      (unsigned long long)s0.procs_live, (unsigned long long)s1.slots_used);
	printf("info fuzz: %lu ioctls in %d threads + 200 processes, %llu registrations, generation %llu\n",
	       g_fuzz_iters, NT, (unsigned long long)(s1.procs_total - s0.procs_total),
	       (unsigned long long)s1.generation);
	ret = 0;
out:
	if (fd >= 0)
		close(fd);
	if (sfd >= 0)
		close(sfd);
	return ret;
}

/* The fuzzer registers with random signals and sets rules for its own
 * uid: run it in a child that ignores them all. */
static int t_fuzz(void)
{
	int p[2], st, ret = -1;
	char why[512];
	pid_t c;

	CHECK(pipe(p) == 0, "pipe");
	fflush(stdout);
	c = fork();
	if (c == 0) {
		struct sigaction sa;
		int r;

		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = SIG_IGN;
		for (int sig = 1; sig < NSIG; sig++)
			if (sig != SIGCHLD && sig != SIGKILL && sig != SIGSTOP)
				sigaction(sig, &sa, NULL);
		close(p[0]);
		r = t_fuzz_body();
		if (r && write(p[1], g_why, strlen(g_why)) < 0)
			_exit(2);
		fflush(stdout);
		_exit(r ? 1 : 0);
	}
	close(p[1]);
	ssize_t n = read(p[0], why, sizeof(why) - 1);
	why[n > 0 ? n : 0] = 0;
	close(p[0]);
	CHECK(c > 0 && waitpid(c, &st, 0) == c, "fork/wait");
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "fuzz child: status 0x%x: %s", st, why);
	ret = 0;
out:
	return ret;
}

/* ---- share: one uid cannot take every slot ---------------------------- */
/*
 * A holder of `uid` sets every slot it can (each with its own uid as
 * target), writes how many it got, and keeps them until `hold` closes.  A
 * slot is refused only by the share (-EDQUOT) or by being someone else's
 * (-EPERM: an admin's, -EBUSY: another file's); anything else fails it.
 */
static pid_t share_holder(uid_t uid, int *got_rd, int *hold_wr)
{
	int g[2], h[2];
	pid_t pid;

	if (pipe(g) || pipe(h))
		return -1;
	pid = fork();
	if (pid == 0) {
		unsigned char n = 0;
		char w;
		int fd;

		/* Only its own pipe ends: an earlier holder's hold end
		 * kept here would keep that holder from ever seeing EOF. */
		for (int f = 3; f < 1024; f++)
			if (f != g[1] && f != h[0])
				close(f);
		drop_to(uid);
		fd = kt_open();
		if (fd < 0)
			_exit(10);
		for (unsigned slot = 0; slot < STRATA_KABI_MAX_SLOTS; slot++) {
			int r = kt_set_rules_uid(fd, slot, uid, "share:*", NULL, NULL);

			if (r == 0)
				n++;
			else if (r != -EDQUOT && r != -EPERM && r != -EBUSY)
				n = 200 + slot; /* reported as is */
		}
		if (write(g[1], &n, 1) != 1 || read(h[0], &w, 1) != 0)
			_exit(11);
		_exit(0);
	}
	close(g[1]);
	close(h[0]);
	*got_rd = g[0];
	*hold_wr = h[1];
	return pid;
}

static int t_share(void)
{
	/* Three uids take their share each; a fourth finds the users' part
	 * full; root still takes every slot left. */
	const unsigned want[4] = {STRATA_KABI_SLOTS_PER_UID, STRATA_KABI_SLOTS_PER_UID,
				  STRATA_KABI_SLOTS_PER_UID, 0};
	pid_t pids[4] = {-1, -1, -1, -1};
	int rd[4] = {-1, -1, -1, -1}, hold[4] = {-1, -1, -1, -1};
	int ret = -1, fd = -1, st;
	unsigned root_got = 0, busy_before;
	struct strata_kabi_stats sst;

	fd = kt_open();
	CHECK(fd >= 0, "open");
	CHECK(kt_stats(fd, &sst) == 0, "stats");
	busy_before = (unsigned)__builtin_popcountll(sst.slots_busy);
	CHECK(busy_before == 0, "%u slots busy before the test", busy_before);
	for (int i = 0; i < 4; i++) {
		unsigned char n = 0xff;

		pids[i] = share_holder(40011 + (uid_t)i, &rd[i], &hold[i]);
		CHECK(pids[i] > 0, "fork");
		CHECK(read(rd[i], &n, 1) == 1, "holder %d died", i);
		CHECK(n == want[i], "uid %d got %u slots, want %u", 40011 + i, n, want[i]);
	}
	for (unsigned slot = 0; slot < STRATA_KABI_MAX_SLOTS; slot++)
		if (kt_set_rules_uid(fd, slot, STRATA_KABI_UID_ANY, "root:*", NULL, NULL) == 0)
			root_got++;
	CHECK(root_got == STRATA_KABI_MAX_SLOTS - 3 * STRATA_KABI_SLOTS_PER_UID,
	      "root got %u slots beside the users' 12", root_got);
	/* A holder's exit frees its share: a new uid takes it. */
	close(hold[0]);
	hold[0] = -1;
	waitpid(pids[0], &st, 0);
	pids[0] = -1;
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "holder 0 ended with %d", st);
	{
		int r4 = -1, h4 = -1;
		unsigned char n = 0xff;
		pid_t p4 = share_holder(40021, &r4, &h4);

		CHECK(p4 > 0, "fork");
		if (read(r4, &n, 1) != 1)
			n = 0xfe;
		close(h4);
		waitpid(p4, NULL, 0);
		close(r4);
		CHECK(n == STRATA_KABI_SLOTS_PER_UID, "after a release uid 40021 got %u", n);
	}
	ret = 0;
out:
	for (int i = 0; i < 4; i++) {
		if (hold[i] >= 0)
			close(hold[i]);
		if (pids[i] > 0)
			waitpid(pids[i], NULL, 0);
		if (rd[i] >= 0)
			close(rd[i]);
	}
	if (fd >= 0)
		close(fd); /* clears root's slots */
	return ret;
}

struct kt_test {
	const char *name;
	int (*fn)(void);
};

static const struct kt_test tests[] = {
	{"abi", t_abi},
	{"errors", t_errors},
	{"control", t_control},
	{"session", t_session},
	{"targets", t_targets},
	{"tree", t_tree},
	{"perm", t_perm},
	{"share", t_share},
	{"leak", t_leak},
	{"clock", t_clock},
	{"fuzz", t_fuzz},
	{"kevents", kt_kevents},
	{"kevents_loss", kt_kevents_loss},
	{"kevents_stream", kt_kevents_stream},
	{"kevents_load", kt_kevents_load},
};

static int run(const struct kt_test *t)
{
	struct timespec a, b;
	int r;

	g_why[0] = 0;
	clock_gettime(CLOCK_MONOTONIC, &a);
	r = t->fn();
	clock_gettime(CLOCK_MONOTONIC, &b);
	if (r == 0)
		printf("PASS %s (%.2f s)\n", t->name,
		       (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9);
	else
		printf("FAIL %s: %s\n", t->name, g_why);
	fflush(stdout);
	return r;
}

int main(int argc, char **argv)
{
	int failed = 0, i = 1;

	setvbuf(stdout, NULL, _IOLBF, 0);
	for (; i < argc && argv[i][0] == '-'; i += 2) {
		if (i + 1 >= argc)
			return 2;
		if (!strcmp(argv[i], "--cycles"))
			g_cycles = strtoul(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--fuzz-iters"))
			g_fuzz_iters = strtoul(argv[i + 1], NULL, 0);
		else
			return 2;
	}
	for (; i < argc; i++) {
		int found = 0;

		for (size_t j = 0; j < sizeof(tests) / sizeof(tests[0]); j++) {
			if (strcmp(argv[i], "all") && strcmp(argv[i], tests[j].name))
				continue;
			found = 1;
			failed |= run(&tests[j]) != 0;
		}
		if (!found) {
			printf("FAIL %s: no such test\n", argv[i]);
			failed = 1;
		}
	}
	return failed;
}
