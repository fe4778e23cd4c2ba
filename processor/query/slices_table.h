/*
 * slices_table.h - the `slices` table (docs/query.md, "Slices and the
 * views"): beginnings and ends paired in one pass over the trace.
 */
#ifndef STRATA_QUERY_SLICES_TABLE_H
#define STRATA_QUERY_SLICES_TABLE_H

#include <cstdint>

#include "table_cursor.h"

namespace strata {
namespace query {

enum : unsigned {
	kSlLockWait = 1,
	kSlCondWait = 2,
	kSlLockHold = 4,
	kSlMonitorWait = 8,
	kSlSyscall = 16,
	kSlAll = 31
};

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

// A pass for these kinds and bounds (ts in [cur->lo, cur->hi], ts_end in
// [elo, ehi]) on cur->r, not started.
void slices_start(Cur *cur, Vtab *v, unsigned kinds, int64_t elo, int64_t ehi);
// The next rows into the pass's state; cur->eof at its end.
void slices_advance(Cur *cur, Vtab *v);
// The pass's next row (the next rows read when those ready are done).
void slices_next(Cur *cur, Vtab *v);
// The current row's rowid (SliceRow::rowid).
int64_t slices_rowid(const SliceState &s);
// Column col of the pass's current row.
void slices_column(const SliceState &s, sqlite3_context *ctx, int col);
// The kinds `kind = a` selects (none for a value that names none).
unsigned slice_kinds_of(sqlite3_value *a);

} // namespace query
} // namespace strata
#endif
