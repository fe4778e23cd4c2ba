// view_graph.cpp - see view_graph.h.
#include "view_graph.h"

#include "trace_reader.h"

#include <algorithm>
#include <set>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>

namespace strata {
namespace {

namespace fs = std::filesystem;

// The library's error causes, one per line (actor-less causes of the
// library itself repeat the component's in internal terms: skipped).
std::string causes_of(const bt_error *err)
{
	std::string out;
	const uint64_t n = bt_error_get_cause_count(err);
	for (uint64_t i = 0; i < n; i++) {
		const bt_error_cause *c = bt_error_borrow_cause_by_index(err, i);
		if (bt_error_cause_get_actor_type(c) == BT_ERROR_CAUSE_ACTOR_TYPE_UNKNOWN)
			continue;
		out += "\n  ";
		out += bt_error_cause_get_module_name(c);
		out += ": ";
		out += bt_error_cause_get_message(c);
	}
	return out;
}

// `what`, then the causes of the thread's error (taken and released).
std::string failure(const std::string &what)
{
	std::string out = what;
	if (const bt_error *err = bt_current_thread_take_error()) {
		out += causes_of(err);
		bt_error_release(err);
	}
	return out;
}

struct SinkState {
	const TraceMessageFn *fn = nullptr;
	bt_message_iterator *iter = nullptr;
	std::string *warnings = nullptr;
};

// See read_ctf_traces() in view_graph.h: take an error left behind by a
// call that reported success, and keep its causes as a warning.
void take_stray_error(SinkState &s)
{
	const bt_error *err = bt_current_thread_take_error();
	if (!err)
		return;
	if (s.warnings && s.warnings->empty()) // the first one says enough
		*s.warnings = "babeltrace2 reported a problem in the trace:" + causes_of(err) + "\n";
	bt_error_release(err);
}

bt_graph_simple_sink_component_initialize_func_status sink_init(bt_message_iterator *iter, void *data)
{
	static_cast<SinkState *>(data)->iter = iter;
	return BT_GRAPH_SIMPLE_SINK_COMPONENT_INITIALIZE_FUNC_STATUS_OK;
}

bt_graph_simple_sink_component_consume_func_status sink_consume(bt_message_iterator *, void *data)
{
	SinkState &s = *static_cast<SinkState *>(data);
	bt_message_array_const msgs;
	uint64_t count = 0;

	const bt_message_iterator_next_status next = bt_message_iterator_next(s.iter, &msgs, &count);
	if (next == BT_MESSAGE_ITERATOR_NEXT_STATUS_OK || next == BT_MESSAGE_ITERATOR_NEXT_STATUS_END)
		take_stray_error(s);
	switch (next) {
	case BT_MESSAGE_ITERATOR_NEXT_STATUS_OK:
		break;
	case BT_MESSAGE_ITERATOR_NEXT_STATUS_END:
		return BT_GRAPH_SIMPLE_SINK_COMPONENT_CONSUME_FUNC_STATUS_END;
	case BT_MESSAGE_ITERATOR_NEXT_STATUS_AGAIN:
		return BT_GRAPH_SIMPLE_SINK_COMPONENT_CONSUME_FUNC_STATUS_AGAIN;
	case BT_MESSAGE_ITERATOR_NEXT_STATUS_MEMORY_ERROR:
		return BT_GRAPH_SIMPLE_SINK_COMPONENT_CONSUME_FUNC_STATUS_MEMORY_ERROR;
	default:
		return BT_GRAPH_SIMPLE_SINK_COMPONENT_CONSUME_FUNC_STATUS_ERROR;
	}

	bool more = true;
	for (uint64_t i = 0; i < count; i++) {
		if (more)
			more = (*s.fn)(msgs[i]);
		bt_message_put_ref(msgs[i]);
	}
	return more ? BT_GRAPH_SIMPLE_SINK_COMPONENT_CONSUME_FUNC_STATUS_OK
		    : BT_GRAPH_SIMPLE_SINK_COMPONENT_CONSUME_FUNC_STATUS_END;
}

// Owns the graph and plugins; releases them on every path.
struct Graph {
	bt_graph *graph = nullptr;
	const bt_plugin *ctf = nullptr;
	const bt_plugin *utils = nullptr;
	~Graph()
	{
		bt_graph_put_ref(graph);
		bt_plugin_put_ref(ctf);
		bt_plugin_put_ref(utils);
	}
};

// One source.ctf.fs for `dir`, every output port connected to the muxer.
bool add_trace(bt_graph *graph, const bt_component_class_source *src_cls, const bt_component_filter *mux,
	       const std::string &dir, size_t index, std::string *why)
{
	bt_value *params = bt_value_map_create();
	bt_value *inputs = nullptr;
	bool ok = params &&
		  bt_value_map_insert_empty_array_entry(params, "inputs", &inputs) ==
			  BT_VALUE_MAP_INSERT_ENTRY_STATUS_OK &&
		  bt_value_array_append_string_element(inputs, dir.c_str()) ==
			  BT_VALUE_ARRAY_APPEND_ELEMENT_STATUS_OK;
	const bt_component_source *src = nullptr;
	const std::string name = "source-" + std::to_string(index);
	ok = ok && bt_graph_add_source_component(graph, src_cls, name.c_str(), params, BT_LOGGING_LEVEL_NONE,
						 &src) == BT_GRAPH_ADD_COMPONENT_STATUS_OK;
	bt_value_put_ref(params);
	if (!ok) {
		*why = failure("cannot read the trace in '" + dir + "'");
		return false;
	}
	const uint64_t n_out = bt_component_source_get_output_port_count(src);
	for (uint64_t p = 0; p < n_out; p++) {
		// The muxer always keeps one free input port, the last one.
		const uint64_t n_in = bt_component_filter_get_input_port_count(mux);
		const bt_port_input *in =
			n_in ? bt_component_filter_borrow_input_port_by_index_const(mux, n_in - 1) : nullptr;
		if (!in || bt_graph_connect_ports(
				   graph, bt_component_source_borrow_output_port_by_index_const(src, p), in,
				   nullptr) != BT_GRAPH_CONNECT_PORTS_STATUS_OK) {
			*why = failure("cannot connect a stream of '" + dir + "' to the muxer");
			return false;
		}
	}
	return true;
}

} // namespace

bool find_ctf_traces(const std::string &root, std::vector<std::string> *out, std::string *why)
{
	return find_trace_dirs(root, out, why);
}

bool use_native_reader(const std::vector<std::string> &dirs)
{
	const char *r = getenv("STRATA_READER");
	if (r && !strcmp(r, "babeltrace2"))
		return false;
	return strata_wrote(dirs);
}

namespace {
// The head of a sub-trace's metadata (its env block comes before its event
// classes), and the string value of one env entry in it.
std::string metadata_head(const std::string &dir)
{
	std::ifstream f(dir + "/metadata", std::ios::binary);
	std::string head(65536, '\0');
	f.read(&head[0], (std::streamsize)head.size());
	head.resize((size_t)f.gcount());
	return head;
}
bool env_entry(const std::string &head, const std::string &key, std::string *value)
{
	const std::string pat = "\n\t" + key + " = \"";
	const size_t at = head.find(pat);
	if (at == std::string::npos)
		return false;
	const size_t b = at + pat.size(), e = head.find("\";\n", b);
	if (e == std::string::npos)
		return false;
	*value = head.substr(b, e - b);
	return true;
}
} // namespace

size_t machines(const std::vector<std::string> &dirs)
{
	std::set<std::string> hosts;
	for (const std::string &d : dirs) {
		std::string host;
		if (env_entry(metadata_head(d), "hostname", &host))
			hosts.insert(host);
	}
	return hosts.size();
}

std::string reference_machine(const std::vector<std::string> &dirs)
{
	std::string first, host, peer;
	bool have_first = false;
	for (const std::string &d : dirs) {
		const std::string head = metadata_head(d);
		if (!env_entry(head, "hostname", &host))
			continue;
		if (!env_entry(head, "sync_peer", &peer))
			return host;
		if (!have_first) {
			first = host;
			have_first = true;
		}
	}
	return first;
}

bool is_kernel_trace(const std::string &dir)
{
	std::ifstream f(dir + "/metadata", std::ios::binary);
	const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
	return text.find("domain = \"kernel\"") != std::string::npos;
}

bool read_ctf_traces(const std::string &root, const TraceMessageFn &fn, std::string *why,
		     std::string *warnings)
{
	std::vector<std::string> traces;
	if (!find_ctf_traces(root, &traces, why))
		return false;
	return read_ctf_trace_dirs(traces, fn, why, warnings);
}

bool read_ctf_trace_dirs(const std::vector<std::string> &traces, const TraceMessageFn &fn, std::string *why,
			 std::string *warnings)
{
	Graph g;
	if (bt_plugin_find("ctf", BT_TRUE, BT_TRUE, BT_TRUE, BT_TRUE, BT_FALSE, &g.ctf) !=
		    BT_PLUGIN_FIND_STATUS_OK ||
	    bt_plugin_find("utils", BT_TRUE, BT_TRUE, BT_TRUE, BT_TRUE, BT_FALSE, &g.utils) !=
		    BT_PLUGIN_FIND_STATUS_OK) {
		*why = failure(
			"cannot load the babeltrace2 'ctf' and 'utils' plugins (is babeltrace2 installed?)");
		return false;
	}
	const bt_component_class_source *src_cls =
		bt_plugin_borrow_source_component_class_by_name_const(g.ctf, "fs");
	const bt_component_class_filter *mux_cls =
		bt_plugin_borrow_filter_component_class_by_name_const(g.utils, "muxer");
	if (!src_cls || !mux_cls) {
		*why = "babeltrace2 lacks source.ctf.fs or filter.utils.muxer";
		return false;
	}
	g.graph = bt_graph_create(0);
	const bt_component_filter *mux = nullptr;
	if (!g.graph ||
	    bt_graph_add_filter_component(g.graph, mux_cls, "muxer", nullptr, BT_LOGGING_LEVEL_NONE, &mux) !=
		    BT_GRAPH_ADD_COMPONENT_STATUS_OK) {
		*why = failure("cannot create the babeltrace2 graph");
		return false;
	}
	for (size_t i = 0; i < traces.size(); i++)
		if (!add_trace(g.graph, src_cls, mux, traces[i], i, why))
			return false;

	SinkState state;
	state.fn = &fn;
	state.warnings = warnings;
	const bt_component_sink *sink = nullptr;
	if (bt_graph_add_simple_sink_component(g.graph, "reader", sink_init, sink_consume, nullptr, &state,
					       &sink) != BT_GRAPH_ADD_COMPONENT_STATUS_OK ||
	    bt_graph_connect_ports(g.graph, bt_component_filter_borrow_output_port_by_name_const(mux, "out"),
				   bt_component_sink_borrow_input_port_by_name_const(sink, "in"),
				   nullptr) != BT_GRAPH_CONNECT_PORTS_STATUS_OK) {
		*why = failure("cannot set up the reading sink");
		return false;
	}
	for (;;) {
		const bt_graph_run_status st = bt_graph_run(g.graph);
		if (st == BT_GRAPH_RUN_STATUS_AGAIN)
			continue;
		if (st != BT_GRAPH_RUN_STATUS_OK) {
			*why = failure("cannot read the trace");
			return false;
		}
		return true;
	}
}

} // namespace strata
