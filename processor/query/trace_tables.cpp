// trace_tables.cpp - the `strata` SQLite module; contract in trace_tables.h,
// the tables and their types in docs/query.md.
#include "trace_tables.h"

#include <algorithm>
#include <charconv>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>

#include "json_writer.h"
#include "trace_reader.h"
#include "u64_aggregates.h"

namespace strata {
namespace query {
namespace {

enum class Kind { Events, Typed, Lost, Processes, Threads, Sched, Slices };

// The columns every event table starts with (docs/query.md).
enum : int { kTs, kMachine, kPid, kTid, kProcess, kThread, kCpu, kCommon };
const char *const kCommonCols[kCommon] = {"ts", "machine", "pid", "tid", "process", "thread", "cpu"};
const char *const kCommonDecl = "ts INTEGER, machine TEXT, pid INTEGER, tid INTEGER, process TEXT, "
				"thread TEXT, cpu INTEGER";
enum : int { kProvider = kCommon, kName, kFields };

// A field column of a typed table.
struct FieldCol {
	std::string name;
	const FieldInfo *info = nullptr; // of the class that named it first
	bool label = false;              // an enum's label column (name_label)
};

struct TypedTable {
	std::string name; // the class's full name
	std::vector<FieldCol> cols;
	// The sub-traces whose metadata has the class: the only ones a scan
	// reads.  Their orders as Trace::thread_ids and Trace::key_orders
	// (over these sub-traces' streams alone: a user class's table has them
	// when the trace has a kernel stream too).
	std::vector<const SubTrace *> subs;
	std::vector<int32_t> thread_ids;
	bool key_orders = false;
};

// How x_column gives a typed table's column for one class: a number at a
// fixed offset from the payload is loaded as it is (Int: signed, Uint:
// unsigned, of `bytes`), a float or an enum's label at a fixed offset is
// read there (Scalar), anything else decodes the fields up to it (Decode);
// None: the class has no such field (NULL).
struct ColPlan {
	enum Kind : uint8_t { None, Int, Uint, Scalar, Decode } kind = None;
	uint8_t bytes = 0;
	bool label = false;
	int32_t field = -1; // the field's index in the class
	int64_t off = -1;
};

// Where a class's fields go in its typed table, and its names as the
// events table gives them (valid UTF-8, made once: x_column hands them to
// SQLite without a copy).
struct ClassMap {
	size_t table = 0;
	std::vector<int> col;   // by field index: the value's column (from 0 after the common ones)
	std::vector<int> label; // by field index: an enum's label column, or -1
	// By field index: a scalar's offset from the payload when every field
	// before it has a fixed size, else -1 (x_column then reads it at once).
	std::vector<int64_t> off;
	std::vector<ColPlan> plan; // by column of its table (from 0 after the common ones)
	std::string provider, name;
};

// A sub-trace's names as the event tables give them (valid UTF-8).
struct SubText {
	std::string machine, process;
};

// The offsets of ClassMap::off, as TraceEvent::for_each_field lays the
// fields out (WIDE: each aligned to its size, from a payload 8-aligned).
std::vector<int64_t> scalar_offsets(const EventInfo &info, bool wide)
{
	std::vector<int64_t> off;
	int64_t o = 0;
	bool fixed = true;
	for (const FieldInfo &f : info.fields) {
		const int64_t b = f.elem_bits / 8 < 8 ? f.elem_bits / 8 : 8;
		const bool scalar =
			f.type == STRATA_FT_INTEGER || f.type == STRATA_FT_ENUM || f.type == STRATA_FT_FLOAT;
		if (fixed && wide && b > 1 && (scalar || f.type == STRATA_FT_ARRAY))
			o = (o + b - 1) & ~(b - 1);
		off.push_back(fixed && scalar ? o : -1);
		if (scalar)
			o += b;
		else if (f.type == STRATA_FT_ARRAY)
			o += (int64_t)f.length * b;
		else
			fixed = false;
	}
	return off;
}

// What the planner is told (x_best_index): sizes from the packet index,
// all a trace knows before it is read; records at kRecordBytes each (the
// mean of Strata's traces lies between 20 and 60).
struct Sizes {
	double events = 1, kernel_events = 1, shared_events = 0; // records
	double packets = 1, processes = 1, threads = 1, classes = 1, lost = 1;
	int64_t t0 = 0, t1 = 0; // the first packet's beginning, the last one's end
	// The packets' records (content / kRecordBytes) summed in the order of
	// their ends and of their beginnings (ns, the records up to and with
	// it): a window's rows from the packet index (window_records).
	std::vector<std::pair<int64_t, double>> by_end, by_begin;
	// The records of each process's streams, and of each thread's own
	// lanes (the packets name their thread); those of shared lanes and the
	// kernel's, whose threads the index does not know.
	std::unordered_map<int64_t, double> pid_records, tid_records;
	double unowned = 0;
};
constexpr double kRecordBytes = 32;

// One opened trace, shared by the tables of its path.
struct Trace {
	std::string path;
	TraceReader index;
	std::vector<TypedTable> typed;
	std::map<std::string, size_t> typed_by_name;
	std::unordered_map<const MetaEvent *, ClassMap> classes;
	std::unordered_map<const SubTrace *, SubText> sub_text;
	// By stream index: where its bytes begin in the trace's streams laid
	// end to end.  An event's rowid is its record's place there (stream
	// base + packet offset + payload offset): the same in every scan,
	// whatever window or filter the scan was given, so SQLite's
	// MULTI-INDEX OR (a scan per term, rows told apart by rowid) sees a
	// row twice only when it is the same row.
	std::vector<int64_t> stream_base;
	Sizes sizes;
	// When every stream is a thread's own lane (COMPACT, not shared: each
	// packet names its thread, and every record is that thread's): the
	// threads, in tid order.  An event table can then give its rows in tid
	// order (then ts), a pass per thread, for GROUP BY tid and ORDER BY tid
	// without SQLite's sorter.  Empty otherwise.
	std::vector<int32_t> thread_ids;
	// When no stream is the kernel's, every sub-trace has one machine, pid
	// and process name: an event table can give its rows grouped by any of
	// them, a pass per group of sub-traces (key_passes), for GROUP BY pid,
	// ORDER BY process... without SQLite's sorter.  False too when the
	// passes could cost more than the sorter (kThreadPassPackets).
	bool key_orders = false;
};

// Trace::stream_base: each stream's span ends past its last packet.
std::vector<int64_t> stream_bases(const TraceReader &index)
{
	std::vector<int64_t> base(index.streams().size(), 0);
	int64_t at = 1; // rowids from 1
	for (const auto &s : index.streams()) {
		base[s->index] = at;
		uint64_t end = 0;
		for (const PacketEntry &p : s->packets)
			end = std::max(end, p.offset + p.size);
		at += (int64_t)end + 1;
	}
	return base;
}

Sizes trace_sizes(const Trace &t)
{
	Sizes z;
	std::set<std::pair<const SubTrace *, int32_t>> threads;
	double events = 0, kernel = 0, shared = 0, packets = 0, lost = 1;
	int64_t t0 = INT64_MAX, t1 = INT64_MIN;
	for (const auto &s : t.index.streams()) {
		for (const PacketEntry &p : s->packets) {
			const double n = (double)(p.content > 88 ? p.content - 88 : 0) / kRecordBytes;
			events += n;
			kernel += s->trace->kernel ? n : 0;
			shared += s->shared ? n : 0;
			packets++;
			lost += p.discarded != 0;
			if (p.vtid >= 0)
				threads.insert({&whole_of(*s->trace), p.vtid});
			if (!s->trace->kernel)
				z.pid_records[s->trace->vpid] += n;
			if (p.vtid >= 0 && !s->shared)
				z.tid_records[p.vtid] += n;
			else
				z.unowned += n;
			const int64_t b = s->trace->meta.ns_from_origin(p.ts_begin);
			const int64_t e = s->trace->meta.ns_from_origin(p.ts_end);
			t0 = std::min(t0, b);
			t1 = std::max(t1, e);
			z.by_begin.emplace_back(b, n);
			z.by_end.emplace_back(e, n);
		}
	}
	for (auto *v : {&z.by_begin, &z.by_end}) {
		std::sort(v->begin(), v->end());
		double sum = 0;
		for (auto &x : *v)
			x.second = sum += x.second;
	}
	z.events = std::max(1.0, events);
	z.kernel_events = std::max(1.0, kernel);
	z.shared_events = shared;
	z.packets = std::max(1.0, packets);
	z.processes = std::max<double>(1, (double)t.index.traces().size());
	z.threads = std::max<double>(1, (double)threads.size());
	z.classes = std::max<double>(1, (double)t.typed.size());
	z.lost = lost;
	z.t0 = t0 <= t1 ? t0 : 0;
	z.t1 = t0 <= t1 ? t1 : 0;
	return z;
}

// What the thread and key orders need of one sub-trace's streams, found
// in one look at every packet: whether each is a thread's own lane
// (COMPACT, not shared, every packet naming its thread), their threads,
// and their packets (plus one a stream).
struct SubOrder {
	bool lanes = true, kernel = false;
	std::set<int32_t> tids;
	double packets = 0;
};

std::map<const SubTrace *, SubOrder> sub_orders(const TraceReader &index)
{
	std::map<const SubTrace *, SubOrder> out;
	for (const auto &s : index.streams()) {
		SubOrder &o = out[s->trace];
		o.kernel |= s->trace->kernel;
		o.lanes &=
			!s->shared && !s->trace->kernel && s->trace->meta.record_format == STRATA_REC_COMPACT;
		for (const PacketEntry &p : s->packets) {
			if (!o.lanes)
				break;
			o.lanes = p.vtid >= 0;
			o.tids.insert(p.vtid);
		}
		o.packets += (double)s->packets.size() + 1;
	}
	return out;
}

// Trace::thread_ids (TypedTable::thread_ids: of the sub-traces `subs`,
// null: all).  Each pass copies the index and looks at every packet: with
// threads x packets past kThreadPassPackets the passes would cost more
// than SQLite's sorter, and the trace has no thread order.
constexpr double kThreadPassPackets = 1 << 24;
std::vector<int32_t> thread_ids(const std::map<const SubTrace *, SubOrder> &orders,
				const std::vector<const SubTrace *> *subs)
{
	std::set<int32_t> tids;
	double packets = 0;
	for (const auto &[sub, o] : orders) {
		if (subs && std::find(subs->begin(), subs->end(), sub) == subs->end())
			continue;
		if (!o.lanes)
			return {};
		tids.insert(o.tids.begin(), o.tids.end());
		packets += o.packets;
	}
	if ((double)tids.size() * packets > kThreadPassPackets)
		return {};
	return std::vector<int32_t>(tids.begin(), tids.end());
}

// Trace::key_orders (TypedTable::key_orders: of the sub-traces `subs`):
// each pass copies the index, as thread_ids'.
bool key_orders(const std::map<const SubTrace *, SubOrder> &orders, const std::vector<const SubTrace *> *subs,
		double traces)
{
	double packets = 0;
	for (const auto &[sub, o] : orders) {
		if (subs && std::find(subs->begin(), subs->end(), sub) == subs->end())
			continue;
		if (o.kernel)
			return false;
		packets += o.packets;
	}
	return traces * packets <= kThreadPassPackets;
}

// Whether the scans that read only the sub-traces `subs` (null: all)
// read stream s.
bool among(const std::vector<const SubTrace *> *subs, const StreamInfo &s)
{
	return !subs || std::find(subs->begin(), subs->end(), s.trace) != subs->end();
}

// An event's rowid (Trace::stream_base).
inline int64_t event_rowid(const Trace &t, const TraceEvent &e)
{
	return t.stream_base[e.stream->index] + (int64_t)e.packet->offset + (int64_t)e.payload;
}

std::string quote_ident(const std::string &s)
{
	std::string o = "\"";
	for (char c : s)
		o += c == '"' ? std::string("\"\"") : std::string(1, c);
	return o + "\"";
}

std::string quote_text(const std::string &s)
{
	std::string o = "'";
	for (char c : s)
		o += c == '\'' ? std::string("''") : std::string(1, c);
	return o + "'";
}

bool is_u64(const FieldInfo &f)
{
	return (f.type == STRATA_FT_INTEGER || f.type == STRATA_FT_ENUM) && !f.is_signed && f.elem_bits >= 64;
}

const char *decl_type(const FieldInfo &f)
{
	switch (f.type) {
	case STRATA_FT_INTEGER:
		// "HEX": an address or a bit set (strata_hex), which `strata query`'s
		// table shows as 0x...; the value stays an integer, and a u64 keeps
		// no affinity ("BLOB" in a declared type, docs/query.md, "Types").
		if (f.base == 16)
			return is_u64(f) ? " HEX BLOB" : " INTEGER HEX";
		return is_u64(f) ? "" : " INTEGER"; // u64: no affinity (values past INT64_MAX are TEXT)
	case STRATA_FT_ENUM:
		return is_u64(f) ? "" : " INTEGER";
	case STRATA_FT_FLOAT:
		return " REAL";
	default:
		return " TEXT"; // strings; arrays and sequences as JSON
	}
}

std::string valid_utf8(const std::string &s)
{
	if (utf8_well_formed(std::string_view(s.data(), s.size())))
		return s;
	std::string o;
	utf8_append_repaired(o, std::string_view(s.data(), s.size()));
	return o;
}

// Each column's ColPlan for a class (its table's columns all known).
std::vector<ColPlan> col_plans(const MetaEvent &me, const ClassMap &cm, size_t ncols)
{
	std::vector<ColPlan> plan(ncols);
	for (size_t f = 0; f < cm.col.size(); f++) {
		const FieldInfo &fi = me.info.fields[f];
		const unsigned b = fi.elem_bits / 8 < 8 ? fi.elem_bits / 8 : 8;
		for (int label = 0; label < 2; label++) {
			const int c = label ? cm.label[f] : cm.col[f];
			if (c < 0)
				continue;
			ColPlan &p = plan[(size_t)c];
			p.field = (int32_t)f;
			p.label = label;
			p.off = cm.off[f];
			p.bytes = (uint8_t)b;
			const bool integer = fi.type == STRATA_FT_INTEGER || fi.type == STRATA_FT_ENUM;
			if (p.off < 0)
				p.kind = ColPlan::Decode;
			else if (integer && !label && (b == 1 || b == 2 || b == 4 || b == 8))
				p.kind = fi.is_signed ? ColPlan::Int : ColPlan::Uint;
			else
				p.kind = ColPlan::Scalar;
		}
	}
	return plan;
}

void build_typed(Trace *t)
{
	for (const auto &sub : t->index.traces()) {
		if (!sub->readable)
			continue;
		auto cls = sub->meta.events.find(sub->meta.stream_id);
		if (cls == sub->meta.events.end())
			continue;
		for (const auto &kv : cls->second) {
			const MetaEvent &me = kv.second;
			auto it = t->typed_by_name.find(me.full_name);
			if (it == t->typed_by_name.end()) {
				it = t->typed_by_name.emplace(me.full_name, t->typed.size()).first;
				t->typed.push_back(TypedTable{me.full_name, {}, {}, {}, false});
			}
			TypedTable &tt = t->typed[it->second];
			if (tt.subs.empty() || tt.subs.back() != sub.get())
				tt.subs.push_back(sub.get());
			ClassMap cm;
			cm.table = it->second;
			for (const FieldInfo &f : me.info.fields) {
				std::string col = f.name;
				for (const char *c : kCommonCols)
					if (col == c)
						col = "f_" + col;
				auto find = [&](const std::string &n, bool label) {
					for (size_t k = 0; k < tt.cols.size(); k++)
						if (tt.cols[k].name == n)
							return (int)k;
					tt.cols.push_back(FieldCol{n, &f, label});
					return (int)tt.cols.size() - 1;
				};
				cm.col.push_back(find(col, false));
				cm.label.push_back(f.type == STRATA_FT_ENUM ? find(col + "_label", true)
									    : -1);
			}
			cm.off = scalar_offsets(me.info, sub->meta.record_format != STRATA_REC_COMPACT);
			cm.provider = valid_utf8(sub->kernel ? std::string("kernel") : me.info.provider);
			cm.name = valid_utf8(me.full_name);
			t->classes.emplace(&me, std::move(cm));
		}
	}
	for (auto &kv : t->classes)
		kv.second.plan = col_plans(*kv.first, kv.second, t->typed[kv.second.table].cols.size());
	for (const auto &sub : t->index.traces())
		t->sub_text[sub.get()] = SubText{valid_utf8(sub->hostname), valid_utf8(sub->procname)};
}

// ---- values -----------------------------------------------------------------

void result_text(sqlite3_context *ctx, const char *s, size_t n)
{
	if (utf8_well_formed(std::string_view(s, n))) {
		sqlite3_result_text(ctx, s, (int)n, SQLITE_TRANSIENT);
		return;
	}
	std::string o;
	utf8_append_repaired(o, std::string_view(s, n));
	sqlite3_result_text(ctx, o.data(), (int)o.size(), SQLITE_TRANSIENT);
}

__attribute__((noinline)) void result_u64_text(sqlite3_context *ctx, uint64_t v)
{
	char b[24];
	const int n = (int)(std::to_chars(b, b + sizeof b, v).ptr - b);
	sqlite3_result_text(ctx, b, n, SQLITE_TRANSIENT);
}

inline void result_u64(sqlite3_context *ctx, uint64_t v)
{
	if (__builtin_expect(v <= (uint64_t)INT64_MAX, 1))
		sqlite3_result_int64(ctx, (int64_t)v);
	else
		result_u64_text(ctx, v); // past INT64_MAX: its exact digits, as TEXT
}

// A u64's decimal digits (a value past INT64_MAX, exact, as TEXT).
void append_decimal(std::string *o, uint64_t v)
{
	char b[24];
	o->append(b, (size_t)(std::to_chars(b, b + sizeof b, v).ptr - b));
}

const char *enum_label(const FieldInfo &f, int64_t v)
{
	for (const EnumLabel &l : f.labels)
		if (v >= l.first && v <= l.last)
			return l.label.c_str();
	return nullptr;
}

int64_t int_value(const FieldValue &v)
{
	return v.info->is_signed ? v.i : (int64_t)v.u;
}

// An array's or a sequence's elements as a JSON array (its column's text).
void json_elems(JsonWriter &w, const FieldValue &v)
{
	w.begin_array();
	for (uint32_t k = 0; k < v.count; k++)
		if (v.info->is_signed)
			w.i64(v.elem_i(k));
		else
			w.u64(v.elem_u(k));
	w.end_array();
}

void json_elems_text(std::string *o, const FieldValue &v)
{
	JsonWriter w(*o, JsonWriter::Style::kCompact);
	json_elems(w, v);
}

// A field's value as JSON (an enum's value only: its label is a key of its
// own); a float as `--json` writes a REAL (JsonWriter::real).
void json_value(JsonWriter &w, const FieldValue &v)
{
	switch (v.info->type) {
	case STRATA_FT_INTEGER:
	case STRATA_FT_ENUM:
		if (v.info->is_signed)
			w.i64(v.i);
		else
			w.u64(v.u);
		break;
	case STRATA_FT_FLOAT:
		w.real(v.d);
		break;
	case STRATA_FT_STRING:
		w.str(std::string_view(v.str, v.len));
		break;
	case STRATA_FT_ARRAY:
	case STRATA_FT_SEQUENCE:
		json_elems(w, v);
		break;
	default:
		w.null();
	}
}

void json_fields(std::string *o, const std::vector<FieldValue> &fv)
{
	JsonWriter w(*o, JsonWriter::Style::kCompact);
	w.begin_object();
	for (const FieldValue &v : fv) {
		w.key(std::string_view(v.info->name.data(), v.info->name.size()));
		json_value(w, v);
		if (v.info->type == STRATA_FT_ENUM) {
			w.key(v.info->name + "_label");
			const char *l = enum_label(*v.info, int_value(v));
			if (l)
				w.str(l);
			else
				w.null();
		}
	}
	w.end_object();
}

void result_field(sqlite3_context *ctx, const FieldValue &v, bool label)
{
	const FieldInfo &f = *v.info;
	if (label) {
		const char *l = enum_label(f, int_value(v));
		if (l)
			sqlite3_result_text(ctx, l, -1, SQLITE_TRANSIENT);
		else
			sqlite3_result_null(ctx);
		return;
	}
	switch (f.type) {
	case STRATA_FT_INTEGER:
	case STRATA_FT_ENUM:
		if (f.is_signed)
			sqlite3_result_int64(ctx, v.i);
		else
			result_u64(ctx, v.u);
		return;
	case STRATA_FT_FLOAT:
		sqlite3_result_double(ctx, v.d); // NaN comes out NULL (SQLite)
		return;
	case STRATA_FT_STRING:
		result_text(ctx, v.str, v.len);
		return;
	case STRATA_FT_ARRAY:
	case STRATA_FT_SEQUENCE: {
		std::string o;
		json_elems_text(&o, v);
		sqlite3_result_text(ctx, o.data(), (int)o.size(), SQLITE_TRANSIENT);
		return;
	}
	default:
		sqlite3_result_null(ctx);
	}
}

// ---- the registry: a connection's open traces -------------------------------

struct Registry {
	std::map<std::string, std::weak_ptr<Trace>> traces;
	std::vector<std::shared_ptr<Trace>> open; // strata_open's, kept while its tables exist
	std::vector<std::string> made;            // strata_open's tables and views (to drop on the next)
	std::set<std::string> told;               // damage already told
	std::vector<std::string> untold;
	uint64_t bytes = 0;
};

std::mutex g_reg_mu; // guards g_regs (connections may live on several threads)
std::map<sqlite3 *, Registry *> g_regs;

Registry *registry_of(sqlite3 *db)
{
	std::lock_guard<std::mutex> g(g_reg_mu);
	auto it = g_regs.find(db);
	return it == g_regs.end() ? nullptr : it->second;
}

void note_damage(Registry *reg, const std::string &line)
{
	if (reg->told.insert(line).second)
		reg->untold.push_back(line);
}

std::shared_ptr<Trace> get_trace(Registry *reg, const std::string &path, std::string *why)
{
	auto it = reg->traces.find(path);
	if (it != reg->traces.end())
		if (auto t = it->second.lock())
			return t;
	auto t = std::make_shared<Trace>();
	t->path = path;
	// Several roots read as one trace: their paths joined by '\n'
	// (open_trace refuses a path holding one).
	std::vector<std::string> roots, dirs;
	for (size_t at = 0;;) {
		const size_t nl = path.find('\n', at);
		roots.push_back(path.substr(at, nl == std::string::npos ? nl : nl - at));
		if (nl == std::string::npos)
			break;
		at = nl + 1;
	}
	if (!find_trace_dirs(roots, &dirs, why) || !t->index.open_dirs(dirs, why))
		return nullptr;
	size_t readable = 0;
	for (const auto &sub : t->index.traces()) {
		readable += sub->readable;
		if (!sub->readable)
			note_damage(reg, "cannot read " + sub->dir + ": " + sub->why);
	}
	if (!readable) {
		*why = "no sub-trace under '" + roots_label(roots) + "' can be read";
		return nullptr;
	}
	build_typed(t.get());
	t->stream_base = stream_bases(t->index);
	t->sizes = trace_sizes(*t);
	const auto orders = sub_orders(t->index);
	const double traces = (double)t->index.traces().size();
	t->thread_ids = thread_ids(orders, nullptr);
	t->key_orders = key_orders(orders, nullptr, traces);
	for (TypedTable &tt : t->typed) {
		tt.thread_ids = thread_ids(orders, &tt.subs);
		tt.key_orders = key_orders(orders, &tt.subs, traces);
	}
	reg->traces[path] = t;
	return t;
}

// ---- the tables -------------------------------------------------------------

struct Vtab : sqlite3_vtab {
	Registry *reg = nullptr;
	std::shared_ptr<Trace> t;
	Kind kind = Kind::Events;
	size_t typed = 0;
};

// A row of the small tables (processes, threads, lost): made whole at xFilter.
struct Cell {
	enum { Null, Int, Real, Text } type = Null;
	int64_t i = 0;
	double d = 0;
	std::string s;
};
Cell cint(int64_t v)
{
	Cell c;
	c.type = Cell::Int;
	c.i = v;
	return c;
}
Cell ctext(const std::string &v)
{
	Cell c;
	c.type = Cell::Text;
	c.s = v;
	return c;
}

// ---- slices: begin/end pairs, one pass ----------------------------------------
//
// The `slices` table pairs beginnings and ends (docs/query.md) in one pass
// over the trace: each event is given to the kinds it may begin or end,
// and the pairings that need what came before keep a state per key
// (bounded by what is pending: an acquisition not yet released, a syscall
// not yet exited).  The rows are those of the SQL over the typed tables
// that it replaces (`strata analyze mutex`'s pairing of holds, below).

enum : unsigned {
	kSlLockWait = 1,
	kSlCondWait = 2,
	kSlLockHold = 4,
	kSlMonitorWait = 8,
	kSlSyscall = 16,
	kSlAll = 31
};

// What one event class gives the slices: field indices (-1: none).
struct SliceClass {
	unsigned wait = 0; // kSlLockWait, kSlCondWait or kSlMonitorWait: a row ending at ts
	int f_wait = -1, f_obj = -1, f_caller = -1, f_ret = -1, f_hold = -1, f_age = -1, f_lock = -1;
	bool held = false;     // mutex_held, mutex_tryheld: a hold row; an acquisition at ts - hold_ns
	bool acq = false;      // a full acquisition (ret 0 or 130) at ts
	bool excl = true;      // acq: not a read lock
	bool acquired = false; // mutex_acquired, mutex_tryacquired: acquired age_ns before ts
	bool release = false;  // mutex_unlock, rwlock_unlock
	bool sys = false, sys_entry = false; // named syscall_* (syscall_entry_*), any case
	std::string_view name;               // the row's name (the class's, less its provider)
	std::string exit_name;               // sys_entry: the exit that ends it
	bool any() const { return wait || held || acq || acquired || release || sys; }
};

bool ascii_prefix_nocase(const std::string &s, const char *p)
{
	const size_t n = strlen(p);
	if (s.size() < n)
		return false;
	for (size_t i = 0; i < n; i++)
		if (tolower((unsigned char)s[i]) != p[i])
			return false;
	return true;
}

// Which parts of the pairing this trace has (the SQL made a part only for
// the classes present): full holds need an acquisition and a release class,
// syscalls an entry class.
struct SliceParts {
	bool holds = false, syscalls = false;
};

SliceParts slice_parts(const Trace &t)
{
	SliceParts p;
	bool acq = false, rel = false;
	for (const auto &kv : t.typed_by_name) {
		const std::string &n = kv.first;
		for (const char *a :
		     {"pthread:mutex_lock", "pthread:mutex_timedlock", "pthread:mutex_trylock",
		      "pthread:rwlock_rdlock", "pthread:rwlock_wrlock", "pthread:rwlock_tryrdlock",
		      "pthread:rwlock_trywrlock", "pthread:mutex_acquired", "pthread:mutex_tryacquired",
		      "pthread:mutex_held", "pthread:mutex_tryheld"})
			acq |= n == a;
		rel |= n == "pthread:mutex_unlock" || n == "pthread:rwlock_unlock";
		p.syscalls |= n.compare(0, 14, "syscall_entry_") == 0;
	}
	p.holds = acq && rel;
	return p;
}

SliceClass slice_class(const MetaEvent &me)
{
	SliceClass c;
	const std::string &n = me.full_name;
	auto field = [&](const char *f) {
		for (size_t k = 0; k < me.info.fields.size(); k++)
			if (me.info.fields[k].name == f)
				return (int)k;
		return -1;
	};
	auto is = [&](std::initializer_list<const char *> names) {
		for (const char *x : names)
			if (n == x)
				return true;
		return false;
	};
	c.name = std::string_view(n);
	if (n.compare(0, 8, "pthread:") == 0)
		c.name.remove_prefix(8);
	else if (n.compare(0, 4, "jvm:") == 0)
		c.name.remove_prefix(4);
	c.f_lock = field("lock");
	c.f_caller = field("caller");
	if (is({"pthread:mutex_lock", "pthread:mutex_timedlock", "pthread:rwlock_rdlock",
		"pthread:rwlock_wrlock", "pthread:sem_wait", "pthread:sem_timedwait"}) &&
	    field("wait_ns") >= 0 && c.f_lock >= 0) {
		c.wait = kSlLockWait;
		c.f_wait = field("wait_ns");
		c.f_obj = c.f_lock;
	}
	if (is({"pthread:cond_wait", "pthread:cond_timedwait"}) && field("wait_ns") >= 0 &&
	    field("cond") >= 0) {
		c.wait = kSlCondWait;
		c.f_wait = field("wait_ns");
		c.f_obj = field("cond");
	}
	if (is({"jvm:monitor_contended_entered", "jvm:monitor_waited"}) && field("wait_ns") >= 0) {
		c.wait = kSlMonitorWait;
		c.f_wait = field("wait_ns");
		c.f_obj = field("class");
		c.f_caller = -1;
	}
	if (is({"pthread:mutex_held", "pthread:mutex_tryheld"}) && field("hold_ns") >= 0) {
		c.held = true;
		c.f_hold = field("hold_ns");
	}
	if (is({"pthread:mutex_lock", "pthread:mutex_timedlock", "pthread:mutex_trylock",
		"pthread:rwlock_rdlock", "pthread:rwlock_wrlock", "pthread:rwlock_tryrdlock",
		"pthread:rwlock_trywrlock"}) &&
	    field("ret") >= 0 && c.f_caller >= 0) {
		c.acq = true;
		c.f_ret = field("ret");
		c.excl = n.find("rdlock") == std::string::npos;
	}
	if (is({"pthread:mutex_acquired", "pthread:mutex_tryacquired"}) && field("age_ns") >= 0) {
		c.acquired = true;
		c.f_age = field("age_ns");
	}
	c.release = is({"pthread:mutex_unlock", "pthread:rwlock_unlock"});
	c.sys = ascii_prefix_nocase(n, "syscall_");
	c.sys_entry = ascii_prefix_nocase(n, "syscall_entry_");
	if (c.sys_entry) {
		c.name = std::string_view(n).substr(14);
		c.exit_name = "syscall_exit_" + n.substr(14);
	}
	return c;
}

// A field's value as its typed table's column gives it.
Cell cell_of(const FieldValue &v)
{
	Cell c;
	switch (v.info->type) {
	case STRATA_FT_INTEGER:
	case STRATA_FT_ENUM:
		if (v.info->is_signed || v.u <= (uint64_t)INT64_MAX)
			return cint(v.info->is_signed ? v.i : (int64_t)v.u);
		c.type = Cell::Text;
		append_decimal(&c.s, v.u);
		return c;
	case STRATA_FT_FLOAT:
		if (std::isnan(v.d))
			return c;
		c.type = Cell::Real;
		c.d = v.d;
		return c;
	case STRATA_FT_STRING:
		c.type = Cell::Text;
		if (utf8_well_formed(std::string_view(v.str, v.len)))
			c.s.assign(v.str, v.len);
		else
			utf8_append_repaired(c.s, std::string_view(v.str, v.len));
		return c;
	case STRATA_FT_ARRAY:
	case STRATA_FT_SEQUENCE:
		c.type = Cell::Text;
		json_elems_text(&c.s, v);
		return c;
	default:
		return c;
	}
}

// SQLite's `ts - x` for an INTEGER ts and a column's value x.
Cell cell_minus(int64_t ts, const Cell &x)
{
	if (x.type == Cell::Int)
		return cint(ts - x.i);
	Cell c;
	if (x.type == Cell::Null)
		return c;
	c.type = Cell::Real;
	c.d = (double)ts - (x.type == Cell::Real ? x.d : strtod(x.s.c_str(), nullptr));
	return c;
}

// SQLite's `x > 0` (TEXT compares above every number).
bool cell_positive(const Cell &x)
{
	return x.type == Cell::Text || (x.type == Cell::Int && x.i > 0) || (x.type == Cell::Real && x.d > 0);
}

// A time for the pairing's comparisons (a value past INT64_MAX: its bits).
int64_t cell_time(const Cell &x)
{
	if (x.type == Cell::Int)
		return x.i;
	if (x.type == Cell::Real)
		return (int64_t)x.d;
	return x.type == Cell::Text ? (int64_t)strtoull(x.s.c_str(), nullptr, 10) : 0;
}

struct SliceRow {
	const char *kind = nullptr;
	std::string_view name;
	Cell ts, ts_end, dur, object, caller;
	const SubTrace *sub = nullptr;
	int32_t tid = -1;
	int64_t rowid = 0; // the ending event's rowid * 4 + the row's slot (SliceSlot)
};

// The slice rows one event can make, a slot each (the low bits of their rowids).
enum SliceSlot : int { kSlotSyscall, kSlotWait, kSlotHeld, kSlotHold };

enum : int {
	kSlKind,
	kSlName,
	kSlTs,
	kSlTsEnd,
	kSlDur,
	kSlMachine,
	kSlPid,
	kSlTid,
	kSlProcess,
	kSlObject,
	kSlCaller
};
const char *const kSlicesDecl =
	"CREATE TABLE x(kind TEXT, name TEXT, ts INTEGER, ts_end INTEGER, dur INTEGER, "
	"machine TEXT, pid INTEGER, tid INTEGER, process TEXT, object, caller HEX BLOB)";

// The pass's state.  Holds of full records follow `strata analyze mutex`
// (docs/query.md): an acquisition A of lock L by thread T (a full
// mutex_lock, rwlock_*lock or their tries, or a mutex_acquired, at its
// acquisition time) makes a hold when the next of T's rows on L in time
// (acquisitions, the compact records' at ts - hold_ns, releases) is a
// release R; the hold ends at R, or earlier when the next acquisition of
// L by any thread in record order (`pos`: the record's ts) was recorded
// before R and one of the two is exclusive: then at that acquisition's
// time, or at A if that was later.  Records come in time order, so a
// release ends the pending acquisition of its (T, L) at once: an
// acquisition read after it lies at or past it.
struct SliceState {
	struct TKey {
		int proc;
		int32_t tid;
		uint64_t lock;
		bool operator==(const TKey &o) const
		{
			return proc == o.proc && tid == o.tid && lock == o.lock;
		}
	};
	struct TKeyHash {
		size_t operator()(const TKey &k) const
		{
			return std::hash<uint64_t>()(k.lock * 0x9e3779b97f4a7c15ull ^
						     ((uint64_t)k.proc << 32) ^ (uint32_t)k.tid);
		}
	};
	struct Pending {
		int64_t a = 0; // acquired at
		Cell caller;
		std::string_view name;
		const SubTrace *sub = nullptr;
		bool excl = true;
		bool has_next = false; // the lock's next acquisition (any thread) is known
		int64_t nat = 0, npos = 0;
		bool nexcl = false;
		uint64_t seq = 0;
	};
	struct LKey {
		int proc;
		uint64_t lock;
		bool operator==(const LKey &o) const { return proc == o.proc && lock == o.lock; }
	};
	struct LKeyHash {
		size_t operator()(const LKey &k) const
		{
			return std::hash<uint64_t>()(k.lock * 0x9e3779b97f4a7c15ull ^ (uint64_t)k.proc);
		}
	};
	struct Last { // the lock's last acquisition, when it is a pending one
		int32_t tid;
		uint64_t seq;
	};
	struct Sys {
		const SliceClass *entry;
		int64_t ts;
		const SubTrace *sub;
	};
	const Trace *t = nullptr;
	SliceParts parts;
	unsigned kinds = kSlAll;
	int64_t begin_max = INT64_MAX; // holds: no acquisition after this can make a row
	int64_t end_max = INT64_MAX;   // no row ends after this
	std::unordered_map<const MetaEvent *, SliceClass> classes;
	const MetaEvent *last_cls = nullptr;
	const SliceClass *last_sc = nullptr;
	std::map<std::pair<std::string, int64_t>, int> proc_ids; // (machine, pid)
	std::map<std::string, int> host_ids;
	std::unordered_map<const SubTrace *, std::pair<int, int>> sub_ids; // (proc, host)
	const SubTrace *last_sub = nullptr;
	std::pair<int, int> last_ids;
	std::unordered_map<TKey, Pending, TKeyHash> pending;
	std::unordered_map<LKey, Last, LKeyHash> last;
	std::map<std::pair<int, int32_t>, Sys> sys; // (host, tid): a syscall entered
	uint64_t seq = 0;
	std::vector<FieldValue> fv;
	std::vector<SliceRow> rows; // the first nrows are the rows ready (the others kept for reuse)
	size_t nrows = 0, ri = 0;
	bool done = false;

	const SliceClass &class_of(const MetaEvent *m)
	{
		if (m == last_cls)
			return *last_sc;
		auto it = classes.find(m);
		if (it == classes.end())
			it = classes.emplace(m, slice_class(*m)).first;
		last_cls = m;
		last_sc = &it->second;
		return it->second;
	}
	std::pair<int, int> ids(const SubTrace *sub)
	{
		if (sub == last_sub)
			return last_ids;
		last_sub = sub;
		auto it = sub_ids.find(sub);
		if (it != sub_ids.end())
			return last_ids = it->second;
		last_ids = make_ids(sub);
		return last_ids;
	}
	std::pair<int, int> make_ids(const SubTrace *sub)
	{
		auto it = sub_ids.find(sub);
		if (it != sub_ids.end())
			return it->second;
		const int p =
			proc_ids.emplace(std::make_pair(sub->hostname, sub->kernel ? INT64_MIN : sub->vpid),
					 (int)proc_ids.size())
				.first->second;
		const int h = host_ids.emplace(sub->hostname, (int)host_ids.size()).first->second;
		return sub_ids[sub] = {p, h};
	}
	SliceRow &row(const char *kind, std::string_view name, const TraceEvent &e, SliceSlot slot)
	{
		SliceRow &r = next_row(e, slot);
		r.kind = kind;
		r.name = name;
		r.sub = &e.trace();
		r.tid = e.tid;
		return r;
	}

	SliceRow &next_row(const TraceEvent &e, SliceSlot slot)
	{
		if (nrows == rows.size())
			rows.emplace_back();
		SliceRow &r = rows[nrows++];
		r.rowid = event_rowid(*t, e) * 4 + slot;
		for (Cell *c : {&r.ts, &r.ts_end, &r.dur, &r.object, &r.caller}) {
			c->type = Cell::Null;
			c->s.clear();
		}
		return r;
	}

	// An acquisition row of the pairing: at time xa, read at xpos.
	void acquisition(const TKey &k, int64_t xa, int64_t xpos, bool xexcl, bool full, const SliceClass &sc,
			 const TraceEvent &e, Cell caller)
	{
		if (!full && pending.empty())
			return; // no hold pending: an acquisition that begins none changes nothing
		const LKey lk{k.proc, k.lock};
		auto li = last.find(lk);
		if (li != last.end()) {
			auto p = pending.find(TKey{k.proc, li->second.tid, k.lock});
			if (p != pending.end() && p->second.seq == li->second.seq && !p->second.has_next) {
				p->second.has_next = true;
				p->second.nat = xa;
				p->second.npos = xpos;
				p->second.nexcl = xexcl;
			}
			last.erase(li);
		}
		auto p = pending.find(k);
		if (p != pending.end() && (xa == xpos || xa > p->second.a)) {
			pending.erase(p); // its thread's next row on the lock is this acquisition: no hold
			p = pending.end();
		}
		if (!full || p != pending.end() || xa > begin_max)
			return;
		Pending &n = pending[k];
		n.a = xa;
		n.caller = std::move(caller);
		n.name = sc.name;
		n.sub = &e.trace();
		n.excl = xexcl;
		n.seq = ++seq;
		last[lk] = Last{k.tid, n.seq};
	}

	void release(const TKey &k, const TraceEvent &e)
	{
		auto p = pending.find(k);
		if (p == pending.end())
			return;
		const Pending &a = p->second;
		const int64_t end =
			a.has_next && a.npos < e.ns && (a.excl || a.nexcl) ? std::max(a.nat, a.a) : e.ns;
		if (end <= end_max) {
			SliceRow &r = next_row(e, kSlotHold);
			r.kind = "lock_hold";
			r.name = a.name;
			r.ts = cint(a.a);
			r.ts_end = cint(end);
			r.dur = cint(end - a.a);
			r.object = k.lock <= (uint64_t)INT64_MAX ? cint((int64_t)k.lock) : Cell();
			if (k.lock > (uint64_t)INT64_MAX) {
				r.object.type = Cell::Text;
				append_decimal(&r.object.s, k.lock);
			}
			r.caller = a.caller;
			r.sub = a.sub;
			r.tid = k.tid;
		}
		pending.erase(p);
	}

	// One event: the rows it ends, the state it changes.
	void event(const TraceEvent &e)
	{
		const SliceClass &sc = class_of(e.cls);
		if (!sc.any())
			return;
		const bool past = e.ns > end_max; // only ends pending holds
		if (sc.sys && (kinds & kSlSyscall) && parts.syscalls && !past) {
			const std::pair<int, int32_t> k{ids(&e.trace()).second, e.tid};
			auto it = sys.find(k);
			if (it != sys.end() && it->second.entry->exit_name == e.cls->full_name) {
				SliceRow &r = row("syscall", it->second.entry->name, e, kSlotSyscall);
				r.ts = cint(it->second.ts);
				r.ts_end = cint(e.ns);
				r.dur = cint(e.ns - it->second.ts);
				r.sub = it->second.sub;
			}
			if (sc.sys_entry && e.ns <= begin_max)
				sys[k] = Sys{&sc, e.ns, &e.trace()};
			else if (it != sys.end())
				sys.erase(it);
		}
		const bool pair = (kinds & kSlLockHold) && parts.holds;
		const bool wait = sc.wait && (kinds & sc.wait) && !past;
		const bool held = sc.held && (kinds & kSlLockHold);
		if (!wait && !held && !(pair && (sc.acq || sc.acquired || sc.release)))
			return;
		e.decode(&fv);
		if (wait) {
			const Cell w = cell_of(fv[(size_t)sc.f_wait]);
			if (sc.wait != kSlLockWait || cell_positive(w)) {
				SliceRow &r = row(sc.wait == kSlLockWait   ? "lock_wait"
						  : sc.wait == kSlCondWait ? "cond_wait"
									   : "monitor_wait",
						  sc.name, e, kSlotWait);
				r.ts = cell_minus(e.ns, w);
				r.ts_end = cint(e.ns);
				r.dur = w;
				if (sc.f_obj >= 0)
					r.object = cell_of(fv[(size_t)sc.f_obj]);
				if (sc.f_caller >= 0 && sc.wait != kSlMonitorWait)
					r.caller = cell_of(fv[(size_t)sc.f_caller]);
			}
		}
		if (held && !past) {
			const Cell h = cell_of(fv[(size_t)sc.f_hold]);
			SliceRow &r = row("lock_hold", sc.name, e, kSlotHeld);
			r.ts = cell_minus(e.ns, h);
			r.ts_end = cint(e.ns);
			r.dur = h;
			if (sc.f_lock >= 0)
				r.object = cell_of(fv[(size_t)sc.f_lock]);
		}
		if (!pair || sc.f_lock < 0)
			return;
		const FieldValue &lv = fv[(size_t)sc.f_lock];
		if (lv.info->type != STRATA_FT_INTEGER && lv.info->type != STRATA_FT_ENUM)
			return;
		const TKey k{ids(&e.trace()).first, e.tid, lv.u};
		if (sc.release) {
			release(k, e);
		} else if (sc.acq) {
			const Cell ret = cell_of(fv[(size_t)sc.f_ret]);
			if (ret.type == Cell::Int && (ret.i == 0 || ret.i == 130))
				acquisition(k, e.ns, e.ns, sc.excl, true, sc, e,
					    cell_of(fv[(size_t)sc.f_caller]));
		} else if (sc.acquired) {
			acquisition(k, cell_time(cell_minus(e.ns, cell_of(fv[(size_t)sc.f_age]))), e.ns, true,
				    true, sc, e, Cell());
		} else if (sc.held) {
			acquisition(k, cell_time(cell_minus(e.ns, cell_of(fv[(size_t)sc.f_hold]))), e.ns,
				    true, false, sc, e, Cell());
		}
	}
};

struct Cur : sqlite3_vtab_cursor {
	std::unique_ptr<TraceReader> r;
	TraceMsg m;
	bool eof = true;
	int64_t lo = INT64_MIN, hi = INT64_MAX;
	bool want_pid = false, want_tid = false;
	bool filtered = false; // a window, want_pid or want_tid: checked per row
	// In thread order (x_best_index's idxNum bit 2): a pass per thread of
	// Trace::thread_ids, this the pass_k-th, its tid as cur->tid.  In the
	// order of a key (idxNum's key bits): a pass per group, the pass_k-th.
	bool by_thread = false;
	size_t pass_k = 0;
	std::vector<std::vector<const SubTrace *>> groups;
	int64_t pid = 0, tid = 0;
	// The current event's fields, decoded on first use.
	std::vector<FieldValue> fv;
	int decoded = 0;              // fields of fv decoded (the first ones)
	const ClassMap *cm = nullptr; // the event's class (typed: only its table's)
	const MetaEvent *cm_cls = nullptr, *other_cls = nullptr; // the classes last looked up
	const SubTrace *tsub = nullptr;                          // the sub-trace last looked up
	const SubText *tsub_text = nullptr;                      // and its names
	std::string json;                                        // the fields column's text
	// Small tables; sched's rows ready to be read (and their rowids: the
	// rowid of the switch that began the slice).
	std::vector<std::vector<Cell>> rows;
	std::vector<int64_t> row_ids;
	size_t ri = 0;
	uint64_t bytes_before = 0;
	// sched: each CPU's slice begun and not yet ended; what each class
	// gives (SchedClass); each thread's first wake-up since it last ran
	// and the process the kernel's forks last gave it; the user
	// sub-traces' threads by kernel sub-trace (sched_user_pids).
	struct Running {
		int64_t ts = 0, tid = 0, prio = 0;
		std::string comm;
		Cell pid;
		int64_t wake = INT64_MIN; // none
		int64_t rowid = 0;        // of the switch that began it
	};
	struct SchedClass {
		enum { None, Switch, Wake, Fork } kind = None;
		std::vector<int> idx; // Switch: prev_tid, prev_state, next_comm, next_tid, next_prio;
				      // Wake: tid; Fork: parent_tid, parent_pid, child_tid, child_pid
	};
	std::map<std::pair<const SubTrace *, int32_t>, Running> running;
	std::unordered_map<const MetaEvent *, SchedClass> sched_classes;
	struct SubTid {
		size_t operator()(const std::pair<const SubTrace *, int64_t> &k) const
		{
			return std::hash<int64_t>()(k.second) ^ std::hash<const void *>()(k.first);
		}
	};
	// By (kernel sub-trace, tid): the first wake-up since it ran; the fork's pid.
	std::unordered_map<std::pair<const SubTrace *, int64_t>, int64_t, SubTid> woken, forked;
	bool sched_history = false; // pid or a wake column asked for: read from the start
	std::map<const SubTrace *, std::unordered_map<int64_t, std::vector<std::pair<int64_t, int64_t>>>>
		user_pids; // kernel sub-trace -> tid -> (since, pid), by since
	bool sched_done = false;
	std::unique_ptr<SliceState> sl; // slices
};

const char *const kLostDecl =
	"CREATE TABLE x(ts INTEGER, ts_end INTEGER, machine TEXT, pid INTEGER, process TEXT, tid INTEGER, "
	"stream TEXT, kind TEXT, count INTEGER, bytes INTEGER, why TEXT)";
const char *const kProcDecl = "CREATE TABLE x(machine TEXT, pid INTEGER, process TEXT, domain TEXT, "
			      "ts INTEGER, ts_end INTEGER, streams INTEGER, packets INTEGER, bytes "
			      "INTEGER, trace TEXT)";
const char *const kSchedDecl =
	"CREATE TABLE x(ts INTEGER, ts_end INTEGER, dur INTEGER, machine TEXT, cpu INTEGER, pid INTEGER, "
	"tid INTEGER, comm TEXT, prio INTEGER, end_state INTEGER, next_tid INTEGER, next_comm TEXT, "
	"wake_ts INTEGER, wake_latency INTEGER)";
enum : int { kSchedPid = 5, kSchedWakeTs = 12, kSchedWakeLatency = 13 };
const char *const kThreadDecl =
	"CREATE TABLE x(machine TEXT, pid INTEGER, tid INTEGER, process TEXT, thread TEXT, ts INTEGER, "
	"ts_end INTEGER, packets INTEGER)";

std::string unquote(const char *a)
{
	std::string s = a;
	while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
		s.pop_back();
	size_t b = 0;
	while (b < s.size() && (s[b] == ' ' || s[b] == '\t'))
		b++;
	s = s.substr(b);
	if (s.size() >= 2 && (s[0] == '\'' || s[0] == '"') && s.back() == s[0]) {
		const char q = s[0];
		std::string o;
		for (size_t i = 1; i + 1 < s.size(); i++) {
			o += s[i];
			if (s[i] == q && i + 2 < s.size() && s[i + 1] == q)
				i++;
		}
		return o;
	}
	return s;
}

int x_connect(sqlite3 *db, void *aux, int argc, const char *const *argv, sqlite3_vtab **out, char **err)
{
	auto *reg = (Registry *)aux;
	if (argc != 5) {
		*err = sqlite3_mprintf("strata: USING strata('TRACE PATH', 'TABLE'): TABLE is events, lost, "
				       "processes, threads, sched, slices or an event class's name");
		return SQLITE_ERROR;
	}
	const std::string path = unquote(argv[3]), table = unquote(argv[4]);
	std::string why;
	auto t = get_trace(reg, path, &why);
	if (!t) {
		*err = sqlite3_mprintf("strata: %s", why.c_str());
		return SQLITE_ERROR;
	}
	auto v = std::make_unique<Vtab>();
	v->reg = reg;
	v->t = t;
	std::string decl;
	if (table == "events") {
		v->kind = Kind::Events;
		decl = std::string("CREATE TABLE x(") + kCommonDecl +
		       ", provider TEXT, name TEXT, fields TEXT)";
	} else if (table == "lost") {
		v->kind = Kind::Lost;
		decl = kLostDecl;
	} else if (table == "processes") {
		v->kind = Kind::Processes;
		decl = kProcDecl;
	} else if (table == "threads") {
		v->kind = Kind::Threads;
		decl = kThreadDecl;
	} else if (table == "sched") {
		v->kind = Kind::Sched;
		decl = kSchedDecl;
	} else if (table == "slices") {
		v->kind = Kind::Slices;
		decl = kSlicesDecl;
	} else {
		auto it = t->typed_by_name.find(table);
		if (it == t->typed_by_name.end()) {
			*err = sqlite3_mprintf("strata: no event class '%s' in %s", table.c_str(),
					       path.c_str());
			return SQLITE_ERROR;
		}
		v->kind = Kind::Typed;
		v->typed = it->second;
		decl = std::string("CREATE TABLE x(") + kCommonDecl;
		for (const FieldCol &c : t->typed[it->second].cols)
			decl += ", " + quote_ident(c.name) + (c.label ? " TEXT" : decl_type(*c.info));
		decl += ")";
	}
	const int rc = sqlite3_declare_vtab(db, decl.c_str());
	if (rc != SQLITE_OK) {
		*err = sqlite3_mprintf("strata: cannot declare %s: %s", table.c_str(), sqlite3_errmsg(db));
		return rc;
	}
	*out = v.release();
	return SQLITE_OK;
}

int x_disconnect(sqlite3_vtab *vt)
{
	delete static_cast<Vtab *>(vt);
	return SQLITE_OK;
}

bool event_table(const Vtab *v)
{
	return v->kind == Kind::Events || v->kind == Kind::Typed;
}

// The threads of an event table's passes in tid order (empty: none).
const std::vector<int32_t> &pass_tids(const Vtab *v)
{
	return v->kind == Kind::Typed ? v->t->typed[v->typed].thread_ids : v->t->thread_ids;
}

// Whether an event table's rows come grouped by sub-trace keys.
bool pass_keys(const Vtab *v)
{
	return v->kind == Kind::Typed ? v->t->typed[v->typed].key_orders : v->t->key_orders;
}

// Whether a text constraint i may be pushed down, matched byte for byte:
// when it compares as BINARY (`kind = 'LOCK_WAIT' COLLATE NOCASE` is left
// to SQLite), and is not an IN: SQLite makes `kind = 'X' COLLATE NOCASE OR
// kind = 'y'` an IN that it then checks as BINARY in place of the OR
// (SQLite 3.40), a wrong answer that leaving the IN to it avoids.
bool text_pushdown(sqlite3_index_info *info, int i)
{
	const char *coll = sqlite3_vtab_collation(info, i);
	return (!coll || sqlite3_stricmp(coll, "BINARY") == 0) && !sqlite3_vtab_in(info, i, -1);
}

// A ts (or ts_end) constraint's letter from `base` (a: =, b: >, c: >=,
// d: <, e: <=), or 0.
char bound_op(unsigned char op, char base)
{
	switch (op) {
	case SQLITE_INDEX_CONSTRAINT_EQ:
		return base;
	case SQLITE_INDEX_CONSTRAINT_GT:
		return (char)(base + 1);
	case SQLITE_INDEX_CONSTRAINT_GE:
		return (char)(base + 2);
	case SQLITE_INDEX_CONSTRAINT_LT:
		return (char)(base + 3);
	case SQLITE_INDEX_CONSTRAINT_LE:
		return (char)(base + 4);
	default:
		return 0;
	}
}

// The letter of usable constraint i as the table pushes it down (0: left
// to SQLite).  Event tables and sched: a-e on ts, p pid =, t tid = (not
// sched); slices: a-e on ts, f-j on ts_end, k kind =, p pid =, t tid =.
char pushed_op(const Vtab *v, sqlite3_index_info *info, int i)
{
	const auto &c = info->aConstraint[i];
	const bool eq = c.op == SQLITE_INDEX_CONSTRAINT_EQ;
	if (v->kind == Kind::Slices) {
		if (c.iColumn == kSlTs || c.iColumn == kSlTsEnd)
			return bound_op(c.op, c.iColumn == kSlTs ? 'a' : 'f');
		if (eq && c.iColumn == kSlKind && text_pushdown(info, i))
			return 'k';
		return eq && c.iColumn == kSlPid ? 'p' : eq && c.iColumn == kSlTid ? 't' : 0;
	}
	if (!event_table(v) && v->kind != Kind::Sched)
		return 0;
	if (c.iColumn == kTs)
		return bound_op(c.op, 'a');
	if (!event_table(v))
		return 0; // sched: ts bounds only
	return eq && c.iColumn == kPid ? 'p' : eq && c.iColumn == kTid ? 't' : 0;
}

// The rows a scan of the table gives before any constraint, and what
// making them costs (x_filter reads the index whole, lost the trace whole).
std::pair<double, double> table_size(const Vtab *v)
{
	const Sizes &z = v->t->sizes;
	switch (v->kind) {
	case Kind::Events:
		return {z.events, z.events};
	case Kind::Typed:
		return {z.events / z.classes, z.events};
	case Kind::Sched:
		return {z.kernel_events / 2, z.kernel_events};
	case Kind::Slices:
		return {z.events / 4, z.events};
	case Kind::Processes:
		return {z.processes, z.packets};
	case Kind::Threads:
		return {z.threads, z.packets + z.shared_events};
	default:
		return {z.lost, z.events};
	}
}

// The records (Sizes::by_end) of the packets that meet [lo, hi]: all but
// those that end before lo and those that begin after hi.
double window_records(const Sizes &z, double lo, double hi)
{
	if (z.by_end.empty())
		return 0;
	auto upto = [](const std::vector<std::pair<int64_t, double>> &v, double t, bool with) {
		// The records of the packets whose time is below t (with: or at it).
		auto it = std::partition_point(v.begin(), v.end(), [&](const auto &x) {
			return with ? (double)x.first <= t : (double)x.first < t;
		});
		return it == v.begin() ? 0.0 : std::prev(it)->second;
	};
	const double all = z.by_end.back().second;
	const double got = all - upto(z.by_end, lo, false) - (all - upto(z.by_begin, hi, true));
	return std::max(0.0, got);
}

// The records the packet index gives process `id` (op 'p') or thread
// `id` ('t': its own lanes', and its share of the lanes whose records
// name their threads).
double id_records(const Sizes &z, char op, int64_t id)
{
	const auto &m = op == 'p' ? z.pid_records : z.tid_records;
	auto it = m.find(id);
	const double own = it == m.end() ? 0 : it->second;
	return op == 'p' ? own : own + z.unowned / z.threads;
}

// The rows and the cost of a scan with the constraints pushed down
// (ops[k] the letter of constraint used[k]): a ts window whose bounds
// SQLite knows already (constants) keeps the share of the records that
// the packet index puts in the packets it meets, one it does not (a
// join's) a quarter per bound; pid = N and tid = N the records of its
// streams (id_records), against a value not known yet a process's or a
// thread's share; kind = a fifth.
std::pair<double, double> estimate(const Vtab *v, sqlite3_index_info *info, const std::string &ops,
				   const std::vector<int> &used)
{
	const Sizes &z = v->t->sizes;
	auto [rows, cost] = table_size(v);
	double lo = (double)z.t0, hi = (double)z.t1, part = 1;
	for (size_t k = 0; k < ops.size(); k++) {
		const char op = ops[k] >= 'f' && ops[k] <= 'j' ? (char)(ops[k] - 5) : ops[k];
		sqlite3_value *rhs = nullptr;
		const bool known = op >= 'a' && op <= 'e' &&
				   sqlite3_vtab_rhs_value(info, used[k], &rhs) == SQLITE_OK && rhs &&
				   (sqlite3_value_numeric_type(rhs) == SQLITE_INTEGER ||
				    sqlite3_value_numeric_type(rhs) == SQLITE_FLOAT);
		const double x = known ? sqlite3_value_double(rhs) : 0;
		if ((op == 'p' || op == 't') && sqlite3_vtab_rhs_value(info, used[k], &rhs) == SQLITE_OK &&
		    rhs && sqlite3_value_type(rhs) == SQLITE_INTEGER)
			part *= std::min(1.0, id_records(z, op, sqlite3_value_int64(rhs)) / z.events);
		else if (op == 'a')
			part /= std::max(1.0, rows / 2); // a time held by an event or two
		else if (known && (op == 'b' || op == 'c'))
			lo = std::max(lo, x);
		else if (known)
			hi = std::min(hi, x);
		else
			part /= op == 'p' ? z.processes : op == 't' ? z.threads : op == 'k' ? 5 : 4;
	}
	if (lo > (double)z.t0 || hi < (double)z.t1)
		part *= hi < lo ? 0 : std::min(1.0, window_records(z, lo, hi) / z.events);
	const double got = std::max(1.0, rows * part);
	const bool reads = event_table(v) || v->kind == Kind::Sched || v->kind == Kind::Slices;
	return {got, reads ? z.packets / 16 + cost * std::max(part, 1.0 / std::max(1.0, rows)) : cost};
}

// Whether the ORDER BY (or GROUP BY) is tid, or tid then ts, ascending:
// the order of a pass per thread (Trace::thread_ids).
bool thread_order(const sqlite3_index_info *info)
{
	const auto *o = info->aOrderBy;
	return (info->nOrderBy == 1 || (info->nOrderBy == 2 && o[1].iColumn == kTs && !o[1].desc)) &&
	       o[0].iColumn == kTid && !o[0].desc;
}

// The key orders (Trace::key_orders): ORDER BY (or GROUP BY) up to three
// of machine, pid and process, ascending, then ts ascending or not at all.
// The order's idxNum bits: each column's code (1 machine, 2 pid, 3 process)
// in two bits from bit 4; 0 when the order is another.
constexpr int kKeyShift = 4;
int key_order(const sqlite3_index_info *info)
{
	int n = info->nOrderBy, bits = 0;
	if (n > 1 && info->aOrderBy[n - 1].iColumn == kTs && !info->aOrderBy[n - 1].desc)
		n--;
	if (n < 1 || n > 3)
		return 0;
	for (int i = 0; i < n; i++) {
		const auto &o = info->aOrderBy[i];
		const int code = o.iColumn == kMachine   ? 1
				 : o.iColumn == kPid     ? 2
				 : o.iColumn == kProcess ? 3
							 : 0;
		if (!code || o.desc)
			return 0;
		bits |= code << (kKeyShift + 2 * i);
	}
	return bits;
}

// The sub-traces grouped by their values of the key order's columns (the
// values x_column gives: machine and process as valid UTF-8, compared as
// SQLite's BINARY does), the groups in that order.
std::vector<std::vector<const SubTrace *>> key_passes(const Trace &t, int bits)
{
	std::map<std::vector<std::string>, std::vector<const SubTrace *>> groups;
	for (const auto &sub : t.index.traces()) {
		auto it = t.sub_text.find(sub.get());
		const SubText *st = it == t.sub_text.end() ? nullptr : &it->second;
		std::vector<std::string> key;
		for (int b = bits >> kKeyShift; b; b >>= 2) {
			if ((b & 3) == 1)
				key.push_back(st ? st->machine : sub->hostname);
			else if ((b & 3) == 3)
				key.push_back(st ? st->process : sub->procname);
			else { // a pid, as text in its numeric order
				char d[24];
				std::snprintf(d, sizeof d, "%016llx",
					      (unsigned long long)((uint64_t)sub->vpid ^ (1ull << 63)));
				key.push_back(d);
			}
		}
		groups[key].push_back(sub.get());
	}
	std::vector<std::vector<const SubTrace *>> out;
	for (auto &g : groups)
		out.push_back(std::move(g.second));
	return out;
}

// idxStr: one letter per argument (pushed_op).  Every constraint is
// checked again by SQLite (omit 0): the bounds may be REAL, a pushdown is
// a superset.  Rows come in ts order from the event tables (one scan:
// SQLite sorts itself when an IN makes several); sched's and slices' as
// they end.
int x_best_index(sqlite3_vtab *vt, sqlite3_index_info *info)
{
	const auto *v = static_cast<Vtab *>(vt);
	std::string ops;
	std::vector<int> used;
	for (int i = 0; i < info->nConstraint; i++) {
		const char op = info->aConstraint[i].usable ? pushed_op(v, info, i) : 0;
		if (!op)
			continue;
		ops += op;
		used.push_back(i);
		info->aConstraintUsage[i].argvIndex = (int)ops.size();
		info->aConstraintUsage[i].omit = 0;
	}
	if (event_table(v) && info->nOrderBy == 1 && info->aOrderBy[0].iColumn == kTs &&
	    !info->aOrderBy[0].desc)
		info->orderByConsumed = 1;
	else if (event_table(v) && !pass_tids(v).empty() && thread_order(info))
		info->orderByConsumed = 1, info->idxNum |= 2; // a pass per thread
	else if (event_table(v) && pass_keys(v) && key_order(info))
		info->orderByConsumed = 1, info->idxNum |= key_order(info); // a pass per group
	// sched: 1 when pid or a wake column is used (the pass reads from the start).
	if (v->kind == Kind::Sched &&
	    (info->colUsed & ((1ull << kSchedPid) | (1ull << kSchedWakeTs) | (1ull << kSchedWakeLatency))))
		info->idxNum = 1;
	const auto [rows, cost] = estimate(v, info, ops, used);
	info->estimatedRows = (sqlite3_int64)rows;
	info->estimatedCost = cost;
	if (!ops.empty()) {
		info->idxStr = sqlite3_mprintf("%s", ops.c_str());
		info->needToFreeIdxStr = 1;
	}
	return SQLITE_OK;
}

int x_open(sqlite3_vtab *, sqlite3_vtab_cursor **out)
{
	*out = new Cur();
	return SQLITE_OK;
}

int x_close(sqlite3_vtab_cursor *c)
{
	auto *cur = static_cast<Cur *>(c);
	auto *v = static_cast<Vtab *>(c->pVtab);
	if (cur->r)
		v->reg->bytes += cur->r->stats().bytes - cur->bytes_before;
	delete cur;
	return SQLITE_OK;
}

std::string damage_line(const TraceDamage &d)
{
	return "damaged: " + d.file + " at byte " + std::to_string(d.offset) +
	       (d.bytes ? " (" + std::to_string(d.bytes) + " bytes skipped)" : std::string()) + ": " + d.why;
}

__attribute__((noinline)) void note_damage_msg(Vtab *v, const TraceMsg &m)
{
	note_damage(v->reg, damage_line(*m.damage));
}

// The pass's next event into cur->m (damage on the way noted); false at
// its end.  The row loop's: kept small, the rare work out of line.
inline bool read_event(Cur *cur, Vtab *v)
{
	while (cur->r->next(&cur->m)) {
		if (__builtin_expect(cur->m.kind == TraceMsgKind::Event, 1))
			return true;
		if (cur->m.kind == TraceMsgKind::Damage)
			note_damage_msg(v, cur->m);
	}
	return false;
}

// An event's class as the cursor's table takes it (typed: false when it
// is not the table's class), into cur->cm.
__attribute__((noinline)) bool take_class(Cur *cur, Vtab *v, const MetaEvent *cls)
{
	if (cls == cur->other_cls)
		return false; // the last class seen that is not this table's
	auto it = v->t->classes.find(cls);
	const ClassMap *cm = it == v->t->classes.end() ? nullptr : &it->second;
	if (v->kind == Kind::Typed && (!cm || cm->table != v->typed)) {
		cur->other_cls = cls;
		return false;
	}
	cur->cm_cls = cls;
	cur->cm = cm;
	return true;
}

// An event table's pass (cur->r, not started): its window, its pid and
// tid filters, in a key order its group's sub-traces, and for a typed
// table the sub-traces that have its class.
void events_pass(Cur *cur, const Vtab *v)
{
	if (cur->lo != INT64_MIN || cur->hi != INT64_MAX)
		cur->r->set_window(cur->lo, cur->hi);
	cur->filtered = cur->lo != INT64_MIN || cur->hi != INT64_MAX || cur->want_pid || cur->want_tid;
	const std::vector<const SubTrace *> *group =
		cur->groups.empty() ? nullptr : &cur->groups[cur->pass_k];
	const std::vector<const SubTrace *> *subs =
		v->kind == Kind::Typed ? &v->t->typed[v->typed].subs : nullptr;
	if (cur->want_pid || cur->want_tid || group || subs) {
		const bool wp = cur->want_pid, wt = cur->want_tid;
		const int64_t pid = cur->pid, tid = cur->tid;
		cur->r->set_stream_filter([=](const StreamInfo &s) {
			if ((group && !among(group, s)) || !among(subs, s))
				return false;
			if (wp && (s.trace->kernel || s.trace->vpid != pid))
				return false; // the kernel's events have no pid
			if (wt && !s.shared && s.trace->meta.record_format == STRATA_REC_COMPACT) {
				for (const PacketEntry &p : s.packets)
					if (p.vtid == tid)
						return true;
				return false;
			}
			return true;
		});
	}
}

// The end of a pass: EOF, or in thread order (Cur::by_thread) or a key
// order (Cur::groups) the next pass begun (true).
__attribute__((noinline)) bool pass_end(Cur *cur, Vtab *v)
{
	const size_t passes = cur->by_thread ? pass_tids(v).size() : cur->groups.size();
	if (++cur->pass_k >= passes) {
		cur->eof = true;
		return false;
	}
	v->reg->bytes += cur->r->stats().bytes - cur->bytes_before;
	cur->bytes_before = 0;
	cur->r = std::make_unique<TraceReader>();
	cur->r->share_index(v->t->index);
	if (cur->by_thread)
		cur->tid = pass_tids(v)[cur->pass_k];
	events_pass(cur, v);
	return true;
}

// The next event row of an event table (or EOF).
__attribute__((always_inline)) inline void next_event(Cur *cur, Vtab *v)
{
	for (;;) {
		if (!read_event(cur, v)) {
			if (pass_end(cur, v))
				continue;
			return;
		}
		const TraceEvent &e = *cur->m.event;
		if (cur->filtered) {
			if (e.ns > cur->hi) { // merged by time: nothing later can be in the window
				if (pass_end(cur, v))
					continue;
				return;
			}
			if (e.ns < cur->lo)
				continue;
			if (cur->want_tid && e.tid != cur->tid)
				continue;
			if (cur->want_pid && (e.trace().kernel || e.trace().vpid != cur->pid))
				continue;
		}
		if (e.cls != cur->cm_cls && !take_class(cur, v, e.cls))
			continue; // a stream is mostly runs of one class: one compare
		cur->decoded = 0;
		return;
	}
}

// sched: what a kernel class gives the sched table.
Cur::SchedClass sched_class(const MetaEvent &me)
{
	Cur::SchedClass c;
	auto pick = [&](std::initializer_list<const char *> names) {
		std::vector<int> idx;
		for (const char *n : names)
			for (size_t f = 0; f < me.info.fields.size(); f++)
				if (me.info.fields[f].name == n)
					idx.push_back((int)f);
		return idx.size() == names.size() ? idx : std::vector<int>();
	};
	const std::string &n = me.full_name;
	if (n == "sched_switch")
		c.idx = pick({"prev_tid", "prev_state", "next_comm", "next_tid", "next_prio"});
	else if (n == "sched_waking" || n == "sched_wakeup" || n == "sched_wakeup_new")
		c.idx = pick({"tid"});
	else if (n == "sched_process_fork")
		c.idx = pick({"parent_tid", "parent_pid", "child_tid", "child_pid"});
	if (!c.idx.empty())
		c.kind = n == "sched_switch"         ? Cur::SchedClass::Switch
			 : n == "sched_process_fork" ? Cur::SchedClass::Fork
						     : Cur::SchedClass::Wake;
	return c;
}

// A user stream whose records name their thread (a shared lane, or a
// format with a tid per record): its threads are known by reading it.
bool tid_per_record(const StreamInfo &s)
{
	return !s.trace->kernel && (s.shared || s.trace->meta.record_format != STRATA_REC_COMPACT);
}

// sched: the user sub-traces' threads on each kernel sub-trace's machine:
// an owned lane's packets name their thread and a process's main thread is
// its pid (the packet index: nothing read); the threads of the streams
// that name the thread per record (shared lanes) from those records, one
// entry per packet and thread (at its first record there).
void sched_user_pids(Cur *cur, Vtab *v)
{
	cur->user_pids.clear();
	std::map<std::string, std::unordered_map<int64_t, std::vector<std::pair<int64_t, int64_t>>>> by_host;
	bool read = false;
	for (const auto &s : v->t->index.streams()) {
		const SubTrace *sub = s->trace;
		if (sub->kernel)
			continue;
		read |= tid_per_record(*s);
		auto &tids = by_host[sub->hostname];
		for (const PacketEntry &p : s->packets) {
			const int64_t b = sub->meta.ns_from_origin(p.ts_begin);
			tids[sub->vpid].emplace_back(b, sub->vpid);
			if (!s->shared && sub->meta.record_format == STRATA_REC_COMPACT && p.vtid >= 0 &&
			    p.content > STRATA_PACKET_HEADER_SIZE)
				tids[p.vtid].emplace_back(b, sub->vpid);
		}
	}
	if (read) {
		TraceReader r;
		r.share_index(v->t->index);
		r.set_stream_filter([](const StreamInfo &s) { return tid_per_record(s); });
		std::unordered_map<int64_t, const PacketEntry *> last; // tid -> the packet of its last entry
		TraceMsg m;
		while (r.next(&m)) {
			if (m.kind != TraceMsgKind::Event || m.event->tid < 0)
				continue;
			const TraceEvent &e = *m.event;
			const PacketEntry *&lp = last[e.tid];
			if (lp == e.packet)
				continue;
			lp = e.packet;
			const SubTrace &sub = e.trace();
			by_host[sub.hostname][e.tid].emplace_back(e.ns, sub.vpid);
		}
		v->reg->bytes += r.stats().bytes;
	}
	for (auto &h : by_host)
		for (auto &t : h.second) {
			std::sort(t.second.begin(), t.second.end());
			// A (since, pid) per change of process.
			std::vector<std::pair<int64_t, int64_t>> runs;
			for (const auto &x : t.second)
				if (runs.empty() || runs.back().second != x.second)
					runs.push_back(x);
			t.second.swap(runs);
		}
	for (const auto &sub : v->t->index.traces())
		if (sub->kernel && by_host.count(sub->hostname))
			cur->user_pids[sub.get()] = by_host[sub->hostname];
}

// sched: the process of kernel sub-trace sub's thread tid at ns: the
// tgid the last fork that named it (as parent or child) gave it; else the
// user sub-trace of the same machine that recorded the thread (the last
// to begin recording it at or before ns, else the first); tid 0 (the idle
// tasks) is pid 0; else NULL.
Cell sched_pid(Cur *cur, const SubTrace *sub, int64_t tid, int64_t ns)
{
	if (tid == 0)
		return cint(0);
	auto f = cur->forked.find({sub, tid});
	if (f != cur->forked.end())
		return cint(f->second);
	auto u = cur->user_pids.find(sub);
	if (u == cur->user_pids.end())
		return Cell();
	auto t = u->second.find(tid);
	if (t == u->second.end() || t->second.empty())
		return Cell();
	int64_t pid = t->second.front().second;
	for (const auto &x : t->second)
		if (x.first <= ns)
			pid = x.second;
	return cint(pid);
}

// sched at the end of the pass: the slices still running, no end known.
void sched_finish(Cur *cur)
{
	for (const auto &kv : cur->running) {
		const Cur::Running &r = kv.second;
		cur->rows.push_back({cint(r.ts), Cell(), Cell(), ctext(kv.first.first->hostname),
				     cint(kv.first.second), r.pid, cint(r.tid), ctext(r.comm), cint(r.prio),
				     Cell(), Cell(), Cell(), r.wake == INT64_MIN ? Cell() : cint(r.wake),
				     r.wake == INT64_MIN ? Cell() : cint(r.ts - r.wake)});
		cur->row_ids.push_back(r.rowid);
	}
	cur->running.clear();
	cur->sched_done = true;
}

// sched: the next slices that end (or, at the end of the trace, every
// CPU's last slice), into cur->rows; EOF when none is left.  Each
// sched_switch ends its CPU's running slice and begins the next thread's.
// A lower ts bound is the reader's window (a slice that begins in it has
// its end in it too), unless pid or a wake column is asked for: those
// need what came before (forks, wake-ups), so the pass then reads from the
// start and begins no slice before the bound.  Past an upper bound no
// slice begins, and the pass ends once those begun are ended.
//
// Wake-ups: a sched_waking, sched_wakeup or sched_wakeup_new of a thread
// is its wake-up unless one came already since the thread last ran (was
// the thread of a kernel event, switched in or out); the switch that puts
// it on a CPU takes it: wake_ts, and wake_latency = ts - wake_ts.
void sched_advance(Cur *cur, Vtab *v)
{
	cur->row_ids.clear();
	while (cur->rows.empty()) {
		if (cur->sched_done) {
			cur->eof = true;
			return;
		}
		if (!read_event(cur, v)) {
			sched_finish(cur);
			continue;
		}
		const TraceEvent &e = *cur->m.event;
		const SubTrace *sub = &whole_of(e.trace());
		if (e.tid >= 0 && !cur->woken.empty())
			cur->woken.erase({sub, e.tid}); // it ran
		auto it = cur->sched_classes.find(e.cls);
		if (it == cur->sched_classes.end())
			it = cur->sched_classes.emplace(e.cls, sched_class(*e.cls)).first;
		const Cur::SchedClass &sc = it->second;
		if (sc.kind == Cur::SchedClass::None)
			continue;
		e.decode(&cur->fv);
		auto val = [&](size_t k) { return int_value(cur->fv[(size_t)sc.idx[k]]); };
		if (sc.kind == Cur::SchedClass::Wake) {
			cur->woken.emplace(std::make_pair(sub, val(0)), e.ns); // the first since it ran
			continue;
		}
		if (sc.kind == Cur::SchedClass::Fork) {
			cur->forked[{sub, val(0)}] = val(1);
			cur->forked[{sub, val(2)}] = val(3);
			continue;
		}
		if (e.cpu < 0)
			continue;
		const FieldValue &comm = cur->fv[(size_t)sc.idx[2]];
		if (comm.info->type != STRATA_FT_STRING)
			continue;
		const int64_t prev = val(0), next = val(3);
		cur->woken.erase({sub, prev});
		auto w = cur->woken.find({sub, next});
		const int64_t wake = w == cur->woken.end() ? INT64_MIN : w->second;
		if (w != cur->woken.end())
			cur->woken.erase(w);
		if (e.ns < cur->lo)
			continue; // before the window: the state only
		const std::string next_comm(comm.str, comm.len);
		auto run = cur->running.find({sub, e.cpu});
		if (run != cur->running.end()) {
			const Cur::Running &r = run->second;
			cur->rows.push_back({cint(r.ts), cint(e.ns), cint(e.ns - r.ts), ctext(sub->hostname),
					     cint(e.cpu), r.pid, cint(r.tid), ctext(r.comm), cint(r.prio),
					     prev == r.tid ? cint(val(1)) : Cell(), cint(next),
					     ctext(next_comm), r.wake == INT64_MIN ? Cell() : cint(r.wake),
					     r.wake == INT64_MIN ? Cell() : cint(r.ts - r.wake)});
			cur->row_ids.push_back(r.rowid);
			if (e.ns > cur->hi)
				cur->running.erase(run);
		}
		if (e.ns <= cur->hi)
			cur->running[{sub, e.cpu}] = Cur::Running{e.ns,
								  next,
								  val(4),
								  next_comm,
								  sched_pid(cur, sub, next, e.ns),
								  wake,
								  event_rowid(*v->t, e)};
		else if (cur->running.empty())
			cur->sched_done = true; // every slice begun by the bound has ended
	}
	cur->eof = false;
}

void result_cell(sqlite3_context *ctx, const Cell &cell)
{
	if (cell.type == Cell::Int)
		sqlite3_result_int64(ctx, cell.i);
	else if (cell.type == Cell::Real)
		sqlite3_result_double(ctx, cell.d);
	else if (cell.type == Cell::Text)
		result_text(ctx, cell.s.data(), cell.s.size());
	else
		sqlite3_result_null(ctx);
}

// slices: a pass for these kinds and bounds (ts in [cur->lo, cur->hi],
// ts_end in [elo, ehi]).  A row that ends at its event (the waits, the
// compact holds) lies in the window [max(ts lower, ts_end lower), ts_end
// upper]; a pair (a full hold, a syscall) begins at or after the lower
// bound on ts, and a full hold may end past every bound (ended early by
// another acquisition): the pass then goes on until the holds begun by the
// bounds have ended.  `tid =` becomes the stream filter only without full
// holds, whose ends need every thread's acquisitions.
void slices_start(Cur *cur, Vtab *v, unsigned kinds, int64_t elo, int64_t ehi)
{
	cur->sl = std::make_unique<SliceState>();
	SliceState &s = *cur->sl;
	s.t = v->t.get();
	s.parts = slice_parts(*v->t);
	s.kinds = kinds;
	s.begin_max = std::min(cur->hi, ehi);
	s.end_max = ehi;
	const bool holds = (kinds & kSlLockHold) && s.parts.holds;
	int64_t wlo = INT64_MAX;
	if (kinds & (kSlLockWait | kSlCondWait | kSlMonitorWait))
		wlo = std::max(elo, cur->lo);
	if (kinds & (kSlLockHold | kSlSyscall))
		wlo = std::min(wlo, cur->lo);
	const int64_t whi = holds ? INT64_MAX : ehi;
	if (wlo != INT64_MIN || whi != INT64_MAX)
		cur->r->set_window(wlo, whi);
	const bool wp = cur->want_pid, wt = cur->want_tid && !holds;
	const int64_t pid = cur->pid, tid = cur->tid;
	const bool kernel = (kinds & kSlSyscall) && s.parts.syscalls, user = kinds & ~kSlSyscall;
	cur->r->set_stream_filter([=](const StreamInfo &st) {
		const SubTrace &sub = *st.trace;
		if (sub.kernel ? !kernel : !user && !kernel)
			return false;
		if (wp && (sub.kernel || sub.vpid != pid))
			return false;
		if (wt && !st.shared && sub.meta.record_format == STRATA_REC_COMPACT) {
			for (const PacketEntry &p : st.packets)
				if (p.vtid == tid)
					return true;
			return false;
		}
		return true;
	});
}

// slices: the next rows (those the next events end) into cur->sl->rows;
// EOF at the end of the pass.
void slices_advance(Cur *cur, Vtab *v)
{
	SliceState &s = *cur->sl;
	s.nrows = 0;
	s.ri = 0;
	const bool holds = (s.kinds & kSlLockHold) && s.parts.holds;
	while (!s.nrows) {
		if (s.done) {
			cur->eof = true;
			return;
		}
		if (!read_event(cur, v)) {
			s.done = true; // acquisitions still pending: never released, no hold
			continue;
		}
		const TraceEvent &e = *cur->m.event;
		if (e.ns > s.end_max && (!holds || s.pending.empty())) {
			s.done = true;
			continue;
		}
		s.event(e);
	}
	cur->eof = false;
}

void slices_column(const SliceState &s, sqlite3_context *ctx, int col)
{
	const SliceRow &r = s.rows[s.ri];
	const SubTrace &sub = *r.sub;
	const Cell *cell = col == kSlTs       ? &r.ts
			   : col == kSlTsEnd  ? &r.ts_end
			   : col == kSlDur    ? &r.dur
			   : col == kSlObject ? &r.object
			   : col == kSlCaller ? &r.caller
					      : nullptr;
	if (cell) {
		result_cell(ctx, *cell);
		return;
	}
	switch (col) {
	case kSlKind:
		sqlite3_result_text(ctx, r.kind, -1, SQLITE_STATIC);
		return;
	case kSlName:
		result_text(ctx, r.name.data(), r.name.size());
		return;
	case kSlMachine:
		result_text(ctx, sub.hostname.data(), sub.hostname.size());
		return;
	case kSlPid:
		if (sub.kernel)
			sqlite3_result_null(ctx);
		else
			sqlite3_result_int64(ctx, sub.vpid);
		return;
	case kSlTid:
		if (r.tid < 0)
			sqlite3_result_null(ctx);
		else
			sqlite3_result_int64(ctx, r.tid);
		return;
	case kSlProcess:
		if (sub.kernel)
			sqlite3_result_null(ctx);
		else
			result_text(ctx, sub.procname.data(), sub.procname.size());
		return;
	default:
		sqlite3_result_null(ctx);
	}
}

void fill_processes(Cur *cur, Vtab *v)
{
	for (const auto &sub : v->t->index.traces()) {
		if (!sub->readable || sub->whole)
			continue; // a piece directory: counted with its base
		int64_t b = INT64_MAX, e = INT64_MIN;
		uint64_t streams = 0, packets = 0, bytes = 0;
		for (const auto &s : v->t->index.streams()) {
			if (&whole_of(*s->trace) != sub.get())
				continue;
			streams++;
			for (const PacketEntry &p : s->packets) {
				packets++;
				bytes += p.size;
				b = std::min(b, s->trace->meta.ns_from_origin(p.ts_begin));
				e = std::max(e, s->trace->meta.ns_from_origin(p.ts_end));
			}
		}
		std::vector<Cell> r;
		r.push_back(ctext(sub->hostname));
		r.push_back(sub->kernel ? Cell() : cint(sub->vpid));
		r.push_back(sub->kernel ? Cell() : ctext(sub->procname));
		r.push_back(ctext(sub->kernel ? "kernel" : "ust"));
		r.push_back(packets ? cint(b) : Cell());
		r.push_back(packets ? cint(e) : Cell());
		r.push_back(cint((int64_t)streams));
		r.push_back(cint((int64_t)packets));
		r.push_back(cint((int64_t)bytes));
		r.push_back(ctext(sub->dir));
		cur->rows.push_back(std::move(r));
	}
}

// The (comm, tid) field pairs of a kernel class that name a thread:
// "comm" and "tid", or "X_comm" and "X_tid" (sched_switch's prev_ and
// next_, sched_process_fork's parent_ and child_).  Indices into its fields.
std::vector<std::pair<int, int>> naming_fields(const MetaEvent &me)
{
	std::vector<std::pair<int, int>> out;
	const auto &fs = me.info.fields;
	for (size_t c = 0; c < fs.size(); c++) {
		const std::string &n = fs[c].name;
		if (fs[c].type != STRATA_FT_STRING || n.size() < 4 || n.compare(n.size() - 4, 4, "comm") != 0)
			continue;
		const std::string tid = n.substr(0, n.size() - 4) + "tid";
		for (size_t t = 0; t < fs.size(); t++)
			if (fs[t].name == tid && (fs[t].type == STRATA_FT_INTEGER) && fs[t].elem_bits <= 64)
				out.emplace_back((int)c, (int)t);
	}
	return out;
}

// A thread's row being made: its span, its owned packets, its name.
struct ThreadRun {
	int64_t b = INT64_MAX, e = INT64_MIN;
	uint64_t packets = 0;
	std::string name;
	bool named = false;
};
// Each thread's rows (a rename starts one), by (sub-trace, tid).
using ThreadRuns = std::map<std::tuple<const SubTrace *, int64_t>, std::vector<ThreadRun>>;

// Thread tid of sub seen at ns, named (name, len) by a kernel event that
// names threads, or by none (null).
void thread_seen(ThreadRuns &th, const SubTrace *sub, int64_t tid, int64_t ns, const char *name, size_t len)
{
	std::vector<ThreadRun> &runs = th[{sub, tid}];
	const bool naming = name && len && tid != 0;
	if (runs.empty() ||
	    (naming && runs.back().named && runs.back().name.compare(0, std::string::npos, name, len) != 0))
		runs.emplace_back();
	ThreadRun &t = runs.back();
	if (naming && !t.named) {
		t.name.assign(name, len);
		t.named = true;
	}
	t.b = std::min(t.b, ns);
	t.e = std::max(t.e, ns);
}

// The owned lanes' threads, from the index; whether some stream must be
// read (shared lanes, the kernel's).
bool threads_from_index(Vtab *v, ThreadRuns &th)
{
	bool read = false;
	for (const auto &s : v->t->index.streams()) {
		const SubTrace *sub = s->trace;
		if (s->shared || sub->meta.record_format != STRATA_REC_COMPACT) {
			read = true;
			continue;
		}
		for (const PacketEntry &p : s->packets) {
			if (p.content <= STRATA_PACKET_HEADER_SIZE)
				continue; // no record (a packet closed empty: only its counts)
			std::vector<ThreadRun> &runs = th[{&whole_of(*sub), p.vtid}];
			if (runs.empty())
				runs.emplace_back();
			ThreadRun &t = runs.back();
			t.packets++;
			t.b = std::min(t.b, sub->meta.ns_from_origin(p.ts_begin));
			t.e = std::max(t.e, sub->meta.ns_from_origin(p.ts_end));
		}
	}
	return read;
}

// The shared lanes' and the kernel's threads, from their records (those
// streams only are read).
void threads_from_records(Vtab *v, ThreadRuns &th)
{
	TraceReader r;
	r.share_index(v->t->index);
	r.set_stream_filter([](const StreamInfo &s) {
		return s.shared || s.trace->meta.record_format != STRATA_REC_COMPACT;
	});
	std::unordered_map<const MetaEvent *, std::vector<std::pair<int, int>>> naming;
	std::vector<FieldValue> fv;
	TraceMsg m;
	while (r.next(&m)) {
		if (m.kind != TraceMsgKind::Event)
			continue;
		const TraceEvent &e = *m.event;
		const SubTrace *sub = &whole_of(*m.stream->trace);
		if (e.tid >= 0)
			thread_seen(th, sub, e.tid, e.ns, nullptr, 0);
		if (!sub->kernel)
			continue;
		auto it = naming.find(e.cls);
		if (it == naming.end())
			it = naming.emplace(e.cls, naming_fields(*e.cls)).first;
		if (it->second.empty())
			continue;
		e.decode(&fv);
		for (const auto &ct : it->second) {
			const FieldValue &c = fv[(size_t)ct.first], &t = fv[(size_t)ct.second];
			const int64_t tid = t.info->is_signed ? t.i : (int64_t)t.u;
			if (tid >= 0)
				thread_seen(th, sub, tid, e.ns, c.str, c.len);
		}
	}
	v->reg->bytes += r.stats().bytes;
}

// Threads: owned lanes' from the index; shared lanes' and the kernel's
// from their records.  A kernel thread has a row per name it went by, in
// time order (a rename starts a row): its names come from the kernel's
// events that name threads (naming_fields), each of its events belongs to
// the name it last went by (its first name before any), and a row spans
// the first to the last of its events and namings.  Tid 0 (the idle
// tasks, one per CPU: swapper/N) keeps no name.
void fill_threads(Cur *cur, Vtab *v)
{
	ThreadRuns th;
	if (threads_from_index(v, th))
		threads_from_records(v, th);
	for (const auto &kv : th) {
		const SubTrace *sub = std::get<0>(kv.first);
		const int64_t tid = std::get<1>(kv.first);
		for (const ThreadRun &t : kv.second) {
			std::vector<Cell> r;
			r.push_back(ctext(sub->hostname));
			r.push_back(sub->kernel ? Cell() : cint(sub->vpid));
			r.push_back(cint(tid));
			r.push_back(sub->kernel ? Cell() : ctext(sub->procname));
			r.push_back(t.named                            ? ctext(t.name)
				    : !sub->kernel && tid == sub->vpid ? ctext(sub->procname)
								       : Cell());
			r.push_back(cint(t.b));
			r.push_back(cint(t.e));
			r.push_back(cint((int64_t)t.packets));
			cur->rows.push_back(std::move(r));
		}
	}
}

// The thread a lost row belongs to, when the stream says it: a COMPACT
// owned lane's packets name their thread.  The loss lies in the stream's
// bytes [lo, hi): the thread of the packet holding lo (records cut off
// one), else of the packets on both sides when they agree, else of every
// packet of the stream when they agree; else -1.
int64_t lost_tid(const StreamInfo *s, uint64_t lo, uint64_t hi)
{
	if (!s || s->shared || s->packets.empty() || s->trace->meta.record_format != STRATA_REC_COMPACT)
		return -1;
	const PacketEntry *before = nullptr, *after = nullptr;
	bool one = true;
	for (const PacketEntry &p : s->packets) {
		one &= p.vtid == s->packets[0].vtid;
		if (lo >= p.offset && lo - p.offset < p.size)
			return p.vtid;
		if (p.offset + p.size <= lo)
			before = &p;
		else if (!after && p.offset >= hi)
			after = &p;
	}
	if (before && after && before->vtid == after->vtid)
		return before->vtid;
	return one ? s->packets[0].vtid : -1;
}

// The bytes a discard message's loss lies between: from the end of the
// packet before the one it is counted in (DiscardedPackets: the one after
// the gap; DiscardedEvents: the one whose header counts them) to that
// packet's start.
std::pair<uint64_t, uint64_t> discard_span(const StreamInfo &s, const TraceMsg &m)
{
	const TraceMeta &meta = s.trace->meta;
	for (size_t i = 1; i < s.packets.size(); i++) {
		const PacketEntry &e = s.packets[i], &prev = s.packets[i - 1];
		const uint64_t ts = m.kind == TraceMsgKind::DiscardedPackets ? e.ts_begin : e.ts_end;
		if (meta.ns_from_origin(ts) == m.end_ns)
			return {prev.offset + prev.size, e.offset};
	}
	return {UINT64_MAX, UINT64_MAX};
}

// A lost row's owner: machine, pid, process, tid, stream (NULLs for what is
// not known).
void lost_owner(std::vector<Cell> *row, const SubTrace *sub, const StreamInfo *s, uint64_t lo, uint64_t hi,
		const std::string &file)
{
	row->push_back(sub ? ctext(sub->hostname) : Cell());
	row->push_back(sub && !sub->kernel ? cint(sub->vpid) : Cell());
	row->push_back(sub && !sub->kernel ? ctext(sub->procname) : Cell());
	const int64_t tid = lost_tid(s, lo, hi);
	row->push_back(tid >= 0 ? cint(tid) : Cell());
	row->push_back(ctext(file));
}

// The stream or sub-trace a damaged file belongs to (the index's damage
// comes without its stream): the stream of that path, else the sub-trace
// of its directory.
void damage_owner(const TraceReader &index, const std::string &file, const StreamInfo **s,
		  const SubTrace **sub)
{
	for (const auto &st : index.streams())
		if (st->path == file) {
			*s = st.get();
			*sub = st->trace;
			return;
		}
	const std::string dir = file.substr(0, file.rfind('/') == std::string::npos ? 0 : file.rfind('/'));
	for (const auto &t : index.traces())
		if (t->dir == dir)
			*sub = t.get();
}

// The time span of a damaged span found by the index (it has none of its
// own: its bytes are the damaged ones): from the end of the stream's last
// good packet before it to the beginning of its first after it (NULL at
// the file's start or end).
void damage_span(std::vector<Cell> *row, const StreamInfo *s, const TraceDamage &d)
{
	const PacketEntry *before = nullptr, *after = nullptr;
	static const std::vector<PacketEntry> kNone;
	for (const PacketEntry &p : s ? s->packets : kNone) {
		if (p.offset + p.size <= d.offset)
			before = &p;
		else if (!after && p.offset >= d.offset + d.bytes)
			after = &p;
	}
	row->push_back(before ? cint(s->trace->meta.ns_from_origin(before->ts_end)) : Cell());
	row->push_back(after ? cint(s->trace->meta.ns_from_origin(after->ts_begin)) : Cell());
}

void fill_lost(Cur *cur, Vtab *v)
{
	TraceReader r;
	r.share_index(v->t->index);
	TraceMsg m;
	while (r.next(&m)) {
		if (m.kind == TraceMsgKind::Event)
			continue;
		std::vector<Cell> row;
		if (m.kind == TraceMsgKind::Damage) {
			const TraceDamage &d = *m.damage;
			note_damage(v->reg, damage_line(d));
			const StreamInfo *s = m.stream;
			const SubTrace *sub = s ? s->trace : nullptr;
			if (s) {
				row = {cint(m.begin_ns), cint(m.end_ns)};
			} else {
				damage_owner(v->t->index, d.file, &s, &sub);
				damage_span(&row, s, d);
			}
			lost_owner(&row, sub, s, d.offset, d.offset + d.bytes, d.file);
			row.push_back(ctext("damage"));
			// Packets missing from a stream file (its index names
			// them): how many, and their bytes.
			row.push_back(d.missing_packets ? cint((int64_t)d.missing_packets) : Cell());
			row.push_back(cint((int64_t)(d.bytes ? d.bytes : d.missing_bytes)));
			row.push_back(ctext("at byte " + std::to_string(d.offset) + ": " + d.why));
		} else {
			row = {cint(m.begin_ns), cint(m.end_ns)};
			const auto span = discard_span(*m.stream, m);
			lost_owner(&row, m.stream->trace, m.stream, span.first, span.second, m.stream->path);
			row.push_back(ctext(m.kind == TraceMsgKind::DiscardedEvents ? "events" : "packets"));
			row.push_back(cint((int64_t)m.count));
			row.push_back(Cell());
			row.push_back(Cell());
		}
		cur->rows.push_back(std::move(row));
	}
	v->reg->bytes += r.stats().bytes;
}

// slices: the kind `kind = a` selects (none for a value that names none).
unsigned slice_kinds_of(sqlite3_value *a)
{
	if (sqlite3_value_type(a) != SQLITE_TEXT)
		return 0; // a number never equals a kind (the column's TEXT affinity makes it text)
	const unsigned char *k = sqlite3_value_text(a);
	const std::string ks = k ? (const char *)k : "";
	return ks == "lock_wait"      ? kSlLockWait
	       : ks == "cond_wait"    ? kSlCondWait
	       : ks == "lock_hold"    ? kSlLockHold
	       : ks == "monitor_wait" ? kSlMonitorWait
	       : ks == "syscall"      ? kSlSyscall
				      : 0u;
}

// A new scan on the cursor: what the last one left, dropped.
void reset_cursor(Cur *cur, Vtab *v)
{
	if (cur->r)
		v->reg->bytes += cur->r->stats().bytes - cur->bytes_before;
	cur->r.reset();
	cur->rows.clear();
	cur->ri = 0;
	cur->row_ids.clear();
	cur->eof = false;
	cur->cm = nullptr;
	cur->cm_cls = cur->other_cls = nullptr;
	cur->running.clear();
	cur->sched_done = false;
}

// The constraints x_best_index chose (idx: a letter each, argv their
// values): bounds on ts (cur->lo, cur->hi) and on a slice's ts_end, the
// slices' kinds, pid and tid.
struct ScanBounds {
	int64_t elo = INT64_MIN, ehi = INT64_MAX; // slices: bounds on ts_end
	unsigned kinds = kSlAll;                  // slices: the kinds asked for
	bool none = false;                        // a bound no row can meet (NULL, text)
};

// One numeric constraint `op` (a..e: = > >= < <=; p pid; t tid) into
// [lo, hi] or the cursor's pid and tid.
void apply_bound(Cur *cur, char op, sqlite3_value *a, int t, int64_t &lo, int64_t &hi)
{
	const double d = sqlite3_value_double(a);
	const bool is_int = t == SQLITE_INTEGER;
	const int64_t iv = sqlite3_value_int64(a);
	// Conservative bounds for REAL values: SQLite checks every row again.
	auto floor64 = [&] {
		return is_int         ? iv
		       : d <= -9.2e18 ? INT64_MIN
		       : d >= 9.2e18  ? INT64_MAX
				      : (int64_t)std::floor(d);
	};
	auto ceil64 = [&] {
		return is_int         ? iv
		       : d <= -9.2e18 ? INT64_MIN
		       : d >= 9.2e18  ? INT64_MAX
				      : (int64_t)std::ceil(d);
	};
	switch (op) {
	case 'a':
		lo = std::max(lo, floor64());
		hi = std::min(hi, ceil64());
		break;
	case 'b':
		lo = std::max(lo, is_int && iv < INT64_MAX ? iv + 1 : floor64());
		break;
	case 'c':
		lo = std::max(lo, floor64());
		break;
	case 'd':
		hi = std::min(hi, is_int && iv > INT64_MIN ? iv - 1 : ceil64());
		break;
	case 'e':
		hi = std::min(hi, ceil64());
		break;
	case 'p':
		if (is_int) {
			cur->want_pid = true;
			cur->pid = iv;
		}
		break;
	case 't':
		if (is_int) {
			cur->want_tid = true;
			cur->tid = iv;
		}
		break;
	default:
		break;
	}
}

ScanBounds read_bounds(Cur *cur, const char *idx, int argc, sqlite3_value **argv)
{
	ScanBounds b;
	cur->lo = INT64_MIN;
	cur->hi = INT64_MAX;
	cur->want_pid = cur->want_tid = false;
	for (int i = 0; i < argc && idx && idx[i]; i++) {
		sqlite3_value *a = argv[i];
		if (idx[i] == 'k') {
			b.kinds &= slice_kinds_of(a);
			continue;
		}
		const bool end = idx[i] >= 'f' && idx[i] <= 'j'; // ts_end's, as ts's a..e
		const int t = sqlite3_value_numeric_type(a);
		if (t != SQLITE_INTEGER && t != SQLITE_FLOAT) {
			b.none |= t == SQLITE_NULL;
			continue; // SQLite checks it (text compares above every number)
		}
		apply_bound(cur, end ? (char)(idx[i] - 5) : idx[i], a, t, end ? b.elo : cur->lo,
			    end ? b.ehi : cur->hi);
	}
	return b;
}

// The event tables' scan: in time order, or a pass per thread or per
// group of sub-traces (x_best_index's idx_num).
void start_events(Cur *cur, Vtab *v, int idx_num)
{
	cur->by_thread = (idx_num & 2) && !cur->want_tid;
	cur->pass_k = 0;
	cur->groups.clear();
	if (cur->by_thread) { // a pass per thread, in tid order: the first
		cur->want_tid = true;
		cur->tid = pass_tids(v).empty() ? -1 : pass_tids(v)[0];
	} else if (idx_num >> kKeyShift) { // a pass per group of sub-traces: the first
		cur->groups = key_passes(*v->t, idx_num);
		if (cur->groups.empty()) {
			cur->eof = true;
			return;
		}
	}
	events_pass(cur, v);
	next_event(cur, v);
}

int x_filter(sqlite3_vtab_cursor *c, int idx_num, const char *idx, int argc, sqlite3_value **argv)
{
	auto *cur = static_cast<Cur *>(c);
	auto *v = static_cast<Vtab *>(c->pVtab);
	reset_cursor(cur, v);
	if (!event_table(v) && v->kind != Kind::Sched && v->kind != Kind::Slices) {
		if (v->kind == Kind::Processes)
			fill_processes(cur, v);
		else if (v->kind == Kind::Threads)
			fill_threads(cur, v);
		else
			fill_lost(cur, v);
		cur->eof = cur->rows.empty();
		return SQLITE_OK;
	}
	const ScanBounds b = read_bounds(cur, idx, argc, argv);
	if (b.none || cur->lo > cur->hi || b.elo > b.ehi || !b.kinds) {
		cur->eof = true;
		return SQLITE_OK;
	}
	cur->r = std::make_unique<TraceReader>();
	cur->r->share_index(v->t->index);
	cur->bytes_before = 0;
	if (v->kind == Kind::Slices) {
		slices_start(cur, v, b.kinds, b.elo, b.ehi);
		slices_advance(cur, v);
		return SQLITE_OK;
	}
	if (v->kind == Kind::Sched) {
		cur->sched_history = idx_num & 1;
		cur->woken.clear();
		cur->forked.clear();
		if (cur->sched_history)
			sched_user_pids(cur, v);
		else if (cur->lo != INT64_MIN)
			cur->r->set_window(cur->lo, INT64_MAX); // the slices' ends lie past hi
		cur->r->set_stream_filter([](const StreamInfo &s) { return s.trace->kernel; });
		sched_advance(cur, v);
		return SQLITE_OK;
	}
	start_events(cur, v, idx_num);
	return SQLITE_OK;
}

// x_next of the tables other than the event tables.
__attribute__((noinline)) int next_other(Cur *cur, Vtab *v)
{
	if (v->kind == Kind::Slices) {
		if (++cur->sl->ri >= cur->sl->nrows)
			slices_advance(cur, v);
		return SQLITE_OK;
	}
	if (v->kind == Kind::Sched) {
		if (++cur->ri >= cur->rows.size()) {
			cur->rows.clear();
			cur->ri = 0;
			sched_advance(cur, v);
		}
		return SQLITE_OK;
	}
	cur->eof = ++cur->ri >= cur->rows.size();
	return SQLITE_OK;
}

// The row loop: an event table's next row takes a few compares past the
// reader's next event, the rest out of line (next_other, take_class).
int x_next(sqlite3_vtab_cursor *c)
{
	auto *cur = static_cast<Cur *>(c);
	auto *v = static_cast<Vtab *>(c->pVtab);
	if (__builtin_expect(!event_table(v), 0))
		return next_other(cur, v);
	next_event(cur, v);
	return SQLITE_OK;
}

int x_eof(sqlite3_vtab_cursor *c)
{
	return static_cast<Cur *>(c)->eof;
}

// The names of the event's sub-trace (valid UTF-8, kept by the trace),
// or null when it is not one the trace indexed.
inline const SubText *sub_text(Cur *cur, Vtab *v, const SubTrace *sub)
{
	if (sub != cur->tsub) {
		auto it = v->t->sub_text.find(sub);
		cur->tsub = sub;
		cur->tsub_text = it == v->t->sub_text.end() ? nullptr : &it->second;
	}
	return cur->tsub_text;
}

// A text the trace keeps as long as the table exists (valid UTF-8): given
// to SQLite without a copy.
inline void result_kept(sqlite3_context *ctx, const std::string &s)
{
	sqlite3_result_text(ctx, s.data(), (int)s.size(), SQLITE_STATIC);
}

// Decodes the event's fields up to the want-th (every one for INT32_MAX),
// in place: no allocation once the vector has grown.
void decode_to(Cur *cur, const TraceEvent &e, int want)
{
	if (cur->decoded > want || cur->decoded >= (int)e.cls->info.fields.size())
		return;
	cur->fv.resize(e.cls->info.fields.size());
	int n = 0;
	e.for_each_field([cur, &n, want](const FieldValue &fv) {
		cur->fv[(size_t)n++] = fv;
		return n <= want;
	});
	cur->decoded = n;
}

// A typed table's field column: the class's plan for it (docs/query.md
// "Memory"): a number at a fixed offset is loaded, nothing else decoded.
void typed_column(Cur *cur, const TraceEvent &e, sqlite3_context *ctx, int col)
{
	const ColPlan &p = cur->cm->plan[(size_t)(col - kCommon)];
	const uint8_t *at = e.pkt + e.payload + p.off;
	switch (p.kind) {
	case ColPlan::Int:
		sqlite3_result_int64(ctx, load_int(at, p.bytes, true));
		return;
	case ColPlan::Uint:
		if (p.bytes == 8)
			result_u64(ctx, (uint64_t)load_int(at, 8, false));
		else
			sqlite3_result_int64(ctx, load_int(at, p.bytes, false));
		return;
	case ColPlan::Scalar: {
		FieldValue fv;
		fv.info = &e.cls->info.fields[(size_t)p.field];
		read_scalar(*fv.info, at, &fv);
		result_field(ctx, fv, p.label);
		return;
	}
	case ColPlan::Decode:
		decode_to(cur, e, p.field);
		if (p.field < cur->decoded)
			result_field(ctx, cur->fv[(size_t)p.field], p.label);
		else
			sqlite3_result_null(ctx);
		return;
	default:
		sqlite3_result_null(ctx); // a field this class lacks
		return;
	}
}

// The names of an event's sub-trace and class (machine, process, thread,
// provider, name): the trace's kept texts when it has them.
void name_column(Cur *cur, Vtab *v, const TraceEvent &e, sqlite3_context *ctx, int col)
{
	const SubTrace &sub = e.trace();
	if (col == kMachine) {
		if (const SubText *st = sub_text(cur, v, &sub))
			result_kept(ctx, st->machine);
		else
			result_text(ctx, sub.hostname.data(), sub.hostname.size());
	} else if (col == kProcess || col == kThread) {
		if (sub.kernel || (col == kThread && e.tid != sub.vpid))
			sqlite3_result_null(ctx);
		else if (const SubText *st = sub_text(cur, v, &sub))
			result_kept(ctx, st->process);
		else
			result_text(ctx, sub.procname.data(), sub.procname.size());
	} else if (col == kProvider) {
		if (cur->cm) {
			result_kept(ctx, cur->cm->provider);
		} else {
			const std::string &p = sub.kernel ? std::string("kernel") : e.cls->info.provider;
			result_text(ctx, p.data(), p.size());
		}
	} else if (cur->cm) { // kName
		result_kept(ctx, cur->cm->name);
	} else {
		result_text(ctx, e.cls->full_name.data(), e.cls->full_name.size());
	}
}

__attribute__((noinline)) int column_other(Cur *cur, Vtab *v, sqlite3_context *ctx, int col)
{
	if (!event_table(v)) {
		if (v->kind == Kind::Slices)
			slices_column(*cur->sl, ctx, col);
		else
			result_cell(ctx, cur->rows[cur->ri][(size_t)col]);
		return SQLITE_OK;
	}
	const TraceEvent &e = *cur->m.event;
	if (v->kind == Kind::Typed && col >= kCommon) {
		typed_column(cur, e, ctx, col);
		return SQLITE_OK;
	}
	const SubTrace &sub = e.trace();
	switch (col) {
	case kTs:
		sqlite3_result_int64(ctx, e.ns);
		return SQLITE_OK;
	case kPid:
		if (sub.kernel)
			sqlite3_result_null(ctx);
		else
			sqlite3_result_int64(ctx, sub.vpid);
		return SQLITE_OK;
	case kTid:
		if (e.tid < 0)
			sqlite3_result_null(ctx);
		else
			sqlite3_result_int64(ctx, e.tid);
		return SQLITE_OK;
	case kCpu:
		if (e.cpu < 0)
			sqlite3_result_null(ctx);
		else
			sqlite3_result_int64(ctx, e.cpu);
		return SQLITE_OK;
	case kMachine:
	case kProcess:
	case kThread:
	case kProvider:
	case kName:
		name_column(cur, v, e, ctx, col);
		return SQLITE_OK;
	default:
		break;
	}
	// fields: every field as JSON, into the cursor's buffer (no
	// allocation once it has grown).
	decode_to(cur, e, INT32_MAX);
	cur->fv.resize((size_t)cur->decoded);
	cur->json.clear();
	json_fields(&cur->json, cur->fv);
	sqlite3_result_text(ctx, cur->json.data(), (int)cur->json.size(), SQLITE_TRANSIENT);
	return SQLITE_OK;
}

// The columns a scan asks most, read at once (a typed table's number at a
// fixed offset, ts, tid); the rest out of line (column_other).
int x_column(sqlite3_vtab_cursor *c, sqlite3_context *ctx, int col)
{
	auto *cur = static_cast<Cur *>(c);
	auto *v = static_cast<Vtab *>(c->pVtab);
	if (event_table(v)) {
		const TraceEvent &e = *cur->m.event;
		if (col >= kCommon && v->kind == Kind::Typed) {
			const ColPlan &p = cur->cm->plan[(size_t)(col - kCommon)];
			if (p.kind == ColPlan::Int || (p.kind == ColPlan::Uint && p.bytes < 8)) {
				sqlite3_result_int64(ctx, load_int(e.pkt + e.payload + p.off, p.bytes,
								   p.kind == ColPlan::Int));
				return SQLITE_OK;
			}
			if (p.kind == ColPlan::Uint) {
				result_u64(ctx, (uint64_t)load_int(e.pkt + e.payload + p.off, 8, false));
				return SQLITE_OK;
			}
		} else if (col == kTs) {
			sqlite3_result_int64(ctx, e.ns);
			return SQLITE_OK;
		} else if (col == kTid && e.tid >= 0) {
			sqlite3_result_int64(ctx, e.tid);
			return SQLITE_OK;
		}
	}
	return column_other(cur, v, ctx, col);
}

int x_rowid(sqlite3_vtab_cursor *c, sqlite3_int64 *out)
{
	auto *cur = static_cast<Cur *>(c);
	const auto *v = static_cast<Vtab *>(c->pVtab);
	// A rowid names a row the same way in every scan (Trace::stream_base):
	// the small tables are made whole, in one order, by every scan.
	if (event_table(v))
		*out = event_rowid(*v->t, *cur->m.event);
	else if (v->kind == Kind::Slices)
		*out = cur->sl->rows[cur->sl->ri].rowid;
	else if (v->kind == Kind::Sched)
		*out = cur->row_ids[cur->ri];
	else
		*out = (sqlite3_int64)cur->ri + 1;
	return SQLITE_OK;
}

sqlite3_module make_module()
{
	sqlite3_module m;
	memset(&m, 0, sizeof m);
	m.iVersion = 1;
	m.xCreate = x_connect;
	m.xConnect = x_connect;
	m.xBestIndex = x_best_index;
	m.xDisconnect = x_disconnect;
	m.xDestroy = x_disconnect;
	m.xOpen = x_open;
	m.xClose = x_close;
	m.xFilter = x_filter;
	m.xNext = x_next;
	m.xEof = x_eof;
	m.xColumn = x_column;
	m.xRowid = x_rowid;
	return m;
}
const sqlite3_module kModule = make_module();

void drop_registry(void *p)
{
	auto *reg = (Registry *)p;
	{
		std::lock_guard<std::mutex> g(g_reg_mu);
		for (auto it = g_regs.begin(); it != g_regs.end();)
			it = it->second == reg ? g_regs.erase(it) : std::next(it);
	}
	delete reg;
}

// ---- the views ---------------------------------------------------------------

// Every lock acquisition of the pthread preload's events, one row each
// (a mutex_counts row stands for `pairs` counted ones): the rows
// `strata analyze mutex` counts (docs/query.md).
std::string acquisitions_sql(const Trace &t)
{
	auto has = [&](const std::string &n) { return t.typed_by_name.count(n) != 0; };
	const char *kCols = "ts, machine, pid, tid, process, lock AS object";
	std::vector<std::string> parts;
	for (const char *n : {"pthread:mutex_lock", "pthread:mutex_timedlock", "pthread:rwlock_rdlock",
			      "pthread:rwlock_wrlock", "pthread:sem_wait", "pthread:sem_timedwait"})
		if (has(n))
			parts.push_back(
				std::string("SELECT ") + kCols + ", '" + (n + 8) +
				"' AS name, contended, CASE WHEN contended THEN wait_ns ELSE 0 END AS "
				"wait_ns, caller, 1 AS pairs FROM " +
				quote_ident(n) + " WHERE ret IN (0, 130)"); // 130: EOWNERDEAD
	for (const char *n : {"pthread:mutex_trylock", "pthread:rwlock_tryrdlock", "pthread:rwlock_trywrlock",
			      "pthread:sem_trywait"})
		if (has(n))
			parts.push_back(std::string("SELECT ") + kCols + ", '" + (n + 8) +
					"', 0, 0, caller, 1 FROM " + quote_ident(n) +
					" WHERE ret IN (0, 130)");
	for (const char *n : {"pthread:mutex_held", "pthread:mutex_tryheld"})
		if (has(n))
			parts.push_back(
				std::string("SELECT ts - hold_ns, machine, pid, tid, process, lock, '") +
				(n + 8) + "', 0, 0, NULL, 1 FROM " + quote_ident(n));
	for (const char *n : {"pthread:mutex_acquired", "pthread:mutex_tryacquired"})
		if (has(n))
			parts.push_back(
				std::string("SELECT ts - age_ns, machine, pid, tid, process, lock, '") +
				(n + 8) + "', 0, 0, NULL, 1 FROM " + quote_ident(n));
	if (has("pthread:mutex_counts"))
		parts.push_back(std::string("SELECT ") + kCols +
				", 'mutex_counts', 0, 0, NULL, count FROM \"pthread:mutex_counts\"");
	if (parts.empty())
		return "SELECT NULL AS ts, NULL AS machine, NULL AS pid, NULL AS tid, NULL AS process, NULL "
		       "AS "
		       "object, NULL AS name, NULL AS contended, NULL AS wait_ns, NULL AS caller, NULL AS "
		       "pairs "
		       "WHERE 0";
	std::string sql;
	for (const auto &p : parts)
		sql += (sql.empty() ? "" : " UNION ALL ") + p;
	return sql;
}

// Counting mode's holds (docs/pthread.md): a mutex_counts row's pairs,
// their timed holds' sum and longest, and hold_total_ns as `strata analyze
// mutex` counts it: the untimed ones at the mean of the row's timed ones.
std::string hold_counts_sql(const Trace &t)
{
	if (!t.typed_by_name.count("pthread:mutex_counts"))
		return "SELECT NULL AS ts, NULL AS machine, NULL AS pid, NULL AS tid, NULL AS process, NULL "
		       "AS "
		       "object, NULL AS site, NULL AS tried, NULL AS pairs, NULL AS timed, NULL AS "
		       "hold_sum_ns, NULL AS hold_max_ns, NULL AS hold_total_ns WHERE 0";
	return "SELECT ts, machine, pid, tid, process, lock AS object, site, try_ AS tried, count AS pairs, "
	       "timed, hold_sum_ns, hold_max_ns, hold_sum_ns + CASE WHEN min(timed, count) > 0 THEN "
	       "CAST(CAST(hold_sum_ns AS REAL) / min(timed, count) * (count - min(timed, count)) AS "
	       "INTEGER) ELSE 0 END AS hold_total_ns FROM \"pthread:mutex_counts\"";
}

// The views open_trace makes: a class of such a name gets no table.
bool is_view(const std::string &n)
{
	return n == "acquisitions" || n == "hold_counts";
}

void f_open(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	std::vector<std::string> roots;
	for (int i = 0; i < argc; i++) {
		const unsigned char *p = sqlite3_value_text(argv[i]);
		if (!p) {
			roots.clear();
			break;
		}
		roots.emplace_back((const char *)p);
	}
	if (roots.empty()) {
		sqlite3_result_error(ctx, "strata_open(PATH, ...): the trace's directories", -1);
		return;
	}
	std::string why;
	if (!open_trace(sqlite3_context_db_handle(ctx), roots, &why)) {
		sqlite3_result_error(ctx, why.c_str(), -1);
		return;
	}
	Registry *reg = registry_of(sqlite3_context_db_handle(ctx));
	sqlite3_result_int64(ctx, reg ? (int64_t)reg->made.size() : 0);
}

} // namespace

int register_strata(sqlite3 *db)
{
	if (registry_of(db))
		return SQLITE_OK;
	auto *reg = new Registry();
	{
		std::lock_guard<std::mutex> g(g_reg_mu);
		g_regs[db] = reg;
	}
	int rc = sqlite3_create_module_v2(db, "strata", &kModule, reg, drop_registry);
	if (rc == SQLITE_OK)
		rc = sqlite3_create_function_v2(db, "strata_open", -1, SQLITE_UTF8 | SQLITE_DIRECTONLY,
						nullptr, f_open, nullptr, nullptr, nullptr);
	if (rc == SQLITE_OK)
		rc = register_u64_aggregates(db);
	return rc;
}

bool open_trace(sqlite3 *db, const std::vector<std::string> &roots, std::string *why)
{
	std::string path;
	for (const std::string &r : roots) {
		if (r.find('\n') != std::string::npos) {
			*why = "a trace path holding a newline cannot be opened";
			return false;
		}
		path += (path.empty() ? "" : "\n") + r;
	}
	return open_trace(db, path, why);
}

bool open_trace(sqlite3 *db, const std::string &path, std::string *why)
{
	if (register_strata(db) != SQLITE_OK) {
		*why = sqlite3_errmsg(db);
		return false;
	}
	Registry *reg = registry_of(db);
	reg->traces.erase(path); // indexed again: a trace still being written has grown
	auto t = get_trace(reg, path, why);
	if (!t)
		return false;
	auto exec = [&](const std::string &sql) {
		char *err = nullptr;
		if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err) == SQLITE_OK)
			return true;
		*why = err ? err : sqlite3_errmsg(db);
		sqlite3_free(err);
		return false;
	};
	for (const std::string &m : reg->made)
		if (!exec((is_view(m) ? "DROP VIEW IF EXISTS temp." : "DROP TABLE IF EXISTS temp.") +
			  quote_ident(m)))
			return false;
	reg->made.clear();
	reg->open.clear();
	reg->open.push_back(t);
	std::vector<std::string> names = {"events", "lost", "processes", "threads", "sched", "slices"};
	for (const TypedTable &tt : t->typed)
		if (tt.name != "events" && tt.name != "lost" && tt.name != "processes" &&
		    tt.name != "threads" && tt.name != "sched" && tt.name != "slices" && !is_view(tt.name))
			names.push_back(tt.name);
	for (const std::string &n : names) {
		if (!exec("CREATE VIRTUAL TABLE temp." + quote_ident(n) + " USING strata(" +
			  quote_text(path) + ", " + quote_text(n) + ")"))
			return false;
		reg->made.push_back(n);
	}
	const std::pair<const char *, std::string> views[] = {{"acquisitions", acquisitions_sql(*t)},
							      {"hold_counts", hold_counts_sql(*t)}};
	for (const auto &view : views) {
		if (!exec(std::string("CREATE TEMP VIEW ") + view.first + " AS " + view.second))
			return false;
		reg->made.push_back(view.first);
	}
	return true;
}

std::vector<std::string> take_damage(sqlite3 *db)
{
	Registry *reg = registry_of(db);
	std::vector<std::string> out;
	if (reg)
		out.swap(reg->untold);
	return out;
}

uint64_t take_bytes_read(sqlite3 *db)
{
	Registry *reg = registry_of(db);
	if (!reg)
		return 0;
	const uint64_t b = reg->bytes;
	reg->bytes = 0;
	return b;
}

} // namespace query
} // namespace strata
