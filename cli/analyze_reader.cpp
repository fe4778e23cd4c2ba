// analyze_reader.cpp - decode the `pthread` provider's events of a trace
// directory.  The babeltrace2 graph (every sub-trace, merged by time) is
// view_graph's; this file only turns messages into the analysis' input.
#include "analyze_reader.h"

#include <babeltrace2/babeltrace.h>

#include <algorithm>
#include <map>
#include <unordered_map>
#include <vector>

#include "bt_fields.h"
#include "view_graph.h"

namespace strata {
namespace analyze {
namespace {

// What an event class is to the analysis, decided once per class.
struct ClassOf : MemberCache {
	// Held and Acquired are the preload's compact records, Site its
	// interned callers (docs/pthread.md).
	enum { Other, Mapping, Lock, Site, Held, Acquired, Counts, CountsDone } what = Other;
	Op op = Op::MutexLock;
};

struct Sink {
	Input *in = nullptr;
	std::unordered_map<const bt_event_class *, ClassOf> classes;
	const bt_trace *last_trace = nullptr;
	uint32_t last_proc = 0;
	const std::function<void(const Event &)> *on = nullptr; // streaming: each event, none kept
	const std::function<void(int64_t)> *progress = nullptr;
	std::map<const bt_trace *, uint32_t> procs;
	// Compact records: site id -> caller per process; kept events whose
	// caller is still a site id (resolved after reading: a site event may
	// follow its first use by another thread); whether kept events must be
	// sorted again (a compact record's acquisition goes back in time).
	std::map<std::pair<uint32_t, uint64_t>, uint64_t> sites;
	std::vector<std::pair<size_t, uint64_t>> by_site;
	bool reorder = false;
};

uint32_t proc_of(Sink *s, const bt_event *ev)
{
	const bt_trace *tr = bt_stream_borrow_trace_const(bt_event_borrow_stream_const(ev));
	if (tr == s->last_trace)
		return s->last_proc;
	auto it = s->procs.find(tr);
	if (it != s->procs.end()) {
		s->last_trace = tr;
		return s->last_proc = it->second;
	}
	Process p;
	env_string(tr, "procname", &p.name);
	env_int(tr, "vpid", &p.pid);
	const char *tn = bt_trace_get_name(tr);
	if (tn)
		p.trace_dir = tn;
	uint32_t idx = static_cast<uint32_t>(s->in->procs.size());
	s->in->procs.push_back(p);
	s->procs[tr] = idx;
	s->last_trace = tr;
	return s->last_proc = idx;
}

// An event to the model (streaming) or kept.  With a site id, its caller
// is looked up now; a kept event whose site is not known yet is resolved
// after reading, a streamed one keeps caller 0.
void deliver(Sink *s, Event &&e, const uint64_t *site)
{
	if (site) {
		auto it = s->sites.find({e.proc, *site});
		if (it != s->sites.end())
			e.caller = it->second;
		else if (!s->on)
			s->by_site.emplace_back(s->in->events.size(), *site);
	}
	if (s->progress)
		(*s->progress)(e.ts);
	if (s->on)
		(*s->on)(e);
	else
		s->in->events.push_back(std::move(e));
}

// A compact record (docs/pthread.md): mutex_held is an uncontended
// mutex_lock hold_ns before and a mutex_unlock now; mutex_acquired is the
// mutex_lock age_ns before; mutex_tryheld and mutex_tryacquired the same
// with a successful mutex_trylock (the class's op).  Streamed, the acquisition goes to the model
// out of time order only against other locks' events: none of this lock's
// can fall inside an uncontended hold's acquisition and its record.
void on_compact(Sink *s, const ClassOf &c, const bt_field *pl, Event &&base)
{
	const bool held = c.what == ClassOf::Held;
	const uint64_t back = c.u64(pl, held ? "hold_ns" : "age_ns");
	const uint64_t site = c.u64(pl, "site");
	const int64_t now = base.ts;
	base.op = c.op;
	base.lock = c.u64(pl, "lock");
	base.ts = now - static_cast<int64_t>(back);
	Event un;
	if (held) {
		un = base;
		un.op = Op::MutexUnlock;
		un.ts = now;
	}
	deliver(s, std::move(base), &site);
	if (held)
		deliver(s, std::move(un), &site);
	s->reorder = true;
}

// Counting mode (docs/pthread.md): mutex_counts is `count` uncontended
// pairs of the lock taken at the site, mutex_counts_done a process's final
// flush.
void on_counts(Sink *s, const ClassOf &c, const bt_field *pl, Event &&e)
{
	if (c.what == ClassOf::CountsDone) {
		e.op = Op::CountsDone;
		deliver(s, std::move(e), nullptr);
		return;
	}
	const uint64_t site = c.u64(pl, "site");
	e.op = Op::MutexCounts;
	e.lock = c.u64(pl, "lock");
	e.tried = c.u64(pl, "try_") != 0;
	e.count = c.u64(pl, "count");
	e.timed = c.u64(pl, "timed");
	e.waited_untimed = c.u64(pl, "waited_untimed");
	e.hold_sum = c.u64(pl, "hold_sum_ns");
	e.hold_max = c.u64(pl, "hold_max_ns");
	deliver(s, std::move(e), &site);
}

void on_event(Sink *s, const bt_message *msg)
{
	const bt_event *ev = bt_message_event_borrow_event_const(msg);
	const bt_event_class *ecl = bt_event_borrow_class_const(ev);
	auto cit = s->classes.find(ecl);
	if (cit == s->classes.end()) {
		ClassOf c;
		const char *full = bt_event_class_get_name(ecl);
		const std::string name = full ? full : "";
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
		cit = s->classes.emplace(ecl, c).first;
	}
	const ClassOf &c = cit->second;
	if (c.what == ClassOf::Other) {
		s->in->other_events++;
		return;
	}
	const bt_field *pl = bt_event_borrow_payload_field_const(ev);
	int64_t ts = 0;
	const bt_clock_snapshot *cs = bt_message_event_borrow_default_clock_snapshot_const(msg);
	if (cs &&
	    bt_clock_snapshot_get_ns_from_origin(cs, &ts) != BT_CLOCK_SNAPSHOT_GET_NS_FROM_ORIGIN_STATUS_OK)
		ts = static_cast<int64_t>(bt_clock_snapshot_get_value(cs));
	uint32_t proc = proc_of(s, ev);
	if (c.what == ClassOf::Mapping) {
		Mapping m;
		m.proc = proc;
		m.start = c.u64(pl, "start");
		m.end = c.u64(pl, "end");
		m.offset = c.u64(pl, "offset");
		m.path = c.str(pl, "path");
		s->in->maps.push_back(std::move(m));
		return;
	}
	if (c.what == ClassOf::Site) {
		s->sites[{proc, c.u64(pl, "id")}] = c.u64(pl, "caller");
		return;
	}
	Event e;
	e.op = c.op;
	e.ts = ts;
	e.proc = proc;
	int64_t tid = 0;
	e.tid = event_tid(ev, &tid) ? tid : 0;
	if (c.what == ClassOf::Held || c.what == ClassOf::Acquired) {
		on_compact(s, c, pl, std::move(e));
		return;
	}
	if (c.what == ClassOf::Counts || c.what == ClassOf::CountsDone) {
		on_counts(s, c, pl, std::move(e));
		return;
	}
	e.lock = c.u64(pl, "lock");
	e.cond = c.u64(pl, "cond");
	e.ret = static_cast<int32_t>(c.i64(pl, "ret"));
	e.contended = c.u64(pl, "contended") != 0;
	e.wait_ns = c.u64(pl, "wait_ns");
	e.caller = c.u64(pl, "caller");
	const bt_field *st = c.field(pl, "stack");
	if (st && bt_field_class_type_is(bt_field_get_class_type(st), BT_FIELD_CLASS_TYPE_ARRAY)) {
		uint64_t n = bt_field_array_get_length(st);
		for (uint64_t i = 0; i < n && i < 256; i++)
			e.stack.push_back(as_u64(bt_field_array_borrow_element_field_by_index_const(st, i)));
	}
	deliver(s, std::move(e), nullptr);
}

} // namespace

bool read_trace(const std::string &dir, Input *in, std::string *err)
{
	return read_trace_feed(dir, in, nullptr, nullptr, err);
}

bool read_trace_feed(const std::string &dir, Input *in, const std::function<void(const Event &)> *on,
		     const std::function<void(int64_t)> *progress, std::string *err)
{
	Sink sink;
	sink.in = in;
	sink.on = on;
	sink.progress = progress;
	std::string warnings;
	bool ok = read_ctf_traces(
		dir,
		[&sink](const bt_message *m) {
			switch (bt_message_get_type(m)) {
			case BT_MESSAGE_TYPE_EVENT:
				on_event(&sink, m);
				break;
			case BT_MESSAGE_TYPE_DISCARDED_EVENTS: {
				uint64_t c = 0;
				if (bt_message_discarded_events_get_count(m, &c) ==
				    BT_PROPERTY_AVAILABILITY_AVAILABLE)
					sink.in->discarded += c;
				break;
			}
			default:
				break;
			}
			return true;
		},
		err, &warnings);
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
