/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * The user-space ABI of the Strata kernel module (/dev/strata).
 * Version STRATA_KABI_VERSION.  Used by the kernel (with __KERNEL__) and by
 * user space (C11 and C++17).  Fixed-width types only; pointers travel as
 * __u64.
 *
 * Roles:
 *   traced process  REGISTER (with the signal it wants on a rule change),
 *                   QUERY its rules (kabi 2: its grants, what it needs to
 *                   join each session), ACK the generation it has applied.
 *                   Closing the fd (or exiting) unregisters.
 *   controller      SET_RULES of a session slot for a set of targets (kabi
 *                   2: with the session's grant and per-rule targets), then
 *                   WAIT until every signalled process acknowledged.  The
 *                   open file that sets a slot owns it until it clears it
 *                   or is released.  Without CAP_SYS_ADMIN a controller
 *                   only reaches processes of its own effective uid.
 *
 * Size negotiation: every argument struct starts with `size`, which user
 * space sets to sizeof() of the struct it was compiled with.  The kernel
 * accepts any size from the first version's size (STRATA_KABI_*_SIZE_V1) to
 * a page; bytes beyond what it knows must be zero (else -E2BIG); it copies
 * back only min(size, its own size) bytes.  The ioctl number encodes the
 * version-1 size, but the kernel dispatches on type and number only: `size`
 * is authoritative.
 *
 * Errors: -EFAULT bad pointer, -EINVAL bad size or field, -ENOTTY unknown
 * command, -EPERM not allowed, -EMSGSIZE output buffer too small (the needed
 * size is written back), -ETIMEDOUT WAIT expired (missing pids written back).
 *
 * mmap of the device (read-only, MAP_SHARED, one page at offset 0): the
 * clock page (struct strata_kclock).
 *
 * Kernel events: a slot set by a CAP_SYS_ADMIN controller whose rules enable
 * "kernel:<tracepoint>" patterns (provider literally "kernel", glob on the
 * tracepoint; later rules win; loglevel INFO; filters are not applied) gets
 * a kernel buffer: KBUF_OPEN returns an fd of a regular (shmem) file of
 * total_size bytes, like a user buffer's memfd, whose mmap (offset 0,
 * read-write, MAP_SHARED) is an ordinary abi/strata_abi.h buffer,
 * one lane per CPU, discard mode, CLOCK_MONOTONIC, its event descriptors in
 * its table.
 * The consumer reads it like a user buffer, except that no futex wake comes
 * from the kernel: poll() its wait fd (KBUF_OPEN below).  Events (ids 0..6
 * fixed): sched_switch, sched_wakeup, sched_process_fork,
 * sched_process_exec, sched_process_exit, sys_enter, sys_exit; then
 * interrupts, softirqs, timers, block requests, wakeups, migration, wait
 * and user page faults, and syscall_entry_<name>/syscall_exit_<name> for
 * every syscall the kernel's ftrace metadata describes
 * (docs/kernel-module.md has the list; the descriptor table is the truth).
 * A rule "kernel:kprobe_SYM" or "kernel:kretprobe_SYM" (SYM: [A-Za-z0-9_.],
 * no glob) adds event kprobe_SYM (ip) or kretprobe_SYM (ip, parent_ip,
 * ret) on kernel function SYM: its descriptor is appended to the table
 * when first named (at most 32 per module load).
 */
#ifndef STRATA_KABI_H
#define STRATA_KABI_H

#include "strata_limits.h"

#ifdef __KERNEL__
#include <linux/types.h>
#include <linux/ioctl.h>
#else
#include <stdint.h>
#include <sys/ioctl.h>
#include <linux/types.h>
#endif

/* 2: SET_RULES carries what a process needs to join (session id, channel,
 * daemon socket, per-rule targets), QUERY can answer with grants, a slot is
 * owned by the fd that set it, STATS has slots_busy.  Version-1 callers
 * (smaller structs) keep version 1's behaviour, except ownership.
 */
#define STRATA_KABI_VERSION 2u
#define STRATA_KABI_DEVICE "/dev/strata"

#define STRATA_KABI_MAX_SLOTS STRATA_LIMIT_SLOTS
/* Slots are shared out (since 2026-11-25, issue 32): a caller without
 * CAP_SYS_ADMIN sets at most STRATA_KABI_SLOTS_PER_UID slots per effective
 * uid, and such callers together leave STRATA_KABI_SLOTS_ADMIN free for
 * admins; a new slot past either limit gets -EDQUOT.  No behaviour to ask for:
 * the same numbers hold for the daemon's sessions (docs/security.md). */
#define STRATA_KABI_SLOTS_PER_UID 4u
#define STRATA_KABI_SLOTS_ADMIN 4u
/* The limits the runtime and the protocol share are strata_limits.h's; the
 * socket path's is the system's (static_assert in consumerd/kernel_source.cpp),
 * the comm's the kernel's (kmod/strata_ctl.c). */
#define STRATA_KABI_MAX_RULES STRATA_LIMIT_RULES
#define STRATA_KABI_MAX_TARGETS 64u /* a grant's targets (TARGET_PIDS / TARGET_COMMS) */
#define STRATA_KABI_PATTERN_MAX STRATA_LIMIT_PATTERN
#define STRATA_KABI_FILTER_MAX STRATA_LIMIT_FILTER
#define STRATA_KABI_COMM_MAX STRATA_LIMIT_COMM
#define STRATA_KABI_NAME_MAX STRATA_LIMIT_NAME
#define STRATA_KABI_SOCK_MAX 108u                        /* = sizeof(sockaddr_un.sun_path) */
#define STRATA_KABI_RULE_PIDS STRATA_LIMIT_TARGET_PIDS   /* per-rule pid targets */
#define STRATA_KABI_RULE_COMMS STRATA_LIMIT_TARGET_NAMES /* per-rule name targets */

/* Same layout as struct strata_rule of libtrace/runtime/runtime.h (checked by the
 * user-space tests).
 */
struct strata_kabi_rule {
	char pattern[STRATA_KABI_PATTERN_MAX];
	__s32 loglevel_max;
	__u32 enable;
	char filter[STRATA_KABI_FILTER_MAX];
};

/* Same layout as struct strata_channel_config of libtrace/runtime/runtime.h
 * (static_assert in libtrace/control).  Zero counts mean "the runtime's
 * default"; the module checks mode <= 1, powers of two, a terminated name.
 */
struct strata_kabi_channel {
	char name[STRATA_KABI_NAME_MAX];
	__u32 stream_id;
	__u32 mode; /* 0 discard, 1 overwrite */
	__u32 n_lanes;
	__u32 n_subbuf;
	__u64 subbuf_size;
};

/* The processes one rule applies to, inside those its slot targets: every
 * one when both counts are 0, else the listed pids (controller's namespace,
 * not 0) and names (terminated, not empty).  Unused entries must be zero.
 */
struct strata_kabi_rule_target {
	__u32 n_pids;
	__u32 n_comms;
	__u32 pids[STRATA_KABI_RULE_PIDS];
	char comms[STRATA_KABI_RULE_COMMS][STRATA_KABI_COMM_MAX];
};

/* REGISTER: the calling process (thread group) asks to be told of changes.
 * signo: 1..64 except SIGKILL/SIGSTOP; 0 = never signal (poll QUERY).
 */
struct strata_kabi_register {
	__u32 size;
	__u32 signo;
	__u64 generation;   /* out: current global generation */
	__u32 kabi_version; /* out: STRATA_KABI_VERSION */
	__u32 reserved;
};

/* QUERY: the rules of every slot that targets the caller.  The buffer at
 * buf_ptr receives n_entries records, each a struct strata_kabi_slot_rules
 * followed by n_rules struct strata_kabi_rule.
 */
struct strata_kabi_slot_rules {
	__u32 slot;
	__u32 n_rules;
	__u64 generation; /* generation at which this slot's rules were set */
};

/* QUERY with format STRATA_KABI_QUERY_GRANTS: each entry is a grant, what
 * a process needs to join the slot's session, followed by the n_rules rules
 * that target the caller (rules whose targets leave it out are not sent; a
 * slot with rules none of which targets the caller is not sent at all).
 * session_id 0: the slot was set without session (a version-1 controller).
 */
struct strata_kabi_grant {
	__u32 slot;
	__u32 n_rules;
	__u64 generation;
	__u64 session_id;
	struct strata_kabi_channel channel;
	char sock_path[STRATA_KABI_SOCK_MAX]; /* the daemon taking the buffer */
	__u32 reserved;
};

#define STRATA_KABI_QUERY_RULES 0u  /* entries: strata_kabi_slot_rules (V1) */
#define STRATA_KABI_QUERY_GRANTS 2u /* entries: strata_kabi_grant */

struct strata_kabi_query {
	__u32 size;
	__u32 buf_size; /* in: bytes at buf_ptr; out: bytes needed */
	__u64 buf_ptr;
	__u64 generation; /* out: the caller's generation (ACK this) */
	__u32 n_entries;  /* out */
	__u32 reserved;
	/* V2 */
	__u32 format; /* STRATA_KABI_QUERY_RULES or _GRANTS */
	__u32 reserved2;
};

/* ACK: the caller has applied everything up to `generation`. */
struct strata_kabi_ack {
	__u32 size;
	__u32 reserved;
	__u64 generation;
};

enum strata_kabi_target_kind {
	STRATA_KABI_TARGET_UID = 1,   /* every process of uid target_uid */
	STRATA_KABI_TARGET_PIDS = 2,  /* n_targets __u32 pids (caller's namespace) */
	STRATA_KABI_TARGET_COMMS = 3, /* n_targets char[16] process names */
	/* The processes of target_uid (as TARGET_UID) that are the one __u32
	 * pid at targets_ptr (n_targets 1, caller's namespace) or descend from
	 * it by their parent chain at the time of asking (a process reparented
	 * out of the tree has left it).  A module without it: -EINVAL. */
	STRATA_KABI_TARGET_TREE = 4,
};
#define STRATA_KABI_UID_ANY 0xffffffffu /* TARGET_UID, TARGET_TREE: every uid (admin only) */

/* SET_RULES: replace slot's rules.  n_rules == 0 and session_id == 0 clears
 * the slot.  Every registered process whose QUERY answer for the slot
 * changes is signalled (and owes an ACK to WAIT); a process registered
 * with signo 0 is neither signalled nor waited for.
 * Ownership: the open file that sets a slot owns it until it clears it or
 * is released (closed by its last holder); then the module clears the slot
 * and signals its processes.  SET_RULES on a slot another open file owns:
 * -EBUSY (a CAP_SYS_ADMIN caller may still clear it).
 * With STRATA_KABI_SET_KEEP in flags, the owner's release does not clear
 * the slot at once: it is kept as it stands (rules, session, kernel buffer,
 * whose probes go on writing and counting what does not fit) with no owner
 * for keep_orphan_ms (module parameter, default 60 s), and no process is
 * signalled; a SET_RULES from another file of the same rights (the dead
 * owner's successor: CAP_SYS_ADMIN, or the same euid for a non-admin slot)
 * takes it over, and with an unchanged session signals nobody.  Not taken
 * over in time, it is cleared as a release would.  A module without the
 * flag refuses it (-EINVAL): then set the slot without it.
 * V2 fields (size >= STRATA_KABI_SET_RULES_SIZE_V2): the session a process
 * joins through QUERY's grants.
 */
#define STRATA_KABI_SET_KEEP 0x1u /* flags: outlive the owner's file (above) */

struct strata_kabi_set_rules {
	__u32 size;
	__u32 slot;
	__u32 n_rules;
	__u32 target_kind; /* enum strata_kabi_target_kind */
	__u64 rules_ptr;   /* n_rules struct strata_kabi_rule */
	__u64 targets_ptr; /* PIDS / COMMS */
	__u32 n_targets;   /* 1..STRATA_KABI_MAX_TARGETS for PIDS/COMMS */
	__u32 target_uid;  /* UID: without CAP_SYS_ADMIN, the caller's euid */
	__u64 generation;  /* out: the generation of this change */
	__u32 n_signalled; /* out: processes signalled */
	__u32 flags;       /* STRATA_KABI_SET_KEEP; was `reserved` (0) */
	/* V2 */
	__u64 session_id; /* 0: none (grants then name no session) */
	struct strata_kabi_channel channel;
	char sock_path[STRATA_KABI_SOCK_MAX]; /* absolute, terminated; "" without session */
	__u32 reserved2;
	/* 0 (every rule targets the slot's processes) or n_rules
	 * struct strata_kabi_rule_target
	 */
	__u64 rule_targets_ptr;
	/* V3: geometry of the slot's kernel buffer when this call creates it
	 * (an existing buffer keeps its own); 0: the module's defaults.
	 * Powers of two, kbuf_subbuf_size 4 KiB..64 MiB, kbuf_n_subbuf 2..64
	 * (else -EINVAL); the module lowers both, in that order, to its bound
	 * on bytes per CPU (parameter kbuf_max_lane_size).  The buffer header
	 * says what was used.
	 */
	__u32 kbuf_subbuf_size;
	__u32 kbuf_n_subbuf;
};

/* WAIT: until every registered process that the caller may control and
 * that was targeted at `generation` or later acknowledged `generation`.
 */
struct strata_kabi_wait {
	__u32 size;
	__u32 timeout_ms;
	__u64 generation;
	__u64 missing_ptr; /* out: up to missing_cap __u32 pids */
	__u32 missing_cap;
	__u32 n_missing; /* out: how many are missing (may exceed cap) */
};

/* STATS: object counts, for leak tests and `strata status`. */
struct strata_kabi_stats {
	__u32 size;
	__u32 reserved;
	__u64 procs_live;  /* registered processes now */
	__u64 procs_total; /* registrations ever */
	__u64 slots_used;
	__u64 generation;
	__u64 signals_sent;
	__u64 kevents_written; /* kernel events recorded */
	__u64 kevents_lost;    /* kernel events discarded (buffer full) */
	/* V2 */
	__u64 slots_busy; /* bit n: slot n is set (by anyone) */
};

/* KBUF_OPEN (CAP_SYS_ADMIN): returns a new fd (the ioctl's value) for the
 * kernel buffer of `slot`; -ENOENT when the slot has no kernel event
 * enabled.  With STRATA_KABI_KBUF_WAIT_FD in flags (size >= V2), also a
 * wait fd (O_CLOEXEC) in wait_fd: poll() reports it readable (POLLIN)
 * while some lane's sub-buffer at the lane's `consumed` position is
 * complete; the module wakes it when a probe completes a sub-buffer (from
 * irq_work, never from inside the scheduler).  Once the slot's buffer is
 * freed it is never readable again (poll with a timeout).
 */
#define STRATA_KABI_KBUF_WAIT_FD 0x1u

struct strata_kabi_kbuf_open {
	__u32 size;
	__u32 slot;
	__u64 total_size; /* out: bytes to mmap */
	__u32 n_lanes;    /* out */
	__u32 reserved;
	/* V2 */
	__u32 flags;   /* in: STRATA_KABI_KBUF_WAIT_FD */
	__s32 wait_fd; /* out: the wait fd with KBUF_WAIT_FD, else -1 */
};

#define STRATA_KABI_REGISTER_SIZE_V1 24u
#define STRATA_KABI_QUERY_SIZE_V1 32u
#define STRATA_KABI_ACK_SIZE_V1 16u
#define STRATA_KABI_SET_RULES_SIZE_V1 56u
#define STRATA_KABI_WAIT_SIZE_V1 32u
#define STRATA_KABI_STATS_SIZE_V1 64u
#define STRATA_KABI_KBUF_OPEN_SIZE_V1 24u
#define STRATA_KABI_KBUF_OPEN_SIZE_V2 32u
#define STRATA_KABI_QUERY_SIZE_V2 40u
#define STRATA_KABI_SET_RULES_SIZE_V2 272u /* + session, channel, socket, rule targets */
#define STRATA_KABI_SET_RULES_SIZE_V3 280u /* + kernel buffer geometry */
#define STRATA_KABI_STATS_SIZE_V2 72u
#define STRATA_KABI_GRANT_SIZE 224u
#define STRATA_KABI_RULE_TARGET_SIZE 520u

#define STRATA_KABI_IOC_MAGIC 0xB7
#define STRATA_IOC_REGISTER _IOWR(STRATA_KABI_IOC_MAGIC, 1, struct strata_kabi_register)
#define STRATA_IOC_QUERY _IOWR(STRATA_KABI_IOC_MAGIC, 2, struct strata_kabi_query)
#define STRATA_IOC_ACK _IOW(STRATA_KABI_IOC_MAGIC, 3, struct strata_kabi_ack)
#define STRATA_IOC_SET_RULES _IOWR(STRATA_KABI_IOC_MAGIC, 4, struct strata_kabi_set_rules)
#define STRATA_IOC_WAIT _IOWR(STRATA_KABI_IOC_MAGIC, 5, struct strata_kabi_wait)
#define STRATA_IOC_STATS _IOWR(STRATA_KABI_IOC_MAGIC, 6, struct strata_kabi_stats)
#define STRATA_IOC_KBUF_OPEN _IOWR(STRATA_KABI_IOC_MAGIC, 7, struct strata_kabi_kbuf_open)

/* ---- The clock page (mmap offset 0, read-only) -------------------------
 * A copy of the kernel's CLOCK_MONOTONIC parameters for the TSC, refreshed
 * on every timekeeping update (pvclock notifier) under `seq` (odd while
 * being written).  CLOCK_MONOTONIC ns at TSC value c:
 *     base_ns + ((((c - cycle_last) & mask) * mult + xtime_nsec) >> shift)
 * computed in 128 bits; a c below cycle_last counts as cycle_last.  Valid
 * only when flags has STRATA_KCLOCK_VALID (the clock source is the TSC);
 * otherwise use clock_gettime().  abi/strata_kclock.h reads it.
 */
#define STRATA_KCLOCK_MAGIC 0x4b434c4bu /* "KCLK" */
#define STRATA_KCLOCK_VALID 0x1u
#define STRATA_KCLOCK_USER 0x2u /* published by strata-consumerd, calibrated in user space */
/* The writer's CPU has no RDTSCP (its CPUID, or the kernel's feature
 * bits): readers order the TSC with lfence even where their own CPUID
 * claims it (valgrind's on such a CPU does, then faults on it). */
#define STRATA_KCLOCK_NO_RDTSCP 0x4u

struct strata_kclock {
	__u32 magic;
	__u32 version; /* 1 */
	__u32 seq;     /* even: stable; odd: being written */
	__u32 flags;
	__u64 cycle_last;
	__u64 mask;
	__u64 xtime_nsec; /* shifted ns */
	__u64 base_ns;
	__u32 mult;
	__u32 shift;
	__u64 updates; /* informational: refresh count */
};

#endif /* STRATA_KABI_H */
