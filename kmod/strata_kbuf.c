// SPDX-License-Identifier: GPL-2.0
/*
 * Kernel event buffers.
 *
 * One buffer per session slot whose rules (set by a CAP_SYS_ADMIN
 * controller) enable at least one kernel:<tracepoint> event.  The buffer is
 * an ordinary strata_abi.h buffer: header, descriptor table (written once,
 * here), one lane per CPU, each a ring of CTF packets.  The consumer maps it
 * read-write through the fd of STRATA_IOC_KBUF_OPEN and reads it with the
 * same code as user buffers (libtrace's Reader).  The buffer is a shmem file
 * (a regular file, like the memfd of a user buffer) whose pages the module
 * pins and maps contiguously with vmap().
 *
 * Contract:
 *   - Writers: the tracepoint probes and the kprobe and kretprobe
 *     handlers, on any CPU, in any context the tracepoints fire in
 *     (process; softirq and hardirq for sched_wakeup, irq_handler_*,
 *     softirq_*, timers, block completion) or the probed function runs
 *     in (or returns from), with preemption disabled.  A probe writes to
 *     lane cpu % n_lanes; a probe may interrupt another probe on the same
 *     lane.  Every change of lane state is one cmpxchg on `head` (the
 *     lane protocol of strata_abi.h, as libtrace/runtime/writer.cpp): a writer
 *     owns the bytes its cmpxchg gave it, then adds their count to
 *     commit[] (release).
 *   - The consumer (user space, another CPU) may store `consumed`, close an
 *     open packet with the same cmpxchg (its padding counted in
 *     ccommit[], never commit[]), and write anything anywhere: the
 *     mapping is HOSTILE to us.  We never read geometry back from it (a
 *     private copy is kept), every position is masked into the ring, every
 *     retry loop is bounded; a hostile consumer can only lose its own
 *     events.
 *   - Control (strata_ctl.c, under its mutex): strata_kbuf_apply_rules()
 *     allocates, publishes (RCU) and unpublishes buffers and sets which
 *     slots each event goes to.  A buffer is freed after an RCU grace
 *     period (probes run inside the tracepoint's RCU-sched read side); the
 *     file and its pages live on while a consumer holds an fd or mapping.
 *     A consumer that truncates the file only orphans pages we still pin.
 *   - Arming: a probe is registered when some slot first wants its event,
 *     and unregistered by strata_disarm_work only after no slot has wanted
 *     it for STRATA_DISARM_DELAY.  Flipping tracepoints on every rule
 *     change patches kernel text each time (static keys, and for sys_enter
 *     a walk over every thread): a controller flipping rules in a loop
 *     livelocked a TCG guest that way.  strata_arm_lock guards `armed`.
 *   - Wakeups: a probe never wakes anybody itself (sched_switch and
 *     sched_wakeup run with a runqueue lock held: wake_up there could
 *     deadlock).  The writer whose commit completes a sub-buffer queues the
 *     buffer's irq_work (NMI-safe); its handler runs once interrupts are
 *     enabled again and wakes the wait queue of the buffer's strata_kwait.
 *     A consumer polls the wait fd of KBUF_OPEN (STRATA_KABI_KBUF_WAIT_FD):
 *     readable while some lane's sub-buffer at `consumed` is complete.  The
 *     strata_kwait outlives the buffer while wait fds hold it (kref); its
 *     lock guards its pointer to the buffer, cleared before the free.
 */
#define pr_fmt(fmt) "strata: " fmt

#include <linux/anon_inodes.h>
#include <linux/binfmts.h>
#include <linux/blk-mq.h>
#include <linux/blkdev.h>
#include <linux/blktrace_api.h>
#include <linux/compat.h>
#include <linux/ctype.h>
#include <linux/file.h>
#include <linux/glob.h>
#include <linux/hrtimer.h>
#include <linux/interrupt.h>
#include <linux/irq_work.h>
#include <linux/kprobes.h>
#include <linux/kref.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/percpu.h>
#include <linux/poll.h>
#include <linux/ptrace.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/timekeeping.h>
#include <linux/timer.h>
#include <linux/tracepoint.h>
#include <linux/uuid.h>
#include <linux/shmem_fs.h>
#include <linux/vmalloc.h>
#include <linux/workqueue.h>
#include <asm/syscall.h>
#include <asm/unaligned.h>

#include "strata_abi.h"
#include "strata_internal.h"
#include "strata_compat.h"

static unsigned int kbuf_subbuf_size = 64 * 1024;
module_param(kbuf_subbuf_size, uint, 0444);
MODULE_PARM_DESC(kbuf_subbuf_size, "kernel buffer sub-buffer bytes (power of two, 4 KiB..64 MiB)");
static unsigned int kbuf_n_subbuf = 8;
module_param(kbuf_n_subbuf, uint, 0444);
MODULE_PARM_DESC(kbuf_n_subbuf, "kernel buffer sub-buffers per CPU (power of two, 2..64)");
static unsigned int kbuf_max_lane_size = 32 << 20;
module_param(kbuf_max_lane_size, uint, 0444);
MODULE_PARM_DESC(kbuf_max_lane_size,
		 "bound on kernel buffer bytes per CPU a session may ask for (>= 8 KiB)");

#define STRATA_KSTR_MAX 256u    /* strings are cut at this many bytes */
#define STRATA_KMAX_FIELDS 8u
#define STRATA_KCAS_TRIES 16
#define STRATA_KLOGLEVEL 6u     /* STRATA_LOGLEVEL_INFO */
#define STRATA_DISARM_DELAY (2 * HZ)

/* What a consumer waits on; outlives its buffer while wait fds hold it. */
struct strata_kwait {
	struct kref ref;                /* the buffer's, one per wait fd */
	wait_queue_head_t wq;
	spinlock_t lock;                /* guards kb */
	struct strata_kbuf *kb;         /* NULL once the buffer is freed */
};

struct strata_kbuf {
	struct rcu_work free_work;      /* freed after a grace period */
	struct irq_work wake_work;      /* queued by probes: wakes kw->wq */
	struct strata_kwait *kw;
	unsigned int slot;
	struct file *file;              /* shmem; consumers get fds of it */
	struct page **pages;            /* pinned (one reference each) */
	u64 n_pages;
	void *mem;                      /* vmap of pages */
	int crash_entry;                /* strata_crash_add's, or -errno */
	u64 total_size;
	/* Private geometry: never read back from the mapping. */
	u32 n_lanes, n_subbuf;
	u64 subbuf_size, lane_stride;
	u8 uuid[16];
	u64 desc_used;                  /* private copy; ctl mutex */
	struct strata_buffer_header *hdr;
	struct strata_lane_ctl *lanes;
	u8 *data;
};

/* ---- Events: descriptor table and serialisation share one definition -- */
struct strata_kfield {
	const char *name;
	u8 type;        /* enum strata_field_type */
	u8 bits;
	u8 is_signed;
	u8 base;
	u32 length;     /* STRATA_FT_ARRAY */
};

union strata_kval {
	u64 u;
	const char *s;
	const u64 *arr;
};

#define KF_INT(n, b, s) { .name = n, .type = STRATA_FT_INTEGER, .bits = b, .is_signed = s, .base = 10 }
#define KF_HEX(n, b) { .name = n, .type = STRATA_FT_INTEGER, .bits = b, .base = 16 }
#define KF_STR(n) { .name = n, .type = STRATA_FT_STRING, .bits = 8, .base = 10 }

/*
 * Each schema (the fields of one or more events) is written once, as a
 * list KS_<schema>(STR, INT, HEX, ARR) of its fields in record order:
 *   STR(name)                 a NUL-terminated string (const char *)
 *   INT(name, bits, signed)   a decimal integer of 32 or 64 bits (u64)
 *   HEX(name, bits)           the same shown in hexadecimal (u64)
 *   ARR(name, length)         a fixed array of 64-bit hex integers (const u64 *)
 * From a list come the descriptor's field table (kf_<schema>) and a typed
 * value record (struct kv_<schema>: one 8-byte member per field, in field
 * order, the layout of a union strata_kval array) that a probe fills by
 * field name.  The event list below ties each event to its schema and probe
 * and gives the enum and a typed emitter per event (kev_emit_<ID>), which
 * takes only its schema's record: a probe that names a field its schema
 * lacks, stores an integer into a string, or emits another schema's record
 * does not compile.  Reordering a list reorders the table and the record
 * together.
 */
#define KS_sched_switch(STR, INT, HEX, ARR) \
	STR(prev_comm) INT(prev_tid, 32, 1) INT(prev_prio, 32, 1) INT(prev_state, 64, 1) \
	STR(next_comm) INT(next_tid, 32, 1) INT(next_prio, 32, 1)
#define KS_wakeup(STR, INT, HEX, ARR) \
	STR(comm) INT(tid, 32, 1) INT(prio, 32, 1) INT(target_cpu, 32, 1)
#define KS_fork(STR, INT, HEX, ARR) \
	STR(parent_comm) INT(parent_tid, 32, 1) STR(child_comm) INT(child_tid, 32, 1) \
	INT(parent_pid, 32, 1) INT(child_pid, 32, 1)
#define KS_exec(STR, INT, HEX, ARR) \
	STR(filename) INT(tid, 32, 1) INT(old_tid, 32, 1)
#define KS_exit(STR, INT, HEX, ARR) \
	STR(comm) INT(tid, 32, 1) INT(prio, 32, 1)
#define KS_sys_enter(STR, INT, HEX, ARR) \
	INT(id, 64, 1) ARR(args, 6)
#define KS_sys_exit(STR, INT, HEX, ARR) \
	INT(id, 64, 1) INT(ret, 64, 1)
#define KS_syscall_ret(STR, INT, HEX, ARR) \
	INT(ret, 64, 1)
#define KS_irq_entry(STR, INT, HEX, ARR) \
	INT(irq, 32, 1) STR(name)
#define KS_irq_exit(STR, INT, HEX, ARR) \
	INT(irq, 32, 1) INT(ret, 32, 1)
#define KS_softirq(STR, INT, HEX, ARR) \
	INT(vec, 32, 0)
#define KS_migrate(STR, INT, HEX, ARR) \
	STR(comm) INT(tid, 32, 1) INT(prio, 32, 1) INT(orig_cpu, 32, 1) INT(dest_cpu, 32, 1)
#define KS_hrtimer_entry(STR, INT, HEX, ARR) \
	HEX(hrtimer, 64) INT(now, 64, 1) HEX(function, 64)
#define KS_hrtimer_exit(STR, INT, HEX, ARR) \
	HEX(hrtimer, 64)
#define KS_timer_entry(STR, INT, HEX, ARR) \
	HEX(timer, 64) INT(now, 64, 0) HEX(function, 64) INT(baseclk, 64, 0)
#define KS_timer_exit(STR, INT, HEX, ARR) \
	HEX(timer, 64)
/* rwbs: lttng-modules' flag bits (RWBS_FLAG_*), see strata_rwbs. */
#define KS_block_issue(STR, INT, HEX, ARR) \
	INT(dev, 32, 0) INT(sector, 64, 0) INT(nr_sector, 32, 0) INT(bytes, 32, 0) \
	INT(tid, 32, 1) INT(rwbs, 32, 0) STR(comm)
#define KS_block_complete(STR, INT, HEX, ARR) \
	INT(dev, 32, 0) INT(sector, 64, 0) INT(nr_sector, 32, 0) INT(error, 32, 1) INT(rwbs, 32, 0)
#define KS_page_fault(STR, INT, HEX, ARR) \
	HEX(address, 64) HEX(ip, 64) HEX(error_code, 64)
/* Dynamic probes.  ip: the function's address; parent_ip: where it returns
 * to; ret: the return register, as a signed long (what a syscall returns).
 */
#define KS_kprobe(STR, INT, HEX, ARR) \
	HEX(ip, 64)
#define KS_kretprobe(STR, INT, HEX, ARR) \
	HEX(ip, 64) HEX(parent_ip, 64) INT(ret, 64, 1)

#define STRATA_KSCHEMAS(X) \
	X(sched_switch) X(wakeup) X(fork) X(exec) X(exit) X(sys_enter) X(sys_exit) \
	X(syscall_ret) X(irq_entry) X(irq_exit) X(softirq) X(migrate) X(hrtimer_entry) \
	X(hrtimer_exit) X(timer_entry) X(timer_exit) X(block_issue) X(block_complete) \
	X(page_fault) X(kprobe) X(kretprobe)

#define KF_DESC_STR(n) KF_STR(#n),
#define KF_DESC_INT(n, b, s) KF_INT(#n, b, s),
#define KF_DESC_HEX(n, b) KF_HEX(#n, b),
#define KF_DESC_ARR(n, len) \
	{ .name = #n, .type = STRATA_FT_ARRAY, .bits = 64, .base = 16, .length = len },
#define KV_MEMBER_STR(n) const char *n;
#define KV_MEMBER_INT(n, b, s) u64 n;
#define KV_MEMBER_HEX(n, b) u64 n;
#define KV_MEMBER_ARR(n, len) const u64 *n;
#define KSCHEMA_DEFINE(s) \
	static const struct strata_kfield kf_##s[] = { \
		KS_##s(KF_DESC_STR, KF_DESC_INT, KF_DESC_HEX, KF_DESC_ARR) \
	}; \
	struct kv_##s { \
		KS_##s(KV_MEMBER_STR, KV_MEMBER_INT, KV_MEMBER_HEX, KV_MEMBER_ARR) \
	}; \
	static_assert(sizeof(struct kv_##s) == ARRAY_SIZE(kf_##s) * sizeof(union strata_kval));
STRATA_KSCHEMAS(KSCHEMA_DEFINE)

/*
 * The fixed events, one line each: EV(ID, event name (lttng-modules'),
 * tracepoint name (NULL: the event name), schema, probe).  Ids 0..6 are
 * kabi 1's events; later ones are appended (ids are what the consumer's
 * descriptors say, but tests name them by id too).
 */
#define STRATA_KEVENT_LIST(EV) \
	EV(SCHED_SWITCH, "sched_switch", NULL, sched_switch, strata_probe_switch) \
	EV(SCHED_WAKEUP, "sched_wakeup", NULL, wakeup, strata_probe_wakeup) \
	EV(PROCESS_FORK, "sched_process_fork", NULL, fork, strata_probe_fork) \
	EV(PROCESS_EXEC, "sched_process_exec", NULL, exec, strata_probe_exec) \
	EV(PROCESS_EXIT, "sched_process_exit", NULL, exit, strata_probe_exit) \
	EV(SYS_ENTER, "sys_enter", NULL, sys_enter, strata_probe_sys_enter) \
	EV(SYS_EXIT, "sys_exit", NULL, sys_exit, strata_probe_sys_exit) \
	EV(IRQ_ENTRY, "irq_handler_entry", NULL, irq_entry, strata_probe_irq_entry) \
	EV(IRQ_EXIT, "irq_handler_exit", NULL, irq_exit, strata_probe_irq_exit) \
	EV(SOFTIRQ_ENTRY, "softirq_entry", NULL, softirq, strata_probe_softirq_entry) \
	EV(SOFTIRQ_EXIT, "softirq_exit", NULL, softirq, strata_probe_softirq_exit) \
	EV(SOFTIRQ_RAISE, "softirq_raise", NULL, softirq, strata_probe_softirq_raise) \
	EV(SCHED_WAKING, "sched_waking", NULL, wakeup, strata_probe_waking) \
	EV(SCHED_WAKEUP_NEW, "sched_wakeup_new", NULL, wakeup, strata_probe_wakeup_new) \
	EV(SCHED_MIGRATE, "sched_migrate_task", NULL, migrate, strata_probe_migrate) \
	EV(PROCESS_WAIT, "sched_process_wait", NULL, exit, strata_probe_wait) \
	EV(HRTIMER_ENTRY, "timer_hrtimer_expire_entry", "hrtimer_expire_entry", hrtimer_entry, \
	   strata_probe_hrtimer_entry) \
	EV(HRTIMER_EXIT, "timer_hrtimer_expire_exit", "hrtimer_expire_exit", hrtimer_exit, \
	   strata_probe_hrtimer_exit) \
	EV(TIMER_ENTRY, "timer_expire_entry", NULL, timer_entry, strata_probe_timer_entry) \
	EV(TIMER_EXIT, "timer_expire_exit", NULL, timer_exit, strata_probe_timer_exit) \
	EV(BLOCK_ISSUE, "block_rq_issue", NULL, block_issue, strata_probe_block_issue) \
	EV(BLOCK_COMPLETE, "block_rq_complete", NULL, block_complete, \
	   strata_probe_block_complete) \
	EV(PAGE_FAULT_USER, "x86_exceptions_page_fault_user", "page_fault_user", page_fault, \
	   strata_probe_page_fault)

#define KEV_ENUM(id, n, tpn, s, p) KEV_##id,
enum {
	STRATA_KEVENT_LIST(KEV_ENUM)
	KEV_COUNT
};

struct strata_kevent {
	const char *name;       /* event name (lttng-modules' name) */
	const char *tp_name;    /* tracepoint name (NULL: = name) */
	const struct strata_kfield *fields;
	u32 n_fields;
	void *probe;
	struct tracepoint *tp;  /* found by name at init */
	u32 slots;              /* bit s: slot s records it (READ_ONCE in probes) */
	u32 deps;               /* sys_enter/exit: slots of the named syscall events it feeds */
	bool want;              /* strata_kbuf_apply_rules' scratch (ctl mutex) */
	bool armed;             /* under strata_arm_lock */
};

/* Named syscall events (lttng-modules' names): syscall_entry_<name> with
 * the arguments as the kernel's ftrace metadata names and types them,
 * syscall_exit_<name> with ret.  Fed by the sys_enter/sys_exit probes;
 * ids KEV_COUNT + 2k (entry) and KEV_COUNT + 2k + 1 (exit) for the k-th
 * syscall found.  Built at init, read-only afterwards but for `slots`.
 */
struct strata_ksys {
	struct strata_kevent entry, exit;
	struct strata_kfield fields[STRATA_SYS_MAX_ARGS];
	u8 str_mask;            /* bit i: argument i is a user string */
};

/* Per-CPU copies of a syscall's user strings (probes run with preemption
 * disabled, and sys_enter never nests on one CPU).
 */
struct strata_sysstr {
	char s[STRATA_SYS_MAX_ARGS][STRATA_KSTR_MAX];
};

static void strata_probe_switch(void *d, STRATA_SCHED_SWITCH_ARGS(preempt, prev, next, prev_state));
static void strata_probe_wakeup(void *d, struct task_struct *p);
static void strata_probe_fork(void *d, struct task_struct *parent, struct task_struct *child);
static void strata_probe_exec(void *d, struct task_struct *p, pid_t old_pid,
			      struct linux_binprm *bprm);
static void strata_probe_exit(void *d, struct task_struct *p);
static void strata_probe_sys_enter(void *d, struct pt_regs *regs, long id);
static void strata_probe_sys_exit(void *d, struct pt_regs *regs, long ret);
static void strata_probe_irq_entry(void *d, int irq, struct irqaction *action);
static void strata_probe_irq_exit(void *d, int irq, struct irqaction *action, int ret);
static void strata_probe_softirq_entry(void *d, unsigned int vec);
static void strata_probe_softirq_exit(void *d, unsigned int vec);
static void strata_probe_softirq_raise(void *d, unsigned int vec);
static void strata_probe_waking(void *d, struct task_struct *p);
static void strata_probe_wakeup_new(void *d, struct task_struct *p);
static void strata_probe_migrate(void *d, struct task_struct *p, int dest_cpu);
static void strata_probe_wait(void *d, struct pid *pid);
static void strata_probe_hrtimer_entry(void *d, struct hrtimer *t, ktime_t *now);
static void strata_probe_hrtimer_exit(void *d, struct hrtimer *t);
static void strata_probe_timer_entry(void *d, struct timer_list *t, unsigned long baseclk);
static void strata_probe_timer_exit(void *d, struct timer_list *t);
static void strata_probe_block_issue(void *d, struct request *rq);
static void strata_probe_block_complete(void *d, struct request *rq, blk_status_t error,
					unsigned int nr_bytes);
static void strata_probe_page_fault(void *d, unsigned long address, struct pt_regs *regs,
				    unsigned long error_code);

#define KEV_ENTRY(id, n, tpn, s, p) \
	[KEV_##id] = { .name = n, .tp_name = tpn, .fields = kf_##s, \
		       .n_fields = ARRAY_SIZE(kf_##s), .probe = p },
static struct strata_kevent strata_kevents[KEV_COUNT] = {
	STRATA_KEVENT_LIST(KEV_ENTRY)
};

static struct strata_ksys *strata_ksys;        /* strata_n_ksys entries */
static u32 strata_n_ksys;
static u16 *strata_ksys_of_nr;                  /* nr -> index + 1, 0: none */
static u32 strata_ksys_nr_max;
static u64 strata_desc_capacity;                /* bytes, page-aligned */
static DEFINE_PER_CPU(struct strata_sysstr, strata_sysstr);

/* Dynamic kernel probes: rule pattern "kernel:kprobe_<symbol>" (a call)
 * or "kernel:kretprobe_<symbol>" (a return), no glob character,
 * CAP_SYS_ADMIN slots only.  An entry is created the first time a rule
 * names it and lives until unload (its id and descriptor stay); its probe
 * is registered while some slot wants it and unregistered by the disarm
 * work as tracepoints are.  Events "kprobe_<symbol>" (field ip) and
 * "kretprobe_<symbol>" (ip, parent_ip, ret); both kinds share the table
 * and its limit.  Entries are added under the ctl mutex; probes read the
 * table only through the ids of registered probes.
 */
#define STRATA_MAX_KPROBES 32u
#define STRATA_KSYM_MAX 128u
#define STRATA_KPROBE_PREFIX "kernel:kprobe_"
#define STRATA_KRETPROBE_PREFIX "kernel:kretprobe_"

struct strata_kprobe_ev {
	union {                         /* which one: is_ret */
		struct kprobe kp;
		struct kretprobe rp;
	};
	struct strata_kevent ev;
	u32 id;
	bool is_ret;
	bool registered;                /* under strata_arm_lock */
	char sym[STRATA_KSYM_MAX];
	char name[sizeof("kretprobe_") + STRATA_KSYM_MAX];
};

static struct strata_kprobe_ev strata_kprobes[STRATA_MAX_KPROBES];
static u32 strata_n_kprobes;    /* entries in use; ctl mutex */

/* Fixed events: tracepoints, then the named syscalls. */
static u32 strata_n_events(void)
{
	return KEV_COUNT + 2 * strata_n_ksys;
}

/* Every event, kprobes included (ctl mutex). */
static u32 strata_n_all_events(void)
{
	return strata_n_events() + strata_n_kprobes;
}

static struct strata_kevent *strata_kev(u32 id)
{
	if (id < KEV_COUNT)
		return &strata_kevents[id];
	if (id >= strata_n_events())
		return &strata_kprobes[id - strata_n_events()].ev;
	id -= KEV_COUNT;
	return id & 1 ? &strata_ksys[id / 2].exit : &strata_ksys[id / 2].entry;
}

static struct strata_kbuf __rcu *strata_kbufs[STRATA_KABI_MAX_SLOTS];
static DEFINE_MUTEX(strata_arm_lock);
static struct workqueue_struct *strata_wq;
static void strata_disarm_fn(struct work_struct *work);
static DECLARE_DELAYED_WORK(strata_disarm_work, strata_disarm_fn);
static DEFINE_PER_CPU(u64, strata_kwritten);
static DEFINE_PER_CPU(u64, strata_klost);
static bool strata_kbuf_broken; /* a broken invariant disabled recording */

/* ---- Serialisation ------------------------------------------------------ */

/* Bytes of the record, header included, WITHOUT padding after it; with
 * rec, write it.  Records start 8-byte aligned in packets that start
 * S-aligned, so alignment from the record start is alignment from the
 * packet start.  The padding that keeps records 8-byte aligned goes BEFORE
 * a record (strata_reserve): a packet's content then ends exactly where its
 * last record ends, which babeltrace2 needs (with trailing padding inside
 * content_size it decodes a phantom event from the padding).
 */
static u32 strata_kser(u8 *rec, const struct strata_kevent *ev,
		       const union strata_kval *v, const u32 *slen)
{
	u32 off = STRATA_EVENT_HEADER_SIZE, i, j, a;

	for (i = 0; i < ev->n_fields; i++) {
		const struct strata_kfield *f = &ev->fields[i];

		switch (f->type) {
		case STRATA_FT_INTEGER:
			a = f->bits / 8;
			off = ALIGN(off, a);
			if (rec) {
				if (a == 8)
					put_unaligned_le64(v[i].u, rec + off);
				else
					put_unaligned_le32((u32)v[i].u, rec + off);
			}
			off += a;
			break;
		case STRATA_FT_STRING:
			if (rec) {
				memcpy(rec + off, v[i].s, slen[i]);
				rec[off + slen[i]] = 0;
			}
			off += slen[i] + 1;
			break;
		case STRATA_FT_ARRAY:
			off = ALIGN(off, 8);
			for (j = 0; j < f->length; j++, off += 8)
				if (rec)
					put_unaligned_le64(v[i].arr[j], rec + off);
			break;
		}
	}
	return off;
}

/* ---- The lane protocol (strata_abi.h) ------------------------------------ */

static u64 *strata_commit_of(struct strata_kbuf *kb, struct strata_lane_ctl *lc, u64 pos)
{
	return &lc->commit[(pos / kb->subbuf_size) & (kb->n_subbuf - 1)];
}

static u8 *strata_at(struct strata_kbuf *kb, u32 lane, u64 pos)
{
	return kb->data + (u64)lane * kb->lane_stride + (pos & (kb->lane_stride - 1));
}

static void strata_commit_bytes(struct strata_kbuf *kb, u64 *commit, u64 n)
{
	/* Release (atomic64_add_return_release): the bytes written in the
	 * reserved space come before the count that completes the
	 * sub-buffer; pairs with the consumer's acquire load of commit[].
	 */
	u64 v = atomic64_add_return_release(n, (atomic64_t *)commit);

	/* Complete when ours and the consumer's count (ccommit[], the
	 * padding of packets it closed itself) reach the lap's end.
	 * ccommit[i] follows commit[i] by STRATA_MAX_SUBBUF.  READ_ONCE: a
	 * hint to wake; the consumer re-reads both with acquire loads.
	 */
	v += READ_ONCE(commit[STRATA_MAX_SUBBUF]);
	if (!(v & (kb->subbuf_size - 1))) {
		/* No futex wake from probe context: the count only tells a
		 * consumer that something completed.  Relaxed.  The wakeup
		 * goes through irq_work (see the contract); its queueing is
		 * fully ordered after our release add, and the consumer's
		 * poll re-reads commit[] after joining the wait queue.
		 */
		atomic_inc((atomic_t *)&kb->hdr->wake_seq);
		irq_work_queue(&kb->wake_work);
	}
}

static void strata_open_packet(struct strata_kbuf *kb, u32 lane, struct strata_lane_ctl *lc,
			       u64 head, u64 now)
{
	struct strata_packet_header *ph = (void *)strata_at(kb, lane, head);

	ph->magic = STRATA_CTF_MAGIC;
	memcpy(ph->uuid, kb->uuid, sizeof(ph->uuid));
	ph->stream_id = 0;
	ph->stream_instance_id = lane;
	ph->timestamp_begin = now;
	ph->packet_seq_num = head / kb->subbuf_size;
	ph->lane_id = lane;
	ph->vtid = 0;
	strata_commit_bytes(kb, strata_commit_of(kb, lc, head), STRATA_PACKET_HEADER_SIZE);
}

/* disc: the lane's events_discarded, read before the close cmpxchg (see
 * strata_reserve).
 */
static void strata_close_packet(struct strata_kbuf *kb, u32 lane, struct strata_lane_ctl *lc,
				u64 start, u64 content, u64 now, u64 disc)
{
	struct strata_packet_header *ph = (void *)strata_at(kb, lane, start);

	ph->timestamp_end = now;
	ph->content_size = content * 8;
	ph->packet_size = kb->subbuf_size * 8;
	ph->events_discarded = disc;
	strata_commit_bytes(kb, strata_commit_of(kb, lc, start), kb->subbuf_size - content);
}

/* Reserve rsize bytes in lane, 8-byte aligned; returns the position or
 * U64_MAX (lost), *span = bytes to commit (alignment padding before the
 * record included).  The timestamp is read before each attempt: a writer
 * that interrupts us between the read and our cmpxchg makes it fail, so
 * timestamps follow positions in a lane.
 */
static u64 strata_reserve(struct strata_kbuf *kb, u32 lane, u32 rsize, u64 *now, u64 *span)
{
	struct strata_lane_ctl *lc = &kb->lanes[lane];
	const u64 S = kb->subbuf_size;
	/* Acquire: pairs with the release of a concurrent writer's or the
	 * consumer's cmpxchg (fully ordered) so the packet state we act on is
	 * the one that head describes.
	 */
	u64 head = smp_load_acquire(&lc->head);
	int tries;

	for (tries = 0; tries < STRATA_KCAS_TRIES; tries++) {
		u64 off = head & (S - 1), consumed, disc;

		*now = ktime_get_mono_fast_ns();
		if (off) {
			u64 pad = ALIGN(off, STRATA_EVENT_ALIGN) - off;

			/* Strictly less: a packet is only ever finished by a
			 * close (which writes its sizes), never filled to its
			 * last byte by a record.
			 */
			if (off + pad + rsize < S) {
				/* Fully ordered cmpxchg: also orders our later
				 * record stores after it.
				 */
				if (try_cmpxchg64(&lc->head, &head, head + pad + rsize)) {
					*span = pad + rsize;
					return head + pad;
				}
				continue;
			}
			/* Relaxed: a counter, read exactly by the consumer
			 * after a flush.  Read before the close cmpxchg (fully
			 * ordered), after the load of head that showed the
			 * packet open: the next packet's closer loads head
			 * from our cmpxchg or a later one, so its read comes
			 * after ours and, the counter only growing, is not
			 * smaller.  Read after the cmpxchg, an interrupt or
			 * NMI that opens, fills and closes the next packet,
			 * then discards, would leave us a count above the
			 * next packet's.  What is discarded between this read
			 * and the cmpxchg goes to the next packet.
			 */
			disc = atomic64_read((atomic64_t *)&lc->events_discarded);
			if (try_cmpxchg64(&lc->head, &head, head - off + S)) {
				strata_close_packet(kb, lane, lc, head - off, off, *now, disc);
				head = head - off + S;
			}
			continue;
		}
		/* Discard mode: the sub-buffer at head must be released.
		 * Acquire: pairs with the consumer's release store of
		 * `consumed` after its copy.  A consumed ahead of head reads
		 * as full (unsigned).
		 */
		consumed = smp_load_acquire(&lc->consumed);
		if (head - consumed >= kb->lane_stride)
			break;
		if (try_cmpxchg64(&lc->head, &head, head + STRATA_PACKET_HEADER_SIZE + rsize)) {
			strata_open_packet(kb, lane, lc, head, *now);
			*span = rsize;
			return head + STRATA_PACKET_HEADER_SIZE;
		}
	}
	/* Relaxed: see the close above. */
	atomic64_inc((atomic64_t *)&lc->events_discarded);
	this_cpu_inc(strata_klost);
	return U64_MAX;
}

static void strata_write_one(struct strata_kbuf *kb, u16 id, u32 rsize,
			     const struct strata_kevent *ev, const union strata_kval *v,
			     const u32 *slen)
{
	unsigned int cpu = smp_processor_id();
	u32 lane = cpu % kb->n_lanes;
	u64 now, span, pos = strata_reserve(kb, lane, rsize, &now, &span);
	u8 *rec;

	if (pos == U64_MAX)
		return;
	rec = strata_at(kb, lane, pos);
	memset(rec - (span - rsize), 0, span);
	put_unaligned_le16(id, rec + STRATA_EVENT_ID_OFF);
	put_unaligned_le64(now, rec + STRATA_EVENT_TS_OFF);
	put_unaligned_le32(current->pid, rec + STRATA_EVENT_TID_OFF);
	put_unaligned_le16(cpu, rec + STRATA_EVENT_CPU_OFF);
	strata_kser(rec, ev, v, slen);
	strata_commit_bytes(kb, strata_commit_of(kb, &kb->lanes[lane], pos), span);
	this_cpu_inc(strata_kwritten);
}

/* Called by every probe with preemption disabled (tracepoint context). */
static void strata_emit(unsigned int id, const union strata_kval *v)
{
	const struct strata_kevent *ev = strata_kev(id);
	u32 slots = READ_ONCE(ev->slots);
	u32 slen[STRATA_KMAX_FIELDS] = { 0 };
	u32 i, rsize;

	if (!slots || READ_ONCE(strata_kbuf_broken))
		return;
	for (i = 0; i < ev->n_fields; i++)
		if (ev->fields[i].type == STRATA_FT_STRING)
			slen[i] = strnlen(v[i].s, STRATA_KSTR_MAX - 1);
	rsize = strata_kser(NULL, ev, v, slen);
	while (slots) {
		unsigned int s = __ffs(slots);
		struct strata_kbuf *kb;

		slots &= slots - 1;
		/* Probes run inside the tracepoint's RCU-sched read side. */
		kb = rcu_dereference_sched(strata_kbufs[s]);
		if (!kb)
			continue;
		/* A record that cannot fit an empty packet is our bug (the
		 * minimum sub-buffer is 4 KiB, strings are capped): stop
		 * recording kernel events for good.  No printk here (we may be
		 * inside the scheduler, rq lock held): the WARN comes from
		 * process context (strata_kbuf_apply_rules, strata_kbuf_stats).
		 */
		if (unlikely(rsize + STRATA_EVENT_ALIGN >
			     kb->subbuf_size - STRATA_PACKET_HEADER_SIZE)) {
			WRITE_ONCE(strata_kbuf_broken, true);
			return;
		}
		strata_write_one(kb, id, rsize, ev, v, slen);
	}
}

/* Typed emitters (see KS_*): kschema_emit_<schema>(id, record) for events
 * whose id is known at run time (named syscalls, kprobes), kev_emit_<ID>
 * for each fixed event.
 */
#define KSCHEMA_EMITTER(s) \
	static __always_inline void kschema_emit_##s(unsigned int id, const struct kv_##s *v) \
	{ \
		strata_emit(id, (const union strata_kval *)v); \
	}
STRATA_KSCHEMAS(KSCHEMA_EMITTER)
#define KEV_EMITTER(id, n, tpn, s, p) \
	static __always_inline void kev_emit_##id(const struct kv_##s *v) \
	{ \
		kschema_emit_##s(KEV_##id, v); \
	}
STRATA_KEVENT_LIST(KEV_EMITTER)

/* ---- Probes --------------------------------------------------------------- */

/* Another CPU may be renaming the task: copy, then terminate. */
static void strata_comm(char *dst, const struct task_struct *t)
{
	memcpy(dst, t->comm, TASK_COMM_LEN);
	dst[TASK_COMM_LEN - 1] = 0;
}

static void strata_probe_switch(void *d, STRATA_SCHED_SWITCH_ARGS(preempt, prev, next, prev_state))
{
	char pc[TASK_COMM_LEN], nc[TASK_COMM_LEN];
	struct kv_sched_switch v = {
		.prev_comm = pc, .prev_tid = (u32)prev->pid, .prev_prio = (u32)prev->prio,
		.prev_state = STRATA_SCHED_SWITCH_PREV_STATE(prev, prev_state),
		.next_comm = nc, .next_tid = (u32)next->pid, .next_prio = (u32)next->prio,
	};

	strata_comm(pc, prev);
	strata_comm(nc, next);
	kev_emit_SCHED_SWITCH(&v);
}

/* Schema exit (comm, tid, prio): t's name and prio with tid. */
static void strata_comm_tid_prio(unsigned int id, struct task_struct *t, pid_t tid)
{
	char c[TASK_COMM_LEN];
	struct kv_exit v = { .comm = c, .tid = (u32)tid, .prio = (u32)t->prio };

	strata_comm(c, t);
	kschema_emit_exit(id, &v);
}

/* sched_wakeup, sched_waking, sched_wakeup_new: schema wakeup. */
static void strata_wakeup_common(unsigned int id, struct task_struct *p)
{
	char c[TASK_COMM_LEN];
	struct kv_wakeup v = {
		.comm = c, .tid = (u32)p->pid, .prio = (u32)p->prio, .target_cpu = (u32)task_cpu(p),
	};

	strata_comm(c, p);
	kschema_emit_wakeup(id, &v);
}

static void strata_probe_wakeup(void *d, struct task_struct *p)
{
	strata_wakeup_common(KEV_SCHED_WAKEUP, p);
}

static void strata_probe_fork(void *d, struct task_struct *parent, struct task_struct *child)
{
	char pc[TASK_COMM_LEN], cc[TASK_COMM_LEN];
	struct kv_fork v = {
		.parent_comm = pc, .parent_tid = (u32)parent->pid,
		.child_comm = cc, .child_tid = (u32)child->pid,
		.parent_pid = (u32)parent->tgid, .child_pid = (u32)child->tgid,
	};

	strata_comm(pc, parent);
	strata_comm(cc, child);
	kev_emit_PROCESS_FORK(&v);
}

static void strata_probe_exec(void *d, struct task_struct *p, pid_t old_pid,
			      struct linux_binprm *bprm)
{
	struct kv_exec v = {
		.filename = bprm->filename ? bprm->filename : "",
		.tid = (u32)p->pid, .old_tid = (u32)old_pid,
	};

	kev_emit_PROCESS_EXEC(&v);
}

static void strata_probe_waking(void *d, struct task_struct *p)
{
	strata_wakeup_common(KEV_SCHED_WAKING, p);
}

static void strata_probe_wakeup_new(void *d, struct task_struct *p)
{
	strata_wakeup_common(KEV_SCHED_WAKEUP_NEW, p);
}

static void strata_probe_migrate(void *d, struct task_struct *p, int dest_cpu)
{
	char c[TASK_COMM_LEN];
	struct kv_migrate v = {
		.comm = c, .tid = (u32)p->pid, .prio = (u32)p->prio,
		.orig_cpu = (u32)task_cpu(p), .dest_cpu = (u32)dest_cpu,
	};

	strata_comm(c, p);
	kev_emit_SCHED_MIGRATE(&v);
}

/* As the kernel's own event: the waiting task's name and prio, the pid
 * waited for.
 */
static void strata_probe_wait(void *d, struct pid *pid)
{
	strata_comm_tid_prio(KEV_PROCESS_WAIT, current, pid_nr(pid));
}

static void strata_probe_irq_entry(void *d, int irq, struct irqaction *action)
{
	struct kv_irq_entry v = {
		.irq = (u32)irq, .name = action && action->name ? action->name : "",
	};

	kev_emit_IRQ_ENTRY(&v);
}

static void strata_probe_irq_exit(void *d, int irq, struct irqaction *action, int ret)
{
	struct kv_irq_exit v = { .irq = (u32)irq, .ret = (u32)ret };

	kev_emit_IRQ_EXIT(&v);
}

static void strata_probe_softirq_entry(void *d, unsigned int vec)
{
	struct kv_softirq v = { .vec = vec };

	kev_emit_SOFTIRQ_ENTRY(&v);
}

static void strata_probe_softirq_exit(void *d, unsigned int vec)
{
	struct kv_softirq v = { .vec = vec };

	kev_emit_SOFTIRQ_EXIT(&v);
}

static void strata_probe_softirq_raise(void *d, unsigned int vec)
{
	struct kv_softirq v = { .vec = vec };

	kev_emit_SOFTIRQ_RAISE(&v);
}

static void strata_probe_hrtimer_entry(void *d, struct hrtimer *t, ktime_t *now)
{
	struct kv_hrtimer_entry v = {
		.hrtimer = (unsigned long)t, .now = (u64)ktime_to_ns(*now),
		.function = (unsigned long)t->function,
	};

	kev_emit_HRTIMER_ENTRY(&v);
}

static void strata_probe_hrtimer_exit(void *d, struct hrtimer *t)
{
	struct kv_hrtimer_exit v = { .hrtimer = (unsigned long)t };

	kev_emit_HRTIMER_EXIT(&v);
}

static void strata_probe_timer_entry(void *d, struct timer_list *t, unsigned long baseclk)
{
	struct kv_timer_entry v = {
		.timer = (unsigned long)t, .now = jiffies, .function = (unsigned long)t->function,
		.baseclk = baseclk,
	};

	kev_emit_TIMER_ENTRY(&v);
}

static void strata_probe_timer_exit(void *d, struct timer_list *t)
{
	struct kv_timer_exit v = { .timer = (unsigned long)t };

	kev_emit_TIMER_EXIT(&v);
}

/* lttng-modules' RWBS_FLAG_* bits of a request. */
static u32 strata_rwbs(const struct request *rq)
{
	u32 f = 0;

	switch (req_op(rq)) {
	case REQ_OP_WRITE:
		f |= BIT(0);
		break;
	case REQ_OP_DISCARD:
		f |= BIT(1);
		break;
	case REQ_OP_READ:
		f |= BIT(2);
		break;
	case REQ_OP_FLUSH:
		f |= BIT(8);
		break;
	default:
		break;
	}
	if (rq->cmd_flags & REQ_RAHEAD)
		f |= BIT(3);
	if (rq->cmd_flags & REQ_SYNC)
		f |= BIT(5);
	if (rq->cmd_flags & REQ_META)
		f |= BIT(6);
	if (rq->cmd_flags & REQ_FUA)
		f |= BIT(9);
	if (rq->cmd_flags & REQ_PREFLUSH)
		f |= BIT(10);
	return f;
}

static u32 strata_rq_dev(const struct request *rq)
{
	return rq->q && rq->q->disk ? (u32)disk_devt(rq->q->disk) : 0;
}

static void strata_probe_block_issue(void *d, struct request *rq)
{
	char c[TASK_COMM_LEN];
	struct kv_block_issue v = {
		.dev = strata_rq_dev(rq), .sector = blk_rq_trace_sector(rq),
		.nr_sector = blk_rq_trace_nr_sectors(rq), .bytes = blk_rq_bytes(rq),
		.tid = (u32)current->pid, .rwbs = strata_rwbs(rq), .comm = c,
	};

	strata_comm(c, current);
	kev_emit_BLOCK_ISSUE(&v);
}

static void strata_probe_block_complete(void *d, struct request *rq, blk_status_t error,
					unsigned int nr_bytes)
{
	struct kv_block_complete v = {
		.dev = strata_rq_dev(rq), .sector = blk_rq_pos(rq), .nr_sector = nr_bytes >> 9,
		.error = (u32)blk_status_to_errno(error), .rwbs = strata_rwbs(rq),
	};

	kev_emit_BLOCK_COMPLETE(&v);
}

static void strata_probe_page_fault(void *d, unsigned long address, struct pt_regs *regs,
				    unsigned long error_code)
{
	struct kv_page_fault v = {
		.address = address, .ip = instruction_pointer(regs), .error_code = error_code,
	};

	kev_emit_PAGE_FAULT_USER(&v);
}

static void strata_probe_exit(void *d, struct task_struct *p)
{
	strata_comm_tid_prio(KEV_PROCESS_EXIT, p, p->pid);
}

/* Copy a user string without faulting (we run with preemption disabled):
 * page by page, at most STRATA_KSTR_MAX - 1 bytes, so at most two copies.
 * A string we cannot read at all is recorded as "(fault)", as lttng-modules
 * does; one cut by an unreadable page keeps what was read.
 */
static void strata_copy_ustr(char *dst, unsigned long uaddr)
{
	u32 done = 0;

	while (done < STRATA_KSTR_MAX - 1) {
		unsigned long at = uaddr + done;
		u32 chunk = min_t(u32, STRATA_KSTR_MAX - 1 - done, PAGE_SIZE - offset_in_page(at));

		if (copy_from_user_nofault(dst + done, (const void __user *)at, chunk))
			break;
		if (memchr(dst + done, 0, chunk))
			return;
		done += chunk;
	}
	if (!done)
		strscpy(dst, "(fault)", STRATA_KSTR_MAX);
	else
		dst[done] = 0;
}

/* The named syscall event of this task's syscall nr, or NULL: native
 * 64-bit syscalls only (a compat task's numbers are another table).
 */
static struct strata_ksys *strata_ksys_lookup(long nr)
{
	u16 k;

	if (!strata_n_ksys || nr < 0 || nr >= strata_ksys_nr_max || in_compat_syscall())
		return NULL;
	k = strata_ksys_of_nr[nr];
	return k ? &strata_ksys[k - 1] : NULL;
}

static void strata_probe_sys_enter(void *d, struct pt_regs *regs, long id)
{
	unsigned long args[6];
	union strata_kval v[STRATA_SYS_MAX_ARGS];
	struct strata_ksys *ks = strata_ksys_lookup(id);
	u64 a[6];
	int i;

	syscall_get_arguments(current, regs, args);
	if (READ_ONCE(strata_kevents[KEV_SYS_ENTER].slots)) {
		struct kv_sys_enter raw = { .id = (u64)id, .args = a };

		for (i = 0; i < 6; i++)
			a[i] = args[i];
		kev_emit_SYS_ENTER(&raw);
	}
	if (ks && READ_ONCE(ks->entry.slots)) {
		struct strata_sysstr *ss = this_cpu_ptr(&strata_sysstr);

		for (i = 0; i < ks->entry.n_fields; i++) {
			if (ks->str_mask & BIT(i)) {
				strata_copy_ustr(ss->s[i], args[i]);
				v[i].s = ss->s[i];
			} else {
				v[i].u = args[i];
			}
		}
		/* The one positional record: its schema is built at init from
		 * the syscall's ftrace metadata (strata_ksys_init), in argument
		 * order, as v is filled here.
		 */
		strata_emit(KEV_COUNT + 2 * (ks - strata_ksys), v);
	}
}

static void strata_probe_sys_exit(void *d, struct pt_regs *regs, long ret)
{
	long nr = syscall_get_nr(current, regs);
	struct strata_ksys *ks = strata_ksys_lookup(nr);

	if (READ_ONCE(strata_kevents[KEV_SYS_EXIT].slots)) {
		struct kv_sys_exit v = { .id = (u64)nr, .ret = (u64)ret };

		kev_emit_SYS_EXIT(&v);
	}
	if (ks && READ_ONCE(ks->exit.slots)) {
		struct kv_syscall_ret v = { .ret = (u64)ret };

		kschema_emit_syscall_ret(KEV_COUNT + 2 * (ks - strata_ksys) + 1, &v);
	}
}

/* ---- Buffers -------------------------------------------------------------- */

/* Bytes of ev's descriptor record. */
static u32 strata_desc_need(const struct strata_kevent *ev)
{
	u32 need = sizeof(struct strata_desc_event) +
		   ev->n_fields * sizeof(struct strata_desc_field) +
		   sizeof("kernel") + strlen(ev->name) + 1, i;

	for (i = 0; i < ev->n_fields; i++)
		need += strlen(ev->fields[i].name) + 1;
	return ALIGN(need, 8);
}

/* Append one descriptor record; returns its size or 0 if it does not fit. */
static u32 strata_put_desc(u8 *table, u64 used, u64 cap, u32 id,
			   const struct strata_kevent *ev)
{
	struct strata_desc_event *de = (void *)(table + used);
	struct strata_desc_field *df = (void *)(de + 1);
	u32 pool = sizeof(*de) + ev->n_fields * sizeof(*df);
	u32 need = strata_desc_need(ev), i;
	char *rec = (char *)de;

	if (used + need > cap)
		return 0;
	de->record_size = need;
	de->id = id;
	de->loglevel = STRATA_KLOGLEVEL;
	de->n_fields = ev->n_fields;
	de->provider_off = pool;
	pool += sprintf(rec + pool, "kernel") + 1;
	de->name_off = pool;
	pool += sprintf(rec + pool, "%s", ev->name) + 1;
	for (i = 0; i < ev->n_fields; i++) {
		const struct strata_kfield *f = &ev->fields[i];

		df[i].name_off = pool;
		pool += sprintf(rec + pool, "%s", f->name) + 1;
		df[i].type = f->type;
		df[i].elem_bits = f->bits;
		df[i].is_signed = f->is_signed;
		df[i].base = f->base;
		df[i].length = f->length;
	}
	return need;
}

/* ---- Consumer wakeups ----------------------------------------------------- */

static void strata_kwait_free(struct kref *ref)
{
	kfree(container_of(ref, struct strata_kwait, ref));
	atomic_long_dec(&strata_nr_objects);
}

/* irq_work: interrupts enabled again, no runqueue lock of ours held. */
static void strata_kbuf_wake(struct irq_work *work)
{
	struct strata_kbuf *kb = container_of(work, struct strata_kbuf, wake_work);

	wake_up_interruptible(&kb->kw->wq);
}

/* Some lane's sub-buffer at the consumer's position is complete.  Shared
 * memory: `consumed` is masked into the ring, the answer is only a hint.
 */
static bool strata_kbuf_ready(struct strata_kbuf *kb)
{
	const u64 S = kb->subbuf_size;
	u32 lane;

	for (lane = 0; lane < kb->n_lanes; lane++) {
		struct strata_lane_ctl *lc = &kb->lanes[lane];
		u64 pos = READ_ONCE(lc->consumed) & ~(S - 1);

		u64 *commit = strata_commit_of(kb, lc, pos);

		/* Acquire: the same pairing as the consumer's own check
		 * (producers' commit[] and the consumer's ccommit[]).
		 */
		if (smp_load_acquire(commit) + smp_load_acquire(&commit[STRATA_MAX_SUBBUF]) >=
		    (pos / kb->lane_stride + 1) * S)
			return true;
	}
	return false;
}

static __poll_t strata_kwait_poll(struct file *file, poll_table *pt)
{
	struct strata_kwait *kw = file->private_data;
	__poll_t mask = 0;

	/* Join the queue first, then look: a completion after our look
	 * queues a wakeup that finds us on the queue.
	 */
	poll_wait(file, &kw->wq, pt);
	spin_lock(&kw->lock);
	if (kw->kb && strata_kbuf_ready(kw->kb))
		mask = EPOLLIN | EPOLLRDNORM;
	spin_unlock(&kw->lock);
	return mask;
}

static int strata_kwait_release(struct inode *inode, struct file *file)
{
	struct strata_kwait *kw = file->private_data;

	kref_put(&kw->ref, strata_kwait_free);
	return 0;
}

static const struct file_operations strata_kwait_fops = {
	.owner = THIS_MODULE,
	.poll = strata_kwait_poll,
	.release = strata_kwait_release,
	.llseek = noop_llseek,
};

/* Under the ctl mutex (the caller's): the slot's buffer stays. */
static struct strata_kbuf *strata_kbuf_of_slot(unsigned int slot)
{
	struct strata_kbuf *kb;

	if (slot >= STRATA_KABI_MAX_SLOTS)
		return ERR_PTR(-EINVAL);
	kb = rcu_dereference_protected(strata_kbufs[slot], 1);
	return kb ? kb : ERR_PTR(-ENOENT);
}

struct file *strata_kbuf_wait_file(unsigned int slot)
{
	struct strata_kbuf *kb = strata_kbuf_of_slot(slot);
	struct file *file;

	if (IS_ERR(kb))
		return ERR_CAST(kb);
	kref_get(&kb->kw->ref);
	file = anon_inode_getfile("strata-kwait", &strata_kwait_fops, kb->kw, O_RDONLY);
	if (IS_ERR(file))
		kref_put(&kb->kw->ref, strata_kwait_free);
	return file;
}

/* The shmem file, its pages pinned and unevictable, one kernel mapping. */
static int strata_kbuf_map(struct strata_kbuf *kb)
{
	struct address_space *mapping;
	u64 i;

	kb->crash_entry = -ENOENT;
	kb->file = shmem_file_setup("strata-kbuf", kb->total_size, VM_NORESERVE);
	if (IS_ERR(kb->file)) {
		kb->file = NULL;
		return -ENOMEM;
	}
	mapping = kb->file->f_mapping;
	mapping_set_unevictable(mapping);
	kb->n_pages = kb->total_size >> PAGE_SHIFT;
	kb->pages = kvcalloc(kb->n_pages, sizeof(*kb->pages), GFP_KERNEL);
	if (!kb->pages)
		return -ENOMEM;
	for (i = 0; i < kb->n_pages; i++) {
		struct page *page = shmem_read_mapping_page_gfp(mapping, i, GFP_KERNEL);

		if (IS_ERR(page))
			return PTR_ERR(page);
		kb->pages[i] = page;
	}
	kb->mem = vmap(kb->pages, kb->n_pages, VM_MAP, PAGE_KERNEL);
	if (kb->mem)
		kb->crash_entry = strata_crash_add(kb->slot, kb->pages, kb->n_pages);
	return kb->mem ? 0 : -ENOMEM;
}

static void strata_kbuf_unmap(struct strata_kbuf *kb)
{
	u64 i;

	strata_crash_del(kb->crash_entry);
	if (kb->mem)
		vunmap(kb->mem);
	for (i = 0; kb->pages && i < kb->n_pages && kb->pages[i]; i++) {
		set_page_dirty_lock(kb->pages[i]);
		put_page(kb->pages[i]);
	}
	kvfree(kb->pages);
	if (kb->file) {
		mapping_clear_unevictable(kb->file->f_mapping);
		fput(kb->file);
	}
}

static bool strata_geometry_valid(u64 subbuf_size, u32 n_subbuf)
{
	return is_power_of_2(subbuf_size) && subbuf_size >= STRATA_MIN_SUBBUF_SIZE &&
	       subbuf_size <= STRATA_MAX_SUBBUF_SIZE && is_power_of_2(n_subbuf) &&
	       n_subbuf >= 2 && n_subbuf <= STRATA_MAX_SUBBUF;
}

/* A session's geometry (SET_RULES V2): 0 for either means the defaults. */
bool strata_kbuf_geometry_ok(u32 subbuf_size, u32 n_subbuf)
{
	return (!subbuf_size && !n_subbuf) || strata_geometry_valid(subbuf_size, n_subbuf) ||
	       (!subbuf_size && strata_geometry_valid(kbuf_subbuf_size, n_subbuf)) ||
	       (!n_subbuf && strata_geometry_valid(subbuf_size, kbuf_n_subbuf));
}

/* A new buffer's lanes and sub-buffers: the session's geometry (0: the
 * module's defaults) within the module's bound on pinned bytes per CPU.
 */
static void strata_kbuf_size(struct strata_kbuf *kb, u32 subbuf_size, u32 n_subbuf)
{
	kb->n_lanes = min_t(u32, nr_cpu_ids, STRATA_MAX_LANES);
	kb->n_subbuf = n_subbuf ? n_subbuf : kbuf_n_subbuf;
	kb->subbuf_size = subbuf_size ? subbuf_size : kbuf_subbuf_size;
	/* The module's bound on pinned bytes per CPU: fewer sub-buffers
	 * first, then smaller ones (never below the ABI's minimums).
	 */
	while ((u64)kb->n_subbuf * kb->subbuf_size > kbuf_max_lane_size && kb->n_subbuf > 2)
		kb->n_subbuf /= 2;
	while ((u64)kb->n_subbuf * kb->subbuf_size > kbuf_max_lane_size &&
	       kb->subbuf_size > STRATA_MIN_SUBBUF_SIZE)
		kb->subbuf_size /= 2;
	kb->lane_stride = (u64)kb->n_subbuf * kb->subbuf_size;
}

/* The buffer header a consumer validates (strata_abi.h), but desc_used:
 * stored last, with release, by the caller.
 */
static void strata_kbuf_fill_header(struct strata_kbuf *kb, u64 lanes_off, u64 data_off)
{
	kb->hdr->magic = STRATA_ABI_MAGIC;
	kb->hdr->abi_major = STRATA_ABI_MAJOR;
	kb->hdr->abi_minor = STRATA_ABI_MINOR;
	kb->hdr->header_size = sizeof(*kb->hdr);
	kb->hdr->endian_check = 0x01020304;
	kb->hdr->total_size = kb->total_size;
	kb->hdr->pid = 0;
	kb->hdr->uid = 0;
	strscpy(kb->hdr->comm, "kernel", sizeof(kb->hdr->comm));
	strscpy(kb->hdr->channel, "kernel", sizeof(kb->hdr->channel));
	memcpy(kb->hdr->trace_uuid, kb->uuid, 16);
	kb->hdr->stream_id = 0;
	kb->hdr->mode = STRATA_MODE_DISCARD;
	kb->hdr->n_lanes = kb->n_lanes;
	kb->hdr->n_subbuf = kb->n_subbuf;
	kb->hdr->subbuf_size = kb->subbuf_size;
	kb->hdr->desc_offset = PAGE_ALIGN(sizeof(*kb->hdr));
	kb->hdr->desc_capacity = strata_desc_capacity;
	kb->hdr->lanes_offset = lanes_off;
	kb->hdr->data_offset = data_off;
	kb->hdr->lane_stride = kb->lane_stride;
	kb->hdr->clock_id = STRATA_CLOCK_MONOTONIC;
	kb->hdr->lanes_claimed = kb->n_lanes;
	kb->hdr->record_format = STRATA_REC_WIDE; /* one lane per CPU, no sharing */
	kb->hdr->n_shared_lanes = 0;
}

static struct strata_kbuf *strata_kbuf_alloc(unsigned int slot, u32 subbuf_size, u32 n_subbuf)
{
	struct strata_kbuf *kb;
	u64 lanes_off, data_off, desc_used = 0;
	u32 i, n;

	kb = kzalloc(sizeof(*kb), GFP_KERNEL);
	if (!kb)
		return NULL;
	kb->kw = kzalloc(sizeof(*kb->kw), GFP_KERNEL);
	if (!kb->kw) {
		kfree(kb);
		return NULL;
	}
	atomic_long_inc(&strata_nr_objects);
	kref_init(&kb->kw->ref);
	init_waitqueue_head(&kb->kw->wq);
	spin_lock_init(&kb->kw->lock);
	init_irq_work(&kb->wake_work, strata_kbuf_wake);
	kb->slot = slot;
	strata_kbuf_size(kb, subbuf_size, n_subbuf);
	lanes_off = PAGE_ALIGN(sizeof(struct strata_buffer_header)) + strata_desc_capacity;
	data_off = PAGE_ALIGN(lanes_off + kb->n_lanes * sizeof(struct strata_lane_ctl));
	kb->total_size = data_off + kb->n_lanes * kb->lane_stride;
	if (strata_kbuf_map(kb)) {
		strata_kbuf_unmap(kb);
		kref_put(&kb->kw->ref, strata_kwait_free);
		kfree(kb);
		return NULL;
	}
	atomic_long_inc(&strata_nr_objects);
	generate_random_uuid(kb->uuid);
	kb->hdr = kb->mem;
	kb->lanes = kb->mem + lanes_off;
	kb->data = kb->mem + data_off;

	for (i = 0; i < strata_n_all_events(); i++) {
		n = strata_put_desc(kb->mem + PAGE_ALIGN(sizeof(*kb->hdr)), desc_used,
				    strata_desc_capacity, i, strata_kev(i));
		WARN_ON_ONCE(!n);
		desc_used += n;
	}
	kb->desc_used = desc_used;
	strata_kbuf_fill_header(kb, lanes_off, data_off);
	/* Release: the table is complete before a consumer sees its size;
	 * pairs with the consumer's acquire load of desc_used.
	 */
	smp_store_release(&kb->hdr->desc_used, desc_used);
	kb->kw->kb = kb; /* published to pollers with the buffer (ctl mutex) */
	return kb;
}

static void strata_kbuf_free_fn(struct work_struct *work)
{
	struct strata_kbuf *kb = container_of(to_rcu_work(work), struct strata_kbuf, free_work);

	/* No probe uses kb any more (grace period): no new irq_work. */
	irq_work_sync(&kb->wake_work);
	spin_lock(&kb->kw->lock);
	kb->kw->kb = NULL;
	spin_unlock(&kb->kw->lock);
	kref_put(&kb->kw->ref, strata_kwait_free);
	strata_kbuf_unmap(kb);
	kfree(kb);
	atomic_long_dec(&strata_nr_objects);
}

/* The buffer of `slot` records kernel events from boot: its header says so
 * (comm "kernel-boot"), for the consumer that adopts it (strata_ctl_boot).
 */
void strata_kbuf_mark_boot(unsigned int slot)
{
	struct strata_kbuf *kb = strata_kbuf_of_slot(slot);

	if (!IS_ERR(kb))
		strscpy(kb->hdr->comm, "kernel-boot", sizeof(kb->hdr->comm));
}

struct file *strata_kbuf_open_file(unsigned int slot, u64 *total_size, u32 *n_lanes)
{
	struct strata_kbuf *kb = strata_kbuf_of_slot(slot);

	if (IS_ERR(kb))
		return ERR_CAST(kb);
	*total_size = kb->total_size;
	*n_lanes = kb->n_lanes;
	return get_file(kb->file);
}

/* ---- Rules ---------------------------------------------------------------- */

/* Does the slot's rule list (later rules win) enable kernel event `name`? */
static bool strata_rules_enable(const struct strata_kabi_rule *rules, u32 n, const char *name)
{
	char full[96];
	bool on = false;
	u32 i;

	snprintf(full, sizeof(full), "kernel:%s", name);
	for (i = 0; i < n; i++) {
		const struct strata_kabi_rule *r = &rules[i];

		if (strncmp(r->pattern, "kernel:", 7))
			continue;
		if (r->loglevel_max >= 0 && STRATA_KLOGLEVEL > (u32)r->loglevel_max)
			continue;
		if (glob_match(r->pattern, full))
			on = r->enable;
	}
	return on;
}

static void strata_arm(struct strata_kevent *ev, bool want)
{
	int ret;

	lockdep_assert_held(&strata_arm_lock);
	if (want == ev->armed || !ev->tp || !ev->probe)
		return;
	if (want)
		ret = tracepoint_probe_register(ev->tp, ev->probe, NULL);
	else
		ret = tracepoint_probe_unregister(ev->tp, ev->probe, NULL);
	if (ret)
		pr_warn("%s %s: %d\n", want ? "arming" : "disarming", ev->name, ret);
	else
		ev->armed = want;
}

/* Probe context: preemption (and maybe interrupts) disabled; kprobes
 * does not re-enter a handler on the CPU it runs on.
 */
static int strata_kprobe_handler(struct kprobe *p, struct pt_regs *regs)
{
	struct strata_kprobe_ev *k = container_of(p, struct strata_kprobe_ev, kp);
	struct kv_kprobe v = { .ip = (unsigned long)p->addr };

	kschema_emit_kprobe(k->id, &v);
	return 0;
}

/* At the probed function's return, from the return trampoline: preemption
 * disabled (kprobe_busy_begin), the same as a kprobe handler.
 */
static int strata_kretprobe_handler(struct kretprobe_instance *ri, struct pt_regs *regs)
{
	struct kretprobe *rp = strata_get_kretprobe(ri);
	struct strata_kprobe_ev *k;
	struct kv_kretprobe v;

	if (!rp)
		return 0;
	k = container_of(rp, struct strata_kprobe_ev, rp);
	v = (struct kv_kretprobe){
		.ip = (unsigned long)rp->kp.addr, .parent_ip = strata_kretprobe_retaddr(ri),
		.ret = (u64)(long)regs_return_value(regs),
	};
	kschema_emit_kretprobe(k->id, &v);
	return 0;
}

static void strata_kprobe_arm(struct strata_kprobe_ev *k, bool want)
{
	const char *what = k->is_ret ? "kretprobe" : "kprobe";
	unsigned long missed;
	int ret;

	lockdep_assert_held(&strata_arm_lock);
	if (want == k->registered)
		return;
	if (!want) {
		if (k->is_ret) {
			unregister_kretprobe(&k->rp);
			/* Returns not recorded: no free instance (maxactive)
			 * or a nested kprobe; kprobes itself counted them.
			 */
			missed = k->rp.nmissed + k->rp.kp.nmissed;
		} else {
			unregister_kprobe(&k->kp);
			missed = k->kp.nmissed;
		}
		if (missed)
			pr_warn("%s on %s: %lu hits missed by kprobes\n", what, k->sym, missed);
		k->registered = false;
		return;
	}
	/* A probe is registered from a clean struct each time. */
	if (k->is_ret) {
		memset(&k->rp, 0, sizeof(k->rp));
		k->rp.kp.symbol_name = k->sym;
		k->rp.handler = strata_kretprobe_handler;
		/* Instances: one per task inside the function at once; 0
		 * lets kprobes choose (a few per possible CPU).
		 */
		k->rp.maxactive = 0;
		ret = register_kretprobe(&k->rp);
	} else {
		memset(&k->kp, 0, sizeof(k->kp));
		k->kp.symbol_name = k->sym;
		k->kp.pre_handler = strata_kprobe_handler;
		ret = register_kprobe(&k->kp);
	}
	if (ret)
		pr_warn("%s on %s: %d\n", what, k->sym, ret);
	else
		k->registered = true;
}

static bool strata_ksym_ok(const char *s)
{
	size_t i, n = strnlen(s, STRATA_KSYM_MAX);

	if (!n || n >= STRATA_KSYM_MAX)
		return false;
	for (i = 0; i < n; i++)
		if (!isalnum(s[i]) && s[i] != '_' && s[i] != '.')
			return false;
	return true;
}

/* The probe an enabled rule names, or NULL: "kernel:kprobe_SYM" or
 * "kernel:kretprobe_SYM" with a valid symbol; *is_ret says which.
 */
static const char *strata_kprobe_rule(const struct strata_kabi_rule *r, bool *is_ret)
{
	const size_t kp = strlen(STRATA_KPROBE_PREFIX), krp = strlen(STRATA_KRETPROBE_PREFIX);
	const char *sym;

	if (!r->enable)
		return NULL;
	*is_ret = !strncmp(r->pattern, STRATA_KRETPROBE_PREFIX, krp);
	if (*is_ret)
		sym = r->pattern + krp;
	else if (!strncmp(r->pattern, STRATA_KPROBE_PREFIX, kp))
		sym = r->pattern + kp;
	else
		return NULL;
	return strata_ksym_ok(sym) ? sym : NULL;
}

/* Ctl mutex: an entry for every probe an enabled rule names that has
 * none yet, its descriptor appended to every existing buffer (release:
 * the record before the size that shows it; pairs with the consumer's
 * acquire load of desc_used).
 */
static void strata_kprobes_add(const struct strata_kabi_rule *rules, u32 n_rules)
{
	u32 r, i, s;

	for (r = 0; r < n_rules; r++) {
		struct strata_kprobe_ev *k;
		const char *sym;
		bool is_ret;

		sym = strata_kprobe_rule(&rules[r], &is_ret);
		if (!sym)
			continue;
		for (i = 0; i < strata_n_kprobes; i++)
			if (strata_kprobes[i].is_ret == is_ret && !strcmp(strata_kprobes[i].sym, sym))
				break;
		if (i < strata_n_kprobes)
			continue;
		if (strata_n_kprobes == STRATA_MAX_KPROBES) {
			pr_warn("%s on %s: at most %u kprobes and kretprobes\n",
				is_ret ? "kretprobe" : "kprobe", sym, STRATA_MAX_KPROBES);
			continue;
		}
		k = &strata_kprobes[strata_n_kprobes];
		strscpy(k->sym, sym, sizeof(k->sym));
		k->is_ret = is_ret;
		snprintf(k->name, sizeof(k->name), "%s_%s", is_ret ? "kretprobe" : "kprobe", sym);
		k->ev.name = k->name;
		k->ev.fields = is_ret ? kf_kretprobe : kf_kprobe;
		k->ev.n_fields = is_ret ? ARRAY_SIZE(kf_kretprobe) : ARRAY_SIZE(kf_kprobe);
		k->id = strata_n_events() + strata_n_kprobes;
		WRITE_ONCE(strata_n_kprobes, strata_n_kprobes + 1);
		for (s = 0; s < STRATA_KABI_MAX_SLOTS; s++) {
			struct strata_kbuf *kb = rcu_dereference_protected(strata_kbufs[s], 1);
			u32 n;

			if (!kb)
				continue;
			n = strata_put_desc(kb->mem + PAGE_ALIGN(sizeof(*kb->hdr)), kb->desc_used,
					    strata_desc_capacity, k->id, &k->ev);
			WARN_ON_ONCE(!n);
			kb->desc_used += n;
			smp_store_release(&kb->hdr->desc_used, kb->desc_used);
		}
	}
}

void strata_kbuf_apply_rules(unsigned int slot, const struct strata_kabi_rule *rules,
			     u32 n_rules, bool admin, u32 subbuf_size, u32 n_subbuf)
{
	struct strata_kbuf *kb = rcu_dereference_protected(strata_kbufs[slot], 1);
	u32 deps[KEV_COUNT] = { 0 };
	bool any = false;
	u32 i;

	WARN_ONCE(READ_ONCE(strata_kbuf_broken),
		  "strata: kernel events disabled: a record did not fit an empty packet");

	if (admin)
		strata_kprobes_add(rules, n_rules);
	/* Kernel events show every process: CAP_SYS_ADMIN slots only.  A
	 * named syscall event needs its carrier's tracepoint.
	 */
	for (i = 0; i < strata_n_all_events(); i++) {
		struct strata_kevent *ev = strata_kev(i);
		bool has_tp = i < KEV_COUNT ? !!ev->tp : i >= strata_n_events() ||
			      !!strata_kevents[(i - KEV_COUNT) & 1 ? KEV_SYS_EXIT : KEV_SYS_ENTER].tp;

		ev->want = admin && has_tp && strata_rules_enable(rules, n_rules, ev->name);
		any |= ev->want;
	}
	if (any && !kb) {
		kb = strata_kbuf_alloc(slot, subbuf_size, n_subbuf);
		if (!kb) {
			pr_warn("slot %u: no memory for the kernel buffer\n", slot);
			return;
		}
		/* Release: the buffer is initialised before probes see it;
		 * pairs with rcu_dereference_sched in strata_emit.
		 */
		rcu_assign_pointer(strata_kbufs[slot], kb);
	}
	mutex_lock(&strata_arm_lock);
	/* The buffer was published above: a probe that sees a slot's bit
	 * finds it (or skips a slot being cleared).
	 */
	for (i = strata_n_all_events(); i-- > 0;) {
		struct strata_kevent *ev = strata_kev(i);
		u32 m = ev->want ? ev->slots | BIT(slot) : ev->slots & ~BIT(slot);

		WRITE_ONCE(ev->slots, m);
		if (i >= strata_n_events()) {
			struct strata_kprobe_ev *k = &strata_kprobes[i - strata_n_events()];

			if (m)
				strata_kprobe_arm(k, true);
			else if (k->registered)
				mod_delayed_work(strata_wq, &strata_disarm_work, STRATA_DISARM_DELAY);
		} else if (i >= KEV_COUNT) {
			deps[(i - KEV_COUNT) & 1 ? KEV_SYS_EXIT : KEV_SYS_ENTER] |= m;
		}
	}
	for (i = 0; i < KEV_COUNT; i++) {
		struct strata_kevent *ev = &strata_kevents[i];

		WRITE_ONCE(ev->deps, deps[i]);
		if (ev->slots | deps[i])
			strata_arm(ev, true);
		else if (ev->armed)
			mod_delayed_work(strata_wq, &strata_disarm_work, STRATA_DISARM_DELAY);
	}
	mutex_unlock(&strata_arm_lock);
	if (!any && kb) {
		RCU_INIT_POINTER(strata_kbufs[slot], NULL);
		/* Probes still inside it finish within a grace period. */
		INIT_RCU_WORK(&kb->free_work, strata_kbuf_free_fn);
		queue_rcu_work(strata_wq, &kb->free_work);
	}
}

static void strata_disarm_fn(struct work_struct *work)
{
	u32 i;

	mutex_lock(&strata_arm_lock);
	for (i = 0; i < KEV_COUNT; i++)
		if (!READ_ONCE(strata_kevents[i].slots) && !READ_ONCE(strata_kevents[i].deps))
			strata_arm(&strata_kevents[i], false);
	/* strata_n_kprobes only grows; entries below it are complete. */
	for (i = 0; i < READ_ONCE(strata_n_kprobes) && i < STRATA_MAX_KPROBES; i++)
		if (!READ_ONCE(strata_kprobes[i].ev.slots))
			strata_kprobe_arm(&strata_kprobes[i], false);
	mutex_unlock(&strata_arm_lock);
}

void strata_kbuf_stats(u64 *written, u64 *lost)
{
	int cpu;

	WARN_ONCE(READ_ONCE(strata_kbuf_broken),
		  "strata: kernel events disabled: a record did not fit an empty packet");

	*written = 0;
	*lost = 0;
	for_each_possible_cpu(cpu) {
		*written += per_cpu(strata_kwritten, cpu);
		*lost += per_cpu(strata_klost, cpu);
	}
}

static void strata_find_tp(struct tracepoint *tp, void *priv)
{
	u32 i;

	for (i = 0; i < KEV_COUNT; i++)
		if (!strcmp(tp->name, strata_kevents[i].tp_name ?: strata_kevents[i].name))
			strata_kevents[i].tp = tp;
}

/* A syscall argument's field, from the type the kernel's metadata gives
 * it: paths and names (const char __user *, but not the byte buffers that
 * share that type) as strings, other pointers as hex, integers by width
 * and sign of their C type (unknown types: unsigned 64).
 */
static void strata_sys_field(struct strata_kfield *f, const char *type, const char *name,
			     bool *is_str)
{
	static const char *const s32_types[] = {
		"int", "pid_t", "key_serial_t", "clockid_t", "timer_t", "mqd_t", "rwf_t",
		"__s32", "s32",
	};
	static const char *const u32_types[] = {
		"unsigned int", "unsigned", "u32", "__u32", "uid_t", "gid_t", "qid_t",
		"umode_t", "old_uid_t", "old_gid_t", "key_perm_t",
	};
	static const char *const s64_types[] = {
		"long", "loff_t", "off_t", "ssize_t", "__s64", "s64", "__kernel_old_time_t",
	};
	static const char *const not_strings[] = {
		"buf", "u_msg_ptr", "msg_ptr", "_callout_info",
	};
	u32 i;

	*is_str = false;
	*f = (struct strata_kfield)KF_HEX(name, 64);
	/* The metadata's types are stringified after macro expansion: __user
	 * is gone outside sparse builds.
	 */
	if (!strcmp(type, "const char *") || !strcmp(type, "const char __user *")) {
		for (i = 0; i < ARRAY_SIZE(not_strings); i++)
			if (!strcmp(name, not_strings[i]))
				return;
		*f = (struct strata_kfield)KF_STR(name);
		*is_str = true;
		return;
	}
	if (strchr(type, '*'))
		return;
	if (!strncmp(type, "const ", 6))
		type += 6;
	for (i = 0; i < ARRAY_SIZE(s32_types); i++)
		if (!strcmp(type, s32_types[i])) {
			*f = (struct strata_kfield)KF_INT(name, 32, 1);
			return;
		}
	for (i = 0; i < ARRAY_SIZE(u32_types); i++)
		if (!strcmp(type, u32_types[i])) {
			*f = (struct strata_kfield)KF_INT(name, 32, 0);
			return;
		}
	for (i = 0; i < ARRAY_SIZE(s64_types); i++)
		if (!strcmp(type, s64_types[i])) {
			*f = (struct strata_kfield)KF_INT(name, 64, 1);
			return;
		}
	*f = (struct strata_kfield)KF_INT(name, 64, 0);
}

static void strata_ksys_free(void)
{
	u32 k;

	for (k = 0; k < strata_n_ksys; k++) {
		kfree(strata_ksys[k].entry.name);
		kfree(strata_ksys[k].exit.name);
	}
	kvfree(strata_ksys);
	kfree(strata_ksys_of_nr);
	strata_ksys = NULL;
	strata_ksys_of_nr = NULL;
	strata_n_ksys = 0;
}

/* The named syscall events, from the kernel's metadata (strata_ksys.c). */
static int strata_ksys_init(void)
{
	u32 max = strata_ksys_max_nr(), n, k, i;
	struct strata_sysinfo *si;

	if (!max)
		return 0;
	si = kvcalloc(max, sizeof(*si), GFP_KERNEL);
	strata_ksys_of_nr = kcalloc(max, sizeof(*strata_ksys_of_nr), GFP_KERNEL);
	if (!si || !strata_ksys_of_nr)
		goto nomem;
	n = strata_ksys_discover(si, max);
	/* Event ids are u16: KEV_COUNT + 2n must fit. */
	n = min_t(u32, n, (U16_MAX - KEV_COUNT) / 2);
	strata_ksys = kvcalloc(n ? n : 1, sizeof(*strata_ksys), GFP_KERNEL);
	if (!strata_ksys)
		goto nomem;
	strata_ksys_nr_max = max;
	for (k = 0; k < n; k++) {
		struct strata_ksys *ks = &strata_ksys[k];

		ks->entry.name = kasprintf(GFP_KERNEL, "syscall_entry_%s", si[k].name);
		ks->exit.name = kasprintf(GFP_KERNEL, "syscall_exit_%s", si[k].name);
		strata_n_ksys = k + 1; /* so that strata_ksys_free frees them */
		if (!ks->entry.name || !ks->exit.name)
			goto nomem;
		for (i = 0; i < si[k].n_args; i++) {
			bool is_str;

			strata_sys_field(&ks->fields[i], si[k].types[i], si[k].args[i], &is_str);
			if (is_str)
				ks->str_mask |= BIT(i);
		}
		ks->entry.fields = ks->fields;
		ks->entry.n_fields = si[k].n_args;
		ks->exit.fields = kf_syscall_ret;
		ks->exit.n_fields = ARRAY_SIZE(kf_syscall_ret);
		strata_ksys_of_nr[si[k].nr] = k + 1;
	}
	kvfree(si);
	pr_info("%u syscalls named from the kernel's syscall metadata\n", strata_n_ksys);
	return 0;
nomem:
	kvfree(si);
	strata_ksys_free();
	return -ENOMEM;
}

int strata_kbuf_init(void)
{
	u64 desc = 0;
	u32 i;
	int ret;

	if (!strata_geometry_valid(kbuf_subbuf_size, kbuf_n_subbuf) ||
	    kbuf_max_lane_size < 2 * STRATA_MIN_SUBBUF_SIZE) {
		pr_err("bad kbuf_subbuf_size/kbuf_n_subbuf/kbuf_max_lane_size\n");
		return -EINVAL;
	}
	ret = strata_ksys_init();
	if (ret)
		return ret;
	for (i = 0; i < strata_n_events(); i++)
		desc += strata_desc_need(strata_kev(i));
	/* Room for every kprobe, each with the longest name and fields. */
	memset(strata_kprobes[0].name, 'k', sizeof(strata_kprobes[0].name) - 1);
	strata_kprobes[0].ev.name = strata_kprobes[0].name;
	strata_kprobes[0].ev.fields = kf_kretprobe;
	strata_kprobes[0].ev.n_fields = ARRAY_SIZE(kf_kretprobe);
	desc += STRATA_MAX_KPROBES * strata_desc_need(&strata_kprobes[0].ev);
	memset(&strata_kprobes[0], 0, sizeof(strata_kprobes[0]));
	strata_desc_capacity = PAGE_ALIGN(desc);
	strata_wq = alloc_workqueue("strata", 0, 0);
	if (!strata_wq) {
		strata_ksys_free();
		return -ENOMEM;
	}
	for_each_kernel_tracepoint(strata_find_tp, NULL);
	for (i = 0; i < KEV_COUNT; i++)
		if (!strata_kevents[i].tp)
			pr_info("tracepoint %s not found: kernel:%s unavailable\n",
				strata_kevents[i].name, strata_kevents[i].name);
	return 0;
}

void strata_kbuf_exit(void)
{
	/* strata_ctl_exit cleared every slot: no event has a slot left. */
	cancel_delayed_work_sync(&strata_disarm_work);
	strata_disarm_fn(NULL);
	/* No probe runs after this; then the buffers' queued puts run. */
	tracepoint_synchronize_unregister();
	rcu_barrier();
	destroy_workqueue(strata_wq);
	strata_ksys_free();
}
