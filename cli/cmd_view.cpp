// cmd_view.cpp - `strata view [DIR]`: pretty-print a trace, one line per
// event.  view_graph.cpp reads the traces through libbabeltrace2 and hands
// the messages, merged by time, to on_message() here.  Single-threaded.
#include <babeltrace2/babeltrace.h>

#include <fnmatch.h>
#include <sys/stat.h>
#include <time.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "bt_fields.h"
#include "commands.h"
#include "view_graph.h"

namespace strata {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

// ---- formatting helpers --------------------------------------------------

void append_time(std::string &out, int64_t ns_from_origin)
{
	int64_t sec = ns_from_origin / 1000000000;
	int64_t ns = ns_from_origin % 1000000000;
	if (ns < 0) {
		ns += 1000000000;
		sec -= 1;
	}
	const time_t t = static_cast<time_t>(sec);
	struct tm tm;
	char buf[48];
	if (localtime_r(&t, &tm))
		std::snprintf(buf, sizeof buf, "[%02d:%02d:%02d.%09" PRId64 "]", tm.tm_hour, tm.tm_min,
			      tm.tm_sec, ns);
	else
		std::snprintf(buf, sizeof buf, "[%" PRId64 ".%09" PRId64 "]", sec, ns);
	out += buf;
}

void append_quoted(std::string &out, const char *s)
{
	out += '"';
	for (const unsigned char *p = reinterpret_cast<const unsigned char *>(s); *p; p++) {
		if (*p == '"' || *p == '\\') {
			out += '\\';
			out += static_cast<char>(*p);
		} else if (*p == '\n') {
			out += "\\n";
		} else if (*p == '\t') {
			out += "\\t";
		} else if (*p < 0x20 || *p == 0x7f) {
			char buf[8];
			std::snprintf(buf, sizeof buf, "\\x%02x", *p);
			out += buf;
		} else {
			out += static_cast<char>(*p);
		}
	}
	out += '"';
}

void append_unsigned(std::string &out, uint64_t v, bt_field_class_integer_preferred_display_base base)
{
	char buf[80];
	switch (base) {
	case BT_FIELD_CLASS_INTEGER_PREFERRED_DISPLAY_BASE_HEXADECIMAL:
		std::snprintf(buf, sizeof buf, "0x%" PRIx64, v);
		break;
	case BT_FIELD_CLASS_INTEGER_PREFERRED_DISPLAY_BASE_OCTAL:
		std::snprintf(buf, sizeof buf, "0%" PRIo64, v);
		break;
	case BT_FIELD_CLASS_INTEGER_PREFERRED_DISPLAY_BASE_BINARY: {
		char *p = buf;
		*p++ = '0';
		*p++ = 'b';
		int top = 63;
		while (top > 0 && !((v >> top) & 1))
			top--;
		for (int b = top; b >= 0; b--)
			*p++ = ((v >> b) & 1) ? '1' : '0';
		*p = '\0';
		break;
	}
	default:
		std::snprintf(buf, sizeof buf, "%" PRIu64, v);
		break;
	}
	out += buf;
}

template <typename T> void append_real(std::string &out, T v)
{
	char buf[64];
	auto r = std::to_chars(buf, buf + sizeof buf, v); // shortest round-trip form
	out.append(buf, r.ptr);
}

void append_field(std::string &out, const bt_field *field, bool is_root = false);

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

void append_enum_labels(std::string &out, const bt_field *field, bool is_signed)
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

void append_field(std::string &out, const bt_field *field, bool is_root)
{
	const bt_field_class *fc = bt_field_borrow_class_const(field);
	const bt_field_class_type type = bt_field_get_class_type(field);

	if (bt_field_class_type_is(type, BT_FIELD_CLASS_TYPE_INTEGER)) {
		const bool is_signed = bt_field_class_type_is(type, BT_FIELD_CLASS_TYPE_SIGNED_INTEGER);
		const bool is_enum = bt_field_class_type_is(type, BT_FIELD_CLASS_TYPE_ENUMERATION);
		if (is_enum) {
			append_enum_labels(out, field, is_signed);
			out += " (";
		}
		if (is_signed) {
			const int64_t v = bt_field_integer_signed_get_value(field);
			const auto base = bt_field_class_integer_get_preferred_display_base(fc);
			if (base == BT_FIELD_CLASS_INTEGER_PREFERRED_DISPLAY_BASE_DECIMAL || is_enum)
				out += std::to_string(v);
			else
				append_unsigned(out, static_cast<uint64_t>(v), base);
		} else {
			append_unsigned(out, bt_field_integer_unsigned_get_value(field),
					is_enum ? BT_FIELD_CLASS_INTEGER_PREFERRED_DISPLAY_BASE_DECIMAL
						: bt_field_class_integer_get_preferred_display_base(fc));
		}
		if (is_enum)
			out += ')';
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
			append_field(out, bt_field_structure_borrow_member_field_by_index_const(field, i));
		}
		out += n ? " }" : "}";
	} else if (bt_field_class_type_is(type, BT_FIELD_CLASS_TYPE_ARRAY)) {
		const uint64_t n = bt_field_array_get_length(field);
		out += "[ ";
		for (uint64_t i = 0; i < n; i++) {
			if (i)
				out += ", ";
			append_field(out, bt_field_array_borrow_element_field_by_index_const(field, i));
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

// ---- the sink ------------------------------------------------------------

// A time bound of --since/--until: `+SECONDS` from the first event, or a
// time of day (local) on the first event's day; resolved at the first
// event.
struct TimeBound {
	bool set = false, relative = false;
	int64_t ns = 0; // relative: from the first event; else: from local midnight
	int64_t at = 0; // resolved: ns from the clock's origin
};

struct ViewSink {
	uint64_t limit = UINT64_MAX;
	uint64_t events = 0;
	// Filters (all must pass; an empty set lets everything through).
	std::set<int64_t> pids, tids;
	std::vector<std::string> patterns;
	TimeBound since, until;
	bool first_seen = false;
	std::unordered_map<int64_t, int64_t> tid_pid;                   // threads seen in user sub-traces
	std::map<const bt_trace *, std::pair<bool, int64_t>> trace_pid; // trace -> (kernel, vpid)
	std::map<const bt_trace *, std::string> who;                    // trace -> "procname[pid]"
	std::string line;
	bool write_failed = false;
};

const std::string &trace_who(ViewSink &s, const bt_trace *trace)
{
	auto it = s.who.find(trace);
	if (it != s.who.end())
		return it->second;
	std::string name = "?", pid = "?";
	const bt_value *v = bt_trace_borrow_environment_entry_value_by_name_const(trace, "procname");
	if (v && bt_value_get_type(v) == BT_VALUE_TYPE_STRING)
		name = bt_value_string_get(v);
	v = bt_trace_borrow_environment_entry_value_by_name_const(trace, "vpid");
	if (v && bt_value_get_type(v) == BT_VALUE_TYPE_SIGNED_INTEGER)
		pid = std::to_string(bt_value_integer_signed_get(v));
	else if (v && bt_value_get_type(v) == BT_VALUE_TYPE_UNSIGNED_INTEGER)
		pid = std::to_string(bt_value_integer_unsigned_get(v));
	if (name == "?") {
		v = bt_trace_borrow_environment_entry_value_by_name_const(trace, "domain");
		if (v && bt_value_get_type(v) == BT_VALUE_TYPE_STRING)
			name = bt_value_string_get(v);
	}
	return s.who.emplace(trace, name + "[" + pid + "]").first->second;
}

// (kernel, vpid) of a sub-trace.
const std::pair<bool, int64_t> &trace_pid(ViewSink &s, const bt_trace *tr)
{
	auto it = s.trace_pid.find(tr);
	if (it != s.trace_pid.end())
		return it->second;
	std::string domain;
	int64_t pid = -1;
	env_int(tr, "vpid", &pid);
	const bool kernel = env_string(tr, "domain", &domain) && domain == "kernel";
	return s.trace_pid.emplace(tr, std::make_pair(kernel, pid)).first->second;
}

bool message_ns(const bt_message *msg, int64_t *ns)
{
	if (!bt_message_event_borrow_stream_class_default_clock_class_const(msg))
		return false;
	const bt_clock_snapshot *cs = bt_message_event_borrow_default_clock_snapshot_const(msg);
	return bt_clock_snapshot_get_ns_from_origin(cs, ns) == BT_CLOCK_SNAPSHOT_GET_NS_FROM_ORIGIN_STATUS_OK;
}

void resolve(TimeBound &b, int64_t first)
{
	if (!b.set)
		return;
	if (b.relative) {
		b.at = first + b.ns;
		return;
	}
	// Local midnight of the first event's day, plus the time of day.
	const time_t t = static_cast<time_t>(first / 1000000000);
	struct tm tm;
	localtime_r(&t, &tm);
	tm.tm_hour = tm.tm_min = tm.tm_sec = 0;
	tm.tm_isdst = -1;
	b.at = static_cast<int64_t>(mktime(&tm)) * 1000000000 + b.ns;
}

enum class Verdict { Show, Skip, Stop };

// The filters of `strata view` for one event.
Verdict filter_event(ViewSink &s, const bt_message *msg)
{
	const bt_event *ev = bt_message_event_borrow_event_const(msg);
	int64_t ns = 0;
	const bool timed = message_ns(msg, &ns);
	if (timed && !s.first_seen) {
		s.first_seen = true;
		resolve(s.since, ns);
		resolve(s.until, ns);
	}
	if (timed && s.until.set && ns > s.until.at)
		return Verdict::Stop; // messages come in time order
	if (timed && s.since.set && ns < s.since.at)
		return Verdict::Skip;
	const auto &tp = trace_pid(s, bt_stream_borrow_trace_const(bt_event_borrow_stream_const(ev)));
	int64_t tid = -1;
	const bool has_tid = event_tid(ev, &tid);
	if (!tp.first && has_tid && !s.pids.empty())
		s.tid_pid[tid] = tp.second;
	if (!s.tids.empty() && (!has_tid || !s.tids.count(tid)))
		return Verdict::Skip;
	if (!s.pids.empty()) {
		int64_t pid = tp.second;
		if (tp.first) { // a kernel event: its thread's process, if known
			auto it = has_tid ? s.tid_pid.find(tid) : s.tid_pid.end();
			pid = it != s.tid_pid.end() ? it->second : tid;
		}
		if (!s.pids.count(pid))
			return Verdict::Skip;
	}
	if (!s.patterns.empty()) {
		const char *name = bt_event_class_get_name(bt_event_borrow_class_const(ev));
		const std::string n = name ? name : "";
		const std::string kn = "kernel:" + n;
		bool match = false;
		for (const std::string &p : s.patterns)
			if (!fnmatch(p.c_str(), n.c_str(), 0) ||
			    (tp.first && !fnmatch(p.c_str(), kn.c_str(), 0))) {
				match = true;
				break;
			}
		if (!match)
			return Verdict::Skip;
	}
	return Verdict::Show;
}

// A loss is shown unless --pid, --tid or -e leave out its stream, or it
// falls outside --since/--until.
bool show_discarded(ViewSink &s, const bt_message *msg, bool events)
{
	if (!s.tids.empty() || !s.patterns.empty())
		return false;
	const bt_stream *stream = events ? bt_message_discarded_events_borrow_stream_const(msg)
					 : bt_message_discarded_packets_borrow_stream_const(msg);
	if (!s.pids.empty() && !s.pids.count(trace_pid(s, bt_stream_borrow_trace_const(stream)).second))
		return false;
	const bt_stream_class *sc = bt_stream_borrow_class_const(stream);
	const bool has_times = events ? bt_stream_class_discarded_events_have_default_clock_snapshots(sc)
				      : bt_stream_class_discarded_packets_have_default_clock_snapshots(sc);
	if ((s.since.set || s.until.set) && has_times) {
		const bt_clock_snapshot *cb =
			events ? bt_message_discarded_events_borrow_beginning_default_clock_snapshot_const(
					 msg)
			       : bt_message_discarded_packets_borrow_beginning_default_clock_snapshot_const(
					 msg);
		int64_t b = 0;
		if (bt_clock_snapshot_get_ns_from_origin(cb, &b) ==
			    BT_CLOCK_SNAPSHOT_GET_NS_FROM_ORIGIN_STATUS_OK &&
		    ((s.since.set && s.first_seen && b < s.since.at) ||
		     (s.until.set && s.first_seen && b > s.until.at)))
			return false;
	}
	return true;
}

void format_event(ViewSink &s, const bt_message *msg)
{
	const bt_event *ev = bt_message_event_borrow_event_const(msg);
	const bt_event_class *ec = bt_event_borrow_class_const(ev);
	const bt_stream *stream = bt_event_borrow_stream_const(ev);
	std::string &out = s.line;

	if (bt_message_event_borrow_stream_class_default_clock_class_const(msg)) {
		int64_t ns = 0;
		const bt_clock_snapshot *cs = bt_message_event_borrow_default_clock_snapshot_const(msg);
		if (bt_clock_snapshot_get_ns_from_origin(cs, &ns) ==
		    BT_CLOCK_SNAPSHOT_GET_NS_FROM_ORIGIN_STATUS_OK)
			append_time(out, ns);
		else
			out += "[overflow]";
	} else {
		out += "[no clock]";
	}
	out += ' ';
	out += trace_who(s, bt_stream_borrow_trace_const(stream));

	const bt_field *ctx = bt_event_borrow_common_context_field_const(ev);
	int64_t v = 0;
	out += " tid=";
	if (event_tid(ev, &v))
		out += std::to_string(v);
	else
		out += '?';
	// The CPU where events say it (kernel events); user events do not
	// carry it (their lanes are per thread: strata_abi.h).
	if (integer_value(member(ctx, "cpu_id"), &v) || integer_value(member(ctx, "cpu"), &v))
		out += " cpu=" + std::to_string(v);
	out += ' ';
	const char *name = bt_event_class_get_name(ec);
	out += name ? name : "<unnamed>";
	const bt_field *payload = bt_event_borrow_payload_field_const(ev);
	if (payload && bt_field_class_structure_get_member_count(bt_field_borrow_class_const(payload))) {
		out += ": ";
		append_field(out, payload, true);
	}
	out += '\n';
}

void format_discarded(ViewSink &s, const bt_message *msg, bool events)
{
	const bt_stream *stream = events ? bt_message_discarded_events_borrow_stream_const(msg)
					 : bt_message_discarded_packets_borrow_stream_const(msg);
	const bt_stream_class *sc = bt_stream_borrow_class_const(stream);
	uint64_t count = 0;
	const bool known = events ? bt_message_discarded_events_get_count(msg, &count) ==
					    BT_PROPERTY_AVAILABILITY_AVAILABLE
				  : bt_message_discarded_packets_get_count(msg, &count) ==
					    BT_PROPERTY_AVAILABILITY_AVAILABLE;
	std::string &out = s.line;
	const bool has_times = events ? bt_stream_class_discarded_events_have_default_clock_snapshots(sc)
				      : bt_stream_class_discarded_packets_have_default_clock_snapshots(sc);
	int64_t b = 0, e = 0;
	bool times = false;
	if (has_times) {
		const bt_clock_snapshot *cb =
			events ? bt_message_discarded_events_borrow_beginning_default_clock_snapshot_const(
					 msg)
			       : bt_message_discarded_packets_borrow_beginning_default_clock_snapshot_const(
					 msg);
		const bt_clock_snapshot *ce =
			events ? bt_message_discarded_events_borrow_end_default_clock_snapshot_const(msg)
			       : bt_message_discarded_packets_borrow_end_default_clock_snapshot_const(msg);
		times = bt_clock_snapshot_get_ns_from_origin(cb, &b) ==
				BT_CLOCK_SNAPSHOT_GET_NS_FROM_ORIGIN_STATUS_OK &&
			bt_clock_snapshot_get_ns_from_origin(ce, &e) ==
				BT_CLOCK_SNAPSHOT_GET_NS_FROM_ORIGIN_STATUS_OK;
	}
	// The muxer orders a loss by its beginning; show that time first so the
	// output stays sorted.
	if (times)
		append_time(out, b);
	else
		out += "[--:--:--.---------]";
	out += " *** ";
	out += known ? std::to_string(count) : std::string("some");
	out += events ? " events discarded in " : " packets discarded in ";
	out += trace_who(s, bt_stream_borrow_trace_const(stream));
	out += " stream ";
	out += std::to_string(bt_stream_get_id(stream));
	if (times) {
		out += " between ";
		append_time(out, b);
		out += " and ";
		append_time(out, e);
	}
	out += '\n';
}

bool flush_line(ViewSink &s)
{
	if (!s.line.empty() && std::fwrite(s.line.data(), 1, s.line.size(), stdout) != s.line.size())
		s.write_failed = true;
	s.line.clear();
	return !s.write_failed;
}

// One message; false to stop (limit reached or output failed).
bool on_message(ViewSink &s, const bt_message *msg)
{
	bool more = true;
	switch (bt_message_get_type(msg)) {
	case BT_MESSAGE_TYPE_EVENT:
		switch (filter_event(s, msg)) {
		case Verdict::Show:
			format_event(s, msg);
			more = ++s.events < s.limit;
			break;
		case Verdict::Skip:
			break;
		case Verdict::Stop:
			more = false;
			break;
		}
		break;
	case BT_MESSAGE_TYPE_DISCARDED_EVENTS:
		if (show_discarded(s, msg, true))
			format_discarded(s, msg, true);
		break;
	case BT_MESSAGE_TYPE_DISCARDED_PACKETS:
		if (show_discarded(s, msg, false))
			format_discarded(s, msg, false);
		break;
	default:
		break;
	}
	if ((s.line.size() > (1u << 16) || !more) && !flush_line(s))
		more = false;
	return more;
}

// --pid with a kernel sub-trace: the kernel names threads, not their
// processes.  Read the other sub-traces once first to learn which process
// each of their threads is in, so that a kernel event of such a thread is
// shown from its first one (strata export does the same).
void learn_threads(ViewSink &s, const std::string &dir)
{
	std::vector<std::string> dirs, user;
	std::string why, warnings;
	if (s.pids.empty() || !find_ctf_traces(dir, &dirs, &why))
		return;
	for (const std::string &d : dirs)
		if (!is_kernel_trace(d))
			user.push_back(d);
	if (user.empty() || user.size() == dirs.size())
		return;
	std::map<const bt_trace *, int64_t> pid_of; // this graph's own traces
	read_ctf_trace_dirs(
		user,
		[&s, &pid_of](const bt_message *msg) {
			if (bt_message_get_type(msg) != BT_MESSAGE_TYPE_EVENT)
				return true;
			const bt_event *ev = bt_message_event_borrow_event_const(msg);
			const bt_trace *tr = bt_stream_borrow_trace_const(bt_event_borrow_stream_const(ev));
			auto it = pid_of.find(tr);
			if (it == pid_of.end()) {
				int64_t pid = -1;
				env_int(tr, "vpid", &pid);
				it = pid_of.emplace(tr, pid).first;
			}
			int64_t tid = 0;
			if (event_tid(ev, &tid))
				s.tid_pid.emplace(tid, it->second);
			return true;
		},
		&why, &warnings);
}

int run_view(const std::string &dir, ViewSink &sink)
{
	std::string why, warnings;
	struct stat st;
	if (stat(dir.c_str(), &st) != 0) { // plainly, before any reader or repair check
		std::fprintf(stderr, "strata view: no such trace '%s': %s\n", dir.c_str(),
			     std::strerror(errno));
		return kExitFailure;
	}
	learn_threads(sink, dir);
	const bool ok = read_ctf_traces(
		dir, [&sink](const bt_message *msg) { return on_message(sink, msg); }, &why, &warnings);
	flush_line(sink);
	const bool flushed = std::fflush(stdout) == 0;
	if (!warnings.empty())
		std::fprintf(stderr, "strata view: warning: %s", warnings.c_str());
	if (!ok) {
		std::fprintf(stderr, "strata view: %s\n", why.c_str());
		cli::hint_torn("view", dir);
		return kExitFailure;
	}
	if (!flushed || sink.write_failed) {
		std::fprintf(stderr, "strata view: cannot write the output: %s\n", std::strerror(errno));
		return kExitFailure;
	}
	return kExitOk;
}

bool parse_limit(const char *s, uint64_t *out)
{
	if (!s || !*s || *s == '-')
		return false;
	char *end = nullptr;
	errno = 0;
	const unsigned long long v = std::strtoull(s, &end, 10);
	if (errno || *end)
		return false;
	*out = v;
	return true;
}

bool parse_i64(const char *s, int64_t *out)
{
	if (!s || !*s)
		return false;
	char *end = nullptr;
	errno = 0;
	const long long v = std::strtoll(s, &end, 10);
	if (errno || *end)
		return false;
	*out = v;
	return true;
}

// Seconds with up to nine decimals ("1", "1.5", "0.000000250") -> ns.
bool parse_seconds(const char *s, int64_t *ns)
{
	int64_t sec = 0, frac = 0;
	int digits = 0;
	const char *p = s;
	if (!std::isdigit(static_cast<unsigned char>(*p)))
		return false;
	for (; std::isdigit(static_cast<unsigned char>(*p)); p++)
		sec = sec * 10 + (*p - '0');
	if (*p == '.') {
		for (p++; std::isdigit(static_cast<unsigned char>(*p)); p++)
			if (digits < 9) {
				frac = frac * 10 + (*p - '0');
				digits++;
			}
	}
	if (*p || sec > 1000000000)
		return false;
	for (; digits < 9; digits++)
		frac *= 10;
	*ns = sec * 1000000000 + frac;
	return true;
}

// "+SECONDS" or "HH:MM:SS[.frac]".
bool parse_time(const char *s, TimeBound *b)
{
	b->set = true;
	if (*s == '+') {
		b->relative = true;
		return parse_seconds(s + 1, &b->ns);
	}
	int h = 0, m = 0, n = 0;
	if (std::sscanf(s, "%2d:%2d:%n", &h, &m, &n) != 2 || n == 0 || h > 23 || m > 59)
		return false;
	int64_t sec = 0;
	if (!parse_seconds(s + n, &sec) || sec >= 61 * 1000000000LL)
		return false;
	b->ns = (static_cast<int64_t>(h) * 3600 + m * 60) * 1000000000 + sec;
	return true;
}

const cli::Command kView = {
	"view", "[-n N] [--pid PID] [--tid TID] [-e PATTERN] [--since T] [--until T] [--repair] [DIR]",
	"Print the events of the trace(s) under DIR (default: the current directory),\n"
	"merged by time, one line per event:\n"
	"\n"
	"  [HH:MM:SS.nnnnnnnnn] PROCNAME[PID] tid=TID cpu=CPU PROVIDER:EVENT: { FIELD = VALUE, ... }\n"
	"\n"
	"Times are absolute, in local time (set TZ=UTC for UTC).  Enumerations print as\n"
	"'label (value)', strings quoted, arrays and sequences in [ ].  Lost data prints as\n"
	"'*** N events discarded ...' and '*** N packets discarded ...' lines.\n"
	"Every directory under DIR that holds a CTF 'metadata' file is read.",
	"",
	"Exit status: 0 ok, 1 the trace cannot be read or does not exist (the reason is\n"
	"printed), 2 usage error."};

// --pid PID or --tid TID (repeatable): into `ids`.
cli::Option id_option(const char *name, const char *arg, const char *help, std::set<int64_t> &ids)
{
	const std::string why = std::string("--") + name + " needs a number";
	return cli::custom(name, 0, arg, "a number", help, [&ids, why](const char *v) {
		int64_t n = 0;
		if (!parse_i64(v, &n) || n < 0)
			return why;
		ids.insert(n);
		return std::string();
	});
}

// --since T or --until T.
cli::Option time_option(const char *name, const char *help, TimeBound &bound)
{
	const std::string why = std::string("--") + name + " needs a time: +SECONDS or HH:MM:SS[.frac]";
	return cli::custom(name, 0, "T", "a time", help, [&bound, why](const char *v) {
		return parse_time(v, &bound) ? std::string() : why;
	});
}

// The command line into sink, dir and repair: kParsed to go on, else the
// exit status.
int parse_view_args(int argc, char **argv, ViewSink &sink, const char *&dir, bool &repair)
{
	ViewSink *sp = &sink;
	const std::vector<cli::Option> opts = {
		cli::custom("limit", 'n', "N", "a number of events",
			    "stop after N events (those the filters below let through)",
			    [sp](const char *v) {
				    return parse_limit(v, &sp->limit)
						   ? std::string()
						   : std::string("-n needs a number of events");
			    }),
		id_option("pid", "PID",
			  "only process PID: its sub-trace's events and losses, and kernel events of its "
			  "threads (the tid PID, and the threads its sub-trace's events name)",
			  sink.pids),
		id_option("tid", "TID", "only events of thread TID (repeat --pid/--tid for several)",
			  sink.tids),
		cli::texts(nullptr, 'e', "PATTERN", "a pattern",
			   "only events whose name matches the glob PATTERN ('pthread:mutex_*'; kernel "
			   "events as 'kernel:NAME' or 'NAME'); repeat for several",
			   sink.patterns),
		time_option("since",
			    "only events at or after T: '+SECONDS' after the trace's first event "
			    "('+1.5'), or a time of day as printed ('12:03:04.5', local time, on the "
			    "day of the first event)",
			    sink.since),
		time_option("until", "only events at or before T (as --since)", sink.until),
		cli::flag("repair", 0,
			  "first cut every stream file that ends inside a packet (a consumer daemon killed "
			  "while writing) back to its last whole packet (strata-consumerd --repair); changes "
			  "DIR",
			  repair),
	};
	std::vector<char *> operands;
	if (const int r = cli::parse(kView, opts, argc, argv, operands); r != cli::kParsed)
		return r;
	if (operands.size() > 1)
		return cli::usage_error(kView, std::string("one trace directory only ('") + operands[0] +
						       "' and '" + operands[1] + "')");
	dir = operands.empty() ? nullptr : operands[0];
	return cli::kParsed;
}

} // namespace
} // namespace strata

int strata_cmd_view(int argc, char **argv)
{
	using namespace strata;
	ViewSink sink;
	const char *dir = nullptr;
	bool repair = false;

	if (const int r = parse_view_args(argc, argv, sink, dir, repair); r != cli::kParsed)
		return r;
	if (sink.limit == 0)
		return kExitOk;
	if (repair && cli::run_consumerd_repair(dir ? dir : ".", false) != 0) {
		std::fprintf(stderr, "strata view: could not repair '%s'\n", dir ? dir : ".");
		return kExitFailure;
	}
	return run_view(dir ? dir : ".", sink);
}
