// analyze_reader.cpp - decode the `pthread` provider's events of a trace
// directory.  The events come from either reader (read_event.h: Strata's own
// for the traces Strata wrote, babeltrace2 for the others), merged by time;
// this file only turns them into the analysis' input, by one logic path.
#include "analyze_reader.h"

#include <algorithm>
#include <map>
#include <unordered_map>
#include <vector>

#include "read_event.h"
#include "read_progress.h"

namespace strata {
namespace analyze {
namespace {

// What an event class is to the analysis, decided once per class.
struct ClassOf : rd::SlotCache {
	// Held and Acquired are the preload's compact records, Site its
	// interned callers (docs/pthread.md).
	enum { Other, Mapping, Lock, Site, Held, Acquired, Counts, CountsDone } what = Other;
	Op op = Op::MutexLock;
	// Held, Acquired and Lock: their fields' slots, resolved at the first
	// record (a name look-up per field read was a tenth of a wait's cost).
	bool resolved = false;
	// Held, streamed (Sink::on): held_streamed()'s, tested alone.
	bool streamed_held = false;
	rd::FieldSlot f_back, f_site, f_lock;
	// Held: the three as fixed-offset integers (Strata's reader, COMPACT
	// records), when all three are.
	bool fixed = false;
	// And the preload's own layout of them (pthread_tp.h): hold_ns and
	// site 4-byte, lock 8-byte, all unsigned: read without masks.
	bool plain = false;
	rd::FixedInt x_back, x_site, x_lock;
	rd::FieldSlot f_cond, f_ret, f_contended, f_wait, f_caller, f_stack; // Lock
};

// Slots of Sink's caches: by a stream's index (Strata's reader), by a
// class key's hash.
constexpr uint32_t kProcSlots = 1024;
constexpr unsigned kClassSlotBits = 5;

struct Sink {
	Input *in = nullptr;
	std::unordered_map<const void *, ClassOf> classes; // by class_key()
	const void *last_class = nullptr;
	ClassOf *last_of = nullptr;
	// The classes met, a slot each by their key's hash (a pthread trace
	// alternates between a few: held, acquired, lock, unlock), before
	// the map.
	struct ClassSlot {
		const void *key = nullptr;
		ClassOf *of = nullptr;
	} class_slots[1u << kClassSlotBits];
	const void *last_trace = nullptr, *last_stream = nullptr; // of the last event
	uint32_t last_proc = 0;
	// The process of each stream by its index (Strata's reader: the
	// streams of threads that take turns), plus one; 0: not known yet.
	uint32_t proc_slots[kProcSlots] = {};
	EventSink *on = nullptr; // streaming: each event, none kept
	Progress *progress = nullptr;
	uint64_t delivered = 0;
	// A streamed compact hold's acquisition (held_streamed()): the fields
	// it sets, the others as a new Event's (no one changes them).
	Event held_ev;
	std::map<const void *, uint32_t> procs; // by trace_key()
	bool several_machines = false;          // the sub-traces' env.hostname differ
	// Compact records: site id -> caller per process; kept events whose
	// caller is still a site id (resolved after reading: a site event may
	// follow its first use by another thread); whether kept events must be
	// sorted again (a compact record's acquisition goes back in time).
	std::map<std::pair<uint32_t, uint64_t>, uint64_t> sites;
	std::vector<std::pair<size_t, uint64_t>> by_site;
	bool reorder = false;
	// site_caller()'s answers from `sites` by key (cache_place());
	// forgotten when a site event changes `sites`.
	struct RecentSite {
		std::pair<uint32_t, uint64_t> key{0, 0};
		uint64_t caller = 0;
		bool ok = false;
	} recent_sites[kCachePlaces];
	// The last two of them compact holds found (a thread's records come
	// in runs, at one site or at two in turns); none: proc kNoProc, which
	// no process index is (one compare less a hold).
	static constexpr uint32_t kNoProc = UINT32_MAX;
	struct LastSite {
		uint64_t site = 0;
		uint32_t proc = kNoProc;
		uint64_t caller = 0;
	} last_sites[2];
	void forget_sites()
	{
		for (RecentSite &r : recent_sites)
			r.ok = false;
		last_sites[0].proc = last_sites[1].proc = kNoProc;
	}

	template <class E> bool event(const E &ev);
	template <class E> ClassOf &class_miss(const E &ev);
	bool loss(const rd::Loss &l)
	{
		if (l.events && l.known)
			in->discarded += l.count;
		return true;
	}
};

template <class E> uint32_t proc_miss(Sink *s, const E &ev);
template <class E> uint32_t proc_find(Sink *s, const E &ev);

// The process of the event's sub-trace, inline: Strata's reader's by the
// stream's slot (a stream lies in one sub-trace), babeltrace2's the last
// one's by its stream key.
template <class E> inline __attribute__((always_inline)) uint32_t proc_of(Sink *s, const E &ev)
{
	const uint32_t i = ev.stream_index();
	if (i < kProcSlots) {
		if (__builtin_expect(s->proc_slots[i] != 0, 1))
			return s->proc_slots[i] - 1;
	} else if (__builtin_expect(ev.stream_key() == s->last_stream, 1)) {
		return s->last_proc;
	}
	return proc_miss(s, ev);
}

template <class E> __attribute__((noinline)) uint32_t proc_miss(Sink *s, const E &ev)
{
	const uint32_t i = ev.stream_index();
	const uint32_t p = proc_find(s, ev);
	if (i < kProcSlots)
		s->proc_slots[i] = p + 1;
	return p;
}

// The process of the event's sub-trace, made at its first event.
template <class E> uint32_t proc_find(Sink *s, const E &ev)
{
	s->last_stream = ev.stream_key();
	const void *tr = ev.trace_key();
	if (tr == s->last_trace)
		return s->last_proc;
	auto it = s->procs.find(tr);
	if (it != s->procs.end()) {
		s->last_trace = tr;
		return s->last_proc = it->second;
	}
	const rd::TraceIdent &id = ev.trace();
	Process p;
	p.name = id.procname;
	if (id.has_vpid)
		p.pid = id.vpid;
	if (s->several_machines)
		p.machine = id.hostname;
	p.trace_dir = id.name;
	uint32_t idx = static_cast<uint32_t>(s->in->procs.size());
	s->in->procs.push_back(p);
	s->procs[tr] = idx;
	s->last_trace = tr;
	return s->last_proc = idx;
}

// An event to the model (streaming) or kept.  With a site id, its caller
// is looked up now; a kept event whose site is not known yet is resolved
// after reading, a streamed one keeps caller 0.
// The caller of site id `site` of process `proc` into e->caller; false
// when the site is not known yet.
inline __attribute__((always_inline)) bool site_caller(Sink *s, uint32_t proc, uint64_t site, Event *e)
{
	const std::pair<uint32_t, uint64_t> key{proc, site};
	Sink::RecentSite &r = s->recent_sites[cache_place(proc, site)];
	if (!r.ok || r.key != key) {
		auto it = s->sites.find(key);
		if (it == s->sites.end())
			return false;
		r = Sink::RecentSite{key, it->second, true};
	}
	e->caller = r.caller;
	return true;
}

// Progress::update() draws at most every 65536 events: the calls between
// are left out (two per hold, a tenth of the reader's own steps).
inline void progressed(Sink *s, int64_t ts)
{
	if ((++s->delivered & 0xffff) == 0 && s->progress)
		s->progress->update(s->delivered, ts);
}

void deliver(Sink *s, Event &&e, const uint64_t *site)
{
	if (site && !site_caller(s, e.proc, *site, &e) && !s->on)
		s->by_site.emplace_back(s->in->events.size(), *site);
	if (s->progress)
		progressed(s, e.ts);
	if (s->on)
		s->on->event(e);
	else
		s->in->events.push_back(std::move(e));
}

// A compact record (docs/pthread.md): mutex_held is an uncontended
// mutex_lock hold_ns before and a mutex_unlock now; mutex_acquired is the
// mutex_lock age_ns before; mutex_tryheld and mutex_tryacquired the same
// with a successful mutex_trylock (the class's op).  Streamed, the acquisition goes to the model
// out of time order only against other locks' events: none of this lock's
// can fall inside an uncontended hold's acquisition and its record.
template <class E> void on_compact(Sink *s, ClassOf &c, const E &ev, Event &&base)
{
	const bool held = c.what == ClassOf::Held;
	if (!c.resolved) { // the slots, once per class
		c.f_back = c.get(ev, held ? "hold_ns" : "age_ns");
		c.f_site = c.get(ev, "site");
		c.f_lock = c.get(ev, "lock");
		c.resolved = true;
	}
	const uint64_t back = ev.u64(c.f_back);
	const uint64_t site = ev.u64(c.f_site);
	const int64_t now = base.ts;
	base.op = c.op;
	base.lock = ev.u64(c.f_lock);
	base.ts = now - static_cast<int64_t>(back);
	s->reorder = true;
	if (held && s->on) { // streamed: both events in one call
		site_caller(s, base.proc, site, &base);
		if (s->progress) {
			progressed(s, base.ts);
			progressed(s, now);
		}
		s->on->held(base, now);
		return;
	}
	if (!held) {
		deliver(s, std::move(base), &site);
		return;
	}
	Event un = EventSink::unlock_of(base, now);
	deliver(s, std::move(base), &site);
	deliver(s, std::move(un), &site);
}

// A compact hold record, streamed (nearly every record of a trace of the
// preload): on_compact()'s steps without an Event made and dropped each
// time.
// held_streamed()'s slots, resolved when its class is first met.
template <class E> void resolve_held(ClassOf &c, const E &ev)
{
	c.f_back = c.get(ev, "hold_ns");
	c.f_site = c.get(ev, "site");
	c.f_lock = c.get(ev, "lock");
	if constexpr (E::kFixed) {
		c.x_back = rd::FixedInt::of(c.f_back);
		c.x_site = rd::FixedInt::of(c.f_site);
		c.x_lock = rd::FixedInt::of(c.f_lock);
		c.fixed = c.x_back.ok && c.x_site.ok && c.x_lock.ok;
		c.plain = c.x_back.plain(4) && c.x_site.plain(4) && c.x_lock.plain(8);
	}
	c.resolved = true;
}

// (c resolved: its class is streamed_held.)
template <class E> inline __attribute__((always_inline)) void held_streamed(Sink *s, ClassOf &c, const E &ev)
{
	Event &b = s->held_ev;
	const int64_t now = ev.ns();
	b.proc = proc_of(s, ev);
	int64_t tid = 0;
	b.tid = ev.tid(&tid) ? tid : 0;
	b.op = c.op;
	uint64_t back, site;
	if (E::kFixed && __builtin_expect(c.plain, 1)) {
		back = ev.template fixed_as<uint32_t>(c.x_back);
		site = ev.template fixed_as<uint32_t>(c.x_site);
		b.lock = ev.template fixed_as<uint64_t>(c.x_lock);
	} else if (E::kFixed && c.fixed) {
		back = static_cast<uint64_t>(ev.fixed(c.x_back));
		site = static_cast<uint64_t>(ev.fixed(c.x_site));
		b.lock = static_cast<uint64_t>(ev.fixed(c.x_lock));
	} else {
		back = ev.u64(c.f_back);
		site = ev.u64(c.f_site);
		b.lock = ev.u64(c.f_lock);
	}
	b.ts = now - static_cast<int64_t>(back); // streamed: none kept to sort again (reorder)
	Sink::LastSite *last = s->last_sites;
	auto is = [&](const Sink::LastSite &r) { return r.site == site && r.proc == b.proc; };
	if (__builtin_expect(is(last[0]), 1)) {
		b.caller = last[0].caller;
	} else if (is(last[1])) {
		b.caller = last[1].caller;
	} else {
		b.caller = 0;
		if (site_caller(s, b.proc, site, &b)) {
			last[1] = last[0];
			last[0] = Sink::LastSite{site, b.proc, b.caller};
		}
	}
	// Counted with a progress bar or without (progressed() draws only
	// with one): one test less a hold.
	if (__builtin_expect(((s->delivered + 2) & 0xffff) < 2, 0)) {
		progressed(s, b.ts);
		progressed(s, now);
	} else {
		s->delivered += 2; // neither is a multiple of 65536
	}
	// Through a pointer to the member: a plain virtual call, where the
	// compiler otherwise tests the table's entry against the base's
	// held() first (it is never that one: the model overrides it).
	static constexpr void (EventSink::*kHeld)(const Event &, int64_t) = &EventSink::held;
	(s->on->*kHeld)(b, now);
}

// Counting mode (docs/pthread.md): mutex_counts is `count` uncontended
// pairs of the lock taken at the site, mutex_counts_done a process's final
// flush.
template <class E> void on_counts(Sink *s, const ClassOf &c, const E &ev, Event &&e)
{
	if (c.what == ClassOf::CountsDone) {
		e.op = Op::CountsDone;
		deliver(s, std::move(e), nullptr);
		return;
	}
	const uint64_t site = c.u64(ev, "site");
	e.op = Op::MutexCounts;
	e.lock = c.u64(ev, "lock");
	e.tried = c.u64(ev, "try_") != 0;
	e.count = c.u64(ev, "count");
	e.timed = c.u64(ev, "timed");
	e.waited_untimed = c.u64(ev, "waited_untimed");
	e.hold_sum = c.u64(ev, "hold_sum_ns");
	e.hold_max = c.u64(ev, "hold_max_ns");
	deliver(s, std::move(e), &site);
}

// The analysis' view of the event's class, made at its first event.
template <class E> __attribute__((noinline)) ClassOf &Sink::class_miss(const E &ev)
{
	const void *key = ev.class_key();
	auto cit = classes.find(key);
	if (cit == classes.end()) {
		ClassOf c;
		const std::string name = ev.name();
		if (name == "pthread:mapping")
			c.what = ClassOf::Mapping;
		else if (name == "pthread:site")
			c.what = ClassOf::Site;
		else if (name == "pthread:mutex_held" || name == "pthread:mutex_tryheld")
			c.what = ClassOf::Held;
		else if (name == "pthread:mutex_acquired" || name == "pthread:mutex_tryacquired")
			c.what = ClassOf::Acquired;
		else if (name == "pthread:mutex_counts")
			c.what = ClassOf::Counts;
		else if (name == "pthread:mutex_counts_done")
			c.what = ClassOf::CountsDone;
		if ((c.what == ClassOf::Held || c.what == ClassOf::Acquired) &&
		    name.find(":mutex_try") != name.npos)
			c.op = Op::MutexTrylock;
		else if (name.compare(0, 8, "pthread:") == 0 && op_from_name(name.substr(8), &c.op))
			c.what = ClassOf::Lock;
		c.streamed_held = c.what == ClassOf::Held && on != nullptr;
		if (c.streamed_held)
			resolve_held(c, ev);
		cit = classes.emplace(key, c).first;
	}
	return cit->second;
}

template <class E> bool Sink::event(const E &ev)
{
	Sink *s = this;
	const void *key = ev.class_key();
	if (key != last_class) {
		ClassSlot &slot = class_slots[reinterpret_cast<uintptr_t>(key) * 0x9e3779b97f4a7c15ull >>
					      (64 - kClassSlotBits)];
		if (__builtin_expect(slot.key != key, 0))
			slot = ClassSlot{key, &class_miss(ev)};
		last_class = key;
		last_of = slot.of;
	}
	ClassOf &c = *last_of;
	if (__builtin_expect(c.streamed_held, 1)) {
		held_streamed(s, c, ev);
		return true;
	}
	if (c.what == ClassOf::Other) {
		in->other_events++;
		return true;
	}
	const int64_t ts = ev.ns();
	uint32_t proc = proc_of(s, ev);
	if (c.what == ClassOf::Mapping) {
		Mapping m;
		m.proc = proc;
		m.start = c.u64(ev, "start");
		m.end = c.u64(ev, "end");
		m.offset = c.u64(ev, "offset");
		m.path = c.str(ev, "path");
		in->maps.push_back(std::move(m));
		return true;
	}
	if (c.what == ClassOf::Site) {
		sites[{proc, c.u64(ev, "id")}] = c.u64(ev, "caller");
		forget_sites();
		return true;
	}
	Event e;
	e.op = c.op;
	e.ts = ts;
	e.proc = proc;
	int64_t tid = 0;
	e.tid = ev.tid(&tid) ? tid : 0;
	if (c.what == ClassOf::Held || c.what == ClassOf::Acquired) {
		on_compact(s, c, ev, std::move(e));
		return true;
	}
	if (c.what == ClassOf::Counts || c.what == ClassOf::CountsDone) {
		on_counts(s, c, ev, std::move(e));
		return true;
	}
	if (!c.resolved) {
		c.f_lock = c.get(ev, "lock");
		c.f_cond = c.get(ev, "cond");
		c.f_ret = c.get(ev, "ret");
		c.f_contended = c.get(ev, "contended");
		c.f_wait = c.get(ev, "wait_ns");
		c.f_caller = c.get(ev, "caller");
		c.f_stack = c.get(ev, "stack");
		c.resolved = true;
	}
	e.lock = ev.u64(c.f_lock);
	e.cond = ev.u64(c.f_cond);
	e.ret = static_cast<int32_t>(ev.i64(c.f_ret));
	e.contended = ev.u64(c.f_contended) != 0;
	e.wait_ns = ev.u64(c.f_wait);
	e.caller = ev.u64(c.f_caller);
	const rd::FieldSlot &st = c.f_stack;
	const uint32_t n = ev.count(st);
	if (n)
		e.stack.reserve(n < 256 ? n : 256);
	for (uint32_t i = 0; i < n && i < 256; i++)
		e.stack.push_back(ev.elem_u64(st, i));
	deliver(s, std::move(e), nullptr);
	return true;
}

} // namespace

bool read_trace(const std::string &dir, Input *in, std::string *err)
{
	return read_trace_feed(dir, in, nullptr, nullptr, err);
}

bool read_trace_feed(const std::string &dir, Input *in, EventSink *on, Progress *progress, std::string *err)
{
	rd::Source src("analyze");
	if (!src.open(dir)) {
		*err = "no trace read under '" + dir + "'";
		return false;
	}
	const bool ok = read_trace_feed(src, in, on, progress, err);
	src.finish();
	return ok;
}

bool read_trace_feed(rd::Source &src, Input *in, EventSink *on, Progress *progress, std::string *err)
{
	Sink sink;
	sink.in = in;
	sink.several_machines = machines(src.dirs()) > 1;
	sink.on = on;
	sink.progress = progress;
	const bool ok = src.read(sink);
	if (!ok)
		*err = src.why();
	for (const auto &[i, id] : sink.by_site) {
		auto it = sink.sites.find({in->events[i].proc, id});
		in->events[i].caller = it == sink.sites.end() ? 0 : it->second;
	}
	if (sink.reorder && !on)
		std::stable_sort(in->events.begin(), in->events.end(),
				 [](const Event &a, const Event &b) { return a.ts < b.ts; });
	return ok;
}

} // namespace analyze
} // namespace strata
