// SPDX-License-Identifier: GPL-2.0
/*
 * Rule distribution: registered processes, session slots,
 * generations.
 *
 * Contract:
 *   - Everything here runs in process context (ioctl, release).  One mutex,
 *     strata_ctl_lock, guards the process list, the slots and the
 *     generation counter; nothing is copied to or from user space while it
 *     is held (a fault under it could stall every controller).
 *   - A registration (struct strata_proc) belongs to one open file and
 *     lives until that file is released: close, or the exit of the last
 *     process holding it.  A registration whose thread group is gone (the fd
 *     was inherited) is treated as absent by SET_RULES and WAIT.
 *   - The generation counter only grows.  SET_RULES bumps it and stamps
 *     every registered process it targets (before or after the change) with
 *     target_gen; ACK raises acked_gen; WAIT(G) is satisfied when no
 *     controllable live process has target_gen >= G > acked_gen.
 *   - Permissions: a controller reaches processes whose effective uid is its
 *     own; with CAP_SYS_ADMIN it reaches every process.  A slot belongs to
 *     the uid that set it until cleared; a non-admin slot only ever targets
 *     processes of that uid.
 *   - Sharing: a caller without CAP_SYS_ADMIN takes a free slot only while
 *     its euid holds fewer than STRATA_KABI_SLOTS_PER_UID non-admin slots
 *     and all non-admin slots together leave STRATA_KABI_SLOTS_ADMIN free
 *     (-EDQUOT), so that no uid can deny tracing to others and admins can
 *     always set one (strata_share_ok).
 *   - Ownership: a slot is owned by the open file that set it (owner_file,
 *     compared, never dereferenced); another file gets -EBUSY.  The owner's
 *     release clears its slots (strata_ctl_release, before the file is
 *     freed), signalling their processes as SET_RULES would; a slot set
 *     with STRATA_KABI_SET_KEEP is kept instead, owned by no file (an
 *     orphan), until a file of the same rights takes it over or
 *     keep_orphan_ms pass (strata_orphan_fn clears it then, under the lock).
 *   - A process's answer for a slot (its grant) is the slot's session and
 *     the rules whose per-rule targets include it; SET_RULES signals, and
 *     stamps, exactly the registrations whose answer changed.
 */
#define pr_fmt(fmt) "strata: " fmt

#include <linux/capability.h>
#include <linux/cred.h>
#include <linux/file.h>
#include <linux/mm.h>
#include <linux/moduleparam.h>
#include <linux/mutex.h>
#include <linux/pid.h>
#include <linux/sched.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/uaccess.h>
#include <linux/wait.h>
#include <linux/workqueue.h>

#include "strata_internal.h"
#include "strata_abi.h" /* the channel's mode word */
#include "strata_crash.h"

#define STRATA_ARG_MAX_SIZE PAGE_SIZE
#define STRATA_WAIT_MAX_MS (10u * 60u * 1000u)
#define STRATA_WAIT_MAX_MISSING 4096u

struct strata_proc {
	struct list_head node;
	struct pid *tgid;       /* reference held */
	int signo;
	u64 acked_gen;
	u64 target_gen;
};

/* Per-rule targets, resolved: pids as references (NULL: gone). */
struct strata_rtarget {
	u32 n_pids;
	u32 n_comms;
	struct pid *pids[STRATA_KABI_RULE_PIDS];
	char comms[STRATA_KABI_RULE_COMMS][STRATA_KABI_COMM_MAX];
};

struct strata_slot {
	bool used;
	const struct file *owner_file; /* compared only, see the contract */
	bool owner_admin;
	kuid_t owner;
	u32 kind;
	bool uid_any;
	kuid_t uid;
	u32 n_targets;
	struct pid **pids;      /* PIDS: n_targets references (NULL: gone) */
	char (*comms)[STRATA_KABI_COMM_MAX];
	u32 n_rules;
	struct strata_kabi_rule *rules;
	struct strata_rtarget *rtargets; /* NULL or n_rules */
	u64 session_id;
	struct strata_kabi_channel channel;
	char sock_path[STRATA_KABI_SOCK_MAX];
	u64 gen;
	bool keep;                     /* STRATA_KABI_SET_KEEP */
	unsigned long orphan_until;    /* jiffies; kept with no owner_file until then */
};

/* Who a process is, as matched against slots (computed fresh each time). */
struct strata_ident {
	struct pid *tgid;
	kuid_t euid;
	char comm[STRATA_KABI_COMM_MAX];
};
/* A comm target is compared with the task's whole comm. */
static_assert(STRATA_KABI_COMM_MAX == TASK_COMM_LEN, "strata_kabi.h: STRATA_KABI_COMM_MAX = TASK_COMM_LEN");

static DEFINE_MUTEX(strata_ctl_lock);
static LIST_HEAD(strata_procs);           /* guarded by strata_ctl_lock */
static struct strata_slot strata_slots[STRATA_KABI_MAX_SLOTS]; /* idem */
static u64 strata_generation;             /* idem */
static u64 strata_procs_live;             /* idem */
static u64 strata_procs_total;            /* idem */
static u64 strata_signals_sent;           /* idem */
/* Bumped (under the lock) on every ACK and unregistration; WAIT sleeps on
 * strata_ack_wq until it changes.
 */
static unsigned long strata_ack_seq;
static DECLARE_WAIT_QUEUE_HEAD(strata_ack_wq);

static unsigned int keep_orphan_ms = 60000;
module_param(keep_orphan_ms, uint, 0644);
MODULE_PARM_DESC(keep_orphan_ms,
		 "how long a slot set with SET_KEEP outlives its owner's file, for a restarted consumer to take it over (0: cleared at once)");

static void strata_orphan_fn(struct work_struct *work);
static DECLARE_DELAYED_WORK(strata_orphan_work, strata_orphan_fn);

/* Under the lock: a kept slot whose owner's file was released. */
static bool strata_orphan(const struct strata_slot *s)
{
	return s->used && s->keep && !s->owner_file;
}

static void *strata_alloc(size_t size)
{
	void *p = kvzalloc(size, GFP_KERNEL_ACCOUNT);

	if (p)
		atomic_long_inc(&strata_nr_objects);
	return p;
}

static void strata_free(void *p)
{
	if (!p)
		return;
	kvfree(p);
	atomic_long_dec(&strata_nr_objects);
}

/* Fill *id from the live thread group of pid; false if it is gone. */
static bool strata_ident_of(struct pid *pid, struct strata_ident *id)
{
	struct task_struct *task = get_pid_task(pid, PIDTYPE_TGID);

	if (!task)
		return false;
	id->tgid = pid;
	id->euid = task_euid(task);
	get_task_comm(id->comm, task);
	put_task_struct(task);
	return true;
}

/* Is the thread group of pid root's, or does it descend from root's by
 * its parent chain as it stands now?  Under RCU: a task's real_parent is
 * RCU-protected, and a chain is at most as long as there are tasks.
 */
static bool strata_descends(struct pid *pid, struct pid *root)
{
	struct task_struct *t;
	bool in = false;
	int depth;

	if (!root)
		return false;
	rcu_read_lock();
	t = pid_task(pid, PIDTYPE_TGID);
	for (depth = 0; t && depth < PID_MAX_LIMIT; depth++) {
		struct task_struct *up;

		if (task_tgid(t) == root) {
			in = true;
			break;
		}
		up = rcu_dereference(t->real_parent);
		if (up == t || is_global_init(t))
			break;
		t = up;
	}
	rcu_read_unlock();
	return in;
}

static bool strata_slot_matches(const struct strata_slot *s,
				const struct strata_ident *id)
{
	u32 i;

	if (!s->used)
		return false;
	if (!s->owner_admin && !uid_eq(s->owner, id->euid))
		return false;
	switch (s->kind) {
	case STRATA_KABI_TARGET_UID:
		return s->uid_any || uid_eq(s->uid, id->euid);
	case STRATA_KABI_TARGET_TREE:
		return (s->uid_any || uid_eq(s->uid, id->euid)) &&
		       strata_descends(id->tgid, s->pids[0]);
	case STRATA_KABI_TARGET_PIDS:
		for (i = 0; i < s->n_targets; i++)
			if (s->pids[i] == id->tgid)
				return true;
		return false;
	case STRATA_KABI_TARGET_COMMS:
		for (i = 0; i < s->n_targets; i++)
			if (!strncmp(s->comms[i], id->comm, STRATA_KABI_COMM_MAX))
				return true;
		return false;
	}
	return false;
}

/* Does rule i of s apply to id (s already matches id)? */
static bool strata_rule_targets(const struct strata_slot *s, u32 i,
				const struct strata_ident *id)
{
	const struct strata_rtarget *t;
	u32 k;

	if (!s->rtargets)
		return true;
	t = &s->rtargets[i];
	if (!t->n_pids && !t->n_comms)
		return true;
	for (k = 0; k < t->n_pids; k++)
		if (t->pids[k] == id->tgid)
			return true;
	for (k = 0; k < t->n_comms; k++)
		if (!strncmp(t->comms[k], id->comm, STRATA_KABI_COMM_MAX))
			return true;
	return false;
}

/* Is id granted slot s: targeted, and some rule (if any) applies to it? */
static bool strata_slot_grants(const struct strata_slot *s,
			       const struct strata_ident *id)
{
	u32 i;

	if (!strata_slot_matches(s, id))
		return false;
	if (!s->n_rules)
		return true;
	for (i = 0; i < s->n_rules; i++)
		if (strata_rule_targets(s, i, id))
			return true;
	return false;
}

/* Index of the next rule of s at or after i that applies to id. */
static u32 strata_next_rule(const struct strata_slot *s, u32 i,
			    const struct strata_ident *id)
{
	while (i < s->n_rules && !strata_rule_targets(s, i, id))
		i++;
	return i;
}

/* Would id's QUERY answer for the slot be the same under a and b? */
static bool strata_answer_same(const struct strata_slot *a,
			       const struct strata_slot *b,
			       const struct strata_ident *id)
{
	bool ga = strata_slot_grants(a, id), gb = strata_slot_grants(b, id);
	u32 i = 0, j = 0;

	if (ga != gb)
		return false;
	if (!ga)
		return true;
	if (a->session_id != b->session_id ||
	    memcmp(&a->channel, &b->channel, sizeof(a->channel)) ||
	    memcmp(a->sock_path, b->sock_path, sizeof(a->sock_path)))
		return false;
	for (;;) {
		i = strata_next_rule(a, i, id);
		j = strata_next_rule(b, j, id);
		if (i == a->n_rules || j == b->n_rules)
			return i == a->n_rules && j == b->n_rules;
		if (memcmp(&a->rules[i], &b->rules[j], sizeof(a->rules[i])))
			return false;
		i++;
		j++;
	}
}

static void strata_slot_free(struct strata_slot *s)
{
	u32 i, k;

	if (s->pids) {
		for (i = 0; i < s->n_targets; i++)
			put_pid(s->pids[i]);
	}
	if (s->rtargets) {
		for (i = 0; i < s->n_rules; i++)
			for (k = 0; k < s->rtargets[i].n_pids; k++)
				put_pid(s->rtargets[i].pids[k]);
	}
	strata_free(s->pids);
	strata_free(s->comms);
	strata_free(s->rules);
	strata_free(s->rtargets);
	memset(s, 0, sizeof(*s));
}

static bool strata_may_control(const struct strata_ident *id)
{
	return capable(CAP_SYS_ADMIN) || uid_eq(current_euid(), id->euid);
}

/* Copy an argument struct in: size negotiation as in strata_kabi.h. */
static int strata_arg_in(void *karg, size_t ksize, size_t min_size,
			 const void __user *uarg, u32 *usize)
{
	u32 size;

	if (get_user(size, (const u32 __user *)uarg))
		return -EFAULT;
	if (size < min_size || size > STRATA_ARG_MAX_SIZE)
		return -EINVAL;
	*usize = size;
	return copy_struct_from_user(karg, ksize, uarg, size);
}

static int strata_arg_out(void __user *uarg, const void *karg, size_t ksize,
			  u32 usize)
{
	/* `size` stays what user space wrote. */
	if (copy_to_user(uarg, karg, min_t(size_t, ksize, usize)))
		return -EFAULT;
	return 0;
}

static int strata_register(struct file *file, void __user *uarg)
{
	struct strata_kabi_register a;
	struct strata_proc *p, *old;
	u32 usize;
	int ret;

	ret = strata_arg_in(&a, sizeof(a), STRATA_KABI_REGISTER_SIZE_V1, uarg, &usize);
	if (ret)
		return ret;
	if (a.signo > _NSIG || a.signo == SIGKILL || a.signo == SIGSTOP ||
	    a.reserved)
		return -EINVAL;

	p = strata_alloc(sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->tgid = get_pid(task_tgid(current));
	p->signo = a.signo;

	mutex_lock(&strata_ctl_lock);
	old = file->private_data;
	if (old) {
		/* Re-registering updates the signal.  Another group may take
		 * over an inherited registration only once the group that made
		 * it is gone; it then owes nothing for earlier changes.
		 */
		if (old->tgid != p->tgid && pid_has_task(old->tgid, PIDTYPE_TGID)) {
			ret = -EBUSY;
		} else {
			if (old->tgid != p->tgid) {
				swap(old->tgid, p->tgid);
				old->acked_gen = strata_generation;
				old->target_gen = strata_generation;
			}
			old->signo = a.signo;
			a.generation = strata_generation;
		}
		mutex_unlock(&strata_ctl_lock);
		put_pid(p->tgid);
		strata_free(p);
		if (ret)
			return ret;
	} else {
		/* Nothing is owed for changes made before registering: the
		 * process queries after this call.
		 */
		p->acked_gen = strata_generation;
		p->target_gen = strata_generation;
		list_add_tail(&p->node, &strata_procs);
		strata_procs_live++;
		strata_procs_total++;
		a.generation = strata_generation;
		file->private_data = p;
		mutex_unlock(&strata_ctl_lock);
	}
	a.kabi_version = STRATA_KABI_VERSION;
	return strata_arg_out(uarg, &a, sizeof(a), usize);
}

static u32 strata_slot_replace(u32 slot, struct strata_slot *new_slot,
				struct strata_slot *old_slot, u64 *gen,
				u32 kbuf_subbuf_size, u32 kbuf_n_subbuf);

void strata_ctl_release(struct file *file)
{
	struct strata_slot empty, old;
	struct strata_proc *p;
	u64 gen;
	u32 i;

	strata_crash_release(file);
	mutex_lock(&strata_ctl_lock);
	p = file->private_data;
	if (p) {
		list_del(&p->node);
		strata_procs_live--;
		file->private_data = NULL;
		strata_ack_seq++;
	}
	mutex_unlock(&strata_ctl_lock);
	if (p) {
		wake_up_all(&strata_ack_wq);
		put_pid(p->tgid);
		strata_free(p);
	}
	/* The slots this file owns die with it: their processes are told.
	 * A kept slot waits for its owner's successor instead.
	 */
	for (i = 0; i < STRATA_KABI_MAX_SLOTS; i++) {
		mutex_lock(&strata_ctl_lock);
		memset(&old, 0, sizeof(old));
		if (strata_slots[i].used && strata_slots[i].owner_file == file &&
		    strata_slots[i].keep && keep_orphan_ms) {
			strata_slots[i].owner_file = NULL;
			strata_slots[i].orphan_until = jiffies + msecs_to_jiffies(keep_orphan_ms);
			pr_info("slot %u: its owner's file was released: kept %u ms for a successor\n",
				i, keep_orphan_ms);
			mod_delayed_work(system_wq, &strata_orphan_work,
					 msecs_to_jiffies(keep_orphan_ms) + 1);
		} else if (strata_slots[i].used && strata_slots[i].owner_file == file) {
			memset(&empty, 0, sizeof(empty));
			strata_slot_replace(i, &empty, &old, &gen, 0, 0);
		}
		mutex_unlock(&strata_ctl_lock);
		strata_slot_free(&old);
	}
}

/* Kept slots not taken over in time are cleared, as their owner's release
 * would have; runs again for the next one still waiting.
 */
static void strata_orphan_fn(struct work_struct *work)
{
	struct strata_slot empty, old;
	unsigned long next = 0;
	bool again = false;
	u64 gen;
	u32 i;

	for (i = 0; i < STRATA_KABI_MAX_SLOTS; i++) {
		struct strata_slot *s = &strata_slots[i];

		memset(&old, 0, sizeof(old));
		mutex_lock(&strata_ctl_lock);
		if (strata_orphan(s) && time_after_eq(jiffies, s->orphan_until)) {
			memset(&empty, 0, sizeof(empty));
			strata_slot_replace(i, &empty, &old, &gen, 0, 0);
			pr_info("slot %u: not taken over in time: cleared\n", i);
		} else if (strata_orphan(s)) {
			if (!again || time_before(s->orphan_until, next))
				next = s->orphan_until;
			again = true;
		}
		mutex_unlock(&strata_ctl_lock);
		strata_slot_free(&old);
	}
	if (again)
		mod_delayed_work(system_wq, &strata_orphan_work,
				 time_after(next, jiffies) ? next - jiffies + 1 : 1);
}

static size_t strata_entry_size(u32 format, u32 n_rules)
{
	return (format == STRATA_KABI_QUERY_GRANTS ? sizeof(struct strata_kabi_grant) :
		sizeof(struct strata_kabi_slot_rules)) +
	       (size_t)n_rules * sizeof(struct strata_kabi_rule);
}

/* Under the lock: write id's answer for slot i at buf; returns its size. */
static size_t strata_entry(char *buf, u32 format, u32 i,
			   const struct strata_ident *id)
{
	const struct strata_slot *s = &strata_slots[i];
	struct strata_kabi_rule *out;
	u32 r, n = 0;

	if (format == STRATA_KABI_QUERY_GRANTS) {
		struct strata_kabi_grant *g = (void *)buf;

		memset(g, 0, sizeof(*g));
		g->slot = i;
		g->generation = s->gen;
		g->session_id = s->session_id;
		g->channel = s->channel;
		memcpy(g->sock_path, s->sock_path, sizeof(g->sock_path));
		out = (void *)(g + 1);
	} else {
		struct strata_kabi_slot_rules *h = (void *)buf;

		memset(h, 0, sizeof(*h));
		h->slot = i;
		h->generation = s->gen;
		out = (void *)(h + 1);
	}
	for (r = 0; r < s->n_rules; r++)
		if (strata_rule_targets(s, r, id))
			out[n++] = s->rules[r];
	if (format == STRATA_KABI_QUERY_GRANTS)
		((struct strata_kabi_grant *)buf)->n_rules = n;
	else
		((struct strata_kabi_slot_rules *)buf)->n_rules = n;
	return strata_entry_size(format, n);
}

static int strata_query(struct file *file, void __user *uarg)
{
	const size_t max_bytes = STRATA_KABI_MAX_SLOTS *
		strata_entry_size(STRATA_KABI_QUERY_GRANTS, STRATA_KABI_MAX_RULES);
	struct strata_kabi_query a;
	struct strata_ident id;
	size_t needed = 0;
	char *buf;
	u32 usize, i;
	int ret;

	ret = strata_arg_in(&a, sizeof(a), STRATA_KABI_QUERY_SIZE_V1, uarg, &usize);
	if (ret)
		return ret;
	if (a.reserved || a.n_entries || a.reserved2 ||
	    (a.format != STRATA_KABI_QUERY_RULES && a.format != STRATA_KABI_QUERY_GRANTS))
		return -EINVAL;
	if (!strata_ident_of(task_tgid(current), &id))
		return -ESRCH;
	buf = strata_alloc(max_bytes);
	if (!buf)
		return -ENOMEM;

	mutex_lock(&strata_ctl_lock);
	a.generation = strata_generation;
	for (i = 0; i < STRATA_KABI_MAX_SLOTS; i++) {
		if (!strata_slot_grants(&strata_slots[i], &id))
			continue;
		needed += strata_entry(buf + needed, a.format, i, &id);
		a.n_entries++;
	}
	mutex_unlock(&strata_ctl_lock);

	if (needed > a.buf_size)
		ret = -EMSGSIZE;
	else if (needed && copy_to_user(u64_to_user_ptr(a.buf_ptr), buf, needed))
		ret = -EFAULT;
	a.buf_size = needed;
	strata_free(buf);
	if (ret == -EFAULT)
		return ret;
	if (strata_arg_out(uarg, &a, sizeof(a), usize))
		return -EFAULT;
	return ret;
}

static int strata_ack(struct file *file, void __user *uarg)
{
	struct strata_kabi_ack a;
	struct strata_proc *p;
	u32 usize;
	int ret;

	ret = strata_arg_in(&a, sizeof(a), STRATA_KABI_ACK_SIZE_V1, uarg, &usize);
	if (ret)
		return ret;
	if (a.reserved)
		return -EINVAL;
	mutex_lock(&strata_ctl_lock);
	p = file->private_data;
	if (!p || p->tgid != task_tgid(current)) {
		ret = -ENOENT;
	} else if (a.generation > strata_generation) {
		ret = -EINVAL;
	} else {
		if (a.generation > p->acked_gen)
			p->acked_gen = a.generation;
		strata_ack_seq++;
	}
	mutex_unlock(&strata_ctl_lock);
	if (!ret)
		wake_up_all(&strata_ack_wq);
	return ret;
}

static int strata_rules_valid(const struct strata_kabi_rule *r, u32 n)
{
	u32 i;

	for (i = 0; i < n; i++) {
		if (!memchr(r[i].pattern, 0, sizeof(r[i].pattern)) ||
		    !memchr(r[i].filter, 0, sizeof(r[i].filter)) ||
		    !r[i].pattern[0] || r[i].enable > 1 ||
		    r[i].loglevel_max < -1)
			return -EINVAL;
	}
	return 0;
}

static bool strata_pow2_or_0(u64 v)
{
	return (v & (v - 1)) == 0;
}

/* The V2 session fields: all zero without a session. */
static int strata_session_valid(const struct strata_kabi_set_rules *a)
{
	const struct strata_kabi_channel *c = &a->channel;

	if (a->reserved2)
		return -EINVAL;
	if (!a->session_id) {
		if (memchr_inv(c, 0, sizeof(*c)) ||
		    memchr_inv(a->sock_path, 0, sizeof(a->sock_path)))
			return -EINVAL;
		return 0;
	}
	if (!memchr(c->name, 0, sizeof(c->name)) || !c->name[0] ||
	    (c->mode & STRATA_MODE_MASK) > STRATA_MODE_OVERWRITE ||
	    /* blocking (a timeout in the mode word's high bits): discard only */
	    (STRATA_MODE_BLOCK_MS(c->mode) && (c->mode & STRATA_MODE_MASK) != STRATA_MODE_DISCARD) ||
	    c->n_lanes > 4096 || !strata_pow2_or_0(c->n_subbuf) ||
	    !strata_pow2_or_0(c->subbuf_size) ||
	    !memchr(a->sock_path, 0, sizeof(a->sock_path)) || a->sock_path[0] != '/')
		return -EINVAL;
	return 0;
}

/* Copy and resolve the per-rule targets (no lock held). */
static int strata_rtargets_build(const struct strata_kabi_set_rules *a,
				 struct strata_slot *s)
{
	struct strata_kabi_rule_target *u;
	u32 i, k;
	int ret = -EINVAL;

	if (!a->rule_targets_ptr)
		return 0;
	u = strata_alloc((size_t)a->n_rules * sizeof(*u));
	s->rtargets = strata_alloc((size_t)a->n_rules * sizeof(*s->rtargets));
	if (!u || !s->rtargets) {
		ret = -ENOMEM;
		goto out;
	}
	if (copy_from_user(u, u64_to_user_ptr(a->rule_targets_ptr),
			   (size_t)a->n_rules * sizeof(*u))) {
		ret = -EFAULT;
		goto out;
	}
	for (i = 0; i < a->n_rules; i++) {
		const struct strata_kabi_rule_target *t = &u[i];

		if (t->n_pids > STRATA_KABI_RULE_PIDS || t->n_comms > STRATA_KABI_RULE_COMMS)
			goto out;
		for (k = 0; k < STRATA_KABI_RULE_PIDS; k++)
			if ((k < t->n_pids) != (t->pids[k] != 0) ||
			    t->pids[k] > PID_MAX_LIMIT)
				goto out;
		for (k = 0; k < STRATA_KABI_RULE_COMMS; k++) {
			if (k >= t->n_comms) {
				if (memchr_inv(t->comms[k], 0, STRATA_KABI_COMM_MAX))
					goto out;
			} else if (!t->comms[k][0] ||
				   !memchr(t->comms[k], 0, STRATA_KABI_COMM_MAX)) {
				goto out;
			}
		}
	}
	for (i = 0; i < a->n_rules; i++) {
		struct strata_rtarget *t = &s->rtargets[i];

		t->n_comms = u[i].n_comms;
		memcpy(t->comms, u[i].comms, sizeof(t->comms));
		for (k = 0; k < u[i].n_pids; k++)
			t->pids[k] = find_get_pid(u[i].pids[k]);
		t->n_pids = u[i].n_pids; /* references held: freed with the slot */
	}
	ret = 0;
out:
	strata_free(u);
	return ret;
}

/* TARGET_UID's and TARGET_TREE's user: the caller's own without
 * CAP_SYS_ADMIN (-EPERM).
 */
static int strata_target_uid(const struct strata_kabi_set_rules *a,
			     struct strata_slot *s)
{
	if (a->target_uid == STRATA_KABI_UID_ANY) {
		s->uid_any = true;
	} else {
		s->uid = make_kuid(current_user_ns(), a->target_uid);
		if (!uid_valid(s->uid))
			return -EINVAL;
	}
	if (!s->owner_admin && (s->uid_any || !uid_eq(s->uid, s->owner)))
		return -EPERM;
	return 0;
}

/* TARGET_TREE: the user, and the tree's root as a reference in pids[0]
 * (NULL when it is gone: the tree is then empty).
 */
static int strata_target_tree(const struct strata_kabi_set_rules *a,
			      struct strata_slot *s)
{
	u32 nr;
	int ret;

	if (a->n_targets != 1 || !a->targets_ptr)
		return -EINVAL;
	if (copy_from_user(&nr, u64_to_user_ptr(a->targets_ptr), sizeof(nr)))
		return -EFAULT;
	if (!nr || nr > PID_MAX_LIMIT)
		return -EINVAL;
	ret = strata_target_uid(a, s);
	if (ret)
		return ret;
	s->pids = strata_alloc(sizeof(*s->pids));
	if (!s->pids)
		return -ENOMEM;
	s->n_targets = 1;
	s->pids[0] = find_get_pid(nr);
	return 0;
}

/* The slot's targets (a uid, a process tree, pids or comms) from user
 * memory; on error the caller frees what was taken (strata_slot_free).
 */
static int strata_slot_targets(const struct strata_kabi_set_rules *a,
			       struct strata_slot *s)
{
	u32 i;

	switch (a->target_kind) {
	case STRATA_KABI_TARGET_UID:
		if (a->n_targets || a->targets_ptr)
			return -EINVAL;
		return strata_target_uid(a, s);
	case STRATA_KABI_TARGET_TREE:
		return strata_target_tree(a, s);
	case STRATA_KABI_TARGET_PIDS: {
		u32 *nrs;

		if (!a->n_targets || a->n_targets > STRATA_KABI_MAX_TARGETS)
			return -EINVAL;
		nrs = strata_alloc(a->n_targets * sizeof(*nrs));
		s->pids = strata_alloc(a->n_targets * sizeof(*s->pids));
		if (!nrs || !s->pids) {
			strata_free(nrs);
			return -ENOMEM;
		}
		if (copy_from_user(nrs, u64_to_user_ptr(a->targets_ptr),
				   a->n_targets * sizeof(*nrs))) {
			strata_free(nrs);
			return -EFAULT;
		}
		s->n_targets = a->n_targets;
		for (i = 0; i < a->n_targets; i++)
			s->pids[i] = nrs[i] && nrs[i] <= PID_MAX_LIMIT ?
				find_get_pid(nrs[i]) : NULL;
		strata_free(nrs);
		return 0;
	}
	case STRATA_KABI_TARGET_COMMS:
		if (!a->n_targets || a->n_targets > STRATA_KABI_MAX_TARGETS)
			return -EINVAL;
		s->comms = strata_alloc(a->n_targets * sizeof(*s->comms));
		if (!s->comms)
			return -ENOMEM;
		if (copy_from_user(s->comms, u64_to_user_ptr(a->targets_ptr),
				   a->n_targets * sizeof(*s->comms)))
			return -EFAULT;
		s->n_targets = a->n_targets;
		for (i = 0; i < a->n_targets; i++) {
			if (!memchr(s->comms[i], 0, STRATA_KABI_COMM_MAX) ||
			    !s->comms[i][0])
				return -EINVAL;
		}
		return 0;
	}
	return -EINVAL;
}

/* Build the new slot content from user memory (no lock held). */
static int strata_slot_build(const struct strata_kabi_set_rules *a,
			     struct strata_slot *s)
{
	int ret = -EINVAL;

	memset(s, 0, sizeof(*s));
	ret = strata_session_valid(a);
	if (ret)
		return ret;
	ret = -EINVAL;
	if (!a->n_rules && !a->session_id)
		return a->rule_targets_ptr ? -EINVAL : 0;       /* clearing */
	if (a->n_rules > STRATA_KABI_MAX_RULES)
		return -EINVAL;
	s->used = true;
	s->session_id = a->session_id;
	s->channel = a->channel;
	memcpy(s->sock_path, a->sock_path, sizeof(s->sock_path));
	s->owner = current_euid();
	s->owner_admin = capable(CAP_SYS_ADMIN);
	s->kind = a->target_kind;
	s->n_rules = a->n_rules;
	s->rules = strata_alloc((size_t)max(a->n_rules, 1u) * sizeof(*s->rules));
	if (!s->rules)
		return -ENOMEM;
	if (copy_from_user(s->rules, u64_to_user_ptr(a->rules_ptr),
			   (size_t)a->n_rules * sizeof(*s->rules))) {
		ret = -EFAULT;
		goto err;
	}
	if (strata_rules_valid(s->rules, s->n_rules))
		goto err;
	ret = a->n_rules ? strata_rtargets_build(a, s) : (a->rule_targets_ptr ? -EINVAL : 0);
	if (ret)
		goto err;
	ret = strata_slot_targets(a, s);
	if (ret)
		goto err;
	return 0;
err:
	strata_slot_free(s);
	return ret;
}

/*
 * Whether `signo` can be sent to thread group `tgid` without killing it:
 * false only when its action is the default one (fatal for the real-time
 * signals) and some thread does not block it.  An exec resets the handlers
 * but the registration (a close-on-exec fd) is released only when execve
 * returns (the last fput runs as task work): a signal sent in between
 * would kill the new image.  A process that blocks the signal and reads it
 * with sigtimedwait or a signalfd keeps receiving it.  The daemon makes
 * the same check (SigCgt) before its own signals.
 */
static bool strata_may_signal(struct pid *tgid, int signo)
{
	struct sighand_struct *sh;
	struct task_struct *t, *it;
	bool ok = false;

	/* Lockless (lock_task_sighand is not exported): sighand_struct is
	 * SLAB_TYPESAFE_BY_RCU and the thread list is RCU-safe, so the reads
	 * are memory-safe; a handler or mask changing meanwhile races with
	 * the signal anyway, as with the daemon's SigCgt check. */
	rcu_read_lock();
	t = pid_task(tgid, PIDTYPE_TGID);
	sh = t ? rcu_dereference(t->sighand) : NULL;
	if (sh) {
		ok = READ_ONCE(sh->action[signo - 1].sa.sa_handler) != SIG_DFL;
		if (!ok) {
			ok = true;
			/* real_blocked: the mask of a thread inside
			 * sigtimedwait, which unblocks what it waits for. */
			for_each_thread(t, it)
				if (!sigismember(&it->blocked, signo) &&
				    !sigismember(&it->real_blocked, signo))
					ok = false;
		}
	}
	rcu_read_unlock();
	return ok;
}

/*
 * Under the lock: install new_slot as slot `slot`, moving the previous
 * content to *old_slot (the caller frees it after unlocking); bump the
 * generation, signal and stamp every registration whose answer changed.
 * Returns how many were signalled.
 */
static u32 strata_slot_replace(u32 slot, struct strata_slot *new_slot,
			       struct strata_slot *old_slot, u64 *gen,
			       u32 kbuf_subbuf_size, u32 kbuf_n_subbuf)
{
	struct strata_slot *s = &strata_slots[slot];
	struct strata_proc *p;
	u32 n = 0;

	lockdep_assert_held(&strata_ctl_lock);
	*old_slot = *s;
	*s = *new_slot;
	s->gen = ++strata_generation;
	*gen = s->gen;
	list_for_each_entry(p, &strata_procs, node) {
		struct strata_ident id;

		if (!p->signo || !strata_ident_of(p->tgid, &id) ||
		    strata_answer_same(old_slot, s, &id))
			continue;
		/* Only a signalled process owes an ACK for this change. */
		if (strata_may_signal(p->tgid, p->signo) &&
		    !kill_pid(p->tgid, p->signo, 1)) {
			p->target_gen = *gen;
			n++;
			strata_signals_sent++;
		}
	}
	strata_kbuf_apply_rules(slot, s->rules, s->used ? s->n_rules : 0, s->owner_admin,
				kbuf_subbuf_size, kbuf_n_subbuf);
	return n;
}

/*
 * Under the lock: may a caller without CAP_SYS_ADMIN take one more slot?
 * Counted over the slots set by non-admins; see "Sharing" above.
 */
static bool strata_share_ok(kuid_t euid)
{
	u32 i, mine = 0, users = 0;

	lockdep_assert_held(&strata_ctl_lock);
	for (i = 0; i < STRATA_KABI_MAX_SLOTS; i++) {
		const struct strata_slot *s = &strata_slots[i];

		if (!s->used || s->owner_admin)
			continue;
		users++;
		if (uid_eq(s->owner, euid))
			mine++;
	}
	return mine < STRATA_KABI_SLOTS_PER_UID &&
	       users < STRATA_KABI_MAX_SLOTS - STRATA_KABI_SLOTS_ADMIN;
}

static int strata_set_rules(struct file *file, void __user *uarg)
{
	struct strata_kabi_set_rules a;
	struct strata_slot new_slot, old_slot;
	struct strata_slot *s;
	bool admin = capable(CAP_SYS_ADMIN);
	bool orphan;
	u32 usize;
	int ret;

	ret = strata_arg_in(&a, sizeof(a), STRATA_KABI_SET_RULES_SIZE_V1, uarg, &usize);
	if (ret)
		return ret;
	if (a.slot >= STRATA_KABI_MAX_SLOTS || (a.flags & ~STRATA_KABI_SET_KEEP) || a.n_signalled ||
	    a.generation || !strata_kbuf_geometry_ok(a.kbuf_subbuf_size, a.kbuf_n_subbuf))
		return -EINVAL;
	ret = strata_slot_build(&a, &new_slot);
	if (ret)
		return ret;
	if (new_slot.used) {
		new_slot.owner_file = file;
		new_slot.keep = a.flags & STRATA_KABI_SET_KEEP;
	}

	mutex_lock(&strata_ctl_lock);
	s = &strata_slots[a.slot];
	orphan = strata_orphan(s);
	if (s->used && !admin &&
	    (s->owner_admin || !uid_eq(s->owner, current_euid())))
		ret = -EPERM;
	else if (s->used && s->owner_file != file && !orphan && (new_slot.used || !admin))
		ret = -EBUSY;
	else if (!s->used && new_slot.used && !admin &&
		 !strata_share_ok(current_euid()))
		ret = -EDQUOT;
	if (ret) {
		mutex_unlock(&strata_ctl_lock);
		strata_slot_free(&new_slot);
		return ret;
	}
	a.n_signalled = strata_slot_replace(a.slot, &new_slot, &old_slot, &a.generation,
					    a.kbuf_subbuf_size, a.kbuf_n_subbuf);
	mutex_unlock(&strata_ctl_lock);
	if (orphan)
		pr_info("slot %u: taken over by a successor (%u processes signalled)\n", a.slot,
			a.n_signalled);
	strata_slot_free(&old_slot);
	return strata_arg_out(uarg, &a, sizeof(a), usize);
}

/* Under the lock: count (and list up to cap) the missing processes. */
static u32 strata_missing(u64 gen, u32 *pids, u32 cap)
{
	struct strata_proc *p;
	u32 n = 0;

	lockdep_assert_held(&strata_ctl_lock);
	list_for_each_entry(p, &strata_procs, node) {
		struct strata_ident id;

		if (p->target_gen < gen || p->acked_gen >= gen)
			continue;
		if (!strata_ident_of(p->tgid, &id) || !strata_may_control(&id))
			continue;
		if (pids && n < cap)
			pids[n] = pid_vnr(p->tgid);
		n++;
	}
	return n;
}

static int strata_wait(void __user *uarg)
{
	struct strata_kabi_wait a;
	unsigned long deadline, seq;
	u32 *pids = NULL;
	u32 usize, cap;
	int ret;

	ret = strata_arg_in(&a, sizeof(a), STRATA_KABI_WAIT_SIZE_V1, uarg, &usize);
	if (ret)
		return ret;
	if (a.timeout_ms > STRATA_WAIT_MAX_MS || a.n_missing ||
	    (a.missing_cap && !a.missing_ptr))
		return -EINVAL;
	cap = min_t(u32, a.missing_cap, STRATA_WAIT_MAX_MISSING);
	if (cap) {
		pids = strata_alloc(cap * sizeof(*pids));
		if (!pids)
			return -ENOMEM;
	}
	deadline = jiffies + msecs_to_jiffies(a.timeout_ms);
	for (;;) {
		long left;

		mutex_lock(&strata_ctl_lock);
		if (a.generation > strata_generation) {
			mutex_unlock(&strata_ctl_lock);
			ret = -EINVAL;
			break;
		}
		seq = strata_ack_seq;
		a.n_missing = strata_missing(a.generation, NULL, 0);
		if (a.n_missing && time_after_eq(jiffies, deadline))
			strata_missing(a.generation, pids, cap);
		mutex_unlock(&strata_ctl_lock);
		if (!a.n_missing) {
			ret = 0;
			break;
		}
		if (time_after_eq(jiffies, deadline)) {
			ret = -ETIMEDOUT;
			break;
		}
		/* Processes that die holding an inherited fd do not bump
		 * strata_ack_seq: re-check at least every 100 ms.
		 */
		left = min_t(long, deadline - jiffies, HZ / 10 + 1);
		left = wait_event_interruptible_timeout(strata_ack_wq,
				READ_ONCE(strata_ack_seq) != seq, left);
		if (left < 0) {
			ret = -EINTR;
			break;
		}
	}
	if (ret == -ETIMEDOUT && cap &&
	    copy_to_user(u64_to_user_ptr(a.missing_ptr), pids,
			 min(cap, a.n_missing) * sizeof(*pids)))
		ret = -EFAULT;
	strata_free(pids);
	if (ret == -EFAULT || ret == -EINVAL || ret == -EINTR)
		return ret;
	if (strata_arg_out(uarg, &a, sizeof(a), usize))
		return -EFAULT;
	return ret;
}

static int strata_stats(void __user *uarg)
{
	struct strata_kabi_stats a;
	u32 usize, i;
	int ret;

	ret = strata_arg_in(&a, sizeof(a), STRATA_KABI_STATS_SIZE_V1, uarg, &usize);
	if (ret)
		return ret;
	memset(&a, 0, sizeof(a));
	mutex_lock(&strata_ctl_lock);
	a.procs_live = strata_procs_live;
	a.procs_total = strata_procs_total;
	a.generation = strata_generation;
	a.signals_sent = strata_signals_sent;
	for (i = 0; i < STRATA_KABI_MAX_SLOTS; i++) {
		a.slots_used += strata_slots[i].used;
		if (strata_slots[i].used)
			a.slots_busy |= 1ull << i;
	}
	mutex_unlock(&strata_ctl_lock);
	strata_kbuf_stats(&a.kevents_written, &a.kevents_lost);
	a.size = usize;
	return strata_arg_out(uarg, &a, sizeof(a), usize);
}

static int strata_kbuf_open(void __user *uarg)
{
	struct strata_kabi_kbuf_open a;
	struct file *file, *wfile = NULL;
	u32 usize;
	int fd, wfd = -1, ret;

	ret = strata_arg_in(&a, sizeof(a), STRATA_KABI_KBUF_OPEN_SIZE_V1, uarg, &usize);
	if (ret)
		return ret;
	if (a.slot >= STRATA_KABI_MAX_SLOTS || a.reserved || a.total_size || a.n_lanes ||
	    (a.flags & ~STRATA_KABI_KBUF_WAIT_FD) || a.wait_fd)
		return -EINVAL;
	if (!capable(CAP_SYS_ADMIN))
		return -EPERM;
	fd = get_unused_fd_flags(O_CLOEXEC);
	if (fd < 0)
		return fd;
	if (a.flags & STRATA_KABI_KBUF_WAIT_FD) {
		wfd = get_unused_fd_flags(O_CLOEXEC);
		if (wfd < 0) {
			put_unused_fd(fd);
			return wfd;
		}
	}
	mutex_lock(&strata_ctl_lock);
	file = strata_kbuf_open_file(a.slot, &a.total_size, &a.n_lanes);
	if (!IS_ERR(file) && wfd >= 0) {
		wfile = strata_kbuf_wait_file(a.slot);
		if (IS_ERR(wfile)) {
			fput(file);
			file = wfile;
		}
	}
	mutex_unlock(&strata_ctl_lock);
	if (IS_ERR(file)) {
		if (wfd >= 0)
			put_unused_fd(wfd);
		put_unused_fd(fd);
		return PTR_ERR(file);
	}
	a.wait_fd = wfd;
	/* Install only once the caller has its answer: no fd leaks on -EFAULT. */
	if (strata_arg_out(uarg, &a, sizeof(a), usize)) {
		fput(file);
		put_unused_fd(fd);
		if (wfile) {
			fput(wfile);
			put_unused_fd(wfd);
		}
		return -EFAULT;
	}
	fd_install(fd, file);
	if (wfile)
		fd_install(wfd, wfile);
	return fd;
}

long strata_ctl_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	void __user *uarg = (void __user *)arg;

	/* Dispatch on type and number: the struct's size field negotiates. */
	if (_IOC_TYPE(cmd) != STRATA_KABI_IOC_MAGIC)
		return -ENOTTY;
	switch (_IOC_NR(cmd)) {
	case _IOC_NR(STRATA_IOC_REGISTER):
		return strata_register(file, uarg);
	case _IOC_NR(STRATA_IOC_QUERY):
		return strata_query(file, uarg);
	case _IOC_NR(STRATA_IOC_ACK):
		return strata_ack(file, uarg);
	case _IOC_NR(STRATA_IOC_SET_RULES):
		return strata_set_rules(file, uarg);
	case _IOC_NR(STRATA_IOC_WAIT):
		return strata_wait(uarg);
	case _IOC_NR(STRATA_IOC_STATS):
		return strata_stats(uarg);
	case _IOC_NR(STRATA_IOC_KBUF_OPEN):
		return strata_kbuf_open(uarg);
	case _IOC_NR(STRATA_IOC_CRASH_REG):
	case _IOC_NR(STRATA_IOC_CRASH_UNREG):
		return strata_crash_ioctl(file, cmd, arg);
	}
	return -ENOTTY;
}

/*
 * Kernel events from boot (docs/boot.md).  With boot_events set, on the
 * kernel command line as strata.boot_events=kernel:sched_process_* (the
 * initramfs loads the module early), the module records those events from
 * its load into the kernel buffer of slot STRATA_BOOT_SLOT, in discard mode
 * (bounded: kbuf_subbuf_size x kbuf_n_subbuf per CPU; what does not fit is
 * counted), before any consumer exists.  The slot grants no process (PIDS
 * kind with no pid: user processes never see it) and no file owns it, so
 * closing files never clears it.  A consumer with CAP_SYS_ADMIN opens its
 * buffer (KBUF_OPEN) then clears the slot (SET_RULES, no rules), which stops
 * the recording; the open file keeps the buffer readable to its end.
 * strata-consumerd --adopt-early does so at its first session start.
 */
#define STRATA_BOOT_SLOT (STRATA_KABI_MAX_SLOTS - 1)
static char *boot_events;
module_param(boot_events, charp, 0444);
MODULE_PARM_DESC(boot_events,
		 "kernel events recorded from load until a consumer adopts them (comma-separated kernel:NAME globs)");

static void strata_ctl_boot(void)
{
	struct strata_slot s, old;
	const char *p = boot_events;
	u64 gen;
	u32 n = 0;

	if (!p || !*p)
		return;
	memset(&s, 0, sizeof(s));
	s.rules = strata_alloc(STRATA_KABI_MAX_RULES * sizeof(*s.rules));
	if (!s.rules) {
		pr_warn("boot_events: no memory, not recorded\n");
		return;
	}
	while (*p && n < STRATA_KABI_MAX_RULES) {
		const char *e = strchrnul(p, ',');
		size_t len = e - p;

		if (len && len < sizeof(s.rules[n].pattern)) {
			memcpy(s.rules[n].pattern, p, len);
			s.rules[n].loglevel_max = -1;
			s.rules[n].enable = 1;
			n++;
		} else if (len) {
			pr_warn("boot_events: pattern too long, ignored\n");
		}
		p = *e ? e + 1 : e;
	}
	if (!n || strata_rules_valid(s.rules, n)) {
		pr_warn("boot_events: no usable pattern, not recorded\n");
		strata_free(s.rules);
		return;
	}
	s.used = true;
	s.owner = GLOBAL_ROOT_UID;
	s.owner_admin = true;   /* kernel events need it (strata_kbuf_apply_rules) */
	s.kind = STRATA_KABI_TARGET_PIDS; /* and no pid: no process is granted it */
	s.n_rules = n;
	s.session_id = 0;
	mutex_lock(&strata_ctl_lock);
	strata_slot_replace(STRATA_BOOT_SLOT, &s, &old, &gen, 0, 0);
	strata_kbuf_mark_boot(STRATA_BOOT_SLOT);
	mutex_unlock(&strata_ctl_lock);
	strata_slot_free(&old);
	pr_info("recording kernel events from boot in slot %u: %s\n", STRATA_BOOT_SLOT, boot_events);
}

int strata_ctl_init(void)
{
	strata_ctl_boot();
	return 0;
}

void strata_ctl_exit(void)
{
	u32 i;

	/* No file is open (the module is pinned while one is): only slots. */
	cancel_delayed_work_sync(&strata_orphan_work);
	mutex_lock(&strata_ctl_lock);
	for (i = 0; i < STRATA_KABI_MAX_SLOTS; i++) {
		strata_kbuf_apply_rules(i, NULL, 0, false, 0, 0);
		strata_slot_free(&strata_slots[i]);
	}
	mutex_unlock(&strata_ctl_lock);
	if (!list_empty(&strata_procs))
		pr_err("leak: registrations left at exit\n");
}
