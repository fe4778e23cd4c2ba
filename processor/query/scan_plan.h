/*
 * scan_plan.h - what a `strata` table tells SQLite's planner (xBestIndex):
 * the constraints it pushes down, the orders it gives without a sorter,
 * and the rows and cost it estimates from the packet index.
 */
#ifndef STRATA_QUERY_SCAN_PLAN_H
#define STRATA_QUERY_SCAN_PLAN_H

#include <vector>

#include "query_trace.h"

namespace strata {
namespace query {

// The key orders (Trace::key_orders): ORDER BY (or GROUP BY) up to three
// of machine, pid and process, ascending, then ts ascending or not at all.
// The order's idxNum bits: each column's code (1 machine, 2 pid, 3 process)
// in two bits from bit 4; 0 when the order is another.
constexpr int kKeyShift = 4;

// The sub-traces grouped by the key order's columns (key_order's bits),
// the groups in that order.
std::vector<std::vector<const SubTrace *>> key_passes(const Trace &t, int bits);
int x_best_index(sqlite3_vtab *vt, sqlite3_index_info *info);

} // namespace query
} // namespace strata
#endif
