/*
 * filter.h - field filters: one parser/compiler shared by the CLI (which
 * checks an expression before sending it) and the runtime (which compiles
 * the rules it is given and evaluates them at tracepoints).  Grammar and
 * limits: docs/filters.md.
 *
 * Contract: filter_compile, filter_bind and filter_eval neither allocate,
 * lock, nor make system calls; they are async-signal-safe and bounded
 * (compile: one pass over at most kFilterMaxText bytes, recursion at most
 * kFilterMaxDepth; eval: one pass over at most kFilterMaxOps operations,
 * string compares bounded by the event's string and the literal).
 * filter_eval trusts nothing in the program: every offset, length, stack
 * position and field index is checked, so a program torn by a concurrent
 * rewrite gives a wrong answer, never a wild access.  Not thread-aware: the
 * runtime (registry.cpp) publishes programs under a per-slot seqlock.
 */
#ifndef STRATA_LIBTRACE_FILTER_H
#define STRATA_LIBTRACE_FILTER_H

#include <cstddef>
#include <cstdint>

#include <strata/tracepoint.h>

#include "strata_limits.h"

namespace strata {

constexpr unsigned kFilterMaxText = STRATA_LIMIT_FILTER - 1; // bytes of expression
constexpr unsigned kFilterMaxOps = 64;                       // comparisons + && || ! after compilation
constexpr unsigned kFilterMaxDepth = 16;                     // nested parentheses
constexpr unsigned kFilterMaxStack = 32;                     // evaluation stack
constexpr unsigned kFilterPoolMax = 256; // field names and string literals, NUL-terminated

enum FilterOpCode : uint8_t { kFilterCmp = 1, kFilterNot, kFilterAnd, kFilterOr };
enum FilterCmpOp : uint8_t { kCmpEq, kCmpNe, kCmpLt, kCmpLe, kCmpGt, kCmpGe };
enum FilterLitKind : uint8_t {
	kLitInt = 1, // int64 in v
	kLitUint,    // uint64 above INT64_MAX in v
	kLitFloat,   // double bits in v
	kLitString,  // pool offset in the low 32 bits of v, length in the high
};

// One postfix operation.  kFilterCmp pushes `field cmp literal`; the others
// pop one or two truth values and push the result.
struct FilterOp {
	uint8_t code;      // FilterOpCode
	uint8_t cmp;       // FilterCmpOp
	uint8_t lit;       // FilterLitKind
	uint8_t glob;      // string literal contains '*'
	uint16_t name_off; // field name in the pool
	uint16_t name_len;
	uint64_t v; // literal
};

// A compiled filter: plain words, copyable with word-sized atomic loads.
struct FilterProgram {
	uint32_t n_ops;
	uint32_t pool_len;
	FilterOp ops[kFilterMaxOps];
	char pool[kFilterPoolMax];
};
static_assert(sizeof(FilterProgram) % 8 == 0, "FilterProgram is copied in 8-byte words");

struct FilterError {
	unsigned column; // 1-based byte column of the offending token; 0 if none
	const char *msg; // static string
};

// Parse `text` (NUL-terminated, at most kFilterMaxText bytes) into *out.
// Returns true, or false with *err set.  "" compiles to an empty program
// (n_ops == 0) that accepts everything.
bool filter_compile(const char *text, FilterProgram *out, FilterError *err);

// True when every field the program names exists in `d` with a type the
// comparison applies to (integer/enum or float with a number, string with
// a string).  A rule whose filter does not bind does not match the event.
bool filter_bind(const FilterProgram &p, const strata_event_desc *d);

// Evaluate against one event's arguments (the call site's argv, see
// include/strata/tracepoint.h).  1: pass, 0: reject (also for a program
// that does not bind or is malformed).
int filter_eval(const FilterProgram &p, const strata_event_desc *d, const void *const *argv);

// A rule's pattern against "provider:event": '*' matches any run of
// characters, nothing else is special.
bool glob_match(const char *pattern, const char *text);

} // namespace strata
#endif
