/*
 * small_tables.h - the tables made whole when a scan begins
 * (docs/query.md): `processes` and `threads` (from the packet index, and
 * the records that name their threads), `lost` (discards and damage).
 */
#ifndef STRATA_QUERY_SMALL_TABLES_H
#define STRATA_QUERY_SMALL_TABLES_H

#include "table_cursor.h"

namespace strata {
namespace query {

const char *const kLostDecl =
	"CREATE TABLE x(ts INTEGER, ts_end INTEGER, machine TEXT, pid INTEGER, process TEXT, tid INTEGER, "
	"stream TEXT, kind TEXT, count INTEGER, bytes INTEGER, why TEXT)";

const char *const kProcDecl = "CREATE TABLE x(machine TEXT, pid INTEGER, process TEXT, domain TEXT, "
			      "ts INTEGER, ts_end INTEGER, streams INTEGER, packets INTEGER, bytes "
			      "INTEGER, trace TEXT)";

const char *const kThreadDecl =
	"CREATE TABLE x(machine TEXT, pid INTEGER, tid INTEGER, process TEXT, thread TEXT, ts INTEGER, "
	"ts_end INTEGER, packets INTEGER)";

// Each table's rows into cur->rows.
void fill_processes(Cur *cur, Vtab *v);
void fill_threads(Cur *cur, Vtab *v);
void fill_lost(Cur *cur, Vtab *v);

} // namespace query
} // namespace strata
#endif
