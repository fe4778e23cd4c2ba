/*
 * probe.cpp - probes: callbacks on tracepoints (include/strata/probe.h,
 * design and contract in docs/probes.md).
 *
 * Data: the registered probes (a list in registration order) and, per
 * event id, the probes on that tracepoint as one immutable ProbeList.  A
 * change (register, unregister, a module registering or unregistering
 * tracepoints) builds new lists, publishes each with one release store,
 * sets or clears the tracepoint's STRATA_TP_PROBED bit, and retires the
 * lists it replaced.  All of that runs under the runtime's control lock
 * (rt_internal.h), which also orders it against rule changes (arm_entry
 * keeps the PROBED bit).
 *
 * Roles:
 *   - application threads (and signal handlers interrupting them) run
 *     strata_probe_fire from the emitter: an RCU read-side critical section
 *     (liburcu-bp: no lock, no allocation, no system call once the thread
 *     is known to liburcu) around one acquire load of the list and the
 *     callbacks;
 *   - strata_probe_register/unregister (any thread, not a handler) change
 *     the lists under the control lock, then, outside it, wait for a grace
 *     period (urcu_bp_synchronize_rcu) and free what they retired.  The
 *     wait is outside the lock so that a grace period never holds up the
 *     control plane (tp-async's signal handler takes that lock).
 * Lists retired by a module's unregistration (dlclose, strata_dyn_release)
 * wait for the next register or unregister to be freed: a destructor does
 * not wait for a grace period.
 *
 * ThreadSanitizer cannot see liburcu's grace period (membarrier, plain
 * loads in an uninstrumented library), so under TSan a reader releases a
 * token when it leaves its critical section and the updater acquires it
 * after the grace period: the happens-before that the grace period gives.
 */
#include <errno.h>
#include <pthread.h>

#include <cstdlib>
#include <cstring>

#include <strata/probe.h>
// The read side inline (liburcu's small read-lock functions, which its
// headers offer to non-LGPL code), its thread pointer reached with the
// initial-exec TLS model (CMakeLists.txt): no call and no __tls_get_addr
// per hit.  Not under ASan+UBSan: liburcu-bp's readers live in its own
// arena at less than the 128-byte alignment its struct declares, which
// UBSan reports in the inlined code (the library's own code, not
// instrumented, does the same accesses).
#ifndef __SANITIZE_ADDRESS__
#define _LGPL_SOURCE 1
#endif
#include <urcu/urcu-bp.h>
#ifndef _LGPL_SOURCE // the thread's liburcu reader, as the inline header declares it
#include <urcu/tls-compat.h>
extern "C" {
struct urcu_bp_reader;
extern DECLARE_URCU_TLS(struct urcu_bp_reader *, urcu_bp_reader);
}
#endif

#include "probe_internal.h"
#include "rt_internal.h"

#ifdef STRATA_TSAN
extern "C" void __tsan_acquire(void *addr);
extern "C" void __tsan_release(void *addr);
#endif

struct strata_probe {
	char pattern[STRATA_PATTERN_MAX];
	int loglevel_max;
	strata_probe_fn fn;
	void *priv;
	strata_probe *next; // registration order, under the control lock
	uint32_t attached;  // tracepoints it is on, under the control lock
	bool wants_time;    // false only for the runtime's own (agg.cpp)
};

// runtime.h: the preload's "inside libstrata".
STRATA_EXPORT __thread uint32_t strata_rt_inside;

namespace strata {
namespace {

struct ProbeCall {
	strata_probe_fn fn;
	void *priv;
	const strata_probe *owner;
};

// The probes on one tracepoint: immutable once published.
struct ProbeList {
	ProbeList *retired_next; // under the control lock, after it is replaced
	uint32_t n;
	bool wants_time;    // some probe reads ev->timestamp
	ProbeCall calls[1]; // n entries
};

strata_probe *g_probes; // under the control lock
uint64_t g_probes_gen;  // under the control lock: changes of g_probes (probe report)
ProbeList *g_retired;   // replaced lists waiting for a grace period
// Per event id.  Release store by publish(), acquire load by
// strata_probe_fire (pairs: a list seen is complete).
std::atomic<ProbeList *> g_lists[kMaxEventId + 1];
pthread_once_t g_fork_once = PTHREAD_ONCE_INIT;
// liburcu-bp takes pthread mutexes when it registers a thread, during a
// grace period and as a thread exits.  Under the pthread preload (preload/)
// those are traced calls whose tracepoints may be probed: a probe hit
// inside liburcu would re-enter it and wait on its own lock.  So a thread
// registers and waits for grace periods with t_in_urcu set, and a hit that
// finds it set (only on that thread, only inside liburcu) skips its
// probes; a thread that liburcu has let go (its exit, t_urcu_known but no
// reader any more) skips them too rather than register again from inside
// liburcu's exit path.  Per thread, signal handlers included.
__thread bool t_in_urcu __attribute__((tls_model("initial-exec")));
__thread bool t_urcu_known __attribute__((tls_model("initial-exec"))); // we registered it
#ifdef STRATA_TSAN
char g_grace_token;
#endif

bool matches(const strata_probe *p, const strata_event_desc *d)
{
	if (p->loglevel_max >= 0 && d->loglevel > (uint32_t)p->loglevel_max)
		return false;
	char full[2 * 256 + 2];
	size_t lp = strlen(d->provider), ln = strlen(d->name);
	if (lp + ln + 2 > sizeof full)
		return false;
	memcpy(full, d->provider, lp);
	full[lp] = ':';
	memcpy(full + lp + 1, d->name, ln + 1);
	return glob_match(p->pattern, full);
}

void retire(ProbeList *l)
{
	if (!l)
		return;
	l->retired_next = g_retired;
	g_retired = l;
}

// Rebuilds tp's list from the registered probes (control lock held).
// False only when out of memory (the old list then stays).
bool rebuild(strata_tracepoint *tp)
{
	const uint32_t id = tp->id;
	uint32_t n = 0;
	for (strata_probe *p = g_probes; p; p = p->next)
		n += matches(p, tp->desc);
	ProbeList *l = nullptr;
	if (n) {
		l = (ProbeList *)malloc(sizeof(ProbeList) + (n - 1) * sizeof(ProbeCall));
		if (!l)
			return false;
		l->retired_next = nullptr;
		l->n = 0;
		l->wants_time = false;
		for (strata_probe *p = g_probes; p; p = p->next)
			if (matches(p, tp->desc)) {
				l->calls[l->n++] = ProbeCall{p->fn, p->priv, p};
				l->wants_time |= p->wants_time;
			}
	}
	// Release: the list's contents before its pointer; pairs with the
	// acquire load in strata_probe_fire.  The old list is retired: a reader
	// may still be inside it until the next grace period.
	ProbeList *old = g_lists[id].exchange(l, std::memory_order_acq_rel);
	if (old)
		for (uint32_t i = 0; i < old->n; i++)
			const_cast<strata_probe *>(old->calls[i].owner)->attached--;
	if (l)
		for (uint32_t i = 0; i < l->n; i++)
			const_cast<strata_probe *>(l->calls[i].owner)->attached++;
	retire(old);
	registry_set_probed(tp, l != nullptr);
	return true;
}

struct Rebuild {
	const strata_probe *only; // rebuild only the tracepoints this probe matches
	bool ok;
};

void rebuild_one(strata_tracepoint *tp, void *ctx)
{
	auto *r = static_cast<Rebuild *>(ctx);
	if (r->only && !matches(r->only, tp->desc))
		return;
	if (!rebuild(tp))
		r->ok = false;
}

// Takes the retired lists (control lock held) for free_after_grace.
ProbeList *take_retired()
{
	ProbeList *l = g_retired;
	g_retired = nullptr;
	return l;
}

void grace_period()
{
	t_in_urcu = true; // see t_in_urcu
	{
		const RtInside inside; // liburcu's locks are not the program's
		urcu_bp_synchronize_rcu();
	}
	t_in_urcu = false;
#ifdef STRATA_TSAN
	__tsan_acquire(&g_grace_token);
#endif
}

void free_lists(ProbeList *l)
{
	while (l) {
		ProbeList *next = l->retired_next;
		free(l);
		l = next;
	}
}

// A fork while another thread is inside a grace period would leave
// liburcu's registry lock held in the child: liburcu's fork handlers,
// installed once the first probe exists (a process without probes pays
// nothing at fork).
// Inside libstrata (strata_rt_inside): the pthread preload sees none of
// the locks they take and drop.
void urcu_before_fork()
{
	const RtInside inside;
	urcu_bp_before_fork();
}
void urcu_after_fork_parent()
{
	const RtInside inside;
	urcu_bp_after_fork_parent();
}
void urcu_after_fork_child()
{
	const RtInside inside;
	urcu_bp_after_fork_child();
}
void install_fork_handlers()
{
	pthread_atfork(urcu_before_fork, urcu_after_fork_parent, urcu_after_fork_child);
}

void drop_list_of(strata_tracepoint *tp, void *probe)
{
	// Relaxed: control lock held, we are the only writer.
	const ProbeList *l = g_lists[tp->id].load(std::memory_order_relaxed);
	for (uint32_t i = 0; l && i < l->n; i++)
		if (l->calls[i].owner == probe) {
			probe_on_unregister(tp);
			registry_set_probed(tp, false);
			return;
		}
}

// Takes p (already unlinked from g_probes) out of every list, control lock
// held: each list with p is rebuilt without it or, out of memory, dropped
// whole rather than keep calling p.
void remove_from_lists(strata_probe *p)
{
	Rebuild r{p, true};
	registry_for_each(rebuild_one, &r);
	if (!r.ok)
		registry_for_each(drop_list_of, p);
}

// Lays out ev's fields as recorded (strata_probe_pack) into out, or only
// sizes them when out is null.
size_t pack(const strata_probe_event *ev, char *out)
{
	const strata_event_desc *d = ev->desc;
	size_t o = 0, k = 0;
	auto put = [&](const void *src, size_t n) {
		if (out && n)
			memcpy(out + o, src, n);
		o += n;
	};
	for (uint32_t i = 0; i < d->n_fields; i++) {
		const strata_field_desc &f = d->fields[i];
		const void *a = ev->argv[k++];
		switch (f.kind) {
		case STRATA_FIELD_STRING:
			put(a, strlen((const char *)a) + 1);
			break;
		case STRATA_FIELD_ARRAY:
			put(a, (size_t)f.size * f.length);
			break;
		case STRATA_FIELD_SEQUENCE: {
			size_t n;
			memcpy(&n, ev->argv[k++], sizeof n);
			const uint32_t n32 = (uint32_t)n;
			put(&n32, 4);
			put(a, (size_t)f.size * n);
			break;
		}
		default: // INTEGER, FLOAT, ENUM
			put(a, f.size);
			break;
		}
	}
	return o;
}

} // namespace

void probe_on_register(strata_tracepoint *tp)
{
	if (g_probes)
		rebuild(tp); // out of memory: the tracepoint has no probes, as before
}

void probe_on_unregister(strata_tracepoint *tp)
{
	if (tp->id > kMaxEventId)
		return;
	// Relaxed: we are the only writer (control lock); readers of the old
	// list are covered by the grace period before it is freed.
	ProbeList *old = g_lists[tp->id].exchange(nullptr, std::memory_order_relaxed);
	if (old)
		for (uint32_t i = 0; i < old->n; i++)
			const_cast<strata_probe *>(old->calls[i].owner)->attached--;
	retire(old);
}

} // namespace strata

using namespace strata;

extern "C" STRATA_EXPORT void strata_probe_fire(struct strata_tracepoint *tp, const void *const *argv)
{
	if (!tp || !tp->desc)
		return;
	const uint32_t id = tp->id;
	if (id > kMaxEventId || t_in_urcu)
		return; // a hit from inside liburcu on this thread (see t_in_urcu)
	if (__builtin_expect(URCU_TLS(urcu_bp_reader) == nullptr, 0)) {
		if (t_urcu_known)
			return; // liburcu let the thread go: it is exiting (see t_in_urcu)
		// The thread's first probed hit: registered with liburcu here,
		// with its locks traced but not probed.  A signal handler that
		// interrupts this registers nothing twice (urcu checks).
		t_in_urcu = true;
		{
			const RtInside inside;
			urcu_bp_register_thread();
		}
		t_in_urcu = false;
		t_urcu_known = true;
	}
	urcu_bp_read_lock();
	// Acquire: pairs with rebuild()'s release: the list is complete.
	const ProbeList *l = g_lists[id].load(std::memory_order_acquire);
	if (l) {
		const strata_probe_event ev{tp->desc, argv, l->wants_time ? clock_now() : 0, tp};
		for (uint32_t i = 0; i < l->n; i++)
			l->calls[i].fn(&ev, l->calls[i].priv);
	}
#ifdef STRATA_TSAN
	__tsan_release(&g_grace_token); // see the header comment
#endif
	urcu_bp_read_unlock();
}

extern "C" STRATA_EXPORT int strata_probe_register(const char *pattern, int loglevel_max, strata_probe_fn fn,
						   void *priv, strata_probe **out)
{
	return probe_register(pattern, loglevel_max, fn, priv, true, out);
}

int strata::probe_register(const char *pattern, int loglevel_max, strata_probe_fn fn, void *priv,
			   bool wants_time, strata_probe **out)
{
	if (!pattern || !fn || !out || !pattern[0] || strlen(pattern) >= STRATA_PATTERN_MAX)
		return -EINVAL;
	pthread_once(&g_fork_once, install_fork_handlers);
	auto *p = (strata_probe *)calloc(1, sizeof(strata_probe));
	if (!p)
		return -ENOMEM;
	strcpy(p->pattern, pattern);
	p->loglevel_max = loglevel_max < 0 ? -1 : loglevel_max;
	p->fn = fn;
	p->priv = priv;
	p->wants_time = wants_time;
	int rc = control_lock();
	if (rc) {
		free(p);
		return rc;
	}
	strata_probe **tail = &g_probes;
	while (*tail)
		tail = &(*tail)->next;
	*tail = p;
	Rebuild r{p, true};
	registry_for_each(rebuild_one, &r);
	if (!r.ok) { // out of memory: take it out again
		*tail = nullptr;
		remove_from_lists(p);
		rc = -ENOMEM;
	}
	ProbeList *retired = take_retired();
	g_probes_gen++;
	control_unlock();
	probe_report_sync();
	// Every thread sees the PROBED bits before we return (the contract:
	// hits after register are probed).
	strata_rt_quiesce();
	if (retired) {
		grace_period();
		free_lists(retired);
	}
	if (rc) {
		free(p); // never published in a list that survived the grace period
		return rc;
	}
	*out = p;
	return 0;
}

extern "C" STRATA_EXPORT int strata_probe_unregister(strata_probe *p)
{
	if (!p)
		return -EINVAL;
	// Waits rather than fails: unregister must not leave the probe in.
	while (control_lock() != 0)
		sched_yield(); // only from a handler interrupting our own control call: a misuse
	strata_probe **pp = &g_probes;
	while (*pp && *pp != p)
		pp = &(*pp)->next;
	if (*pp) {
		*pp = p->next;
		remove_from_lists(p);
	}
	ProbeList *retired = take_retired();
	g_probes_gen++;
	control_unlock();
	probe_report_sync();
	grace_period(); // even with nothing retired: a reader may hold a list we retired earlier
	free_lists(retired);
	free(p);
	return 0;
}

uint32_t strata::probe_snapshot(ProbeSnapshot *out, uint32_t cap, uint32_t *total, uint64_t *gen)
{
	*total = 0;
	*gen = 0;
	if (control_lock() != 0)
		return 0;
	uint32_t n = 0;
	for (const strata_probe *p = g_probes; p; p = p->next, ++*total)
		if (n < cap) {
			memcpy(out[n].pattern, p->pattern, sizeof out[n].pattern);
			out[n].loglevel_max = p->loglevel_max;
			out[n].fn = p->fn;
			out[n++].runtime = !p->wants_time;
		}
	*gen = g_probes_gen + 1; // never 0
	control_unlock();
	return n;
}

extern "C" STRATA_EXPORT uint32_t strata_probe_attached(const strata_probe *p)
{
	if (!p || control_lock() != 0)
		return 0;
	uint32_t n = p->attached;
	control_unlock();
	return n;
}

extern "C" STRATA_EXPORT const char *strata_probe_strerror(int err)
{
	switch (err) {
	case 0:
		return "success";
	case -EINVAL:
		return "invalid probe: a callback, an output handle and a \"provider:event\" pattern of "
		       "1 to 127 bytes are needed";
	case -ENOMEM:
		return "out of memory";
	case -EBUSY:
		return "probe registered from a signal handler that interrupted a Strata control call";
	default:
		return "unknown error";
	}
}

extern "C" STRATA_EXPORT size_t strata_probe_pack(const struct strata_probe_event *ev, void *buf, size_t cap)
{
	if (!ev || !ev->desc)
		return 0;
	const size_t need = pack(ev, nullptr);
	if (buf && need <= cap)
		pack(ev, (char *)buf);
	return need;
}
