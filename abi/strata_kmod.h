/*
 * strata_kmod.h - thin user-space wrappers of the /dev/strata ioctls
 * (abi/strata_kabi.h), header-only C11/C++17.  Every function returns
 * 0 (or a non-negative value) on success and -errno on failure, sets every
 * struct's `size`, and zeroes reserved fields.  They make system calls only
 * (no allocation, no lock): safe in a signal handler (tp-async).
 *
 * Traced process:   fd = strata_kmod_open(); strata_kmod_register(fd, SIGRTMIN + n);
 *                   on the signal: strata_kmod_query(fd, buf, &size, &gen, &n)
 *                   (grow buf and retry on -EMSGSIZE), apply, strata_kmod_ack(fd, gen)
 *                   or, with grants (kabi 2): strata_kmod_query_grants(fd, buf, &size, &gen, &n)
 * Controller:       strata_kmod_set_rules(fd, slot, rules, n, kind, uid, targets, n, &gen, &nsig)
 *                   or, with a session (kabi 2): strata_kmod_set_session(fd, slot, &session, ...)
 *                   strata_kmod_wait(fd, gen, timeout_ms, missing, cap, &n_missing)
 * Consumer:         kfd = strata_kmod_kbuf_open(fd, slot, &size)   (CAP_SYS_ADMIN)
 *                   then strata::Reader::attach(kfd) (libtrace/shm_reader/reader.h)
 */
#ifndef STRATA_KMOD_H
#define STRATA_KMOD_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "strata_kabi.h"

#ifdef __cplusplus
extern "C" {
#endif

static inline int strata_kmod_open(void)
{
	int fd = open(STRATA_KABI_DEVICE, O_RDWR | O_CLOEXEC);

	return fd < 0 ? -errno : fd;
}

static inline int strata_kmod_ioctl(int fd, unsigned long cmd, void *arg)
{
	int r = ioctl(fd, cmd, arg);

	return r < 0 ? -errno : r;
}

/* The kabi version the module speaks (REGISTER answers it), or -errno. */
static inline int strata_kmod_register_v(int fd, int signo, uint64_t *generation)
{
	struct strata_kabi_register a;
	int r;

	memset(&a, 0, sizeof(a));
	a.size = sizeof(a);
	a.signo = (uint32_t)signo;
	r = strata_kmod_ioctl(fd, STRATA_IOC_REGISTER, &a);
	if (r == 0 && generation)
		*generation = a.generation;
	return r == 0 ? (int)a.kabi_version : r;
}

/* signo 0: never signalled (poll QUERY instead). */
static inline int strata_kmod_register(int fd, int signo, uint64_t *generation)
{
	int r = strata_kmod_register_v(fd, signo, generation);

	return r < 0 ? r : 0;
}

static inline int strata_kmod_query_fmt(int fd, uint32_t format, void *buf, uint32_t *size,
					uint64_t *generation, uint32_t *n_entries)
{
	struct strata_kabi_query a;
	int r;

	memset(&a, 0, sizeof(a));
	/* The V1 size for the V1 format: works with a version-1 module. */
	a.size = format ? sizeof(a) : STRATA_KABI_QUERY_SIZE_V1;
	a.format = format;
	a.buf_size = *size;
	a.buf_ptr = (uint64_t)(uintptr_t)buf;
	r = strata_kmod_ioctl(fd, STRATA_IOC_QUERY, &a);
	if (r == 0 || r == -EMSGSIZE) {
		*size = a.buf_size;
		if (generation)
			*generation = a.generation;
		if (n_entries)
			*n_entries = a.n_entries;
	}
	return r;
}

/* buf receives *n_entries records: struct strata_kabi_slot_rules then its
 * n_rules struct strata_kabi_rule.  *size: in, bytes at buf; out, bytes
 * used or (with -EMSGSIZE) needed. */
static inline int strata_kmod_query(int fd, void *buf, uint32_t *size, uint64_t *generation,
				    uint32_t *n_entries)
{
	return strata_kmod_query_fmt(fd, STRATA_KABI_QUERY_RULES, buf, size, generation, n_entries);
}

/* As strata_kmod_query, the records being struct strata_kabi_grant then
 * n_rules rules (kabi 2; a version-1 module answers -EINVAL).  The records
 * come from the kernel: check each against *size before use. */
static inline int strata_kmod_query_grants(int fd, void *buf, uint32_t *size, uint64_t *generation,
					   uint32_t *n_entries)
{
	return strata_kmod_query_fmt(fd, STRATA_KABI_QUERY_GRANTS, buf, size, generation, n_entries);
}

static inline int strata_kmod_ack(int fd, uint64_t generation)
{
	struct strata_kabi_ack a;

	memset(&a, 0, sizeof(a));
	a.size = sizeof(a);
	a.generation = generation;
	return strata_kmod_ioctl(fd, STRATA_IOC_ACK, &a);
}

/* SET_RULES's common fields: a's header, slot, rules and target. */
static inline void strata_kmod_rules_init(struct strata_kabi_set_rules *a, unsigned slot,
					  const struct strata_kabi_rule *rules, uint32_t n_rules,
					  uint32_t kind, uint32_t uid)
{
	memset(a, 0, sizeof(*a));
	a->size = sizeof(*a);
	a->slot = slot;
	a->n_rules = n_rules;
	a->target_kind = kind;
	a->target_uid = uid;
	a->rules_ptr = (uint64_t)(uintptr_t)rules;
}

/* SET_RULES sent; its answer (either pointer may be NULL) on success. */
static inline int strata_kmod_rules_send(int fd, struct strata_kabi_set_rules *a, uint64_t *generation,
					 uint32_t *n_signalled)
{
	int r = strata_kmod_ioctl(fd, STRATA_IOC_SET_RULES, a);

	if (r == 0) {
		if (generation)
			*generation = a->generation;
		if (n_signalled)
			*n_signalled = a->n_signalled;
	}
	return r;
}

/* kind: enum strata_kabi_target_kind; targets: NULL for UID, else n_targets
 * uint32_t pids or char[16] names.  n_rules 0 clears the slot. */
static inline int strata_kmod_set_rules(int fd, unsigned slot, const struct strata_kabi_rule *rules,
					uint32_t n_rules, uint32_t kind, uint32_t uid, const void *targets,
					uint32_t n_targets, uint64_t *generation, uint32_t *n_signalled)
{
	struct strata_kabi_set_rules a;

	strata_kmod_rules_init(&a, slot, rules, n_rules, kind, uid);
	a.targets_ptr = (uint64_t)(uintptr_t)targets;
	a.n_targets = n_targets;
	return strata_kmod_rules_send(fd, &a, generation, n_signalled);
}

/* A session's slot (kabi 2): what QUERY's grants carry.  rule_targets:
 * NULL or n_rules entries. */
struct strata_kmod_session {
	uint64_t session_id;
	struct strata_kabi_channel channel;
	char sock_path[STRATA_KABI_SOCK_MAX];
	const struct strata_kabi_rule_target *rule_targets;
	uint32_t kbuf_subbuf_size; /* kernel buffer geometry (0: defaults) */
	uint32_t kbuf_n_subbuf;
	uint32_t flags; /* STRATA_KABI_SET_KEEP or 0 */
	uint32_t tree;  /* TARGET_TREE's root pid; 0: TARGET_UID */
};

static inline int strata_kmod_set_session(int fd, unsigned slot, const struct strata_kmod_session *sess,
					  const struct strata_kabi_rule *rules, uint32_t n_rules,
					  uint32_t uid, uint64_t *generation, uint32_t *n_signalled)
{
	struct strata_kabi_set_rules a;

	strata_kmod_rules_init(&a, slot, rules, n_rules,
			       sess->tree ? STRATA_KABI_TARGET_TREE : STRATA_KABI_TARGET_UID, uid);
	if (sess->tree) {
		a.targets_ptr = (uint64_t)(uintptr_t)&sess->tree;
		a.n_targets = 1;
	}
	a.session_id = sess->session_id;
	a.channel = sess->channel;
	memcpy(a.sock_path, sess->sock_path, sizeof(a.sock_path));
	a.rule_targets_ptr = (uint64_t)(uintptr_t)sess->rule_targets;
	a.kbuf_subbuf_size = sess->kbuf_subbuf_size;
	a.kbuf_n_subbuf = sess->kbuf_n_subbuf;
	a.flags = sess->flags;
	return strata_kmod_rules_send(fd, &a, generation, n_signalled);
}

/* 0 when all acknowledged; -ETIMEDOUT with up to cap missing pids. */
static inline int strata_kmod_wait(int fd, uint64_t generation, uint32_t timeout_ms, uint32_t *missing,
				   uint32_t cap, uint32_t *n_missing)
{
	struct strata_kabi_wait a;
	int r;

	memset(&a, 0, sizeof(a));
	a.size = sizeof(a);
	a.timeout_ms = timeout_ms;
	a.generation = generation;
	a.missing_ptr = (uint64_t)(uintptr_t)missing;
	a.missing_cap = missing ? cap : 0;
	r = strata_kmod_ioctl(fd, STRATA_IOC_WAIT, &a);
	if ((r == 0 || r == -ETIMEDOUT) && n_missing)
		*n_missing = a.n_missing;
	return r;
}

static inline int strata_kmod_stats(int fd, struct strata_kabi_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->size = sizeof(*st);
	return strata_kmod_ioctl(fd, STRATA_IOC_STATS, st);
}

/* A new fd (O_CLOEXEC) of the slot's kernel buffer, or -errno (-ENOENT: the
 * slot enables no kernel event; -EPERM: not CAP_SYS_ADMIN). */
static inline int strata_kmod_kbuf_open(int fd, unsigned slot, uint64_t *total_size, uint32_t *n_lanes)
{
	struct strata_kabi_kbuf_open a;
	int r;

	memset(&a, 0, sizeof(a));
	a.size = sizeof(a);
	a.slot = slot;
	r = strata_kmod_ioctl(fd, STRATA_IOC_KBUF_OPEN, &a);
	if (r >= 0) {
		if (total_size)
			*total_size = a.total_size;
		if (n_lanes)
			*n_lanes = a.n_lanes;
	}
	return r;
}

#ifdef __cplusplus
}
#endif
#endif /* STRATA_KMOD_H */
