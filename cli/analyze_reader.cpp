// analyze_reader.cpp - read the `pthread` provider's events of a trace
// directory with the libbabeltrace2 C API: one source.ctf.fs per directory
// holding `metadata`, all into a utils.muxer, drained by a simple sink.
#include "analyze_reader.h"

#include <babeltrace2/babeltrace.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <system_error>

namespace strata {
namespace analyze {
namespace {

namespace fs = std::filesystem;

void find_traces(const fs::path &dir, std::vector<std::string> *out, int depth)
{
	std::error_code ec;
	if (depth > 16)
		return;
	if (fs::is_regular_file(dir / "metadata", ec)) {
		out->push_back(dir.string());
		return; // a trace's subdirectories are not traces (notes/ctf.md)
	}
	std::vector<fs::path> subs;
	for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
		if (it->is_directory(ec) && !it->is_symlink(ec))
			subs.push_back(it->path());
	std::sort(subs.begin(), subs.end());
	for (const fs::path &p : subs)
		find_traces(p, out, depth + 1);
}

struct Sink {
	Input *in = nullptr;
	std::map<const bt_trace *, uint32_t> procs;
	bt_message_iterator *it = nullptr;
	std::string error;
};

const bt_field *member(const bt_field *st, const char *name)
{
	if (!st || bt_field_get_class_type(st) != BT_FIELD_CLASS_TYPE_STRUCTURE)
		return nullptr;
	return bt_field_structure_borrow_member_field_by_name_const(st, name);
}

uint64_t as_u64(const bt_field *f)
{
	if (!f)
		return 0;
	bt_field_class_type t = bt_field_get_class_type(f);
	if (bt_field_class_type_is(t, BT_FIELD_CLASS_TYPE_UNSIGNED_INTEGER))
		return bt_field_integer_unsigned_get_value(f);
	if (bt_field_class_type_is(t, BT_FIELD_CLASS_TYPE_SIGNED_INTEGER))
		return static_cast<uint64_t>(bt_field_integer_signed_get_value(f));
	return 0;
}

int64_t as_i64(const bt_field *f) { return static_cast<int64_t>(as_u64(f)); }

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
	if (!op_from_name(name, &e.op)) {
		s->in->other_events++;
		return;
	}
	e.ts = ts;
	e.proc = proc;
	e.tid = as_i64(member(bt_event_borrow_common_context_field_const(ev), "vtid"));
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

bt_graph_simple_sink_component_initialize_func_status sink_init(bt_message_iterator *it, void *data)
{
	static_cast<Sink *>(data)->it = it;
	return BT_GRAPH_SIMPLE_SINK_COMPONENT_INITIALIZE_FUNC_STATUS_OK;
}

bt_graph_simple_sink_component_consume_func_status sink_consume(bt_message_iterator *it, void *data)
{
	Sink *s = static_cast<Sink *>(data);
	bt_message_array_const msgs;
	uint64_t n = 0;
	switch (bt_message_iterator_next(it, &msgs, &n)) {
	case BT_MESSAGE_ITERATOR_NEXT_STATUS_OK:
		break;
	case BT_MESSAGE_ITERATOR_NEXT_STATUS_END:
		return BT_GRAPH_SIMPLE_SINK_COMPONENT_CONSUME_FUNC_STATUS_END;
	case BT_MESSAGE_ITERATOR_NEXT_STATUS_AGAIN:
		return BT_GRAPH_SIMPLE_SINK_COMPONENT_CONSUME_FUNC_STATUS_AGAIN;
	case BT_MESSAGE_ITERATOR_NEXT_STATUS_MEMORY_ERROR:
		return BT_GRAPH_SIMPLE_SINK_COMPONENT_CONSUME_FUNC_STATUS_MEMORY_ERROR;
	default:
		s->error = "reading the trace failed (babeltrace2 message iterator error)";
		return BT_GRAPH_SIMPLE_SINK_COMPONENT_CONSUME_FUNC_STATUS_ERROR;
	}
	for (uint64_t i = 0; i < n; i++) {
		const bt_message *m = msgs[i];
		switch (bt_message_get_type(m)) {
		case BT_MESSAGE_TYPE_EVENT:
			on_event(s, m);
			break;
		case BT_MESSAGE_TYPE_DISCARDED_EVENTS: {
			uint64_t c = 0;
			if (bt_message_discarded_events_get_count(m, &c) == BT_PROPERTY_AVAILABILITY_AVAILABLE)
				s->in->discarded += c;
			break;
		}
		default:
			break;
		}
		bt_message_put_ref(m);
	}
	return BT_GRAPH_SIMPLE_SINK_COMPONENT_CONSUME_FUNC_STATUS_OK;
}

} // namespace

bool read_trace(const std::string &dir, Input *in, std::string *err)
{
	std::vector<std::string> traces;
	std::error_code ec;
	if (!fs::is_directory(dir, ec)) {
		*err = dir + ": not a directory";
		return false;
	}
	find_traces(dir, &traces, 0);
	if (traces.empty()) {
		*err = dir + ": no CTF trace (no directory holds a 'metadata' file)";
		return false;
	}
	const bt_plugin *ctf = nullptr, *utils = nullptr;
	if (bt_plugin_find("ctf", BT_TRUE, BT_TRUE, BT_TRUE, BT_TRUE, BT_TRUE, &ctf) != BT_PLUGIN_FIND_STATUS_OK ||
	    bt_plugin_find("utils", BT_TRUE, BT_TRUE, BT_TRUE, BT_TRUE, BT_TRUE, &utils) != BT_PLUGIN_FIND_STATUS_OK) {
		*err = "babeltrace2 plugins 'ctf' and 'utils' not found";
		bt_plugin_put_ref(ctf);
		return false;
	}
	bool ok = false;
	Sink sink;
	sink.in = in;
	bt_graph *g = bt_graph_create(0);
	const bt_component_class_source *fs_cls = bt_plugin_borrow_source_component_class_by_name_const(ctf, "fs");
	const bt_component_class_filter *mux_cls = bt_plugin_borrow_filter_component_class_by_name_const(utils, "muxer");
	const bt_component_filter *mux = nullptr;
	const bt_component_sink *snk = nullptr;
	do {
		if (!g || !fs_cls || !mux_cls) {
			*err = "cannot set up the babeltrace2 graph";
			break;
		}
		if (bt_graph_add_filter_component(g, mux_cls, "muxer", nullptr, BT_LOGGING_LEVEL_WARNING, &mux) !=
		    BT_GRAPH_ADD_COMPONENT_STATUS_OK) {
			*err = "cannot create the muxer";
			break;
		}
		bool failed = false;
		for (size_t i = 0; i < traces.size() && !failed; i++) {
			bt_value *params = bt_value_map_create();
			bt_value *inputs = nullptr;
			bt_value_map_insert_empty_array_entry(params, "inputs", &inputs);
			bt_value_array_append_string_element(inputs, traces[i].c_str());
			const bt_component_source *src = nullptr;
			std::string cname = "src" + std::to_string(i);
			if (bt_graph_add_source_component(g, fs_cls, cname.c_str(), params, BT_LOGGING_LEVEL_WARNING,
							  &src) != BT_GRAPH_ADD_COMPONENT_STATUS_OK) {
				*err = traces[i] + ": babeltrace2 cannot open this trace";
				failed = true;
			}
			bt_value_put_ref(params);
			for (uint64_t p = 0; !failed && p < bt_component_source_get_output_port_count(src); p++) {
				const bt_port_output *out = bt_component_source_borrow_output_port_by_index_const(src, p);
				uint64_t nin = bt_component_filter_get_input_port_count(mux);
				const bt_port_input *inp = bt_component_filter_borrow_input_port_by_index_const(mux, nin - 1);
				if (bt_graph_connect_ports(g, out, inp, nullptr) != BT_GRAPH_CONNECT_PORTS_STATUS_OK) {
					*err = "cannot connect " + traces[i] + " to the muxer";
					failed = true;
				}
			}
		}
		if (failed)
			break;
		if (bt_graph_add_simple_sink_component(g, "analyze", sink_init, sink_consume, nullptr, &sink, &snk) !=
		    BT_GRAPH_ADD_COMPONENT_STATUS_OK) {
			*err = "cannot create the sink";
			break;
		}
		if (bt_graph_connect_ports(g, bt_component_filter_borrow_output_port_by_index_const(mux, 0),
					   bt_component_sink_borrow_input_port_by_index_const(snk, 0),
					   nullptr) != BT_GRAPH_CONNECT_PORTS_STATUS_OK) {
			*err = "cannot connect the sink";
			break;
		}
		bt_graph_run_status st;
		do {
			st = bt_graph_run(g);
		} while (st == BT_GRAPH_RUN_STATUS_AGAIN);
		if (st != BT_GRAPH_RUN_STATUS_OK) {
			*err = sink.error.empty() ? "babeltrace2 failed to read the trace" : sink.error;
			break;
		}
		ok = true;
	} while (false);
	bt_graph_put_ref(g);
	bt_plugin_put_ref(ctf);
	bt_plugin_put_ref(utils);
	return ok;
}

} // namespace analyze
} // namespace strata
