// analyze_reader.cpp - decode the `pthread` provider's events of a trace
// directory.  The babeltrace2 graph (every sub-trace, merged by time) is
// view_graph's; this file only turns messages into the analysis' input.
#include "analyze_reader.h"

#include <babeltrace2/babeltrace.h>

#include <map>
#include <unordered_map>

#include "bt_fields.h"
#include "view_graph.h"

namespace strata {
namespace analyze {
namespace {

// What an event class is to the analysis, decided once per class.
struct ClassOf : MemberCache {
	enum { Other, Mapping, Lock } what = Other;
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
	if (cs && bt_clock_snapshot_get_ns_from_origin(cs, &ts) != BT_CLOCK_SNAPSHOT_GET_NS_FROM_ORIGIN_STATUS_OK)
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
	Event e;
	e.op = c.op;
	e.ts = ts;
	e.proc = proc;
	int64_t tid = 0;
	e.tid = event_tid(ev, &tid) ? tid : 0;
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
	if (s->progress)
		(*s->progress)(e.ts);
	if (s->on)
		(*s->on)(e);
	else
		s->in->events.push_back(std::move(e));
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
	return read_ctf_traces(
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
}

} // namespace analyze
} // namespace strata
