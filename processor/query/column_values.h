/*
 * column_values.h - a field's value as the `strata` tables give it to
 * SQLite (docs/query.md, "Types"): u64s past INT64_MAX as exact TEXT,
 * text as valid UTF-8, arrays and the `fields` column as JSON through the
 * one JSON writer; and Cell, a value held for a row made ahead of its
 * reading (the small tables, sched, slices).
 */
#ifndef STRATA_QUERY_COLUMN_VALUES_H
#define STRATA_QUERY_COLUMN_VALUES_H

#include <cstdint>
#include <string>
#include <vector>

#include "sqlite_api.h"
#include "trace_reader.h"

namespace strata {
namespace query {

// A row of the small tables (processes, threads, lost): made whole at xFilter.
struct Cell {
	enum { Null, Int, Real, Text } type = Null;
	int64_t i = 0;
	double d = 0;
	std::string s;
};

inline Cell cint(int64_t v)
{
	Cell c;
	c.type = Cell::Int;
	c.i = v;
	return c;
}

inline Cell ctext(const std::string &v)
{
	Cell c;
	c.type = Cell::Text;
	c.s = v;
	return c;
}

// Text to SQLite, made valid UTF-8 (each ill-formed subsequence U+FFFD).
void result_text(sqlite3_context *ctx, const char *s, size_t n);
__attribute__((noinline)) void result_u64_text(sqlite3_context *ctx, uint64_t v);

inline void result_u64(sqlite3_context *ctx, uint64_t v)
{
	if (__builtin_expect(v <= (uint64_t)INT64_MAX, 1))
		sqlite3_result_int64(ctx, (int64_t)v);
	else
		result_u64_text(ctx, v); // past INT64_MAX: its exact digits, as TEXT
}

// A u64's decimal digits (a value past INT64_MAX, exact, as TEXT).
void append_decimal(std::string *o, uint64_t v);
// The label of an enum's value, or null.
const char *enum_label(const FieldInfo &f, int64_t v);
int64_t int_value(const FieldValue &v);
// An array's or a sequence's elements as a JSON array (its column's text).
void json_elems_text(std::string *o, const FieldValue &v);
// Every field as a JSON object (the events table's `fields`).
void json_fields(std::string *o, const std::vector<FieldValue> &fv);
// A field's value (label: an enum's label) as its column gives it.
void result_field(sqlite3_context *ctx, const FieldValue &v, bool label);
// A field's value as its typed table's column gives it.
Cell cell_of(const FieldValue &v);
void result_cell(sqlite3_context *ctx, const Cell &cell);

} // namespace query
} // namespace strata
#endif
