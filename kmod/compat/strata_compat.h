/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Kernel-version differences, each #if naming the version
 * that changed the interface.  Built and tested on Debian 12's 6.1.
 */
#ifndef STRATA_COMPAT_H
#define STRATA_COMPAT_H

#include <linux/version.h>
#include <linux/kprobes.h>
#include <linux/mm.h>

/* 6.3: vma->vm_flags became read-only; vm_flags_set()/vm_flags_clear(). */
#if LINUX_VERSION_CODE < KERNEL_VERSION(6, 3, 0)
static inline void strata_vm_flags_set(struct vm_area_struct *vma, unsigned long f)
{
	vma->vm_flags |= f;
}

static inline void strata_vm_flags_clear(struct vm_area_struct *vma, unsigned long f)
{
	vma->vm_flags &= ~f;
}
#else
#define strata_vm_flags_set vm_flags_set
#define strata_vm_flags_clear vm_flags_clear
#endif

/* 5.18: sched_switch gained prev_state (before next); the probe takes it. */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(5, 18, 0)
#define STRATA_SCHED_SWITCH_ARGS(preempt, prev, next, prev_state) \
	bool preempt, struct task_struct *prev, struct task_struct *next, \
	unsigned int prev_state
#define STRATA_SCHED_SWITCH_PREV_STATE(prev, prev_state) (prev_state)
#else
#define STRATA_SCHED_SWITCH_ARGS(preempt, prev, next, prev_state) \
	bool preempt, struct task_struct *prev, struct task_struct *next
#define STRATA_SCHED_SWITCH_PREV_STATE(prev, prev_state) (READ_ONCE((prev)->__state))
#endif

/* Syscall events by name read the kernel's own ftrace syscall metadata
 * (struct syscall_metadata, <trace/syscall.h>) through the syscall's trace
 * event: trace_get_event_file()/trace_put_event_file() are exported since
 * 5.6.  The number -> entry point table is the kernel's generated
 * <asm/syscalls_64.h> (x86-64 only here).  Elsewhere: no named syscalls,
 * sys_enter/sys_exit keep working.
 */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(5, 6, 0) && defined(CONFIG_FTRACE_SYSCALLS) && \
	defined(CONFIG_X86_64)
#define STRATA_HAVE_SYSCALL_META 1
#else
#define STRATA_HAVE_SYSCALL_META 0
#endif

/* A kretprobe instance's probe and return address.  5.11 removed the
 * kretprobe hash: get_kretprobe() (NULL once the probe is unregistered)
 * replaced ri->rp; 5.19 moved instances onto rethook and added
 * get_kretprobe_retaddr() for what was ri->ret_addr.
 */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(5, 11, 0)
#define strata_get_kretprobe(ri) get_kretprobe(ri)
#else
#define strata_get_kretprobe(ri) ((ri)->rp)
#endif
#if LINUX_VERSION_CODE >= KERNEL_VERSION(5, 19, 0)
#define strata_kretprobe_retaddr(ri) get_kretprobe_retaddr(ri)
#else
#define strata_kretprobe_retaddr(ri) ((unsigned long)(ri)->ret_addr)
#endif

#endif /* STRATA_COMPAT_H */
