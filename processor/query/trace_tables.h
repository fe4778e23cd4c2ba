/*
 * trace_tables.h - Strata traces as SQLite virtual tables (docs/query.md).
 *
 * One module, `strata`, whose tables each show one view of a trace read by
 * Strata's own reader (processor/ctf/trace_reader.h):
 *   CREATE VIRTUAL TABLE temp.events USING strata('/path/to/trace', 'events')
 * with the second argument 'events', 'lost', 'processes', 'threads', 'sched'
 * (the CPUs' slices, from sched_switch), 'slices' (begin/end pairs, one
 * pass), or an event class's name ('pthread:mutex_lock', 'sched_switch'):
 * its typed table.  open_trace() (and the SQL function strata_open(PATH))
 * makes every table of a trace at once in the `temp` schema, and the views
 * over them: `acquisitions` and `hold_counts`.
 * The tables of one path share one opened trace (its packet index, read
 * once); each scan is a pass of its own, so self-joins work.
 *
 * Pushed down to the reader: ts bounds (=, <, <=, >, >=) become its window
 * (only the packets that may hold such events are read); pid = and tid =
 * become its stream filter (streams that cannot hold such events are not
 * read).  The event tables' rows come in ts order (ORDER BY ts costs
 * nothing); sched's and slices' as they end.
 */
#ifndef STRATA_QUERY_TRACE_TABLES_H
#define STRATA_QUERY_TRACE_TABLES_H

#include <cstdint>
#include <string>
#include <vector>

#include "sqlite_api.h"

namespace strata {
namespace query {

// Registers the `strata` module and the strata_open() function on db.
int register_strata(sqlite3 *db);

// For a program that links SQLite (`strata query`): before its first
// sqlite3_open, has the linked SQLite hand the tables its routines at
// each open, as a loading SQLite hands a loadable extension's (the tables
// are compiled once, as the extension: processor/query/CMakeLists.txt).
// SQLITE_OK, or sqlite3_auto_extension's error.
int use_linked_sqlite();

// Opens the trace at path (a directory at or above its sub-traces) and
// makes its tables and views in `temp` (dropping those of a trace opened
// before).  False with *why when it is not a readable trace.
bool open_trace(sqlite3 *db, const std::string &path, std::string *why);
// Several trace directories read as one (a host's and its guests' traces,
// each placed by the clock map found in or above it): strata_open(PATH, ...).
bool open_trace(sqlite3 *db, const std::vector<std::string> &roots, std::string *why);

// What the reads of db's open traces skipped so far and was not told yet
// (damaged spans, unreadable sub-traces), one line each; cleared.
std::vector<std::string> take_damage(sqlite3 *db);

// Bytes of packets read by db's table scans since the last call; cleared.
uint64_t take_bytes_read(sqlite3 *db);

} // namespace query
} // namespace strata
#endif
