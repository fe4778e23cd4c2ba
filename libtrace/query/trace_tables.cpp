// trace_tables.cpp - the `strata` SQLite module; contract in trace_tables.h,
// the tables and their types in docs/query.md.
#include "trace_tables.h"

#include <charconv>
#include <cinttypes>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>

#include "json_writer.h"
#include "trace_reader.h"

namespace strata {
namespace query {
namespace {

enum class Kind { Events, Typed, Lost, Processes, Threads, Sched };

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
};

// Where a class's fields go in its typed table.
struct ClassMap {
	size_t table = 0;
	std::vector<int> col;   // by field index: the value's column (from 0 after the common ones)
	std::vector<int> label; // by field index: an enum's label column, or -1
	// By field index: a scalar's offset from the payload when every field
	// before it has a fixed size, else -1 (x_column then reads it at once).
	std::vector<int64_t> off;
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

// One opened trace, shared by the tables of its path.
struct Trace {
	std::string path;
	TraceReader index;
	std::vector<TypedTable> typed;
	std::map<std::string, size_t> typed_by_name;
	std::unordered_map<const MetaEvent *, ClassMap> classes;
};

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
	case STRATA_FT_ENUM:
		return is_u64(f) ? "" : " INTEGER"; // u64: no affinity (values past INT64_MAX are TEXT)
	case STRATA_FT_FLOAT:
		return " REAL";
	default:
		return " TEXT"; // strings; arrays and sequences as JSON
	}
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
				t->typed.push_back(TypedTable{me.full_name, {}});
			}
			TypedTable &tt = t->typed[it->second];
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
			t->classes.emplace(&me, std::move(cm));
		}
	}
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

void result_u64(sqlite3_context *ctx, uint64_t v)
{
	if (v <= (uint64_t)INT64_MAX) {
		sqlite3_result_int64(ctx, (int64_t)v);
		return;
	}
	char b[24];
	const int n = (int)(std::to_chars(b, b + sizeof b, v).ptr - b);
	sqlite3_result_text(ctx, b, n, SQLITE_TRANSIENT);
}

void json_number_u(std::string *o, uint64_t v)
{
	char b[24];
	o->append(b, (size_t)(std::to_chars(b, b + sizeof b, v).ptr - b));
}

void json_number_i(std::string *o, int64_t v)
{
	char b[24];
	o->append(b, (size_t)(std::to_chars(b, b + sizeof b, v).ptr - b));
}

void json_double(std::string *o, double d)
{
	if (!std::isfinite(d)) {
		o->append("null"); // JSON has no NaN or infinity
		return;
	}
	char b[32];
	const int n = snprintf(b, sizeof b, "%.17g", d);
	o->append(b, (size_t)n);
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

void json_elems(std::string *o, const FieldValue &v)
{
	o->push_back('[');
	for (uint32_t k = 0; k < v.count; k++) {
		if (k)
			o->push_back(',');
		if (v.info->is_signed)
			json_number_i(o, v.elem_i(k));
		else
			json_number_u(o, v.elem_u(k));
	}
	o->push_back(']');
}

// A field's value as JSON (an enum's value only: its label is a key of its own).
void json_value(std::string *o, const FieldValue &v)
{
	switch (v.info->type) {
	case STRATA_FT_INTEGER:
	case STRATA_FT_ENUM:
		if (v.info->is_signed)
			json_number_i(o, v.i);
		else
			json_number_u(o, v.u);
		break;
	case STRATA_FT_FLOAT:
		json_double(o, v.d);
		break;
	case STRATA_FT_STRING:
		json_quote(*o, std::string_view(v.str, v.len));
		break;
	case STRATA_FT_ARRAY:
	case STRATA_FT_SEQUENCE:
		json_elems(o, v);
		break;
	default:
		o->append("null");
	}
}

void json_fields(std::string *o, const std::vector<FieldValue> &fv)
{
	o->push_back('{');
	bool first = true;
	for (const FieldValue &v : fv) {
		if (!first)
			o->push_back(',');
		first = false;
		json_quote(*o, std::string_view(v.info->name.data(), v.info->name.size()));
		o->push_back(':');
		json_value(o, v);
		if (v.info->type == STRATA_FT_ENUM) {
			const std::string k = v.info->name + "_label";
			o->push_back(',');
			json_quote(*o, std::string_view(k.data(), k.size()));
			o->push_back(':');
			const char *l = enum_label(*v.info, int_value(v));
			if (l)
				json_quote(*o, std::string_view(l, strlen(l)));
			else
				o->append("null");
		}
	}
	o->push_back('}');
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
		json_elems(&o, v);
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
	if (!t->index.open(path, why))
		return nullptr;
	size_t readable = 0;
	for (const auto &sub : t->index.traces()) {
		readable += sub->readable;
		if (!sub->readable)
			note_damage(reg, "cannot read " + sub->dir + ": " + sub->why);
	}
	if (!readable) {
		*why = "no sub-trace under '" + path + "' can be read";
		return nullptr;
	}
	build_typed(t.get());
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
	enum { Null, Int, Text } type = Null;
	int64_t i = 0;
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

struct Cur : sqlite3_vtab_cursor {
	std::unique_ptr<TraceReader> r;
	TraceMsg m;
	bool eof = true;
	int64_t rowid = 0;
	int64_t lo = INT64_MIN, hi = INT64_MAX;
	bool want_pid = false, want_tid = false;
	int64_t pid = 0, tid = 0;
	// The current event's fields, decoded on first use.
	std::vector<FieldValue> fv;
	int decoded = 0; // fields of fv decoded (the first ones)
	const ClassMap *cm = nullptr;
	const MetaEvent *cm_cls = nullptr, *other_cls = nullptr; // the classes last looked up
	std::vector<int> col_field; // typed: column -> field index of this class (-1: none)
	// Small tables; sched's rows ready to be read.
	std::vector<std::vector<Cell>> rows;
	size_t ri = 0;
	uint64_t bytes_before = 0;
	// sched: each CPU's slice begun and not yet ended, and where a
	// sched_switch class keeps prev_tid, prev_state, next_comm, next_tid,
	// next_prio (empty: not a sched_switch).
	struct Running {
		int64_t ts = 0, tid = 0, prio = 0;
		std::string comm;
	};
	std::map<std::pair<const SubTrace *, int32_t>, Running> running;
	std::unordered_map<const MetaEvent *, std::vector<int>> switch_fields;
	bool sched_done = false;
};

const char *const kLostDecl =
	"CREATE TABLE x(ts INTEGER, ts_end INTEGER, machine TEXT, pid INTEGER, process TEXT, "
	"stream TEXT, kind TEXT, count INTEGER, bytes INTEGER, why TEXT)";
const char *const kProcDecl = "CREATE TABLE x(machine TEXT, pid INTEGER, process TEXT, domain TEXT, "
			      "ts INTEGER, ts_end INTEGER, streams INTEGER, packets INTEGER, bytes "
			      "INTEGER, trace TEXT)";
const char *const kSchedDecl =
	"CREATE TABLE x(ts INTEGER, ts_end INTEGER, dur INTEGER, machine TEXT, cpu INTEGER, tid INTEGER, "
	"comm TEXT, prio INTEGER, end_state INTEGER, next_tid INTEGER, next_comm TEXT)";
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
				       "processes, threads, sched or an event class's name");
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

// idxStr: one letter per argument: a ts=, b ts>, c ts>=, d ts<, e ts<=, p pid=, t tid=.
int x_best_index(sqlite3_vtab *vt, sqlite3_index_info *info)
{
	const auto *v = static_cast<Vtab *>(vt);
	std::string ops;
	double cost = 1e6;
	if (event_table(v) || v->kind == Kind::Sched) {
		for (int i = 0; i < info->nConstraint; i++) {
			const auto &c = info->aConstraint[i];
			if (!c.usable)
				continue;
			char op = 0;
			if (c.iColumn == kTs) {
				switch (c.op) {
				case SQLITE_INDEX_CONSTRAINT_EQ:
					op = 'a';
					break;
				case SQLITE_INDEX_CONSTRAINT_GT:
					op = 'b';
					break;
				case SQLITE_INDEX_CONSTRAINT_GE:
					op = 'c';
					break;
				case SQLITE_INDEX_CONSTRAINT_LT:
					op = 'd';
					break;
				case SQLITE_INDEX_CONSTRAINT_LE:
					op = 'e';
					break;
				default:
					break;
				}
			} else if (!event_table(v)) {
				// sched: ts bounds only
			} else if (c.iColumn == kPid && c.op == SQLITE_INDEX_CONSTRAINT_EQ) {
				op = 'p';
			} else if (c.iColumn == kTid && c.op == SQLITE_INDEX_CONSTRAINT_EQ) {
				op = 't';
			}
			if (!op)
				continue;
			ops += op;
			info->aConstraintUsage[i].argvIndex = (int)ops.size();
			info->aConstraintUsage[i].omit = 0; // checked again by SQLite: the bounds may be REAL
			cost /= op == 'a' ? 100 : op == 'p' || op == 't' ? 5 : 4;
		}
		// Rows come in ts order (sched's as their slices end).
		if (event_table(v) && info->nOrderBy == 1 && info->aOrderBy[0].iColumn == kTs &&
		    !info->aOrderBy[0].desc)
			info->orderByConsumed = 1;
	} else {
		cost = 1e3;
	}
	info->estimatedCost = cost;
	info->estimatedRows = (sqlite3_int64)cost;
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

// The pass's next event into cur->m (damage on the way noted); false at
// its end.
bool read_event(Cur *cur, Vtab *v)
{
	while (cur->r->next(&cur->m)) {
		if (cur->m.kind == TraceMsgKind::Damage)
			note_damage(v->reg, damage_line(*cur->m.damage));
		else if (cur->m.kind == TraceMsgKind::Event)
			return true;
	}
	return false;
}

// The next event row of an event table (or EOF).
void next_event(Cur *cur, Vtab *v)
{
	for (;;) {
		if (!read_event(cur, v)) {
			cur->eof = true;
			return;
		}
		const TraceEvent &e = *cur->m.event;
		if (e.ns > cur->hi) { // merged by time: nothing later can be in the window
			cur->eof = true;
			return;
		}
		if (e.ns < cur->lo)
			continue;
		if (cur->want_tid && e.tid != cur->tid)
			continue;
		if (cur->want_pid && (e.trace().kernel || e.trace().vpid != cur->pid))
			continue;
		if (v->kind == Kind::Typed) {
			if (e.cls == cur->other_cls)
				continue; // the last class seen that is not this table's
			if (!cur->cm || e.cls != cur->cm_cls) {
				auto it = v->t->classes.find(e.cls);
				if (it == v->t->classes.end() || it->second.table != v->typed) {
					cur->other_cls = e.cls;
					continue;
				}
				cur->cm_cls = e.cls;
				cur->cm = &it->second;
				cur->col_field.assign(v->t->typed[v->typed].cols.size() * 2, -1);
				for (size_t f = 0; f < it->second.col.size(); f++) {
					cur->col_field[(size_t)it->second.col[f]] = (int)f;
					if (it->second.label[f] >= 0)
						cur->col_field[(size_t)it->second.label[f]] = (int)f;
				}
			}
		}
		cur->decoded = 0;
		cur->rowid++;
		return;
	}
}

// sched: the next slices that end (or, at the end of the trace, every
// CPU's last slice), into cur->rows; EOF when none is left.  Each
// sched_switch ends its CPU's running slice and begins the next thread's.
// A lower ts bound is the reader's window (a slice that begins in it has
// its end in it too); past an upper bound no slice begins, and the pass
// ends once those begun are ended.
void sched_advance(Cur *cur, Vtab *v)
{
	while (cur->rows.empty()) {
		if (cur->sched_done) {
			cur->eof = true;
			return;
		}
		if (!read_event(cur, v)) {
			for (const auto &kv : cur->running) // still running at the end: no end known
				cur->rows.push_back({cint(kv.second.ts), Cell(), Cell(),
						     ctext(kv.first.first->hostname), cint(kv.first.second),
						     cint(kv.second.tid), ctext(kv.second.comm),
						     cint(kv.second.prio), Cell(), Cell(), Cell()});
			cur->running.clear();
			cur->sched_done = true;
			continue;
		}
		const TraceEvent &e = *cur->m.event;
		if (e.ns < cur->lo || e.cpu < 0)
			continue;
		auto it = cur->switch_fields.find(e.cls);
		if (it == cur->switch_fields.end()) {
			std::vector<int> idx;
			if (e.cls->full_name == "sched_switch")
				for (const char *n :
				     {"prev_tid", "prev_state", "next_comm", "next_tid", "next_prio"})
					for (size_t f = 0; f < e.cls->info.fields.size(); f++)
						if (e.cls->info.fields[f].name == n)
							idx.push_back((int)f);
			if (idx.size() != 5)
				idx.clear();
			it = cur->switch_fields.emplace(e.cls, std::move(idx)).first;
		}
		const std::vector<int> &x = it->second;
		if (x.empty())
			continue;
		e.decode(&cur->fv);
		const FieldValue &comm = cur->fv[(size_t)x[2]];
		if (comm.info->type != STRATA_FT_STRING)
			continue;
		const int64_t prev = int_value(cur->fv[(size_t)x[0]]),
			      next = int_value(cur->fv[(size_t)x[3]]);
		const std::string next_comm(comm.str, comm.len);
		const SubTrace *sub = &whole_of(e.trace());
		auto run = cur->running.find({sub, e.cpu});
		if (run != cur->running.end()) {
			const Cur::Running &r = run->second;
			cur->rows.push_back({cint(r.ts), cint(e.ns), cint(e.ns - r.ts), ctext(sub->hostname),
					     cint(e.cpu), cint(r.tid), ctext(r.comm), cint(r.prio),
					     prev == r.tid ? cint(int_value(cur->fv[(size_t)x[1]])) : Cell(),
					     cint(next), ctext(next_comm)});
			if (e.ns > cur->hi)
				cur->running.erase(run);
		}
		if (e.ns <= cur->hi)
			cur->running[{sub, e.cpu}] =
				Cur::Running{e.ns, next, int_value(cur->fv[(size_t)x[4]]), next_comm};
		else if (cur->running.empty())
			cur->sched_done = true; // every slice begun by the bound has ended
	}
	cur->eof = false;
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

// Threads: owned lanes' from the index; shared lanes' and the kernel's
// from their records (those streams only are read).  A kernel thread has a
// row per name it went by, in time order (a rename starts a row): its names
// come from the kernel's events that name threads (naming_fields), each of
// its events belongs to the name it last went by (its first name before
// any), and a row spans the first to the last of its events and namings.
// Tid 0 (the idle tasks, one per CPU: swapper/N) keeps no name.
void fill_threads(Cur *cur, Vtab *v)
{
	struct T {
		int64_t b = INT64_MAX, e = INT64_MIN;
		uint64_t packets = 0;
		std::string name;
		bool named = false;
	};
	std::map<std::tuple<const SubTrace *, int64_t>, std::vector<T>> th;
	auto seen = [&](const SubTrace *sub, int64_t tid, int64_t ns, const char *name, size_t len) {
		std::vector<T> &runs = th[{sub, tid}];
		const bool naming = name && len && tid != 0;
		if (runs.empty() || (naming && runs.back().named &&
				     runs.back().name.compare(0, std::string::npos, name, len) != 0))
			runs.emplace_back();
		T &t = runs.back();
		if (naming && !t.named) {
			t.name.assign(name, len);
			t.named = true;
		}
		t.b = std::min(t.b, ns);
		t.e = std::max(t.e, ns);
	};
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
			std::vector<T> &runs = th[{&whole_of(*sub), p.vtid}];
			if (runs.empty())
				runs.emplace_back();
			T &t = runs.back();
			t.packets++;
			t.b = std::min(t.b, sub->meta.ns_from_origin(p.ts_begin));
			t.e = std::max(t.e, sub->meta.ns_from_origin(p.ts_end));
		}
	}
	if (read) {
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
				seen(sub, e.tid, e.ns, nullptr, 0);
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
					seen(sub, tid, e.ns, c.str, c.len);
			}
		}
		v->reg->bytes += r.stats().bytes;
	}
	for (const auto &kv : th) {
		const SubTrace *sub = std::get<0>(kv.first);
		const int64_t tid = std::get<1>(kv.first);
		for (const T &t : kv.second) {
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
			const bool timed = m.stream != nullptr;
			row = {timed ? cint(m.begin_ns) : Cell(), timed ? cint(m.end_ns) : Cell()};
			const SubTrace *sub = m.stream ? m.stream->trace : nullptr;
			row.push_back(sub ? ctext(sub->hostname) : Cell());
			row.push_back(sub && !sub->kernel ? cint(sub->vpid) : Cell());
			row.push_back(sub && !sub->kernel ? ctext(sub->procname) : Cell());
			row.push_back(ctext(d.file));
			row.push_back(ctext("damage"));
			row.push_back(Cell());
			row.push_back(cint((int64_t)d.bytes));
			row.push_back(ctext("at byte " + std::to_string(d.offset) + ": " + d.why));
		} else {
			const SubTrace *sub = m.stream->trace;
			row = {cint(m.begin_ns),
			       cint(m.end_ns),
			       ctext(sub->hostname),
			       sub->kernel ? Cell() : cint(sub->vpid),
			       sub->kernel ? Cell() : ctext(sub->procname),
			       ctext(m.stream->path),
			       ctext(m.kind == TraceMsgKind::DiscardedEvents ? "events" : "packets"),
			       cint((int64_t)m.count),
			       Cell(),
			       Cell()};
		}
		cur->rows.push_back(std::move(row));
	}
	v->reg->bytes += r.stats().bytes;
}

int x_filter(sqlite3_vtab_cursor *c, int, const char *idx, int argc, sqlite3_value **argv)
{
	auto *cur = static_cast<Cur *>(c);
	auto *v = static_cast<Vtab *>(c->pVtab);
	if (cur->r)
		v->reg->bytes += cur->r->stats().bytes - cur->bytes_before;
	cur->r.reset();
	cur->rows.clear();
	cur->ri = 0;
	cur->rowid = 0;
	cur->eof = false;
	cur->cm = nullptr;
	cur->running.clear();
	cur->sched_done = false;
	if (!event_table(v) && v->kind != Kind::Sched) {
		if (v->kind == Kind::Processes)
			fill_processes(cur, v);
		else if (v->kind == Kind::Threads)
			fill_threads(cur, v);
		else
			fill_lost(cur, v);
		cur->eof = cur->rows.empty();
		return SQLITE_OK;
	}
	cur->lo = INT64_MIN;
	cur->hi = INT64_MAX;
	cur->want_pid = cur->want_tid = false;
	bool none = false; // a bound no row can meet (NULL, text)
	for (int i = 0; i < argc && idx && idx[i]; i++) {
		sqlite3_value *a = argv[i];
		const int t = sqlite3_value_numeric_type(a);
		if (t != SQLITE_INTEGER && t != SQLITE_FLOAT) {
			none |= t == SQLITE_NULL;
			continue; // SQLite checks it (text compares above every number)
		}
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
		switch (idx[i]) {
		case 'a':
			cur->lo = std::max(cur->lo, floor64());
			cur->hi = std::min(cur->hi, ceil64());
			break;
		case 'b':
			cur->lo = std::max(cur->lo, is_int && iv < INT64_MAX ? iv + 1 : floor64());
			break;
		case 'c':
			cur->lo = std::max(cur->lo, floor64());
			break;
		case 'd':
			cur->hi = std::min(cur->hi, is_int && iv > INT64_MIN ? iv - 1 : ceil64());
			break;
		case 'e':
			cur->hi = std::min(cur->hi, ceil64());
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
	if (none || cur->lo > cur->hi) {
		cur->eof = true;
		return SQLITE_OK;
	}
	cur->r = std::make_unique<TraceReader>();
	cur->r->share_index(v->t->index);
	cur->bytes_before = 0;
	if (v->kind == Kind::Sched) {
		if (cur->lo != INT64_MIN)
			cur->r->set_window(cur->lo, INT64_MAX); // the slices' ends lie past hi
		cur->r->set_stream_filter([](const StreamInfo &s) { return s.trace->kernel; });
		sched_advance(cur, v);
		return SQLITE_OK;
	}
	if (cur->lo != INT64_MIN || cur->hi != INT64_MAX)
		cur->r->set_window(cur->lo, cur->hi);
	if (cur->want_pid || cur->want_tid) {
		const bool wp = cur->want_pid, wt = cur->want_tid;
		const int64_t pid = cur->pid, tid = cur->tid;
		cur->r->set_stream_filter([=](const StreamInfo &s) {
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
	next_event(cur, v);
	return SQLITE_OK;
}

int x_next(sqlite3_vtab_cursor *c)
{
	auto *cur = static_cast<Cur *>(c);
	auto *v = static_cast<Vtab *>(c->pVtab);
	if (v->kind == Kind::Sched) {
		cur->rowid++;
		if (++cur->ri >= cur->rows.size()) {
			cur->rows.clear();
			cur->ri = 0;
			sched_advance(cur, v);
		}
		return SQLITE_OK;
	}
	if (!event_table(v)) {
		cur->eof = ++cur->ri >= cur->rows.size();
		return SQLITE_OK;
	}
	next_event(cur, v);
	return SQLITE_OK;
}

int x_eof(sqlite3_vtab_cursor *c)
{
	return static_cast<Cur *>(c)->eof;
}

int x_column(sqlite3_vtab_cursor *c, sqlite3_context *ctx, int col)
{
	auto *cur = static_cast<Cur *>(c);
	auto *v = static_cast<Vtab *>(c->pVtab);
	if (!event_table(v)) {
		const Cell &cell = cur->rows[cur->ri][(size_t)col];
		if (cell.type == Cell::Int)
			sqlite3_result_int64(ctx, cell.i);
		else if (cell.type == Cell::Text)
			result_text(ctx, cell.s.data(), cell.s.size());
		else
			sqlite3_result_null(ctx);
		return SQLITE_OK;
	}
	const TraceEvent &e = *cur->m.event;
	const SubTrace &sub = e.trace();
	switch (col) {
	case kTs:
		sqlite3_result_int64(ctx, e.ns);
		return SQLITE_OK;
	case kMachine:
		result_text(ctx, sub.hostname.data(), sub.hostname.size());
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
	case kProcess:
		if (sub.kernel)
			sqlite3_result_null(ctx);
		else
			result_text(ctx, sub.procname.data(), sub.procname.size());
		return SQLITE_OK;
	case kThread:
		if (!sub.kernel && e.tid == sub.vpid)
			result_text(ctx, sub.procname.data(), sub.procname.size());
		else
			sqlite3_result_null(ctx);
		return SQLITE_OK;
	case kCpu:
		if (e.cpu < 0)
			sqlite3_result_null(ctx);
		else
			sqlite3_result_int64(ctx, e.cpu);
		return SQLITE_OK;
	default:
		break;
	}
	// The fields up to the one asked for (all of them for `fields`),
	// decoded in place: no allocation once the vector has grown.
	const size_t k = (size_t)(col - kCommon);
	int want = -1;
	if (v->kind == Kind::Events)
		want = col == kFields ? INT32_MAX : -1;
	else if (k < cur->col_field.size())
		want = cur->col_field[k];
	if (v->kind == Kind::Typed && want >= 0 && cur->cm->off[(size_t)want] >= 0) {
		// A scalar at a fixed offset: read at once, nothing else decoded.
		FieldValue fv;
		fv.info = &e.cls->info.fields[(size_t)want];
		read_scalar(*fv.info, e.pkt + e.payload + cur->cm->off[(size_t)want], &fv);
		if (fv.info->type == STRATA_FT_INTEGER && fv.info->is_signed)
			sqlite3_result_int64(ctx, fv.i);
		else if (fv.info->type == STRATA_FT_INTEGER)
			result_u64(ctx, fv.u);
		else
			result_field(ctx, fv, v->t->typed[v->typed].cols[k].label);
		return SQLITE_OK;
	}
	if (want >= 0 && cur->decoded <= want && cur->decoded < (int)e.cls->info.fields.size()) {
		cur->fv.resize(e.cls->info.fields.size());
		int n = 0;
		e.for_each_field([cur, &n, want](const FieldValue &fv) {
			cur->fv[(size_t)n++] = fv;
			return n <= want;
		});
		cur->decoded = n;
	}
	if (v->kind == Kind::Events) {
		if (col == kProvider) {
			const std::string &p = sub.kernel ? std::string("kernel") : e.cls->info.provider;
			result_text(ctx, p.data(), p.size());
		} else if (col == kName) {
			result_text(ctx, e.cls->full_name.data(), e.cls->full_name.size());
		} else {
			std::string o;
			cur->fv.resize((size_t)cur->decoded);
			json_fields(&o, cur->fv);
			sqlite3_result_text(ctx, o.data(), (int)o.size(), SQLITE_TRANSIENT);
		}
		return SQLITE_OK;
	}
	const int f = want;
	if (f < 0 || f >= cur->decoded) {
		sqlite3_result_null(ctx);
		return SQLITE_OK;
	}
	result_field(ctx, cur->fv[(size_t)f], v->t->typed[v->typed].cols[k].label);
	return SQLITE_OK;
}

int x_rowid(sqlite3_vtab_cursor *c, sqlite3_int64 *out)
{
	auto *cur = static_cast<Cur *>(c);
	const auto *v = static_cast<Vtab *>(c->pVtab);
	*out = event_table(v) || v->kind == Kind::Sched ? cur->rowid : (sqlite3_int64)cur->ri + 1;
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

// ---- slices: begin/end pairs as SQL over the typed tables ---------------------

// The parts of the slices view this trace has tables for.
std::string slices_sql(const Trace &t)
{
	auto has = [&](const std::string &n) { return t.typed_by_name.count(n) != 0; };
	auto cols_of = [&](const std::string &n, const char *col) {
		auto it = t.typed_by_name.find(n);
		if (it == t.typed_by_name.end())
			return false;
		for (const FieldCol &c : t.typed[it->second].cols)
			if (c.name == col)
				return true;
		return false;
	};
	std::vector<std::string> parts;
	const char *kCols = "machine, pid, tid, process";
	// Lock waits: a blocking call's one event is its end; it began wait_ns before.
	for (const char *n : {"pthread:mutex_lock", "pthread:mutex_timedlock", "pthread:rwlock_rdlock",
			      "pthread:rwlock_wrlock", "pthread:sem_wait", "pthread:sem_timedwait"})
		if (has(n) && cols_of(n, "wait_ns") && cols_of(n, "lock"))
			parts.push_back(std::string("SELECT 'lock_wait' AS kind, '") + (n + 8) +
					"' AS name, ts - wait_ns AS ts, ts AS ts_end, wait_ns AS dur, " +
					kCols + ", lock AS object, caller FROM " + quote_ident(n) +
					" WHERE wait_ns > 0");
	for (const char *n : {"pthread:cond_wait", "pthread:cond_timedwait"})
		if (has(n) && cols_of(n, "wait_ns") && cols_of(n, "cond"))
			parts.push_back(std::string("SELECT 'cond_wait', '") + (n + 8) +
					"', ts - wait_ns, ts, wait_ns, " + kCols + ", cond, caller FROM " +
					quote_ident(n));
	// Holds: compact records carry their own; full records pair an
	// acquisition with the same thread's next unlock of that lock.
	for (const char *n : {"pthread:mutex_held", "pthread:mutex_tryheld"})
		if (has(n) && cols_of(n, "hold_ns"))
			parts.push_back(std::string("SELECT 'lock_hold', '") + (n + 8) +
					"', ts - hold_ns, ts, hold_ns, " + kCols + ", lock, NULL FROM " +
					quote_ident(n));
	// An acquisition proves that the conflicting holds of other threads
	// ended (their unlock event may be stamped late: a thread preempted
	// between the real unlock and its event), so `strata analyze mutex`
	// ends a hold at its thread's unlock or at the first conflicting
	// acquisition it reads meanwhile, whichever comes first.  It reads
	// events in record order, and a compact record's acquisition (ts -
	// hold_ns) at the record (`pos` here); the hold then ends at that
	// acquisition's time, or at its own start if that was later.
	std::vector<std::string> acq;
	const std::string cols = std::string(", ") + kCols + ", lock, ";
	for (const char *n : {"pthread:mutex_lock", "pthread:mutex_timedlock", "pthread:mutex_trylock",
			      "pthread:rwlock_rdlock", "pthread:rwlock_wrlock", "pthread:rwlock_tryrdlock",
			      "pthread:rwlock_trywrlock"})
		if (has(n) && cols_of(n, "ret") && cols_of(n, "caller"))
			acq.push_back("SELECT ts, ts AS pos" + cols + "caller, 1 AS acq, " +
				      (strstr(n, "rdlock") ? "0" : "1") + " AS excl, '" + (n + 8) +
				      "' AS ev, 1 AS full FROM " + quote_ident(n) + " WHERE ret IN (0, 130)");
	for (const char *n : {"pthread:mutex_acquired", "pthread:mutex_tryacquired"})
		if (has(n) && cols_of(n, "age_ns"))
			acq.push_back("SELECT ts - age_ns, ts" + cols + "NULL, 1, 1, '" + (n + 8) +
				      "', 1 FROM " + quote_ident(n));
	for (const char *n : {"pthread:mutex_held", "pthread:mutex_tryheld"})
		if (has(n) && cols_of(n, "hold_ns"))
			acq.push_back("SELECT ts - hold_ns, ts" + cols + "NULL, 1, 1, '" + (n + 8) +
				      "', 0 FROM " + quote_ident(n));
	std::vector<std::string> rel;
	for (const char *n : {"pthread:mutex_unlock", "pthread:rwlock_unlock"})
		if (has(n))
			rel.push_back("SELECT ts, ts" + cols + "NULL, 0, 0, '" + (n + 8) +
				      "', 1, NULL, NULL, NULL FROM " + quote_ident(n));
	if (!acq.empty() && !rel.empty()) {
		std::string a, u;
		for (const auto &x : acq)
			a += (a.empty() ? "" : " UNION ALL ") + x;
		for (const auto &x : rel)
			u += " UNION ALL " + x;
		parts.push_back(
			"SELECT 'lock_hold', ev, ts, e, e - ts, " + std::string(kCols) +
			", lock, caller FROM (SELECT *, CASE WHEN npos < nts AND (excl OR nexcl) THEN "
			"max(nat, ts) ELSE nts END AS e FROM (SELECT *, LEAD(ts) OVER t AS nts, LEAD(acq) "
			"OVER t AS nacq FROM (SELECT *, LEAD(ts) OVER l AS nat, LEAD(pos) OVER l AS npos, "
			"LEAD(excl) OVER l AS nexcl FROM (" +
			a + ") WINDOW l AS (PARTITION BY machine, pid, lock ORDER BY pos)" + u +
			") WINDOW t AS (PARTITION BY machine, pid, tid, lock ORDER BY ts)) WHERE acq = 1 "
			"AND full = 1 AND nacq = 0)");
	}
	// JVM monitors: contended enters and waits end with their duration.
	for (const char *n : {"jvm:monitor_contended_entered", "jvm:monitor_waited"})
		if (has(n) && cols_of(n, "wait_ns"))
			parts.push_back(std::string("SELECT 'monitor_wait', '") + (n + 4) +
					"', ts - wait_ns, ts, wait_ns, " + kCols + ", \"class\", NULL FROM " +
					quote_ident(n));
	// Syscalls: an entry and the same thread's next event, when that is its exit.
	bool sys = false;
	for (const auto &kv : t.typed_by_name)
		sys |= kv.first.compare(0, 14, "syscall_entry_") == 0;
	if (sys)
		parts.push_back(
			"SELECT 'syscall', substr(name, 15), ts, nts, nts - ts, machine, pid, tid, process, "
			"NULL, NULL FROM (SELECT ts, machine, pid, tid, process, name, LEAD(ts) OVER w AS "
			"nts, "
			"LEAD(name) OVER w AS nname FROM events WHERE name LIKE 'syscall\\_%' ESCAPE '\\' "
			"WINDOW w AS (PARTITION BY machine, tid ORDER BY ts)) WHERE name LIKE "
			"'syscall\\_entry\\_%' ESCAPE '\\' AND nname = 'syscall_exit_' || substr(name, 15)");
	if (parts.empty())
		return "SELECT NULL AS kind, NULL AS name, NULL AS ts, NULL AS ts_end, NULL AS dur, NULL AS "
		       "machine, NULL AS pid, NULL AS tid, NULL AS process, NULL AS object, NULL AS caller "
		       "WHERE 0";
	std::string sql;
	for (const auto &p : parts)
		sql += (sql.empty() ? "" : " UNION ALL ") + p;
	return sql;
}

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
	return n == "slices" || n == "acquisitions" || n == "hold_counts";
}

void f_open(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	const unsigned char *p = argc == 1 ? sqlite3_value_text(argv[0]) : nullptr;
	if (!p) {
		sqlite3_result_error(ctx, "strata_open(PATH): the trace's directory", -1);
		return;
	}
	std::string why;
	if (!open_trace(sqlite3_context_db_handle(ctx), (const char *)p, &why)) {
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
		rc = sqlite3_create_function_v2(db, "strata_open", 1, SQLITE_UTF8 | SQLITE_DIRECTONLY,
						nullptr, f_open, nullptr, nullptr, nullptr);
	return rc;
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
	std::vector<std::string> names = {"events", "lost", "processes", "threads", "sched"};
	for (const TypedTable &tt : t->typed)
		if (tt.name != "events" && tt.name != "lost" && tt.name != "processes" &&
		    tt.name != "threads" && tt.name != "sched" && !is_view(tt.name))
			names.push_back(tt.name);
	for (const std::string &n : names) {
		if (!exec("CREATE VIRTUAL TABLE temp." + quote_ident(n) + " USING strata(" +
			  quote_text(path) + ", " + quote_text(n) + ")"))
			return false;
		reg->made.push_back(n);
	}
	const std::pair<const char *, std::string> views[] = {{"slices", slices_sql(*t)},
							      {"acquisitions", acquisitions_sql(*t)},
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
