// SPDX-License-Identifier: GPL-2.0
/*
 * The syscalls' own ftrace metadata, read once at module init.
 *
 * Each syscall defined with SYSCALL_DEFINEn has a struct syscall_metadata
 * (its name, argument count, argument types and names as written in the
 * source), reachable from its "syscalls:sys_enter_<name>" trace event
 * (event_call->data).  The array of all of them (__start_syscalls_metadata)
 * and syscalls_metadata[] are not exported; trace_get_event_file() is, so
 * we look each syscall's event up by name.  The names come from the
 * kernel's generated syscall table header (<asm/syscalls_64.h>, the one
 * arch/x86/entry/syscall_64.c builds the table from), compiled in: number
 * and entry point of every x86-64 syscall of the kernel we are built for.
 * A syscall whose metadata is missing or disagrees on its number is left
 * out (still recorded by the raw sys_enter/sys_exit events).
 *
 * Context: process context (module init), may sleep.  The metadata is
 * built into the kernel image (.rodata/.data), so the pointers we keep
 * stay valid while the module lives.
 */
#define pr_fmt(fmt) "strata: " fmt

#include <linux/err.h>
#include <linux/kernel.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/trace_events.h>

#include "strata_internal.h"
#include "strata_compat.h"

#if STRATA_HAVE_SYSCALL_META
#include <trace/syscall.h>

#define __SYSCALL(nr, sym) [nr] = #sym,
static const char *const strata_sys_entry[] = {
#include <asm/syscalls_64.h>
};
#undef __SYSCALL

u32 strata_ksys_discover(struct strata_sysinfo *out, u32 cap)
{
	char ev[64];
	u32 nr, n = 0;

	for (nr = 0; nr < ARRAY_SIZE(strata_sys_entry) && n < cap; nr++) {
		const char *sym = strata_sys_entry[nr];
		struct trace_event_file *file;
		struct syscall_metadata *m;
		int i;

		if (!sym || strncmp(sym, "sys_", 4) || !strcmp(sym, "sys_ni_syscall"))
			continue;
		snprintf(ev, sizeof(ev), "sys_enter_%s", sym + 4);
		file = trace_get_event_file(NULL, "syscalls", ev);
		if (IS_ERR(file))
			continue;
		m = file->event_call ? file->event_call->data : NULL;
		if (m && m->syscall_nr == (int)nr && m->name && !strcmp(m->name, sym) &&
		    m->nb_args >= 0 && m->nb_args <= STRATA_SYS_MAX_ARGS) {
			out[n].nr = nr;
			out[n].name = m->name + 4;
			out[n].n_args = m->nb_args;
			for (i = 0; i < m->nb_args; i++) {
				out[n].types[i] = m->types[i];
				out[n].args[i] = m->args[i];
			}
			n++;
		}
		trace_put_event_file(file);
	}
	return n;
}

u32 strata_ksys_max_nr(void)
{
	return ARRAY_SIZE(strata_sys_entry);
}
#else
u32 strata_ksys_discover(struct strata_sysinfo *out, u32 cap)
{
	return 0;
}

u32 strata_ksys_max_nr(void)
{
	return 0;
}
#endif
