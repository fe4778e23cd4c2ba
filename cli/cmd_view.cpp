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
#include <type_traits>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "analyze_symbols.h"
#include "bt_fields.h"
#include "read_event.h"
#include "commands.h"
#include "strata_abi.h"
#include "trace_reader.h"
#include "view_graph.h"

namespace strata {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

// ---- formatting helpers --------------------------------------------------

// The output being built: a fixed buffer written out when it passes
// kFlushAt (one append is a compare and a memcpy: std::string's calls were
// a third of `strata view`'s time).  Lines longer than the buffer grow it.
class LineBuf {
public:
	static constexpr size_t kFlushAt = 1u << 16;
	LineBuf() : buf_(kFlushAt * 2) {}
	void append(const char *p, size_t n)
	{
		if (__builtin_expect(len_ + n > buf_.size(), 0))
			buf_.resize((len_ + n) * 2);
		char *d = buf_.data() + len_;
		len_ += n;
		// Most pieces are short: a call to memcpy, or a loop of n bytes
		// (its exit mispredicted as n varies), costs more than two
		// overlapping fixed-size copies.
		if (n >= 8 && n <= 16) {
			uint64_t a, b;
			memcpy(&a, p, 8);
			memcpy(&b, p + n - 8, 8);
			memcpy(d, &a, 8);
			memcpy(d + n - 8, &b, 8);
		} else if (n >= 4 && n < 8) {
			uint32_t a, b;
			memcpy(&a, p, 4);
			memcpy(&b, p + n - 4, 4);
			memcpy(d, &a, 4);
			memcpy(d + n - 4, &b, 4);
		} else if (n < 4) {
			if (n) { // 1, 2 or 3 bytes: first, middle, last
				d[0] = p[0];
				d[n / 2] = p[n / 2];
				d[n - 1] = p[n - 1];
			}
		} else {
			memcpy(d, p, n);
		}
	}
	LineBuf &operator+=(char c)
	{
		if (__builtin_expect(len_ + 1 > buf_.size(), 0))
			buf_.resize((len_ + 1) * 2);
		buf_[len_++] = c;
		return *this;
	}
	LineBuf &operator+=(const char *p)
	{
		append(p, strlen(p));
		return *this;
	}
	LineBuf &operator+=(const std::string &t)
	{
		append(t.data(), t.size());
		return *this;
	}
	// At least n bytes to write at the end (then commit() their end):
	// digits go straight to the buffer, as a copy through a scratch array
	// reads back bytes just stored piecewise (a stalled store forward).
	char *room(size_t n)
	{
		if (__builtin_expect(len_ + n > buf_.size(), 0))
			buf_.resize((len_ + n) * 2);
		return buf_.data() + len_;
	}
	void commit(const char *end) { len_ = static_cast<size_t>(end - buf_.data()); }
	const char *data() const { return buf_.data(); }
	size_t size() const { return len_; }
	bool empty() const { return len_ == 0; }
	void clear() { len_ = 0; }

private:
	std::vector<char> buf_;
	size_t len_ = 0;
};

// "00" to "99", for writing decimal digits two at a time.
constexpr char kDigitPairs[] =
	"00010203040506070809101112131415161718192021222324252627282930313233343536373839"
	"40414243444546474849505152535455565758596061626364656667686970717273747576777879"
	"8081828384858687888990919293949596979899";

// v in decimal at p (room for 20 bytes); the end.  Its length comes first
// (from its highest bit, then one comparison), so the digits are written
// in place, two at a time, without a loop that counts them.
inline char *put_decimal(char *p, uint64_t v)
{
	struct Pow10 {
		uint64_t v[20];
		constexpr Pow10() : v()
		{
			uint64_t x = 1;
			for (uint64_t &e : v) {
				e = x;
				x *= 10; // wraps once, past the last
			}
		}
	};
	static constexpr Pow10 kPow10{};
	const uint64_t w = v | 1; // as many digits as v (10^k is even), and a bit set
	const unsigned approx = (unsigned)((64 - __builtin_clzll(w)) * 1233) >> 12;
	char *const end = p + approx + (w >= kPow10.v[approx]);
	char *q = end;
	while (v >= 100) {
		const uint64_t r = v % 100;
		v /= 100;
		q -= 2;
		memcpy(q, kDigitPairs + 2 * r, 2);
	}
	if (v >= 10)
		memcpy(q - 2, kDigitPairs + 2 * v, 2);
	else
		q[-1] = (char)('0' + v);
	return end;
}

template <class Out> void append_i64(Out &out, int64_t v)
{
	if constexpr (std::is_same_v<Out, LineBuf>) {
		char *p = out.room(24);
		if (v < 0)
			*p++ = '-';
		out.commit(put_decimal(p, v < 0 ? 0 - (uint64_t)v : (uint64_t)v));
		return;
	}
	char buf[24];
	auto r = std::to_chars(buf, buf + sizeof buf, v);
	out.append(buf, (size_t)(r.ptr - buf));
}

// "[HH:MM:SS.nnnnnnnnn]" in local time; the last second's text is kept, so
// that events within one second cost no time conversion.  Single-threaded
// (the view's one thread).
struct TimeText {
	int64_t sec = INT64_MIN;
	int64_t lo = INT64_MAX; // sec's first ns
	char head[40];
	size_t len = 0;
};
TimeText g_time;

template <class Out> void append_time(Out &out, int64_t ns_from_origin)
{
	TimeText &t = g_time;
	int64_t sec, ns;
	if (ns_from_origin >= t.lo && ns_from_origin - t.lo < 1000000000) { // the same second: no division
		sec = t.sec;
		ns = ns_from_origin - t.lo;
	} else {
		sec = ns_from_origin / 1000000000;
		ns = ns_from_origin % 1000000000;
		if (ns < 0) {
			ns += 1000000000;
			sec -= 1;
		}
	}
	if (sec != t.sec) {
		t.lo = sec * 1000000000;
		const time_t tt = static_cast<time_t>(sec);
		struct tm tm;
		int n;
		if (localtime_r(&tt, &tm))
			n = std::snprintf(t.head, sizeof t.head, "[%02d:%02d:%02d.", tm.tm_hour, tm.tm_min,
					  tm.tm_sec);
		else
			n = std::snprintf(t.head, sizeof t.head, "[%" PRId64 ".", sec);
		t.len = n > 0 ? (size_t)n : 0;
		t.sec = sec;
	}
	// Nine digits, two at a time, written where they go (room()).
	const char *const kPairs = kDigitPairs;
	char *const h = out.room(sizeof t.head + 10);
	memcpy(h, t.head, sizeof t.head); // the whole array: fixed size, no call
	char *const d = h + t.len;
	uint32_t v = (uint32_t)ns;
	for (int k = 7; k >= 1; k -= 2) {
		const uint32_t q = v / 100, r = v - q * 100;
		d[k] = kPairs[2 * r];
		d[k + 1] = kPairs[2 * r + 1];
		v = q;
	}
	d[0] = (char)('0' + v);
	d[9] = ']';
	out.commit(d + 10);
}

// The length of the valid UTF-8 sequence at p (1..4), or 0 if it is not one.
size_t utf8_len(const unsigned char *p)
{
	const unsigned char c = p[0];
	auto cont = [&](int k) { return (p[k] & 0xC0) == 0x80; };
	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF)
		return cont(1) ? 2 : 0;
	if (c >= 0xE0 && c <= 0xEF) {
		if (!cont(1) || !cont(2) || (c == 0xE0 && p[1] < 0xA0) || (c == 0xED && p[1] > 0x9F))
			return 0;
		return 3;
	}
	if (c >= 0xF0 && c <= 0xF4) {
		if (!cont(1) || !cont(2) || !cont(3) || (c == 0xF0 && p[1] < 0x90) ||
		    (c == 0xF4 && p[1] > 0x8F))
			return 0;
		return 4;
	}
	return 0;
}

// Text of any bytes (NUL-terminated): quotes and backslashes escaped,
// control characters and bytes that are not UTF-8 as \xNN, so that the
// line is valid UTF-8 whatever the trace holds.
template <class Out> void append_escaped(Out &out, const char *s)
{
	for (const unsigned char *p = reinterpret_cast<const unsigned char *>(s); *p;) {
		const size_t n = utf8_len(p); // stops at the NUL: a continuation check fails there
		if (n > 1) {
			out.append(reinterpret_cast<const char *>(p), n);
			p += n;
			continue;
		}
		if (*p == '"' || *p == '\\') {
			out += '\\';
			out += static_cast<char>(*p);
		} else if (*p == '\n') {
			out += "\\n";
		} else if (*p == '\t') {
			out += "\\t";
		} else if (*p < 0x20 || *p == 0x7f || n == 0) {
			static const char hex[] = "0123456789abcdef";
			const char esc[4] = {'\\', 'x', hex[*p >> 4], hex[*p & 15]};
			out.append(esc, 4);
		} else {
			out += static_cast<char>(*p);
		}
		p++;
	}
}

template <class Out> void append_quoted(Out &out, const char *s)
{
	out += '"';
	append_escaped(out, s);
	out += '"';
}

template <class Out>
void append_unsigned(Out &out, uint64_t v, bt_field_class_integer_preferred_display_base base)
{
	char buf[80];
	switch (base) {
	case BT_FIELD_CLASS_INTEGER_PREFERRED_DISPLAY_BASE_HEXADECIMAL: {
		static const char hex[] = "0123456789abcdef";
		char *e = buf + sizeof buf, *p = e;
		do {
			*--p = hex[v & 15];
			v >>= 4;
		} while (v);
		*--p = 'x';
		*--p = '0';
		out.append(p, (size_t)(e - p));
		return;
	}
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
		if constexpr (std::is_same_v<Out, LineBuf>) {
			out.commit(put_decimal(out.room(24), v));
		} else {
			out.append(buf, (size_t)(std::to_chars(buf, buf + sizeof buf, v).ptr - buf));
		}
		return;
	}
	out += buf;
}

template <class Out, typename T> void append_real(Out &out, T v)
{
	char buf[64];
	auto r = std::to_chars(buf, buf + sizeof buf, v); // shortest round-trip form
	out.append(buf, (size_t)(r.ptr - buf));
}

/*
 * Symbols beside addresses, as `strata analyze mutex` and `strata query`
 * name them (docs/viewing.md): the mappings a process's pthread preload
 * records (pthread:mapping, written before the process's first lock
 * event) name the hex integers of that process's later events,
 * "lock = 0x55d1c1a4b040 hot, caller = 0x55d1c1a4b2c4 worker+0x24".  A
 * sub-trace is a process; both readers key it by their own pointer.
 */
class ViewSymbols {
public:
	bool any() const { return table_ != nullptr; }
	void add(const void *trace, uint64_t start, uint64_t end, uint64_t offset, const char *path)
	{
		auto it = procs_.emplace(trace, (uint32_t)procs_.size()).first;
		if (it->second >= names_.size())
			names_.resize(it->second + 1);
		names_[it->second].clear(); // a new mapping may name an address anew
		analyze::Mapping m;
		m.proc = it->second;
		m.start = start;
		m.end = end;
		m.offset = offset;
		m.path = path ? path : "";
		if (!table_)
			table_.reset(new analyze::SymbolTable({}));
		table_->add(m);
	}
	// " name" when the sub-trace's mappings name addr, else "".
	const std::string &beside(const void *trace, uint64_t addr)
	{
		auto p = procs_.find(trace);
		if (p == procs_.end())
			return none_;
		auto &names = names_[p->second];
		auto it = names.find(addr);
		if (it == names.end()) {
			const std::string f = table_->lookup(p->second, addr, false).function;
			it = names.emplace(addr, f.empty() ? f : " " + f).first;
		}
		return it->second;
	}

private:
	std::unique_ptr<analyze::SymbolTable> table_;
	std::unordered_map<const void *, uint32_t> procs_;
	std::vector<std::unordered_map<uint64_t, std::string>> names_; // per process: its addresses' " name"
	const std::string none_;
};

// The root members' hex integers named (babeltrace2's reader).
struct Namer {
	ViewSymbols *syms;
	const void *trace;
};

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

// What the filters and the line's prefix need of an event, from either
// reader (babeltrace2's messages or Strata's own, trace_reader.h).
struct Ev {
	const void *trace = nullptr; // the sub-trace (a key)
	bool timed = false;
	int64_t ns = 0;
	bool has_tid = false;
	int64_t tid = -1;
	int64_t cpu = -1;
	const char *name = "";
};

// A sub-trace as the view names it: "procname[pid]", kernel or not, vpid.
struct TraceWho {
	std::string who;
	bool kernel = false;
	int64_t vpid = -1;
};

struct ViewSink {
	uint64_t limit = UINT64_MAX;
	uint64_t events = 0;
	// Filters (all must pass; an empty set lets everything through).
	std::set<int64_t> pids, tids;
	std::vector<std::string> patterns;
	TimeBound since, until;
	bool first_seen = false;
	std::unordered_map<int64_t, int64_t> tid_pid; // threads seen in user sub-traces
	std::map<const void *, TraceWho> traces;      // sub-trace -> its name (filled by the pump)
	const void *last_trace = nullptr;             // traces' last look-up
	const TraceWho *last_who = nullptr;
	LineBuf line;
	bool write_failed = false;
	uint64_t damaged = 0;   // Strata's reader: damage named
	bool show_host = false; // sub-traces of several machines: "host:procname[pid]"
	// Strata's reader: each event class's field labels, and the last one's.
	std::unordered_map<const MetaEvent *, std::vector<std::string>> labels;
	const MetaEvent *label_class = nullptr;
	const std::vector<std::string> *class_labels = nullptr;
	// The symbols beside addresses; Strata's reader: whether the last
	// event's class, sym_class, is pthread:mapping.
	ViewSymbols syms;
	const MetaEvent *sym_class = nullptr;
	bool sym_mapping = false;
	// The last event's line after its time (" who tid=T cpu=C name"), and
	// what it was made of: successive events of one thread share it.
	struct {
		const void *trace = nullptr;
		bool has_tid = false;
		int64_t tid = 0, cpu = 0;
		std::string name, text;
	} prefix;
};

const TraceWho &who_of(ViewSink &s, const void *trace)
{
	if (trace != s.last_trace) {
		s.last_trace = trace;
		s.last_who = &s.traces[trace];
	}
	return *s.last_who;
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

// The line's prefix: time, who, thread, CPU, name.
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

// A loss, from either reader.
struct Loss {
	const void *trace = nullptr;
	bool events = true;
	bool known = true;
	uint64_t count = 0;
	bool times = false;
	int64_t b = 0, e = 0;
	uint64_t stream = 0;
};

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

// After a message: false to stop (limit reached or output failed).
bool after_message(ViewSink &s, bool more)
{
	if ((s.line.size() > (1u << 16) || !more) && !flush_line(s))
		more = false;
	return more;
}

// ---- babeltrace2's messages (traces Strata did not write) -----------------

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

// One babeltrace2 message; false to stop (limit reached or output failed).
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

// ---- Strata's own reader ---------------------------------------------------

// A field as append_field prints babeltrace2's: the same text.
void append_value(LineBuf &out, const FieldValue &v)
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
		append_value(s.line, v);
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

// --pid with a kernel sub-trace: the kernel names threads, not their
// processes.  Read the other sub-traces once first to learn which process
// each of their threads is in, so that a kernel event of such a thread is
// shown from its first one (strata export does the same).
void learn_threads(ViewSink &s, const std::vector<std::string> &dirs, bool native)
{
	std::vector<std::string> user;
	std::string why, warnings;
	if (s.pids.empty())
		return;
	for (const std::string &d : dirs)
		if (!is_kernel_trace(d))
			user.push_back(d);
	if (user.empty() || user.size() == dirs.size())
		return;
	if (native) {
		TraceReader r;
		if (!r.open_dirs(user, &why))
			return;
		r.read([&s](const TraceMsg &m) {
			if (m.kind == TraceMsgKind::Event && m.event->tid >= 0)
				s.tid_pid.emplace(m.event->tid, m.event->trace().vpid);
			return true;
		});
		return;
	}
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

// --since/--until as the reader's window (docs/reading.md, "Merging and
// messages"): the packets wholly outside are not read.  The bounds are
// resolved first from the trace's first event, as filter_event() would
// resolve them (a pass of its own, which reads one packet per stream).
// Not with --pid (the threads' processes are learnt from the events read
// before), nor when a sub-trace records mappings (an address's symbol
// needs the mappings recorded before the window).
void window_pushdown(ViewSink &s, TraceReader &r)
{
	if ((!s.since.set && !s.until.set) || !s.pids.empty())
		return;
	for (const auto &t : r.traces())
		for (const auto &cls : t->meta.events)
			for (const auto &kv : cls.second)
				if (kv.second.full_name == "pthread:mapping")
					return;
	TraceReader first;
	first.share_index(r);
	first.start();
	TraceMsg m;
	while (first.next(&m)) {
		if (m.kind != TraceMsgKind::Event)
			continue;
		s.first_seen = true;
		resolve(s.since, m.event->ns);
		resolve(s.until, m.event->ns);
		r.set_window(s.since.set ? s.since.at : INT64_MIN, s.until.set ? s.until.at : INT64_MAX);
		return;
	}
}

int run_view(const std::vector<std::string> &roots, ViewSink &sink)
{
	std::string why, warnings;
	struct stat st;
	for (const std::string &root : roots)
		if (stat(root.c_str(), &st) != 0) { // plainly, before any reader or repair check
			std::fprintf(stderr, "strata view: no such trace '%s': %s\n", root.c_str(),
				     std::strerror(errno));
			return kExitFailure;
		}
	const std::string dir = roots_label(roots);
	std::vector<std::string> dirs;
	if (!find_trace_dirs(roots, &dirs, &why)) {
		std::fprintf(stderr, "strata view: %s\n", why.c_str());
		return kExitFailure;
	}
	const bool native = use_native_reader(dirs);
	sink.show_host = machines(dirs) > 1;
	learn_threads(sink, dirs, native);
	bool ok, skipped = false, none = false;
	if (native) {
		TraceReader r;
		ok = r.open_dirs(dirs, &why);
		if (ok)
			window_pushdown(sink, r);
		ok = ok && r.read_each([&](const TraceMsg &m) { return on_native(sink, m); });
		std::string unread;
		if (!rd::native_after_read(r, "view", dir, false, &warnings, &unread) && ok) {
			ok = false;
			why = unread;
		}
		skipped = ok && rd::native_skipped(r, &none);
		none = none && !sink.first_seen; // the window's pass read one
	} else {
		ok = read_ctf_trace_dirs(
			dirs, [&sink](const bt_message *msg) { return on_bt_message(sink, msg); }, &why,
			&warnings);
	}
	flush_line(sink);
	const bool flushed = std::fflush(stdout) == 0;
	if (!warnings.empty())
		std::fprintf(stderr, "strata view: warning: %s", warnings.c_str());
	if (skipped && none)
		rd::tell_none_read("view", dir);
	if (!ok) {
		std::fprintf(stderr, "strata view: %s\n", why.c_str());
		if (!native)
			cli::hint_torn("view", dir);
		return kExitFailure;
	}
	if (!flushed || sink.write_failed) {
		std::fprintf(stderr, "strata view: cannot write the output: %s\n", std::strerror(errno));
		return kExitFailure;
	}
	if (!sink.events && !skipped) // an empty answer is told, not silent
		std::fprintf(stderr, "strata view: %s\n",
			     sink.pids.empty() && sink.tids.empty() && sink.patterns.empty() &&
					     !sink.since.set && !sink.until.set
				     ? "the trace holds no event"
				     : "no event matched the filters (--pid, --tid, -e, --since, --until)");
	return skipped ? kExitFailure : kExitOk; // everything readable printed, damage skipped
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
	"view", "[-n N] [--pid PID] [--tid TID] [-e PATTERN] [--since T] [--until T] [--repair] [DIR...]",
	"Print the events of the trace(s) under DIR (default: the current directory),\n"
	"merged by time, one line per event.  Several DIRs are read as one trace (a\n"
	"host's and its guests', each placed by the clock map found in or above it):\n"
	"\n"
	"  [HH:MM:SS.nnnnnnnnn] PROCNAME[PID] tid=TID cpu=CPU PROVIDER:EVENT: { FIELD = VALUE, ... }\n"
	"\n"
	"Times are absolute, in local time (set TZ=UTC for UTC).  Enumerations print as\n"
	"'label (value)', strings quoted, arrays and sequences in [ ].  Lost data prints as\n"
	"'*** N events discarded ...' and '*** N packets discarded ...' lines.\n"
	"Every directory under DIR that holds a CTF 'metadata' file is read.",
	"",
	"Exit status: 0 ok (also when no event matched the filters, which is said on\n"
	"stderr), 1 the trace cannot be read or does not exist (the reason is printed),\n"
	"or damage was skipped (every readable event is printed first; 'strata check'\n"
	"names the damage), 2 usage error."};

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
int parse_view_args(int argc, char **argv, ViewSink &sink, std::vector<std::string> &roots, bool &repair)
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
	roots.assign(operands.begin(), operands.end());
	if (roots.empty())
		roots.push_back(".");
	return cli::kParsed;
}

} // namespace
} // namespace strata

int strata_cmd_view(int argc, char **argv)
{
	using namespace strata;
	ViewSink sink;
	std::vector<std::string> roots;
	bool repair = false;

	if (const int r = parse_view_args(argc, argv, sink, roots, repair); r != cli::kParsed)
		return r;
	if (sink.limit == 0)
		return kExitOk;
	for (const std::string &root : roots)
		if (repair && cli::run_consumerd_repair(root, false) != 0) {
			std::fprintf(stderr, "strata view: could not repair '%s'\n", root.c_str());
			return kExitFailure;
		}
	return run_view(roots, sink);
}
