/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the parts of strata.ko share.
 *
 *   strata_main.c   module init/exit, the /dev/strata misc device, mmap
 *   strata_ctl.c    registration, rules, generations (the ioctls)
 *   strata_clock.c  the clock page
 *   strata_kbuf.c   kernel event buffers fed by kernel tracepoints
 *   strata_ksys.c   the syscalls' ftrace metadata (named syscall events)
 *   strata_crash.c  the crash descriptor (docs/crash.md)
 */
#ifndef STRATA_INTERNAL_H
#define STRATA_INTERNAL_H

#include <linux/fs.h>
#include <linux/mm_types.h>
#include <linux/types.h>

#include "strata_kabi.h"

struct strata_kabi_rule;

/* strata_ctl.c */
int strata_ctl_init(void);
void strata_ctl_exit(void);
long strata_ctl_ioctl(struct file *file, unsigned int cmd, unsigned long arg);
void strata_ctl_release(struct file *file);

/* strata_clock.c */
int strata_clock_init(void);
void strata_clock_exit(void);
int strata_clock_mmap(struct vm_area_struct *vma);

void *strata_clock_page(void);

/* strata_crash.c (locks: the ctl mutex, then the crash mutex) */
int strata_crash_init(void *kclock);
void strata_crash_exit(void);
long strata_crash_ioctl(struct file *file, unsigned int cmd, unsigned long arg);
void strata_crash_release(struct file *file);
/* Describe a kernel buffer's pages: the entry (>= 0) for strata_crash_del,
 * or -errno (the buffer works, undescribed).
 */
int strata_crash_add(unsigned int slot, struct page **pages, u64 n_pages);
void strata_crash_del(int entry);

/* strata_kbuf.c */
int strata_kbuf_init(void);
void strata_kbuf_exit(void);
/* Called by strata_ctl.c, under its mutex, whenever a slot's rules change
 * (n_rules 0: cleared): arms, disarms, allocates or frees the slot's
 * kernel buffer.  admin: the slot was set with CAP_SYS_ADMIN.  subbuf_size,
 * n_subbuf: geometry of a buffer this call allocates (0: defaults),
 * checked first with strata_kbuf_geometry_ok.
 */
void strata_kbuf_apply_rules(unsigned int slot, const struct strata_kabi_rule *rules,
			     u32 n_rules, bool admin, u32 subbuf_size, u32 n_subbuf);
bool strata_kbuf_geometry_ok(u32 subbuf_size, u32 n_subbuf);
/* Under the ctl mutex: a reference to the slot's buffer file, or ERR_PTR. */
void strata_kbuf_mark_boot(unsigned int slot);
struct file *strata_kbuf_open_file(unsigned int slot, u64 *total_size, u32 *n_lanes);
/* Under the ctl mutex: a new wait file (poll) of the slot's buffer, or ERR_PTR. */
struct file *strata_kbuf_wait_file(unsigned int slot);
void strata_kbuf_stats(u64 *written, u64 *lost);

/* strata_ksys.c: one syscall as the kernel's ftrace metadata describes
 * it (strings owned by the kernel image).
 */
#define STRATA_SYS_MAX_ARGS 6
struct strata_sysinfo {
	const char *name;               /* "openat" */
	u32 nr;
	u32 n_args;
	const char *types[STRATA_SYS_MAX_ARGS]; /* "const char __user *" */
	const char *args[STRATA_SYS_MAX_ARGS];  /* "filename" */
};
/* Process context: fills up to cap entries, returns how many. */
u32 strata_ksys_discover(struct strata_sysinfo *out, u32 cap);
/* Size of the syscall number space the table covers. */
u32 strata_ksys_max_nr(void);

/* Objects allocated by the module, for the leak check at unload. */
extern atomic_long_t strata_nr_objects;

#endif /* STRATA_INTERNAL_H */
