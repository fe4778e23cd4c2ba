// SPDX-License-Identifier: GPL-2.0
/*
 * The clock page: the kernel's CLOCK_MONOTONIC parameters
 * for the TSC, so that user space turns a TSC value into CLOCK_MONOTONIC ns
 * without a system call (formula in strata_kabi.h).
 *
 * Contract:
 *   - One writer: the pvclock_gtod notifier, called by the timekeeping core
 *     on every timekeeping update with the timekeeper locked and interrupts
 *     off (so writers never overlap).  It copies tkr_mono under the page's
 *     sequence counter: seq odd, fields, seq even.
 *   - Readers (user space, read-only mapping) retry while seq is odd or
 *     changed; see abi/strata_kclock.h.
 *   - The parameters are those the vDSO uses, so the result equals
 *     clock_gettime(CLOCK_MONOTONIC) and inherits its monotonicity.  When
 *     the clock source is not the TSC, STRATA_KCLOCK_VALID is cleared.
 */
#define pr_fmt(fmt) "strata: " fmt

#include <linux/clocksource.h>
#include <linux/gfp.h>
#include <linux/mm.h>
#include <linux/notifier.h>
#include <linux/pvclock_gtod.h>
#include <linux/timekeeper_internal.h>
#include <asm/cpufeature.h>

#include "strata_internal.h"

static struct strata_kclock *strata_kclock;

/* A process's CPUID can claim RDTSCP where it faults (valgrind's does):
 * the page says what the kernel found (strata_kabi.h). */
static u32 strata_clock_no_rdtscp(void)
{
	return boot_cpu_has(X86_FEATURE_RDTSCP) ? 0 : STRATA_KCLOCK_NO_RDTSCP;
}

static int strata_clock_notify(struct notifier_block *nb, unsigned long was_set,
			       void *priv)
{
	const struct timekeeper *tk = priv;
	const struct tk_read_base *tkr = &tk->tkr_mono;
	struct strata_kclock *k = strata_kclock;
	bool tsc = tkr->clock && !strcmp(tkr->clock->name, "tsc");

	/* Open: readers that saw the old even value will retry.  The store
	 * of the odd value is ordered before the field stores (smp_wmb);
	 * pairs with the reader's acquire load of seq and its fence before
	 * the re-check (strata_kclock.h).
	 */
	WRITE_ONCE(k->seq, k->seq + 1);
	smp_wmb(); /* odd seq before the fields; pairs with the reader's fence */
	WRITE_ONCE(k->flags, (tsc ? STRATA_KCLOCK_VALID : 0) | strata_clock_no_rdtscp());
	WRITE_ONCE(k->cycle_last, tkr->cycle_last);
	WRITE_ONCE(k->mask, tkr->mask);
	WRITE_ONCE(k->xtime_nsec, tkr->xtime_nsec);
	WRITE_ONCE(k->base_ns, ktime_to_ns(tkr->base));
	WRITE_ONCE(k->mult, tkr->mult);
	WRITE_ONCE(k->shift, tkr->shift);
	WRITE_ONCE(k->updates, k->updates + 1);
	/* Close: the fields are visible before the even value (smp_wmb);
	 * pairs with the reader's final seq load.
	 */
	smp_wmb();
	WRITE_ONCE(k->seq, k->seq + 1);
	return NOTIFY_OK;
}

static struct notifier_block strata_clock_nb = {
	.notifier_call = strata_clock_notify,
};

int strata_clock_init(void)
{
	int ret;

	strata_kclock = (struct strata_kclock *)get_zeroed_page(GFP_KERNEL);
	if (!strata_kclock)
		return -ENOMEM;
	strata_kclock->magic = STRATA_KCLOCK_MAGIC;
	strata_kclock->version = 1;
	/* Registering calls the notifier once right away. */
	ret = pvclock_gtod_register_notifier(&strata_clock_nb);
	if (ret) {
		free_page((unsigned long)strata_kclock);
		strata_kclock = NULL;
	}
	return ret;
}

void strata_clock_exit(void)
{
	pvclock_gtod_unregister_notifier(&strata_clock_nb);
	/* Mappings hold the module: no reader is left. */
	free_page((unsigned long)strata_kclock);
	strata_kclock = NULL;
}

int strata_clock_mmap(struct vm_area_struct *vma)
{
	if (vma->vm_end - vma->vm_start != PAGE_SIZE)
		return -EINVAL;
	return vm_insert_page(vma, vma->vm_start, virt_to_page(strata_kclock));
}

void *strata_clock_page(void)
{
	return strata_kclock;
}
