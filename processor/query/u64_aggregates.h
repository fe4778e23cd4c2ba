/*
 * u64_aggregates.h - exact aggregates of unsigned 64-bit columns
 * (docs/query.md, "Types"): u64_sum(X), u64_min(X), u64_max(X).
 *
 * A u64 column holds INTEGERs up to INT64_MAX and, past it, TEXT of the
 * value's exact digits; SQLite's sum() goes to REAL (rounded) past INT64_MAX
 * and its min() and max() order such TEXTs as text.  These read either form
 * (a non-negative INTEGER, or TEXT of decimal digits up to 2^64-1), skip
 * NULLs, and answer as the columns do: an INTEGER when the result fits in
 * INT64, else TEXT of its exact digits (a sum is exact to 2^128); NULL over
 * no value.  Any other value (negative, REAL, other text, BLOB) is an error
 * that names it, never a rounded answer.
 */
#ifndef STRATA_QUERY_U64_AGGREGATES_H
#define STRATA_QUERY_U64_AGGREGATES_H

#include "sqlite_api.h"

namespace strata {
namespace query {

// Registers u64_sum, u64_min and u64_max on db.
int register_u64_aggregates(sqlite3 *db);

} // namespace query
} // namespace strata
#endif
