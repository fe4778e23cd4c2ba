/*
 * query_trace.h - one opened trace as the `strata` tables see it: its
 * typed tables' columns and each class's plan for them, the planner's
 * sizes from the packet index, the orders a scan can give without
 * SQLite's sorter, and the connection's registry of open traces.
 * Internal to processor/query (trace_tables.h is the interface).
 */
#ifndef STRATA_QUERY_QUERY_TRACE_H
#define STRATA_QUERY_QUERY_TRACE_H

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "sqlite_api.h"
#include "trace_reader.h"

namespace strata {
namespace query {

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
	bool key_orders = false;
	// Trace::thread_ids' of these sub-traces, made on first use.
	bool tids_made = false;
	std::vector<int32_t> thread_ids;
};

// What the thread and key orders need of one sub-trace's streams, found
// in one look at every packet: whether its records each name their thread
// (COMPACT, not the kernel's: an owned lane's packets name their thread,
// a shared lane's records theirs), the threads of its owned lanes, its
// packets (plus one a stream) and its bytes, all and its shared lanes'.
// The threads of its shared lanes are read from their records once, when
// an order by thread is first asked for and the passes would be worth it
// (thread_ids()).
struct SubOrder {
	bool lanes = true, kernel = false;
	std::set<int32_t> tids;
	double packets = 0, bytes = 0, shared_bytes = 0;
	bool shared_read = false;
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
	// When every record names its thread (SubOrder): the threads, in tid
	// order.  An event table can then give its rows in tid order (then ts),
	// a pass per thread, for GROUP BY tid and ORDER BY tid without SQLite's
	// sorter.  Empty otherwise, or when the passes would cost more than the
	// sorter.  Made on first use (pass_tids()): a shared lane's threads are
	// known only by reading its records.
	std::map<const SubTrace *, SubOrder> orders;
	bool tids_made = false;
	std::vector<int32_t> thread_ids;
	// When no stream is the kernel's, every sub-trace has one machine, pid
	// and process name: an event table can give its rows grouped by any of
	// them, a pass per group of sub-traces (key_passes), for GROUP BY pid,
	// ORDER BY process... without SQLite's sorter.  False too when the
	// passes could cost more than the sorter (kThreadPassPackets).
	bool key_orders = false;
};

struct Registry {
	std::map<std::string, std::weak_ptr<Trace>> traces;
	std::vector<std::shared_ptr<Trace>> open; // strata_open's, kept while its tables exist
	std::vector<std::string> made;            // strata_open's tables and views (to drop on the next)
	std::set<std::string> told;               // damage already told
	std::vector<std::string> untold;
	uint64_t bytes = 0;
};

struct Vtab : sqlite3_vtab {
	Registry *reg = nullptr;
	std::shared_ptr<Trace> t;
	Kind kind = Kind::Events;
	size_t typed = 0;
};

// Whether the scans that read only the sub-traces `subs` (null: all)
// read stream s.
inline bool among(const std::vector<const SubTrace *> *subs, const StreamInfo &s)
{
	return !subs || std::find(subs->begin(), subs->end(), s.trace) != subs->end();
}

// An event's rowid (Trace::stream_base).
inline int64_t event_rowid(const Trace &t, const TraceEvent &e)
{
	return t.stream_base[e.stream->index] + (int64_t)e.packet->offset + (int64_t)e.payload;
}

inline bool event_table(const Vtab *v)
{
	return v->kind == Kind::Events || v->kind == Kind::Typed;
}

// The threads of an event table's passes in tid order (empty: none),
// made on the first call for the table's trace or typed table.
const std::vector<int32_t> &pass_tids(const Vtab *v);

// Whether an event table's rows come grouped by sub-trace keys.
inline bool pass_keys(const Vtab *v)
{
	return v->kind == Kind::Typed ? v->t->typed[v->typed].key_orders : v->t->key_orders;
}

// Notes a line of damage for the user, once per connection.
void note_damage(Registry *reg, const std::string &line);

// The trace at path (roots joined by '\n'), opened once per registry and
// shared by its tables; null with *why when none of it can be read.
std::shared_ptr<Trace> get_trace(Registry *reg, const std::string &path, std::string *why);

} // namespace query
} // namespace strata
#endif
