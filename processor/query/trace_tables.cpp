// trace_tables.cpp - the `strata` SQLite module; contract in trace_tables.h,
// the tables and their types in docs/query.md.
#include "trace_tables.h"

#include <cstring>
#include <map>
#include <mutex>

#include "query_trace.h"
#include "scan_plan.h"
#include "sched_table.h"
#include "slices_table.h"
#include "small_tables.h"
#include "table_cursor.h"
#include "u64_aggregates.h"

// The routines every object of the tables calls SQLite through
// (sqlite_api.h): set by the loading SQLite (extension.cpp) or by the
// linked one at each open (linked_sqlite.cpp).
SQLITE_EXTENSION_INIT1

namespace strata {
namespace query {
namespace {

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

std::mutex g_reg_mu; // guards g_regs (connections may live on several threads)

std::map<sqlite3 *, Registry *> g_regs;

Registry *registry_of(sqlite3 *db)
{
	std::lock_guard<std::mutex> g(g_reg_mu);
	auto it = g_regs.find(db);
	return it == g_regs.end() ? nullptr : it->second;
}

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
