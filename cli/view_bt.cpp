// view_bt.cpp - `strata view` over babeltrace2 (traces Strata did not
// write, or STRATA_READER=babeltrace2): its messages, and their fields
// printed as its text sink prints them.  Single-threaded.
#include <babeltrace2/babeltrace.h>

#include <cstring>
#include <string>
#include <vector>

#include "bt_fields.h"
#include "view_sink.h"

namespace strata {
namespace view {
namespace {

void append_field(LineBuf &out, const bt_field *field, bool is_root = false, const Namer *nm = nullptr);

// A sequence's length is its own member of the payload (CTF 1.8); it is
// shown as the length of the [ ] list, so hide the member itself.
void hide_length_members(const bt_field_class *st, std::vector<bool> &hide)
{
	const uint64_t n = bt_field_class_structure_get_member_count(st);
	for (uint64_t i = 0; i < n; i++) {
		const bt_field_class *m = bt_field_class_structure_member_borrow_field_class_const(
			bt_field_class_structure_borrow_member_by_index_const(st, i));
		if (bt_field_class_get_type(m) != BT_FIELD_CLASS_TYPE_DYNAMIC_ARRAY_WITH_LENGTH_FIELD)
			continue;
		const bt_field_path *path =
			bt_field_class_array_dynamic_with_length_field_borrow_length_field_path_const(m);
		if (!path || bt_field_path_get_root_scope(path) != BT_FIELD_PATH_SCOPE_EVENT_PAYLOAD ||
		    bt_field_path_get_item_count(path) != 1)
			continue;
		const bt_field_path_item *item = bt_field_path_borrow_item_by_index_const(path, 0);
		if (bt_field_path_item_get_type(item) != BT_FIELD_PATH_ITEM_TYPE_INDEX)
			continue;
		const uint64_t idx = bt_field_path_item_index_get_index(item);
		if (idx < n)
			hide[idx] = true;
	}
}

void append_enum_labels(LineBuf &out, const bt_field *field, bool is_signed)
{
	bt_field_class_enumeration_mapping_label_array labels = nullptr;
	uint64_t count = 0;
	const auto st = is_signed ? bt_field_enumeration_signed_get_mapping_labels(field, &labels, &count)
				  : bt_field_enumeration_unsigned_get_mapping_labels(field, &labels, &count);
	if (st != BT_FIELD_ENUMERATION_GET_MAPPING_LABELS_STATUS_OK || count == 0) {
		out += "<unknown>";
		return;
	}
	for (uint64_t i = 0; i < count; i++) {
		if (i)
			out += '|';
		out += labels[i];
	}
}

// An integer field (an enumeration's labels, then its value), named when
// `nm` is given and it shows in hex.
void append_bt_integer(LineBuf &out, const bt_field *field, bt_field_class_type type, const Namer *nm)
{
	const bt_field_class *fc = bt_field_borrow_class_const(field);
	const bool is_signed = bt_field_class_type_is(type, BT_FIELD_CLASS_TYPE_SIGNED_INTEGER);
	const bool is_enum = bt_field_class_type_is(type, BT_FIELD_CLASS_TYPE_ENUMERATION);
	if (is_enum) {
		append_enum_labels(out, field, is_signed);
		out += " (";
	}
	const auto base = bt_field_class_integer_get_preferred_display_base(fc);
	const uint64_t u = is_signed ? static_cast<uint64_t>(bt_field_integer_signed_get_value(field))
				     : bt_field_integer_unsigned_get_value(field);
	if (is_signed && (base == BT_FIELD_CLASS_INTEGER_PREFERRED_DISPLAY_BASE_DECIMAL || is_enum))
		append_i64(out, static_cast<int64_t>(u));
	else
		append_unsigned(out, u,
				is_enum ? BT_FIELD_CLASS_INTEGER_PREFERRED_DISPLAY_BASE_DECIMAL : base);
	if (nm && !is_enum && base == BT_FIELD_CLASS_INTEGER_PREFERRED_DISPLAY_BASE_HEXADECIMAL)
		out += nm->syms->beside(nm->trace, u);
	if (is_enum)
		out += ')';
}

void append_field(LineBuf &out, const bt_field *field, bool is_root, const Namer *nm)
{
	const bt_field_class *fc = bt_field_borrow_class_const(field);
	const bt_field_class_type type = bt_field_get_class_type(field);

	if (bt_field_class_type_is(type, BT_FIELD_CLASS_TYPE_INTEGER)) {
		append_bt_integer(out, field, type, nm);
	} else if (type == BT_FIELD_CLASS_TYPE_SINGLE_PRECISION_REAL) {
		append_real(out, bt_field_real_single_precision_get_value(field));
	} else if (type == BT_FIELD_CLASS_TYPE_DOUBLE_PRECISION_REAL) {
		append_real(out, bt_field_real_double_precision_get_value(field));
	} else if (type == BT_FIELD_CLASS_TYPE_STRING) {
		const char *s = bt_field_string_get_value(field);
		append_quoted(out, s ? s : "");
	} else if (type == BT_FIELD_CLASS_TYPE_BOOL) {
		out += bt_field_bool_get_value(field) ? "true" : "false";
	} else if (type == BT_FIELD_CLASS_TYPE_BIT_ARRAY) {
		append_unsigned(out, bt_field_bit_array_get_value_as_integer(field),
				BT_FIELD_CLASS_INTEGER_PREFERRED_DISPLAY_BASE_HEXADECIMAL);
	} else if (type == BT_FIELD_CLASS_TYPE_STRUCTURE) {
		const uint64_t n = bt_field_class_structure_get_member_count(fc);
		std::vector<bool> hide(n, false);
		if (is_root)
			hide_length_members(fc, hide);
		out += "{ ";
		bool first = true;
		for (uint64_t i = 0; i < n; i++) {
			const bt_field_class_structure_member *m =
				bt_field_class_structure_borrow_member_by_index_const(fc, i);
			if (hide[i])
				continue;
			if (!first)
				out += ", ";
			first = false;
			out += bt_field_class_structure_member_get_name(m);
			out += " = ";
			append_field(out, bt_field_structure_borrow_member_field_by_index_const(field, i),
				     false, is_root ? nm : nullptr);
		}
		out += n ? " }" : "}";
	} else if (bt_field_class_type_is(type, BT_FIELD_CLASS_TYPE_ARRAY)) {
		const uint64_t n = bt_field_array_get_length(field);
		out += "[ ";
		for (uint64_t i = 0; i < n; i++) {
			if (i)
				out += ", ";
			append_field(out, bt_field_array_borrow_element_field_by_index_const(field, i), false,
				     nm);
		}
		out += n ? " ]" : "]";
	} else if (bt_field_class_type_is(type, BT_FIELD_CLASS_TYPE_OPTION)) {
		const bt_field *inner = bt_field_option_borrow_field_const(field);
		if (inner)
			append_field(out, inner);
		else
			out += "none";
	} else if (bt_field_class_type_is(type, BT_FIELD_CLASS_TYPE_VARIANT)) {
		append_field(out, bt_field_variant_borrow_selected_option_field_const(field));
	} else {
		out += "<?>";
	}
}

// babeltrace2's sub-traces: named from their env on first sight.
const TraceWho &bt_trace_who(ViewSink &s, const bt_trace *trace)
{
	auto it = s.traces.find(trace);
	if (it != s.traces.end())
		return it->second;
	TraceWho w;
	std::string name = "?", pid = "?", domain;
	env_string(trace, "procname", &name);
	if (env_int(trace, "vpid", &w.vpid))
		pid = std::to_string(w.vpid);
	w.kernel = env_string(trace, "domain", &domain) && domain == "kernel";
	if (name == "?" && !domain.empty())
		name = domain;
	std::string host;
	if (s.show_host && env_string(trace, "hostname", &host)) {
		append_escaped(w.who, host.c_str());
		w.who += ':';
	}
	append_escaped(w.who, name.c_str());
	w.who += "[" + pid + "]";
	return s.traces.emplace(trace, w).first->second;
}

bool bt_time(const bt_clock_snapshot *cs, int64_t *ns)
{
	return bt_clock_snapshot_get_ns_from_origin(cs, ns) == BT_CLOCK_SNAPSHOT_GET_NS_FROM_ORIGIN_STATUS_OK;
}

Ev bt_ev(ViewSink &s, const bt_message *msg)
{
	const bt_event *e = bt_message_event_borrow_event_const(msg);
	Ev ev;
	const bt_trace *tr = bt_stream_borrow_trace_const(bt_event_borrow_stream_const(e));
	bt_trace_who(s, tr);
	ev.trace = tr;
	ev.timed = bt_message_event_borrow_stream_class_default_clock_class_const(msg) &&
		   bt_time(bt_message_event_borrow_default_clock_snapshot_const(msg), &ev.ns);
	ev.has_tid = event_tid(e, &ev.tid);
	const bt_field *ctx = bt_event_borrow_common_context_field_const(e);
	if (!integer_value(member(ctx, "cpu_id"), &ev.cpu) && !integer_value(member(ctx, "cpu"), &ev.cpu))
		ev.cpu = -1;
	const char *name = bt_event_class_get_name(bt_event_borrow_class_const(e));
	ev.name = name ? name : "";
	return ev;
}

Loss bt_loss(ViewSink &s, const bt_message *msg, bool events)
{
	Loss l;
	l.events = events;
	const bt_stream *stream = events ? bt_message_discarded_events_borrow_stream_const(msg)
					 : bt_message_discarded_packets_borrow_stream_const(msg);
	const bt_trace *tr = bt_stream_borrow_trace_const(stream);
	bt_trace_who(s, tr);
	l.trace = tr;
	l.stream = bt_stream_get_id(stream);
	const bt_stream_class *sc = bt_stream_borrow_class_const(stream);
	l.known = events ? bt_message_discarded_events_get_count(msg, &l.count) ==
				   BT_PROPERTY_AVAILABILITY_AVAILABLE
			 : bt_message_discarded_packets_get_count(msg, &l.count) ==
				   BT_PROPERTY_AVAILABILITY_AVAILABLE;
	const bool has_times = events ? bt_stream_class_discarded_events_have_default_clock_snapshots(sc)
				      : bt_stream_class_discarded_packets_have_default_clock_snapshots(sc);
	if (has_times)
		l.times =
			bt_time(events ? bt_message_discarded_events_borrow_beginning_default_clock_snapshot_const(
						 msg)
				       : bt_message_discarded_packets_borrow_beginning_default_clock_snapshot_const(
						 msg),
				&l.b) &&
			bt_time(events ? bt_message_discarded_events_borrow_end_default_clock_snapshot_const(
						 msg)
				       : bt_message_discarded_packets_borrow_end_default_clock_snapshot_const(
						 msg),
				&l.e);
	return l;
}

} // namespace

bool on_bt_message(ViewSink &s, const bt_message *msg)
{
	bool more = true;
	switch (bt_message_get_type(msg)) {
	case BT_MESSAGE_TYPE_EVENT: {
		const Ev ev = bt_ev(s, msg);
		const bt_field *payload =
			bt_event_borrow_payload_field_const(bt_message_event_borrow_event_const(msg));
		if (ev.name[0] == 'p' && std::strcmp(ev.name, "pthread:mapping") == 0) // shown or not
			s.syms.add(ev.trace, as_u64(member(payload, "start")), as_u64(member(payload, "end")),
				   as_u64(member(payload, "offset")),
				   as_str(member(payload, "path")).c_str());
		switch (filter_event(s, ev)) {
		case Verdict::Show: {
			format_prefix(s, ev);
			if (payload &&
			    bt_field_class_structure_get_member_count(bt_field_borrow_class_const(payload))) {
				s.line += ": ";
				const Namer nm{&s.syms, ev.trace};
				append_field(s.line, payload, true, s.syms.any() ? &nm : nullptr);
			}
			s.line += '\n';
			more = ++s.events < s.limit;
			break;
		}
		case Verdict::Skip:
			break;
		case Verdict::Stop:
			more = false;
			break;
		}
		break;
	}
	case BT_MESSAGE_TYPE_DISCARDED_EVENTS:
	case BT_MESSAGE_TYPE_DISCARDED_PACKETS: {
		const Loss l = bt_loss(s, msg, bt_message_get_type(msg) == BT_MESSAGE_TYPE_DISCARDED_EVENTS);
		if (show_discarded(s, l))
			format_discarded(s, l);
		break;
	}
	default:
		break;
	}
	return after_message(s, more);
}

} // namespace view
} // namespace strata
