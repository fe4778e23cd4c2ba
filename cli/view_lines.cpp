// view_lines.cpp - `strata view`'s lines: the filters and the line's
// prefix both readers share, losses, and the events of Strata's own reader
// (trace_reader.h) printed as babeltrace2's text sink prints them
// (view_bt.cpp prints babeltrace2's own messages).  Single-threaded.
#include <fnmatch.h>
#include <time.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>

#include "strata_abi.h"
#include "view_sink.h"

namespace strata {
namespace view {

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

Verdict filter_event(ViewSink &s, const Ev &ev)
{
	if (ev.timed && !s.first_seen) {
		s.first_seen = true;
		resolve(s.since, ev.ns);
		resolve(s.until, ev.ns);
	}
	if (ev.timed && s.until.set && ev.ns > s.until.at)
		return Verdict::Stop; // messages come in time order
	if (ev.timed && s.since.set && ev.ns < s.since.at)
		return Verdict::Skip;
	const TraceWho &tp = who_of(s, ev.trace);
	if (!tp.kernel && ev.has_tid && !s.pids.empty())
		s.tid_pid[ev.tid] = tp.vpid;
	if (!s.tids.empty() && (!ev.has_tid || !s.tids.count(ev.tid)))
		return Verdict::Skip;
	if (!s.pids.empty()) {
		int64_t pid = tp.vpid;
		if (tp.kernel) { // a kernel event: its thread's process, if known
			auto it = ev.has_tid ? s.tid_pid.find(ev.tid) : s.tid_pid.end();
			pid = it != s.tid_pid.end() ? it->second : ev.tid;
		}
		if (!s.pids.count(pid))
			return Verdict::Skip;
	}
	if (!s.patterns.empty()) {
		const std::string n = ev.name;
		const std::string kn = "kernel:" + n;
		bool match = false;
		for (const std::string &p : s.patterns)
			if (!fnmatch(p.c_str(), n.c_str(), 0) ||
			    (tp.kernel && !fnmatch(p.c_str(), kn.c_str(), 0))) {
				match = true;
				break;
			}
		if (!match)
			return Verdict::Skip;
	}
	return Verdict::Show;
}

void format_prefix(ViewSink &s, const Ev &ev)
{
	LineBuf &out = s.line;
	if (ev.timed)
		append_time(out, ev.ns);
	else
		out += "[no clock]";
	auto &p = s.prefix;
	if (p.trace != ev.trace || p.has_tid != ev.has_tid || p.tid != ev.tid || p.cpu != ev.cpu ||
	    p.name != ev.name || p.text.empty()) {
		// (The name by its text: babeltrace2 may free a class and make
		// another at its address.)
		p.trace = ev.trace;
		p.has_tid = ev.has_tid;
		p.tid = ev.tid;
		p.cpu = ev.cpu;
		p.name = ev.name;
		std::string &t = p.text;
		t = ' ';
		t += who_of(s, ev.trace).who;
		t += " tid=";
		t += ev.has_tid ? std::to_string(ev.tid) : std::string("?");
		// The CPU where events say it (kernel events); user events do
		// not carry it (their lanes are per thread: strata_abi.h).
		if (ev.cpu >= 0)
			t += " cpu=" + std::to_string(ev.cpu);
		t += ' ';
		t += *ev.name ? ev.name : "<unnamed>";
	}
	out += p.text;
}

// A loss is shown unless --pid, --tid or -e leave out its stream, or it
// falls outside --since/--until.
bool show_discarded(ViewSink &s, const Loss &l)
{
	if (!s.tids.empty() || !s.patterns.empty())
		return false;
	if (!s.pids.empty() && !s.pids.count(s.traces[l.trace].vpid))
		return false;
	if ((s.since.set || s.until.set) && l.times &&
	    ((s.since.set && s.first_seen && l.b < s.since.at) ||
	     (s.until.set && s.first_seen && l.b > s.until.at)))
		return false;
	return true;
}

void format_discarded(ViewSink &s, const Loss &l)
{
	LineBuf &out = s.line;
	// The muxer orders a loss by its beginning; show that time first so the
	// output stays sorted.
	if (l.times)
		append_time(out, l.b);
	else
		out += "[--:--:--.---------]";
	out += " *** ";
	if (l.known)
		append_i64(out, (int64_t)l.count);
	else
		out += "some";
	out += l.events ? " events discarded in " : " packets discarded in ";
	out += s.traces[l.trace].who;
	out += " stream ";
	append_i64(out, (int64_t)l.stream);
	if (l.times) {
		out += " between ";
		append_time(out, l.b);
		out += " and ";
		append_time(out, l.e);
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

bool after_message(ViewSink &s, bool more)
{
	if ((s.line.size() > (1u << 16) || !more) && !flush_line(s))
		more = false;
	return more;
}

namespace {

const TraceWho &native_trace_who(ViewSink &s, const SubTrace &t)
{
	auto it = s.traces.find(&t);
	if (it != s.traces.end())
		return it->second;
	TraceWho w;
	w.kernel = t.kernel;
	w.vpid = t.meta.env_value("vpid") ? t.vpid : -1;
	std::string name = t.procname.empty() ? "?" : t.procname;
	if (name == "?" && !t.meta.env_string("domain").empty())
		name = t.meta.env_string("domain");
	if (s.show_host && t.meta.env_value("hostname")) {
		append_escaped(w.who, t.hostname.c_str());
		w.who += ':';
	}
	append_escaped(w.who, name.c_str());
	w.who += "[" + (t.meta.env_value("vpid") ? std::to_string(t.vpid) : std::string("?")) + "]";
	return s.traces.emplace(&t, w).first->second;
}

// A field as append_field prints babeltrace2's: the same text.
// A field's value; with `syms`, the hex elements of an array or sequence
// (a pthread event's `stack`) named as the scalar ones are by the caller.
void append_value(LineBuf &out, const FieldValue &v, ViewSymbols *syms = nullptr, const void *trace = nullptr)
{
	const FieldInfo &f = *v.info;
	auto base_of = [](unsigned b) {
		return b == 16  ? BT_FIELD_CLASS_INTEGER_PREFERRED_DISPLAY_BASE_HEXADECIMAL
		       : b == 8 ? BT_FIELD_CLASS_INTEGER_PREFERRED_DISPLAY_BASE_OCTAL
		       : b == 2 ? BT_FIELD_CLASS_INTEGER_PREFERRED_DISPLAY_BASE_BINARY
				: BT_FIELD_CLASS_INTEGER_PREFERRED_DISPLAY_BASE_DECIMAL;
	};
	auto append_int = [&](uint64_t u, int64_t i, unsigned base) {
		if (f.is_signed && base == 10)
			append_i64(out, i);
		else
			append_unsigned(out, f.is_signed ? (uint64_t)i : u, base_of(base));
	};
	switch (f.type) {
	case STRATA_FT_INTEGER:
		append_int(v.u, v.i, f.base);
		break;
	case STRATA_FT_ENUM: {
		bool any = false;
		for (const EnumLabel &l : f.labels) {
			const bool in = f.is_signed ? (v.i >= l.first && v.i <= l.last)
						    : (v.u >= (uint64_t)l.first && v.u <= (uint64_t)l.last);
			if (!in)
				continue;
			if (any)
				out += '|';
			out += l.label;
			any = true;
		}
		if (!any)
			out += "<unknown>";
		out += " (";
		append_int(v.u, v.i, 10);
		out += ')';
		break;
	}
	case STRATA_FT_FLOAT:
		if (f.elem_bits == 32)
			append_real(out, (float)v.d);
		else
			append_real(out, v.d);
		break;
	case STRATA_FT_STRING:
		append_quoted(out, v.str); // NUL-terminated in the packet (the walk checked)
		break;
	case STRATA_FT_ARRAY:
	case STRATA_FT_SEQUENCE:
		out += "[ ";
		for (uint32_t k = 0; k < v.count; k++) {
			if (k)
				out += ", ";
			append_int(v.elem_u(k), v.elem_i(k), f.base);
			if (syms && f.base == 16)
				out += syms->beside(trace, f.is_signed ? (uint64_t)v.elem_i(k) : v.elem_u(k));
		}
		out += v.count ? " ]" : "]";
		break;
	default:
		out += "<?>";
	}
}

// A pthread:mapping event of Strata's reader, to ViewSink::syms.
__attribute__((noinline)) void native_mapping(ViewSink &s, const TraceEvent &e)
{
	uint64_t start = 0, end = 0, offset = 0;
	const char *path = "";
	e.for_each_field([&](const FieldValue &v) {
		const std::string &n = v.info->name;
		if (v.info->type == STRATA_FT_STRING && n == "path")
			path = v.str;
		else if (v.info->type == STRATA_FT_INTEGER && n == "start")
			start = v.u;
		else if (v.info->type == STRATA_FT_INTEGER && n == "end")
			end = v.u;
		else if (v.info->type == STRATA_FT_INTEGER && n == "offset")
			offset = v.u;
	});
	s.syms.add(&e.trace(), start, end, offset, path);
}

// An event's fields as append_field prints babeltrace2's, addresses named
// (ViewSink::syms).
__attribute__((always_inline)) inline void append_native_fields(ViewSink &s, const TraceEvent &e)
{
	// ": { a = ", ", b = ", ...: made once per event class.
	if (e.cls != s.label_class) {
		auto &l = s.labels[e.cls];
		if (l.empty())
			for (const FieldInfo &f : e.cls->info.fields)
				l.push_back((l.empty() ? ": { " : ", ") + f.name + " = ");
		s.label_class = e.cls;
		s.class_labels = &l;
	}
	const std::string *label = s.class_labels->data();
	const bool named = s.syms.any();
	e.for_each_field([&](const FieldValue &v) {
		s.line += *label++;
		append_value(s.line, v, named ? &s.syms : nullptr, &e.trace());
		if (named && v.info->type == STRATA_FT_INTEGER && v.info->base == 16)
			s.line += s.syms.beside(&e.trace(), v.info->is_signed ? (uint64_t)v.i : v.u);
	});
	s.line += " }";
}

bool on_native(ViewSink &s, const TraceMsg &m)
{
	bool more = true;
	switch (m.kind) {
	case TraceMsgKind::Event: {
		const TraceEvent &e = *m.event;
		Ev ev;
		if (&e.trace() != s.last_trace)
			native_trace_who(s, e.trace());
		ev.trace = &e.trace();
		ev.timed = true;
		ev.ns = e.ns;
		ev.has_tid = e.tid >= 0 || e.trace().kernel;
		ev.tid = e.tid;
		ev.cpu = e.cpu;
		ev.name = e.cls->full_name.c_str();
		if (e.cls != s.sym_class) {
			s.sym_class = e.cls;
			s.sym_mapping = e.cls->full_name == "pthread:mapping";
		}
		if (__builtin_expect(s.sym_mapping, 0)) // shown or not
			native_mapping(s, e);
		switch (filter_event(s, ev)) {
		case Verdict::Show:
			format_prefix(s, ev);
			if (!e.cls->info.fields.empty())
				append_native_fields(s, e);
			s.line += '\n';
			more = ++s.events < s.limit;
			break;
		case Verdict::Skip:
			break;
		case Verdict::Stop:
			more = false;
			break;
		}
		break;
	}
	case TraceMsgKind::DiscardedEvents:
	case TraceMsgKind::DiscardedPackets: {
		Loss l;
		native_trace_who(s, *m.stream->trace);
		l.trace = m.stream->trace;
		l.events = m.kind == TraceMsgKind::DiscardedEvents;
		l.count = m.count;
		l.times = true;
		l.b = m.begin_ns;
		l.e = m.end_ns;
		l.stream = m.stream->instance;
		if (show_discarded(s, l))
			format_discarded(s, l);
		break;
	}
	case TraceMsgKind::Damage:
		// Named on stderr (not mixed into the events), counted.
		s.damaged++;
		std::fprintf(stderr, "strata view: damaged: %s at byte %" PRIu64 "%s: %s\n",
			     m.damage->file.c_str(), m.damage->offset,
			     m.damage->bytes
				     ? (" (" + std::to_string(m.damage->bytes) + " bytes skipped)").c_str()
				     : "",
			     m.damage->why.c_str());
		break;
	}
	return after_message(s, more);
}

} // namespace

bool read_native(TraceReader &r, ViewSink &s)
{
	return r.read_each([&s](const TraceMsg &m) { return on_native(s, m); });
}

void learn_mapping(ViewSink &s, const TraceEvent &e)
{
	native_mapping(s, e);
}

} // namespace view
} // namespace strata
