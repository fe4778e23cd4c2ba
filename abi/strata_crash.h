/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * The crash descriptor of the Strata kernel module (docs/crash.md), and the
 * ioctls by which a traced process puts its buffers in it.
 *
 * The module keeps, in STRATA_CRASH_DESC_BYTES of physically contiguous,
 * page-aligned memory, a description of every buffer it knows of: each
 * kernel buffer (one per module slot with kernel events) and each user
 * buffer a traced process registered (STRATA_IOC_CRASH_REG).  A reader of
 * a physical memory image (kdump's /proc/vmcore, qemu's dump-guest-memory,
 * both ELF cores) finds it with no help from the dead kernel: it scans
 * page-aligned physical addresses for the two magic words and checks the
 * checksum; the module also prints the descriptor's physical address at
 * load ("strata: crash descriptor at 0x...").
 *
 * Every buffer is an ordinary libtrace/abi/strata_abi.h buffer whose pages
 * the module pins while it is described: page i of the buffer is at
 * physical address pfns[i] * page_size, the pfns array itself being
 * physically contiguous at pfns_phys.  Buffers are recoverable as they
 * stand: nothing is flushed at a panic (the crash kernel runs before panic
 * notifiers).
 *
 * Writer (the module, under its crash mutex): an entry is filled with
 * kind 0, then kind is set (after a write barrier); an entry is retired by
 * clearing kind first, and its pfns array is freed after.  Around each
 * change seq is made odd then even and checksum recomputed; a dump taken
 * in the middle of a change shows an odd seq or a wrong checksum: a reader
 * then still trusts each entry whose pfns_sum matches its array.
 *
 * Checksums are FNV-1a 64 (offset basis 0xcbf29ce484222325, prime
 * 0x100000001b3) over the bytes: of the descriptor with `checksum` read as
 * 0, and of each entry's pfns array.  Little-endian (x86-64).
 */
#ifndef STRATA_CRASH_H
#define STRATA_CRASH_H

#ifdef __KERNEL__
#include <linux/types.h>
#include <linux/ioctl.h>
#else
#include <stdint.h>
#include <sys/ioctl.h>
#include <linux/types.h>
#endif

#define STRATA_CRASH_MAGIC0 0x3143534441525453ull /* "STRADSC1" */
#define STRATA_CRASH_MAGIC1 0x9a7c1b05e3d2f468ull /* random: no text matches */
#define STRATA_CRASH_VERSION 1u
#define STRATA_CRASH_DESC_BYTES 16384u
#define STRATA_CRASH_MAX_BUFS 254u

enum strata_crash_kind {
	STRATA_CRASH_FREE = 0,
	STRATA_CRASH_KERNEL = 1, /* a module slot's kernel event buffer */
	STRATA_CRASH_USER = 2,   /* a traced process's buffer */
};

struct strata_crash_buf {
	__u32 kind; /* enum strata_crash_kind */
	__u32 slot; /* the session slot (module slot = daemon slot) */
	__s32 pid;  /* USER: the process (initial pid namespace) */
	__u32 reserved;
	__u64 total_size; /* bytes of the buffer (n_pages * page_size) */
	__u64 n_pages;
	__u64 pfns_phys; /* physical address of n_pages __u64 frame numbers */
	__u64 pfns_sum;  /* FNV-1a 64 of those n_pages * 8 bytes */
	__u64 serial;    /* registration number (module load wide) */
	__u64 reserved2;
};

struct strata_crash_desc {
	__u64 magic0;  /* STRATA_CRASH_MAGIC0 */
	__u64 magic1;  /* STRATA_CRASH_MAGIC1 */
	__u32 version; /* STRATA_CRASH_VERSION */
	__u32 size;    /* sizeof(struct strata_crash_desc) */
	__u32 page_size;
	__u32 max_bufs;           /* STRATA_CRASH_MAX_BUFS */
	__u64 seq;                /* even: stable; odd: being changed */
	__u64 checksum;           /* FNV-1a 64 of the descriptor, this field as 0 */
	__u64 kclock_phys;        /* the clock page (struct strata_kclock), 0 if none */
	__s64 realtime_offset_ns; /* CLOCK_REALTIME - CLOCK_MONOTONIC, refreshed on changes */
	__u8 load_uuid[16];       /* random per module load: the recovered clock's uuid */
	__u64 updates;            /* changes made */
	__u64 reserved[4];
	struct strata_crash_buf bufs[STRATA_CRASH_MAX_BUFS];
};

/* CRASH_REG: the caller's buffer mapped at [addr, addr + size) (page
 * aligned, the whole buffer from its offset 0, read-write) is pinned and
 * described until CRASH_UNREG of the same addr, or until the registering
 * open file is released.  -ENOSPC descriptor full, -E2BIG the user
 * buffers described would then exceed the module's crash_user_max_mb (a
 * total over all processes), -EFAULT not mapped.
 */
struct strata_crash_reg {
	__u32 size; /* sizeof(struct strata_crash_reg) */
	__u32 slot; /* the session slot the buffer belongs to */
	__u64 addr;
	__u64 len;
};

#define STRATA_CRASH_REG_SIZE_V1 24u

#define STRATA_IOC_CRASH_REG _IOW(0xB7, 8, struct strata_crash_reg)
#define STRATA_IOC_CRASH_UNREG _IOW(0xB7, 9, struct strata_crash_reg)

#endif /* STRATA_CRASH_H */
