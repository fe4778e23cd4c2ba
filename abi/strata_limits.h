/* SPDX-License-Identifier: (GPL-2.0 WITH Linux-syscall-note) OR MIT */
/*
 * strata_limits.h - every limit that more than one side of Strata holds,
 * defined once: the runtime (libtrace/runtime/runtime.h), the control
 * protocol (libtrace/proto/proto.h), the buffer ABI (strata_abi.h) and the
 * kernel module's ABI (strata_kabi.h) derive theirs from these, so that
 * what one side accepts always fits the other.
 *
 * Sizes of text are bytes with the terminating NUL (a name of at most
 * STRATA_LIMIT_NAME - 1 bytes).  One limit is the kernel's and must agree
 * with it: STRATA_LIMIT_COMM = TASK_COMM_LEN (static_assert in
 * kmod/strata_ctl.c).  The public tracepoint.h repeats STRATA_MAX_SLOTS,
 * since it is installed alone (static_assert in libtrace/runtime/slots.cpp).
 * Plain C, no includes: usable from the kernel, C and C++.
 */
#ifndef STRATA_LIMITS_H
#define STRATA_LIMITS_H

#define STRATA_LIMIT_SLOTS 16    /* session slots of a process or the module */
#define STRATA_LIMIT_RULES 32    /* enablement rules of a slot */
#define STRATA_LIMIT_PATTERN 128 /* a rule's "provider:event" glob */
#define STRATA_LIMIT_FILTER 256  /* a rule's field filter */
#define STRATA_LIMIT_NAME 64     /* a session's or channel's name */
/* An event rule's targets: process ids, and process names (each matched
 * against a process's comm: the first STRATA_LIMIT_COMM - 1 bytes). */
#define STRATA_LIMIT_TARGET_PIDS 64
#define STRATA_LIMIT_TARGET_NAMES 16
#define STRATA_LIMIT_COMM 16 /* = TASK_COMM_LEN */
/* The largest event id a process registers: ids index the runtime's
 * per-event tables and fit the descriptor records' and the wide record
 * header's 16 bits, 0xffff left unused. */
#define STRATA_LIMIT_EVENT_ID 0xfffe

#endif
