// analyze_reader.cpp - decode the `pthread` provider's events of a trace
// directory.  The babeltrace2 graph (every sub-trace, merged by time) is
// view_graph's; this file only turns messages into the analysis' input.
#include "analyze_reader.h"

#include <babeltrace2/babeltrace.h>

#include <algorithm>
#include <map>
#include <vector>

#include "bt_fields.h"
#include "view_graph.h"

namespace strata {
namespace analyze {
namespace {

struct Sink {
	Input *in = nullptr;
	std::map<const bt_trace *, uint32_t> procs;
	// Compact records (docs/pthread.md): site id -> caller per process, and
	// the events whose caller is still a site id (resolved after reading:
	// a site event may follow its first use by another thread).
	std::map<std::pair<uint32_t, uint64_t>, uint64_t> sites;
	std::vector<std::pair<size_t, uint64_t>> by_site;
	bool reorder = false;
};

// A compact record: mutex_held -> an uncontended mutex_lock hold_ns before
// and a mutex_unlock now; mutex_acquired -> the mutex_lock age_ns before.
// The acquisitions go back in time: read_trace sorts the events again.
bool on_compact(Sink *s, const std::string &name, const bt_field *pl, const Event &base)
{
	if (name == "site") {
		s->sites[{base.proc, as_u64(member(pl, "id"))}] = as_u64(member(pl, "caller"));
		return true;
	}
	bool held = name == "mutex_held";
	if (!held && name != "mutex_acquired")
		return false;
	uint64_t back = as_u64(member(pl, held ? "hold_ns" : "age_ns"));
	Event acq = base;
	acq.op = Op::MutexLock;
	acq.lock = as_u64(member(pl, "lock"));
	acq.ts = base.ts - static_cast<int64_t>(back);
	s->by_site.emplace_back(s->in->events.size(), as_u64(member(pl, "site")));
	s->in->events.push_back(acq);
	if (held) {
		Event un = acq;
		un.op = Op::MutexUnlock;
		un.ts = base.ts;
		s->by_site.emplace_back(s->in->events.size(), as_u64(member(pl, "site")));
		s->in->events.push_back(un);
	}
	s->reorder = true;
	return true;
}

uint32_t proc_of(Sink *s, const bt_event *ev)
{
	const bt_trace *tr = bt_stream_borrow_trace_const(bt_event_borrow_stream_const(ev));
	auto it = s->procs.find(tr);
	if (it != s->procs.end())
		return it->second;
	Process p;
	const bt_value *v = bt_trace_borrow_environment_entry_value_by_name_const(tr, "procname");
	if (v && bt_value_is_string(v))
		p.name = bt_value_string_get(v);
	v = bt_trace_borrow_environment_entry_value_by_name_const(tr, "vpid");
	if (v && bt_value_is_signed_integer(v))
		p.pid = bt_value_integer_signed_get(v);
	else if (v && bt_value_is_unsigned_integer(v))
		p.pid = static_cast<int64_t>(bt_value_integer_unsigned_get(v));
	const char *tn = bt_trace_get_name(tr);
	if (tn)
		p.trace_dir = tn;
	uint32_t idx = static_cast<uint32_t>(s->in->procs.size());
	s->in->procs.push_back(p);
	s->procs[tr] = idx;
	return idx;
}

void on_event(Sink *s, const bt_message *msg)
{
	const bt_event *ev = bt_message_event_borrow_event_const(msg);
	const char *full = bt_event_class_get_name(bt_event_borrow_class_const(ev));
	std::string name = full ? full : "";
	const std::string prefix = "pthread:";
	if (name.compare(0, prefix.size(), prefix) != 0) {
		s->in->other_events++;
		return;
	}
	name = name.substr(prefix.size());
	const bt_field *pl = bt_event_borrow_payload_field_const(ev);
	int64_t ts = 0;
	const bt_clock_snapshot *cs = bt_message_event_borrow_default_clock_snapshot_const(msg);
	if (cs && bt_clock_snapshot_get_ns_from_origin(cs, &ts) != BT_CLOCK_SNAPSHOT_GET_NS_FROM_ORIGIN_STATUS_OK)
		ts = static_cast<int64_t>(bt_clock_snapshot_get_value(cs));
	uint32_t proc = proc_of(s, ev);
	if (name == "mapping") {
		Mapping m;
		m.proc = proc;
		m.start = as_u64(member(pl, "start"));
		m.end = as_u64(member(pl, "end"));
		m.offset = as_u64(member(pl, "offset"));
		const bt_field *p = member(pl, "path");
		if (p && bt_field_get_class_type(p) == BT_FIELD_CLASS_TYPE_STRING)
			m.path = bt_field_string_get_value(p);
		s->in->maps.push_back(std::move(m));
		return;
	}
	Event e;
	e.ts = ts;
	e.proc = proc;
	int64_t tid = 0;
	e.tid = event_tid(ev, &tid) ? tid : 0;
	if (on_compact(s, name, pl, e))
		return;
	if (!op_from_name(name, &e.op)) {
		s->in->other_events++;
		return;
	}
	e.lock = as_u64(member(pl, "lock"));
	e.cond = as_u64(member(pl, "cond"));
	e.ret = static_cast<int32_t>(as_i64(member(pl, "ret")));
	e.contended = as_u64(member(pl, "contended")) != 0;
	e.wait_ns = as_u64(member(pl, "wait_ns"));
	e.caller = as_u64(member(pl, "caller"));
	const bt_field *st = member(pl, "stack");
	if (st && bt_field_class_type_is(bt_field_get_class_type(st), BT_FIELD_CLASS_TYPE_ARRAY)) {
		uint64_t n = bt_field_array_get_length(st);
		for (uint64_t i = 0; i < n && i < 256; i++)
			e.stack.push_back(as_u64(bt_field_array_borrow_element_field_by_index_const(st, i)));
	}
	s->in->events.push_back(std::move(e));
}

} // namespace

bool read_trace(const std::string &dir, Input *in, std::string *err)
{
	Sink sink;
	sink.in = in;
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
	if (sink.reorder)
		std::stable_sort(in->events.begin(), in->events.end(),
				 [](const Event &a, const Event &b) { return a.ts < b.ts; });
	return ok;
}

} // namespace analyze
} // namespace strata
