// cmd_query.cpp - `strata query TRACE ['SQL']`: questions about a trace as
// SQL (docs/query.md), on SQLite and the tables of processor/query; with no
// SQL, statements read from stdin (a prompt when it is a terminal), in the
// manner of the sqlite3 shell.
#include "commands.h"

#ifndef STRATA_HAVE_QUERY
#include <cstdio>
int strata_cmd_query(int, char **)
{
	std::fputs("strata query: this strata was built without SQLite (libsqlite3-dev)\n", stderr);
	return strata::cli::kFail;
}
#else
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cinttypes>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "analyze_symbols.h"
#include "json_writer.h"
#include "options.h"
#include "trace_tables.h"

namespace strata {
namespace {

enum class Mode { Table, Csv, Json };

class AddressSymbols;
struct Out {
	Mode mode = Mode::Table;
	bool stats = false;
	AddressSymbols *syms = nullptr; // the table's names beside addresses
};

std::string cell_text(sqlite3_stmt *st, int i)
{
	const unsigned char *t = sqlite3_column_text(st, i);
	return t ? std::string((const char *)t, (size_t)sqlite3_column_bytes(st, i)) : std::string();
}

// A REAL as the shortest text that reads back as the same double
// (std::to_chars), with a '.' or an exponent so that it reads as a REAL
// again (1.0, -0.0, 1e+300); an infinity Inf or -Inf (in JSON: the
// JsonWriter's real(), 1e999 or -1e999).  SQLite has no NaN (it makes it
// NULL).
std::string real_text(double d)
{
	if (std::isinf(d))
		return d > 0 ? "Inf" : "-Inf";
	char b[40];
	const auto r = std::to_chars(b, b + sizeof b - 2, d);
	std::string s(b, r.ptr);
	if (s.find_first_of(".en") == std::string::npos)
		s += ".0";
	return s;
}

// A cell's text in CSV: SQLite's, but a REAL's exact (real_text).
std::string csv_text(sqlite3_stmt *st, int i)
{
	if (sqlite3_column_type(st, i) == SQLITE_FLOAT)
		return real_text(sqlite3_column_double(st, i));
	return cell_text(st, i);
}

void csv_field(std::string *o, const std::string &s)
{
	if (s.find_first_of(",\"\r\n") == std::string::npos) {
		*o += s;
		return;
	}
	*o += '"';
	for (char c : s)
		*o += c == '"' ? std::string("\"\"") : std::string(1, c);
	*o += '"';
}

void json_cell(JsonWriter &w, sqlite3_stmt *st, int i)
{
	switch (sqlite3_column_type(st, i)) {
	case SQLITE_INTEGER:
		w.i64(sqlite3_column_int64(st, i));
		return;
	case SQLITE_FLOAT:
		w.real(sqlite3_column_double(st, i));
		return;
	case SQLITE_NULL:
		w.null();
		return;
	case SQLITE_BLOB: { // as hex text
		static const char kHex[] = "0123456789abcdef";
		const auto *p = (const unsigned char *)sqlite3_column_blob(st, i);
		const int n = sqlite3_column_bytes(st, i);
		std::string hex;
		for (int k = 0; k < n; k++) {
			hex += kHex[p[k] >> 4];
			hex += kHex[p[k] & 15];
		}
		w.str(hex);
		return;
	}
	default:
		w.str(cell_text(st, i));
	}
}

/*
 * The symbols the table shows beside addresses, as `strata analyze mutex`
 * finds them: from the mappings the pthread preload recorded (its
 * pthread:mapping events) and the mapped ELF files.  A column holds no
 * process, so an address is named when every process that maps it names
 * it the same.  Read once, at the first statement with an address column.
 */
class AddressSymbols {
public:
	explicit AddressSymbols(sqlite3 *db) : db_(db) {}
	// " name" for an address with one, else "".
	std::string beside(uint64_t addr)
	{
		load();
		if (!table_)
			return "";
		auto it = cache_.find(addr);
		if (it == cache_.end())
			it = cache_.emplace(addr, table_->unique_name(addr)).first;
		return it->second.empty() ? "" : " " + it->second;
	}
	// Reads the mappings once, before the first statement with an address
	// column runs (its --stats line does not count this read).
	void load()
	{
		if (loaded_)
			return;
		loaded_ = true;
		std::vector<analyze::Mapping> maps = read_mappings(db_);
		if (!maps.empty())
			table_.reset(new analyze::SymbolTable(maps));
	}

private:
	static uint64_t u64_of(sqlite3_stmt *st, int i)
	{
		if (sqlite3_column_type(st, i) == SQLITE_INTEGER)
			return (uint64_t)sqlite3_column_int64(st, i);
		const char *t = (const char *)sqlite3_column_text(st, i);
		return t ? std::strtoull(t, nullptr, 10) : 0;
	}
	static std::vector<analyze::Mapping> read_mappings(sqlite3 *db)
	{
		std::vector<analyze::Mapping> maps;
		sqlite3_stmt *st = nullptr;
		if (sqlite3_prepare_v2(db,
				       "SELECT machine, pid, \"start\", \"end\", \"offset\", path FROM "
				       "temp.\"pthread:mapping\"",
				       -1, &st, nullptr) != SQLITE_OK) {
			sqlite3_finalize(st); // the trace has no mapping: no names
			return maps;
		}
		std::map<std::pair<std::string, int64_t>, uint32_t> procs; // (machine, pid) -> index
		while (sqlite3_step(st) == SQLITE_ROW) {
			const char *m = (const char *)sqlite3_column_text(st, 0);
			const auto key = std::make_pair(std::string(m ? m : ""), sqlite3_column_int64(st, 1));
			analyze::Mapping mp;
			mp.proc = procs.emplace(key, (uint32_t)procs.size()).first->second;
			mp.start = u64_of(st, 2);
			mp.end = u64_of(st, 3);
			mp.offset = u64_of(st, 4);
			const char *path = (const char *)sqlite3_column_text(st, 5);
			mp.path = path ? path : "";
			maps.push_back(std::move(mp));
		}
		sqlite3_finalize(st);
		return maps;
	}
	sqlite3 *db_;
	bool loaded_ = false;
	std::unique_ptr<analyze::SymbolTable> table_;
	std::unordered_map<uint64_t, std::string> cache_;
};

// The table form: columns as wide as their first 1000 rows' widest value
// (later rows may push theirs wider); NULL as empty.
class TablePrinter {
	struct Cell {
		std::string text;
		bool number; // INTEGER or REAL: right-aligned
	};

public:
	TablePrinter(sqlite3_stmt *st, AddressSymbols *syms)
	    : st_(st), n_(sqlite3_column_count(st)), syms_(syms)
	{
		for (int i = 0; i < n_; i++) {
			names_.push_back(Cell{
				cli::escaped(sqlite3_column_name(st, i) ? sqlite3_column_name(st, i) : ""),
				false});
			const char *d = sqlite3_column_decltype(st, i);
			hex_.push_back(d && std::strstr(d, "HEX"));
			if (hex_.back() && syms_)
				syms_->load();
		}
	}
	void row()
	{
		std::vector<Cell> r;
		for (int i = 0; i < n_; i++) {
			const int t = sqlite3_column_type(st_, i);
			r.push_back(Cell{t == SQLITE_NULL ? std::string() : cli::escaped(shown(i, t)),
					 t == SQLITE_INTEGER || t == SQLITE_FLOAT});
		}
		if (flushed_) {
			print(r);
			return;
		}
		rows_.push_back(std::move(r));
		if (rows_.size() >= 1000)
			flush();
	}
	void flush()
	{
		if (flushed_)
			return;
		flushed_ = true;
		width_.assign((size_t)n_, 0);
		for (int i = 0; i < n_; i++)
			width_[(size_t)i] = columns(names_[(size_t)i].text);
		for (const auto &r : rows_)
			for (int i = 0; i < n_; i++)
				width_[(size_t)i] = std::max(width_[(size_t)i], columns(r[(size_t)i].text));
		print(names_);
		std::string rule;
		for (int i = 0; i < n_; i++)
			rule += (i ? "  " : "") + std::string(width_[(size_t)i], '-');
		std::printf("%s\n", rule.c_str());
		for (const auto &r : rows_)
			print(r);
		rows_.clear();
	}

private:
	// A cell as the table shows it: an integer of a HEX column (an address:
	// the tables' strata_hex fields, slices.caller) as 0x..., a u64 past
	// INT64_MAX (TEXT) included, and its symbol when the trace names it;
	// anything else as SQLite's text.
	std::string shown(int i, int t) const
	{
		std::string s = cell_text(st_, i);
		if (!hex_[(size_t)i] || (t != SQLITE_INTEGER && t != SQLITE_TEXT))
			return s;
		char *end = nullptr;
		errno = 0;
		const unsigned long long v = t == SQLITE_INTEGER
						     ? (unsigned long long)sqlite3_column_int64(st_, i)
						     : std::strtoull(s.c_str(), &end, 10);
		if (t == SQLITE_TEXT && (errno || s.empty() || s[0] == '-' || *end))
			return s;
		char buf[24];
		std::snprintf(buf, sizeof buf, "0x%llx", v);
		return syms_ ? buf + syms_->beside(v) : std::string(buf);
	}
	static size_t columns(const std::string &s)
	{
		size_t n = 0;
		for (unsigned char c : s)
			n += (c & 0xc0) != 0x80; // code points, as a terminal shows most
		return n;
	}
	void print(const std::vector<Cell> &r)
	{
		std::string line;
		for (int i = 0; i < n_; i++) {
			const Cell &c = r[(size_t)i];
			if (i)
				line += "  ";
			const size_t w = columns(c.text);
			const size_t pad = width_[(size_t)i] > w ? width_[(size_t)i] - w : 0;
			if (c.number) // numbers to the right
				line += std::string(pad, ' ') + c.text;
			else
				line += c.text + (i + 1 < n_ ? std::string(pad, ' ') : std::string());
		}
		std::printf("%s\n", line.c_str());
	}
	sqlite3_stmt *st_;
	int n_;
	std::vector<Cell> names_;
	AddressSymbols *syms_;
	std::vector<bool> hex_; // per column: its declared type says HEX
	std::vector<std::vector<Cell>> rows_;
	std::vector<size_t> width_;
	bool flushed_ = false;
};

// Damage told so far: the exit status is 1 once any was skipped, after
// every answer was written (as `strata check`).  One command, one thread.
uint64_t g_damage_told = 0;

void tell_damage(sqlite3 *db)
{
	for (const std::string &l : query::take_damage(db)) {
		std::fprintf(stderr, "strata query: skipped: %s\n", l.c_str());
		g_damage_told++;
	}
}

// Where in `sql` the error is: "line L, column C" and the line with a caret.
std::string error_place(const std::string &sql, int off)
{
	if (off < 0 || (size_t)off > sql.size())
		return "";
	size_t ls = sql.rfind('\n', off ? (size_t)off - 1 : 0);
	ls = ls == std::string::npos || (size_t)off == 0 ? 0 : ls + 1;
	if (off > 0 && sql[(size_t)off - 1] == '\n')
		ls = (size_t)off;
	size_t le = sql.find('\n', (size_t)off);
	if (le == std::string::npos)
		le = sql.size();
	int line = 1;
	for (size_t k = 0; k < ls; k++)
		line += sql[k] == '\n';
	return " (line " + std::to_string(line) + ", column " + std::to_string(off - (int)ls + 1) + ")\n  " +
	       cli::escaped(sql.substr(ls, le - ls)) + "\n  " + std::string((size_t)off - ls, ' ') + "^";
}

// One row of a statement's result in the output's mode (JSON: through jw,
// which writes into buf).
void print_row(sqlite3_stmt *st, int n, const Out &out, TablePrinter *tp, JsonWriter &jw, std::string &buf)
{
	if (tp) {
		tp->row();
	} else if (out.mode == Mode::Csv) {
		buf.clear();
		for (int i = 0; i < n; i++) {
			if (i)
				buf += ',';
			if (sqlite3_column_type(st, i) != SQLITE_NULL)
				csv_field(&buf, csv_text(st, i));
		}
		std::printf("%s\r\n", buf.c_str());
	} else {
		buf.clear();
		jw.newline().begin_object(); // one row a line
		for (int i = 0; i < n; i++) {
			const char *nm = sqlite3_column_name(st, i);
			jw.key(nm ? nm : "");
			json_cell(jw, st, i);
		}
		jw.end_object();
		std::fputs(buf.c_str(), stdout);
	}
}

// Runs every statement of sql; false at the first error (told).
bool run_sql(sqlite3 *db, const std::string &sql, const Out &out)
{
	const char *p = sql.c_str();
	const char *end = p + sql.size();
	while (p < end) {
		sqlite3_stmt *st = nullptr;
		const char *tail = nullptr;
		if (sqlite3_prepare_v2(db, p, (int)(end - p), &st, &tail) != SQLITE_OK) {
			const int off = sqlite3_error_offset(db);
			std::fprintf(stderr, "strata query: %s%s\n", sqlite3_errmsg(db),
				     error_place(sql, off < 0 ? -1 : off + (int)(p - sql.c_str())).c_str());
			return false;
		}
		p = tail;
		if (!st)
			continue; // whitespace or a comment
		TablePrinter table(st, out.mode == Mode::Table ? out.syms : nullptr);
		const auto t0 = std::chrono::steady_clock::now();
		query::take_bytes_read(db);
		const int n = sqlite3_column_count(st);
		uint64_t rows = 0;
		std::string buf;
		JsonWriter jw(buf, JsonWriter::Style::kCompact); // --json: an array a statement
		TablePrinter *tp = nullptr;
		if (n && out.mode == Mode::Table)
			tp = &table;
		if (n && out.mode == Mode::Csv) {
			for (int i = 0; i < n; i++) {
				if (i)
					buf += ',';
				csv_field(&buf, sqlite3_column_name(st, i) ? sqlite3_column_name(st, i) : "");
			}
			std::printf("%s\r\n", buf.c_str());
		}
		if (n && out.mode == Mode::Json) {
			jw.begin_array();
			std::fputs(buf.c_str(), stdout);
		}
		int rc;
		while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
			print_row(st, n, out, tp, jw, buf);
			rows++;
		}
		const bool ok = rc == SQLITE_DONE;
		const std::string err = ok ? "" : sqlite3_errmsg(db); // before anything else asks SQLite
		if (tp)
			tp->flush();
		if (n && out.mode == Mode::Json) {
			buf.clear();
			if (rows) // the closing bracket on a line of its own
				jw.newline();
			jw.end_array();
			buf += '\n'; // the output's last line ends
			std::fputs(buf.c_str(), stdout);
		}
		std::fflush(stdout);
		if (!ok)
			std::fprintf(stderr, "strata query: %s\n", err.c_str());
		else if (n && !rows && !out.stats) // an empty answer is told, not silent
			std::fprintf(stderr, "strata query: no row\n");
		sqlite3_finalize(st);
		tell_damage(db);
		if (out.stats) {
			const double s =
				std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
			std::fprintf(stderr,
				     "strata query: %" PRIu64 " row(s), %" PRIu64
				     " packet bytes read, %.3f s\n",
				     rows, query::take_bytes_read(db), s);
		}
		if (!ok)
			return false;
	}
	return true;
}

// A table name as typed after .schema: "pthread:mutex_lock" (quoted as
// in SQL, with '', "", `` or []) or bare.
std::string unquoted(const std::string &w)
{
	if (w.size() >= 2 && ((w[0] == '"' && w.back() == '"') || (w[0] == '\'' && w.back() == '\'') ||
			      (w[0] == '`' && w.back() == '`') || (w[0] == '[' && w.back() == ']')))
		return w.substr(1, w.size() - 2);
	return w;
}

// Whether the trace's database has a table or view `name`.
bool has_table(sqlite3 *db, const std::string &name)
{
	sqlite3_stmt *st = nullptr;
	bool found = false;
	if (sqlite3_prepare_v2(
		    db, "SELECT 1 FROM sqlite_temp_master WHERE type IN ('table', 'view') AND name = ?", -1,
		    &st, nullptr) == SQLITE_OK &&
	    sqlite3_bind_text(st, 1, name.c_str(), -1, SQLITE_TRANSIENT) == SQLITE_OK)
		found = sqlite3_step(st) == SQLITE_ROW;
	sqlite3_finalize(st);
	return found;
}

bool dot_command(sqlite3 *db, const std::string &line, Out &out, bool *quit)
{
	std::vector<std::string> w;
	size_t i = 0;
	while (i < line.size()) {
		while (i < line.size() && isspace((unsigned char)line[i]))
			i++;
		const size_t b = i;
		while (i < line.size() && !isspace((unsigned char)line[i]))
			i++;
		if (i > b)
			w.push_back(line.substr(b, i - b));
	}
	const std::string &c = w[0];
	if (c == ".quit" || c == ".exit") {
		*quit = true;
		return true;
	}
	if (c == ".help") {
		std::puts(".tables           the tables and views\n"
			  ".schema [TABLE]   their columns\n"
			  ".mode table|csv|json\n"
			  ".quit             leave (also: end of input)");
		return true;
	}
	if (c == ".tables")
		return run_sql(db,
			       "SELECT name FROM sqlite_temp_master WHERE type IN ('table', 'view') ORDER BY "
			       "type, name",
			       out);
	if (c == ".schema") {
		std::string q =
			"SELECT s.name, group_concat(p.name || CASE WHEN p.type = '' THEN '' ELSE ' ' "
			"|| p.type END, ', ') AS columns FROM sqlite_temp_master AS s, "
			"pragma_table_info(s.name, 'temp') AS p WHERE s.type IN ('table', 'view')";
		if (w.size() > 1) {
			const std::string t = unquoted(w[1]);
			if (!has_table(db, t)) {
				std::fprintf(stderr,
					     "strata query: .schema: no table or view named %s (.tables "
					     "lists them)\n",
					     cli::escaped(t).c_str());
				return false;
			}
			char *e = sqlite3_mprintf(" AND s.name = %Q", t.c_str());
			q += e;
			sqlite3_free(e);
		}
		q += " GROUP BY s.name ORDER BY s.name";
		const Mode m = out.mode;
		return run_sql(db, q, out) || (out.mode = m, false);
	}
	if (c == ".mode" && w.size() == 2) {
		if (w[1] == "table")
			out.mode = Mode::Table;
		else if (w[1] == "csv")
			out.mode = Mode::Csv;
		else if (w[1] == "json")
			out.mode = Mode::Json;
		else
			goto bad;
		return true;
	}
bad:
	std::fprintf(stderr, "strata query: unknown command '%s' (.help lists them)\n",
		     cli::escaped(line).c_str());
	return false;
}

sqlite3 *g_shell_db = nullptr; // for the SIGINT handler

void on_sigint(int)
{
	sqlite3_interrupt(g_shell_db); // the running statement stops ("interrupted"); the shell goes on
}

int shell(sqlite3 *db, Out &out)
{
	const bool tty = isatty(0);
	if (tty) {
		g_shell_db = db;
		struct sigaction sa {};
		sa.sa_handler = on_sigint;
		sa.sa_flags = SA_RESTART;
		sigemptyset(&sa.sa_mask);
		sigaction(SIGINT, &sa, nullptr);
	}
	bool failed = false;
	std::string buf, line;
	if (tty)
		std::printf("strata query: SQL statements end with ';'; .help for the commands; ^C stops a "
			    "statement, ^D or .quit leaves\n");
	for (;;) {
		if (tty) {
			std::fputs(buf.empty() ? "strata> " : "   ...> ", stdout);
			std::fflush(stdout);
		}
		if (!std::getline(std::cin, line))
			break;
		if (buf.empty() && !line.empty() && line[0] == '.') {
			bool quit = false;
			failed |= !dot_command(db, line, out, &quit);
			if (quit)
				break;
			continue;
		}
		buf += line + "\n";
		if (!sqlite3_complete(buf.c_str()))
			continue;
		failed |= !run_sql(db, buf, out);
		buf.clear();
	}
	if (tty)
		std::puts("");
	if (buf.find_first_not_of(" \t\r\n") != std::string::npos) {
		std::fprintf(stderr, "strata query: input ends inside a statement (no ';')\n");
		failed = true;
	}
	return failed && !tty ? cli::kFail : cli::kOk;
}

} // namespace
} // namespace strata

int strata_cmd_query(int argc, char **argv)
{
	using namespace strata;
	Out out;
	bool csv = false, json = false;
	static const cli::Command kCmd = {
		"query", "[--csv | --json] [--stats] TRACE... ['SQL']",
		"Answer SQL about the Strata trace under TRACE (several TRACEs, a host's and its "
		"guests', are read as one; the last operand is the SQL unless it is a directory) "
		"(docs/query.md has the tables and worked "
		"questions): events, one table per event class (\"pthread:mutex_lock\", its fields as "
		"columns), processes, threads, lost, sched, slices, and the views acquisitions and "
		"hold_counts.  Without SQL, "
		"statements (ending in ';') are read from stdin, with a prompt on a terminal; .tables, "
		".schema [TABLE], .mode table|csv|json, .help and .quit.",
		"A damaged trace answers from what is readable; what was skipped is said on stderr.\n"
		"A statement that returns no row says \"no row\" on stderr (not with --stats, whose\n"
		"line counts the rows).",
		"Exit status: 0 ok (also when no row matched), 1 bad SQL, an unreadable trace, or\n"
		"damage skipped (every answer is written first; 'strata check' names the damage), 2\n"
		"usage error."};
	const std::vector<cli::Option> opts = {
		cli::flag("csv", 0,
			  "rows as CSV (RFC 4180) with a header line; a REAL in its shortest exact form, "
			  "infinities Inf and -Inf",
			  csv),
		cli::flag("json", 0,
			  "rows as a JSON array of objects, one per statement; a REAL in its shortest exact "
			  "form, infinities 1e999 and -1e999",
			  json),
		cli::flag("stats", 0, "after each statement, on stderr: rows, packet bytes read, time",
			  out.stats),
	};
	std::vector<char *> operands;
	if (int r = cli::parse(kCmd, opts, argc, argv, operands); r != cli::kParsed)
		return r;
	if (csv && json)
		return cli::usage_error(kCmd, "--csv or --json, not both");
	out.mode = csv ? Mode::Csv : json ? Mode::Json : Mode::Table;
	if (operands.empty())
		return cli::usage_error(kCmd, "which trace? (strata query TRACE 'SQL')");
	// TRACE... ['SQL']: the last operand is SQL unless it is a directory.
	struct stat st;
	const bool have_sql =
		operands.size() >= 2 && !(stat(operands.back(), &st) == 0 && S_ISDIR(st.st_mode));
	const std::string sql = have_sql ? operands.back() : "";
	const std::vector<std::string> traces(operands.begin(), operands.end() - (have_sql ? 1 : 0));
	sqlite3 *db = nullptr;
	if (query::use_linked_sqlite() != SQLITE_OK) { // before the open: the tables' routines
		std::fprintf(stderr, "strata query: cannot hand SQLite's routines to the tables\n");
		return cli::kFail;
	}
	if (sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
	    SQLITE_OK) {
		std::fprintf(stderr, "strata query: cannot open SQLite: %s\n",
			     db ? sqlite3_errmsg(db) : "no memory");
		sqlite3_close(db);
		return cli::kFail;
	}
	std::string why;
	if (!query::open_trace(db, traces, &why)) {
		std::fprintf(stderr, "strata query: %s\n", why.c_str());
		sqlite3_close(db);
		return cli::kFail;
	}
	tell_damage(db);
	AddressSymbols syms(db);
	out.syms = &syms;
	int rc;
	if (have_sql && !sql.empty() && sql[0] == '.') { // a dot command as the argument
		bool quit = false;
		rc = dot_command(db, sql, out, &quit) ? cli::kOk : cli::kFail;
	} else {
		rc = have_sql ? (run_sql(db, sql, out) ? cli::kOk : cli::kFail) : shell(db, out);
	}
	sqlite3_close(db);
	return rc == cli::kOk && g_damage_told ? cli::kFail : rc;
}
#endif // STRATA_HAVE_QUERY
