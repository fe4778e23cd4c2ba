// SPDX-License-Identifier: GPL-2.0
/* strata_kbuf.c - kernel event buffers (stub). */
#include "strata_internal.h"

int strata_kbuf_init(void)
{
	return 0;
}

void strata_kbuf_exit(void)
{
}

int strata_kbuf_mmap(struct vm_area_struct *vma, unsigned long off)
{
	return -ENODEV;
}

void strata_kbuf_apply_rules(const struct strata_kabi_rule *const *rules,
			     const u32 *n_rules, unsigned int n_slots)
{
}

void strata_kbuf_stats(u64 *written, u64 *lost)
{
	*written = 0;
	*lost = 0;
}
