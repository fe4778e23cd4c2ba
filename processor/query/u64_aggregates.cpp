// u64_aggregates.cpp - u64_sum, u64_min, u64_max; contract in u64_aggregates.h.
#include "u64_aggregates.h"

#include <charconv>
#include <cstdint>
#include <cstring>
#include <string>

namespace strata {
namespace query {
namespace {

// In sqlite3_aggregate_context's memory, aligned to 8 bytes only: the
// 128-bit sum as two halves.
struct U64Agg {
	uint64_t sum_lo = 0, sum_hi = 0;
	uint64_t min = 0, max = 0;
	bool any = false;
};

// A value as a u64 (true), or an error on ctx (false).
bool u64_of(sqlite3_context *ctx, sqlite3_value *v, const char *fn, uint64_t *out)
{
	const int type = sqlite3_value_type(v); // before sqlite3_value_text() converts it
	if (type == SQLITE_INTEGER && sqlite3_value_int64(v) >= 0) {
		*out = (uint64_t)sqlite3_value_int64(v);
		return true;
	}
	const char *t = type == SQLITE_BLOB ? nullptr : (const char *)sqlite3_value_text(v);
	const size_t n = t ? (size_t)sqlite3_value_bytes(v) : 0;
	if (type == SQLITE_TEXT && n && t[0] >= '0' && t[0] <= '9') {
		const auto r = std::from_chars(t, t + n, *out, 10);
		if (r.ec == std::errc() && r.ptr == t + n)
			return true;
	}
	std::string shown = t ? std::string(t, n < 40 ? n : 40) : std::string("a BLOB");
	char *msg = sqlite3_mprintf("%s: %s%s is not an unsigned 64-bit integer (a non-negative INTEGER or "
				    "the TEXT of its digits)",
				    fn, shown.c_str(), n > 40 ? "..." : "");
	sqlite3_result_error(ctx, msg, -1);
	sqlite3_free(msg);
	return false;
}

void step(sqlite3_context *ctx, int, sqlite3_value **argv)
{
	if (sqlite3_value_type(argv[0]) == SQLITE_NULL)
		return;
	auto *a = (U64Agg *)sqlite3_aggregate_context(ctx, sizeof(U64Agg));
	if (!a) {
		sqlite3_result_error_nomem(ctx);
		return;
	}
	uint64_t v;
	if (!u64_of(ctx, argv[0], (const char *)sqlite3_user_data(ctx), &v))
		return;
	a->sum_lo += v;
	a->sum_hi += a->sum_lo < v; // the carry
	a->min = a->any && a->min < v ? a->min : v;
	a->max = a->any && a->max > v ? a->max : v;
	a->any = true;
}

// An exact value as the u64 columns give it: INTEGER up to INT64_MAX, else
// TEXT of its digits.
void result_exact(sqlite3_context *ctx, unsigned __int128 v)
{
	if (v <= (unsigned __int128)INT64_MAX) {
		sqlite3_result_int64(ctx, (int64_t)v);
		return;
	}
	char b[48];
	char *p = b + sizeof b;
	do {
		*--p = (char)('0' + (int)(v % 10));
		v /= 10;
	} while (v);
	sqlite3_result_text(ctx, p, (int)(b + sizeof b - p), SQLITE_TRANSIENT);
}

template <int What> void finish(sqlite3_context *ctx)
{
	const auto *a = (const U64Agg *)sqlite3_aggregate_context(ctx, 0);
	if (!a || !a->any) {
		sqlite3_result_null(ctx);
		return;
	}
	const unsigned __int128 sum = (unsigned __int128)a->sum_hi << 64 | a->sum_lo;
	result_exact(ctx, What == 0 ? sum : What == 1 ? a->min : a->max);
}

} // namespace

int register_u64_aggregates(sqlite3 *db)
{
	static const char *const kNames[] = {"u64_sum", "u64_min", "u64_max"};
	void (*const finals[])(sqlite3_context *) = {finish<0>, finish<1>, finish<2>};
	for (int k = 0; k < 3; k++) {
		const int rc =
			sqlite3_create_function_v2(db, kNames[k], 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC,
						   (void *)kNames[k], nullptr, step, finals[k], nullptr);
		if (rc != SQLITE_OK)
			return rc;
	}
	return SQLITE_OK;
}

} // namespace query
} // namespace strata
