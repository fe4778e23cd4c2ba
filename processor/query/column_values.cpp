// column_values.cpp - field values as SQLite values (column_values.h).
#include "column_values.h"

#include <charconv>
#include <cmath>

#include "json_writer.h"

namespace strata {
namespace query {
namespace {

// An array's or a sequence's elements as a JSON array (its column's text).
void json_elems(JsonWriter &w, const FieldValue &v)
{
	w.begin_array();
	for (uint32_t k = 0; k < v.count; k++)
		if (v.info->is_signed)
			w.i64(v.elem_i(k));
		else
			w.u64(v.elem_u(k));
	w.end_array();
}

// A field's value as JSON (an enum's value only: its label is a key of its
// own); a float as `--json` writes a REAL (JsonWriter::real).
void json_value(JsonWriter &w, const FieldValue &v)
{
	switch (v.info->type) {
	case STRATA_FT_INTEGER:
	case STRATA_FT_ENUM:
		if (v.info->is_signed)
			w.i64(v.i);
		else
			w.u64(v.u);
		break;
	case STRATA_FT_FLOAT:
		w.real(v.d);
		break;
	case STRATA_FT_STRING:
		w.str(std::string_view(v.str, v.len));
		break;
	case STRATA_FT_ARRAY:
	case STRATA_FT_SEQUENCE:
		json_elems(w, v);
		break;
	default:
		w.null();
	}
}

} // namespace

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

__attribute__((noinline)) void result_u64_text(sqlite3_context *ctx, uint64_t v)
{
	char b[24];
	const int n = (int)(std::to_chars(b, b + sizeof b, v).ptr - b);
	sqlite3_result_text(ctx, b, n, SQLITE_TRANSIENT);
}

// A u64's decimal digits (a value past INT64_MAX, exact, as TEXT).
void append_decimal(std::string *o, uint64_t v)
{
	char b[24];
	o->append(b, (size_t)(std::to_chars(b, b + sizeof b, v).ptr - b));
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

void json_elems_text(std::string *o, const FieldValue &v)
{
	JsonWriter w(*o, JsonWriter::Style::kCompact);
	json_elems(w, v);
}

void json_fields(std::string *o, const std::vector<FieldValue> &fv)
{
	JsonWriter w(*o, JsonWriter::Style::kCompact);
	w.begin_object();
	for (const FieldValue &v : fv) {
		w.key(std::string_view(v.info->name.data(), v.info->name.size()));
		json_value(w, v);
		if (v.info->type == STRATA_FT_ENUM) {
			w.key(v.info->name + "_label");
			const char *l = enum_label(*v.info, int_value(v));
			if (l)
				w.str(l);
			else
				w.null();
		}
	}
	w.end_object();
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
		json_elems_text(&o, v);
		sqlite3_result_text(ctx, o.data(), (int)o.size(), SQLITE_TRANSIENT);
		return;
	}
	default:
		sqlite3_result_null(ctx);
	}
}

// A field's value as its typed table's column gives it.
Cell cell_of(const FieldValue &v)
{
	Cell c;
	switch (v.info->type) {
	case STRATA_FT_INTEGER:
	case STRATA_FT_ENUM:
		if (v.info->is_signed || v.u <= (uint64_t)INT64_MAX)
			return cint(v.info->is_signed ? v.i : (int64_t)v.u);
		c.type = Cell::Text;
		append_decimal(&c.s, v.u);
		return c;
	case STRATA_FT_FLOAT:
		if (std::isnan(v.d))
			return c;
		c.type = Cell::Real;
		c.d = v.d;
		return c;
	case STRATA_FT_STRING:
		c.type = Cell::Text;
		if (utf8_well_formed(std::string_view(v.str, v.len)))
			c.s.assign(v.str, v.len);
		else
			utf8_append_repaired(c.s, std::string_view(v.str, v.len));
		return c;
	case STRATA_FT_ARRAY:
	case STRATA_FT_SEQUENCE:
		c.type = Cell::Text;
		json_elems_text(&c.s, v);
		return c;
	default:
		return c;
	}
}

void result_cell(sqlite3_context *ctx, const Cell &cell)
{
	if (cell.type == Cell::Int)
		sqlite3_result_int64(ctx, cell.i);
	else if (cell.type == Cell::Real)
		sqlite3_result_double(ctx, cell.d);
	else if (cell.type == Cell::Text)
		result_text(ctx, cell.s.data(), cell.s.size());
	else
		sqlite3_result_null(ctx);
}

} // namespace query
} // namespace strata
