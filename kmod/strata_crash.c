// SPDX-License-Identifier: GPL-2.0
/*
 * The crash descriptor (abi/strata_crash.h, docs/crash.md): where every
 * buffer's pages are, for a reader of a physical memory image taken after
 * a panic (kdump's /proc/vmcore, qemu's dump-guest-memory).
 *
 * Contract:
 *   - one page-aligned, physically contiguous descriptor for the module's
 *     lifetime, found by its magic words and checksum; its physical
 *     address is printed at load;
 *   - kernel buffers are described by strata_kbuf.c (strata_crash_add on
 *     allocation, strata_crash_del before the pages are released); user
 *     buffers by their process (CRASH_REG on its open file of /dev/strata),
 *     pinned with pin_user_pages (FOLL_LONGTERM) until CRASH_UNREG or the
 *     file's release;
 *   - every change happens under strata_crash_lock, in process context;
 *     the descriptor is never written from a probe or at panic: the
 *     buffers' own words (heads, commit counters, discarded counts) are
 *     what the reader uses, as they stand.
 */
#define pr_fmt(fmt) "strata: " fmt

#include <linux/gfp.h>
#include <linux/io.h>
#include <linux/list.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/timekeeping.h>
#include <linux/uaccess.h>
#include <linux/uuid.h>

#include "strata_internal.h"
#include "strata_crash.h"

static unsigned int crash_user_max_mb = 256;
module_param(crash_user_max_mb, uint, 0644);
MODULE_PARM_DESC(crash_user_max_mb,
		 "MiB of user buffers all processes together may pin into the crash descriptor (0: none)");

static bool crash_user = true;
module_param(crash_user, bool, 0644);
MODULE_PARM_DESC(crash_user, "describe registered user buffers in the crash descriptor");

/* A user buffer's registration, on its open file's list. */
struct strata_crash_user {
	struct list_head node;
	struct file *file;      /* the registering open file (not a reference) */
	u64 addr;
	pid_t pid;              /* the registering process (a forked child shares the file) */
	struct page **pages;    /* pinned (FOLL_PIN) */
	u64 n_pages;
	int entry;
};

static DEFINE_MUTEX(strata_crash_lock);
static struct strata_crash_desc *strata_crash;
static u64 *strata_crash_pfns[STRATA_CRASH_MAX_BUFS]; /* owned arrays per entry */
static LIST_HEAD(strata_crash_users);
static u64 strata_crash_serial;
static u64 strata_crash_user_pages; /* pinned by user registrations; crash lock */

static u64 strata_fnv(const void *p, size_t n, u64 h)
{
	const u8 *b = p;

	while (n--)
		h = (h ^ *b++) * 0x100000001b3ull;
	return h;
}

/* Under the lock: seq was made odd by the caller. */
static void strata_crash_seal(void)
{
	struct strata_crash_desc *d = strata_crash;

	d->realtime_offset_ns = ktime_to_ns(ktime_sub(ktime_get_real(), ktime_get()));
	d->updates++;
	/* The checksum covers the even seq: a dump taken before it is
	 * rewritten sees a mismatch, i.e. a change in progress.
	 */
	smp_wmb(); /* the change before the even seq (dump order only) */
	WRITE_ONCE(d->seq, d->seq + 1);
	d->checksum = 0;
	d->checksum = strata_fnv(d, sizeof(*d), 0xcbf29ce484222325ull);
}

static void strata_crash_open(void)
{
	WRITE_ONCE(strata_crash->seq, strata_crash->seq + 1);
	smp_wmb(); /* odd seq before the change */
}

/* Under the lock: describe n_pages pages as entry; -errno. */
static int strata_crash_add_locked(u32 kind, u32 slot, pid_t pid, struct page **pages,
				   u64 n_pages)
{
	struct strata_crash_buf *b = NULL;
	u64 *pfns, i;
	int e;

	for (e = 0; e < STRATA_CRASH_MAX_BUFS; e++)
		if (!strata_crash_pfns[e]) {
			b = &strata_crash->bufs[e];
			break;
		}
	if (!b)
		return -ENOSPC;
	pfns = kmalloc_array(n_pages, sizeof(*pfns), GFP_KERNEL | __GFP_NOWARN);
	if (!pfns)
		return -ENOMEM;
	for (i = 0; i < n_pages; i++)
		pfns[i] = page_to_pfn(pages[i]);
	strata_crash_pfns[e] = pfns;
	atomic_long_inc(&strata_nr_objects);
	strata_crash_open();
	b->slot = slot;
	b->pid = pid;
	b->total_size = n_pages << PAGE_SHIFT;
	b->n_pages = n_pages;
	b->pfns_phys = virt_to_phys(pfns);
	b->pfns_sum = strata_fnv(pfns, n_pages * sizeof(*pfns), 0xcbf29ce484222325ull);
	b->serial = ++strata_crash_serial;
	smp_wmb(); /* the entry before its kind */
	WRITE_ONCE(b->kind, kind);
	strata_crash_seal();
	return e;
}

static void strata_crash_del_locked(int e)
{
	strata_crash_open();
	WRITE_ONCE(strata_crash->bufs[e].kind, STRATA_CRASH_FREE);
	smp_wmb(); /* kind cleared before the rest */
	memset(&strata_crash->bufs[e], 0, sizeof(strata_crash->bufs[e]));
	strata_crash_seal();
	kfree(strata_crash_pfns[e]);
	strata_crash_pfns[e] = NULL;
	atomic_long_dec(&strata_nr_objects);
}

int strata_crash_add(unsigned int slot, struct page **pages, u64 n_pages)
{
	int e;

	if (!strata_crash)
		return -ENODEV;
	mutex_lock(&strata_crash_lock);
	e = strata_crash_add_locked(STRATA_CRASH_KERNEL, slot, 0, pages, n_pages);
	mutex_unlock(&strata_crash_lock);
	if (e < 0)
		pr_warn("kernel buffer of slot %u not in the crash descriptor (%d)\n", slot, e);
	return e;
}

void strata_crash_del(int entry)
{
	if (!strata_crash || entry < 0 || entry >= STRATA_CRASH_MAX_BUFS)
		return;
	mutex_lock(&strata_crash_lock);
	if (strata_crash_pfns[entry])
		strata_crash_del_locked(entry);
	mutex_unlock(&strata_crash_lock);
}

static void strata_crash_user_free(struct strata_crash_user *u)
{
	strata_crash_del_locked(u->entry);
	strata_crash_user_pages -= u->n_pages;
	list_del(&u->node);
	unpin_user_pages(u->pages, u->n_pages);
	kvfree(u->pages);
	kfree(u);
	atomic_long_dec(&strata_nr_objects);
}

static long strata_crash_reg(struct file *file, void __user *uarg)
{
	struct strata_crash_reg a;
	struct strata_crash_user *u;
	u64 done = 0;
	long ret;

	if (copy_from_user(&a, uarg, sizeof(a)))
		return -EFAULT;
	if (a.size < STRATA_CRASH_REG_SIZE_V1 || a.slot >= STRATA_KABI_MAX_SLOTS ||
	    !a.len || !PAGE_ALIGNED(a.addr) || !PAGE_ALIGNED(a.len) || a.addr + a.len < a.addr)
		return -EINVAL;
	if (!strata_crash || !crash_user)
		return -EOPNOTSUPP;
	/* A first bound before pinning anything; the total is checked again
	 * under the lock.
	 */
	if (a.len > (u64)crash_user_max_mb << 20)
		return -E2BIG;
	u = kzalloc(sizeof(*u), GFP_KERNEL);
	if (!u)
		return -ENOMEM;
	atomic_long_inc(&strata_nr_objects);
	u->file = file;
	u->addr = a.addr;
	u->pid = task_tgid_nr(current);
	u->n_pages = a.len >> PAGE_SHIFT;
	u->pages = kvcalloc(u->n_pages, sizeof(*u->pages), GFP_KERNEL);
	ret = -ENOMEM;
	if (!u->pages)
		goto fail;
	while (done < u->n_pages) {
		int n = min_t(u64, u->n_pages - done, INT_MAX / 2);

		ret = pin_user_pages_fast(a.addr + (done << PAGE_SHIFT), n,
					  FOLL_WRITE | FOLL_LONGTERM, u->pages + done);
		if (ret <= 0) {
			ret = ret ? ret : -EFAULT;
			goto fail;
		}
		done += ret;
	}
	mutex_lock(&strata_crash_lock);
	if (strata_crash_user_pages + u->n_pages > ((u64)crash_user_max_mb << 20) >> PAGE_SHIFT)
		ret = -E2BIG;
	else
		ret = strata_crash_add_locked(STRATA_CRASH_USER, a.slot, u->pid, u->pages,
					      u->n_pages);
	if (ret >= 0) {
		u->entry = ret;
		strata_crash_user_pages += u->n_pages;
		list_add(&u->node, &strata_crash_users);
		ret = 0;
	}
	mutex_unlock(&strata_crash_lock);
	if (!ret)
		return 0;
fail:
	if (done)
		unpin_user_pages(u->pages, done);
	kvfree(u->pages);
	kfree(u);
	atomic_long_dec(&strata_nr_objects);
	return ret;
}

static long strata_crash_unreg(struct file *file, void __user *uarg)
{
	struct strata_crash_reg a;
	struct strata_crash_user *u, *t;
	long ret = -ENOENT;

	if (copy_from_user(&a, uarg, sizeof(a)))
		return -EFAULT;
	if (a.size < STRATA_CRASH_REG_SIZE_V1)
		return -EINVAL;
	mutex_lock(&strata_crash_lock);
	list_for_each_entry_safe(u, t, &strata_crash_users, node)
		if (u->file == file && u->addr == a.addr && u->pid == task_tgid_nr(current)) {
			strata_crash_user_free(u);
			ret = 0;
			break;
		}
	mutex_unlock(&strata_crash_lock);
	return ret;
}

long strata_crash_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	if (_IOC_NR(cmd) == _IOC_NR(STRATA_IOC_CRASH_REG))
		return strata_crash_reg(file, (void __user *)arg);
	return strata_crash_unreg(file, (void __user *)arg);
}

/* The open file is released: its buffers are no longer described. */
void strata_crash_release(struct file *file)
{
	struct strata_crash_user *u, *t;

	mutex_lock(&strata_crash_lock);
	list_for_each_entry_safe(u, t, &strata_crash_users, node)
		if (u->file == file)
			strata_crash_user_free(u);
	mutex_unlock(&strata_crash_lock);
}

int strata_crash_init(void *kclock)
{
	struct strata_crash_desc *d;

	BUILD_BUG_ON(sizeof(struct strata_crash_desc) > STRATA_CRASH_DESC_BYTES);
	BUILD_BUG_ON(sizeof(struct strata_crash_buf) != 64);
	d = (void *)__get_free_pages(GFP_KERNEL | __GFP_ZERO, get_order(STRATA_CRASH_DESC_BYTES));
	if (!d)
		return -ENOMEM;
	d->version = STRATA_CRASH_VERSION;
	d->size = sizeof(*d);
	d->page_size = PAGE_SIZE;
	d->max_bufs = STRATA_CRASH_MAX_BUFS;
	d->kclock_phys = kclock ? virt_to_phys(kclock) : 0;
	generate_random_uuid(d->load_uuid);
	d->magic1 = STRATA_CRASH_MAGIC1;
	smp_wmb();
	d->magic0 = STRATA_CRASH_MAGIC0;
	strata_crash = d;
	mutex_lock(&strata_crash_lock);
	strata_crash_open();
	strata_crash_seal();
	mutex_unlock(&strata_crash_lock);
	pr_info("crash descriptor at 0x%llx\n", (unsigned long long)virt_to_phys(d));
	return 0;
}

void strata_crash_exit(void)
{
	struct strata_crash_user *u, *t;
	int e;

	if (!strata_crash)
		return;
	mutex_lock(&strata_crash_lock);
	list_for_each_entry_safe(u, t, &strata_crash_users, node)
		strata_crash_user_free(u);
	for (e = 0; e < STRATA_CRASH_MAX_BUFS; e++)
		if (strata_crash_pfns[e])
			strata_crash_del_locked(e);
	/* A later image must not find a stale descriptor in freed memory. */
	strata_crash->magic0 = 0;
	mutex_unlock(&strata_crash_lock);
	free_pages((unsigned long)strata_crash, get_order(STRATA_CRASH_DESC_BYTES));
	strata_crash = NULL;
}
