/*
 * strata/tracepoint.h - declare typed tracepoints and call them.
 * Usable from C11 and C++17 (GCC or Clang).
 *
 * A provider header declares events once, in a single expansion pass:
 *
 *     #include <strata/tracepoint.h>
 *     STRATA_ENUM(demo, color, STRATA_ENUM_VALUE("red", 0), STRATA_ENUM_VALUE("green", 1))
 *     STRATA_EVENT(demo, hello, STRATA_LOGLEVEL_INFO,
 *         strata_int(uint32_t, count),
 *         strata_string(msg),
 *         strata_enum(demo, color, int, tint))
 *
 * Exactly one source file of each executable or shared library defines the
 * providers it uses:
 *
 *     #define STRATA_DEFINE_PROVIDERS
 *     #include "demo_tp.h"
 *
 * and call sites write
 *
 *     strata_tracepoint(demo, hello, 42, "hi", 1);
 *
 * Arguments are checked at compile time against the field types.  When the
 * event is disabled the call site costs one relaxed load and one predicted
 * branch, and its arguments are not evaluated.
 *
 * Field kinds (each one argument of the call, sequences two):
 *   strata_int(ctype, name)            integer of ctype, shown in decimal
 *   strata_hex(ctype, name)            integer of ctype, shown in hexadecimal
 *   strata_int_base(ctype, name, b)    integer, display base 2, 8, 10 or 16
 *   strata_float(ctype, name)          float or double
 *   strata_enum(prov, enum, ctype, name)  integer mapped to STRATA_ENUM labels
 *   strata_string(name)                NUL-terminated string (NULL is "(null)")
 *   strata_array(ctype, name, len)     fixed array of integers: const ctype *
 *   strata_sequence(ctype, name)       const ctype *name, size_t name_len
 *   strata_sequence_hex(ctype, name)   the same, its elements shown in hexadecimal
 *   strata_bytes(name)                 const void *name, size_t name_len
 */
#ifndef STRATA_TRACEPOINT_H
#define STRATA_TRACEPOINT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 2: byte-packed payloads, strata_reservation.rec points at the payload.
 * The runtime refuses descriptions of another version (compiled with an
 * older header): their emitters would lay records out the old way. */
#define STRATA_API_VERSION 2u

/* Log levels, as syslog (lower is more severe), plus debug sub-levels. */
enum strata_loglevel {
	STRATA_LOGLEVEL_EMERG = 0,
	STRATA_LOGLEVEL_ALERT = 1,
	STRATA_LOGLEVEL_CRIT = 2,
	STRATA_LOGLEVEL_ERR = 3,
	STRATA_LOGLEVEL_WARNING = 4,
	STRATA_LOGLEVEL_NOTICE = 5,
	STRATA_LOGLEVEL_INFO = 6,
	STRATA_LOGLEVEL_DEBUG = 7,
};

enum strata_field_kind {
	STRATA_FIELD_INTEGER = 1,
	STRATA_FIELD_FLOAT = 2,
	STRATA_FIELD_ENUM = 3,
	STRATA_FIELD_STRING = 4,
	STRATA_FIELD_ARRAY = 5,
	STRATA_FIELD_SEQUENCE = 6,
};

struct strata_enum_label {
	const char *label;
	int64_t first;
	int64_t last;
};

struct strata_enum_desc {
	const char *name;
	uint32_t n_labels;
	const struct strata_enum_label *labels;
};

struct strata_field_desc {
	const char *name;
	uint8_t kind; /* enum strata_field_kind */
	uint8_t size; /* bytes of the integer, float or element */
	uint8_t is_signed;
	uint8_t base;
	uint32_t length;                          /* ARRAY only */
	const struct strata_enum_desc *enum_desc; /* ENUM only */
};

struct strata_event_desc {
	uint32_t api_version; /* STRATA_API_VERSION */
	uint32_t loglevel;
	const char *provider;
	const char *name;
	uint32_t n_fields;
	const struct strata_field_desc *fields;
};

/*
 * One per event per executable or shared library, hidden visibility.
 * `state` is the only word the call site reads: bits 0..15 are the session
 * slots that record the event, bit 30 says probes are on it
 * (strata/probe.h), bit 31 says some slot has a field filter.
 * The runtime writes it with release stores; call sites read it relaxed
 * (a stale read only delays the change; acknowledged quiescence in the
 * runtime makes it visible to every thread before acknowledging).
 */
struct strata_tracepoint {
	uint32_t state;
	uint32_t magic; /* STRATA_TP_MAGIC */
	const struct strata_event_desc *desc;
	uint32_t id; /* assigned by the runtime at registration */
	uint32_t reserved;
};
#define STRATA_TP_MAGIC 0x5354504bu
#define STRATA_TP_SLOTS_MASK 0xffffu
#define STRATA_TP_FILTERED 0x80000000u
#define STRATA_TP_PROBED 0x40000000u
#define STRATA_MAX_SLOTS 16

/* What the generated code hands the runtime for one record. */
struct strata_reservation {
	char *rec;     /* where the payload goes (after the record's header) */
	void *lane;    /* runtime-private */
	uint64_t size; /* runtime-private (the record's bytes, and where it lies) */
};

/* Runtime entry points (libstrata).  Not for direct use.  The two of every
 * record are called through the GOT (GCC's noplt), not a PLT stub: one
 * indirect jump fewer per call, the address bound when libstrata loads. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define STRATA__NOPLT __attribute__((noplt))
#else
#define STRATA__NOPLT
#endif
STRATA__NOPLT int strata_reserve(struct strata_reservation *r, struct strata_tracepoint *tp, unsigned slot,
				 size_t size);
STRATA__NOPLT void strata_commit(struct strata_reservation *r);
/* A record whose payload the caller has whole (an event whose payload
 * is at most STRATA_WRITE_MAX bytes, built on its stack; or of any size,
 * an event whose one field is a string or an array), at r->rec, read
 * only: reserve, copy and commit in one call, so that the runtime's fast
 * path hands nothing back and is not entered twice.  r's other fields are
 * the runtime's.  Returns 1 if recorded, 0 if not (as strata_reserve's 0). */
#define STRATA_WRITE_MAX 64
STRATA__NOPLT int strata_write(struct strata_reservation *r, struct strata_tracepoint *tp, unsigned slot,
			       size_t size);
/* argv[i] points at argument i (for sequences, the pointer, then the length). */
int strata_filter_pass(struct strata_tracepoint *tp, unsigned slot, const void *const *argv);
/* Calls the probes on tp (strata/probe.h); argv as for strata_filter_pass. */
void strata_probe_fire(struct strata_tracepoint *tp, const void *const *argv);
void strata_register_tracepoints(struct strata_tracepoint *const *start,
				 struct strata_tracepoint *const *stop);
void strata_unregister_tracepoints(struct strata_tracepoint *const *start,
				   struct strata_tracepoint *const *stop);

/* ---- preprocessor machinery (single expansion pass) -------------------- */
#define STRATA__CAT(a, b) STRATA__CAT_(a, b)
#define STRATA__CAT_(a, b) a##b
#define STRATA__TP(p, e) strata__tp__##p##__##e
#define STRATA__EMIT(p, e) strata__emit__##p##__##e

#define STRATA__NARG(...)                                                                                  \
	STRATA__NARG_(__VA_ARGS__, 32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, \
		      14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define STRATA__NARG_(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, _16, _17, _18, _19, \
		      _20, _21, _22, _23, _24, _25, _26, _27, _28, _29, _30, _31, _32, N, ...)              \
	N

/* STRATA__FE(op, a, b, c) -> op(a, 0) op(b, 1) op(c, 2) */
#define STRATA__FE(op, ...) STRATA__CAT(STRATA__FE_, STRATA__NARG(__VA_ARGS__))(op, 0, __VA_ARGS__)
#define STRATA__FE_1(op, i, x) op(x, i)
#define STRATA__FE_2(op, i, x, ...) op(x, i) STRATA__FE_1(op, i##1, __VA_ARGS__)
#define STRATA__FE_3(op, i, x, ...) op(x, i) STRATA__FE_2(op, i##1, __VA_ARGS__)
#define STRATA__FE_4(op, i, x, ...) op(x, i) STRATA__FE_3(op, i##1, __VA_ARGS__)
#define STRATA__FE_5(op, i, x, ...) op(x, i) STRATA__FE_4(op, i##1, __VA_ARGS__)
#define STRATA__FE_6(op, i, x, ...) op(x, i) STRATA__FE_5(op, i##1, __VA_ARGS__)
#define STRATA__FE_7(op, i, x, ...) op(x, i) STRATA__FE_6(op, i##1, __VA_ARGS__)
#define STRATA__FE_8(op, i, x, ...) op(x, i) STRATA__FE_7(op, i##1, __VA_ARGS__)
#define STRATA__FE_9(op, i, x, ...) op(x, i) STRATA__FE_8(op, i##1, __VA_ARGS__)
#define STRATA__FE_10(op, i, x, ...) op(x, i) STRATA__FE_9(op, i##1, __VA_ARGS__)
#define STRATA__FE_11(op, i, x, ...) op(x, i) STRATA__FE_10(op, i##1, __VA_ARGS__)
#define STRATA__FE_12(op, i, x, ...) op(x, i) STRATA__FE_11(op, i##1, __VA_ARGS__)
#define STRATA__FE_13(op, i, x, ...) op(x, i) STRATA__FE_12(op, i##1, __VA_ARGS__)
#define STRATA__FE_14(op, i, x, ...) op(x, i) STRATA__FE_13(op, i##1, __VA_ARGS__)
#define STRATA__FE_15(op, i, x, ...) op(x, i) STRATA__FE_14(op, i##1, __VA_ARGS__)
#define STRATA__FE_16(op, i, x, ...) op(x, i) STRATA__FE_15(op, i##1, __VA_ARGS__)

/* Field tuples: (KIND, name, ctype, extra) */
#define strata_int(ctype, name) (INT, name, ctype, 10)
#define strata_hex(ctype, name) (INT, name, ctype, 16)
#define strata_int_base(ctype, name, base) (INT, name, ctype, base)
#define strata_float(ctype, name) (FLOAT, name, ctype, 10)
#define strata_enum(prov, en, ctype, name) (ENUM, name, ctype, strata__enum__##prov##__##en)
#define strata_string(name) (STRING, name, const char *, 10)
#define strata_array(ctype, name, len) (ARRAY, name, ctype, len)
#define strata_sequence(ctype, name) (SEQ, name, ctype, 10)
#define strata_sequence_hex(ctype, name) (SEQ, name, ctype, 16)
#define strata_bytes(name) (BYTES, name, uint8_t, 16)

#define STRATA__UNPAREN(...) __VA_ARGS__
#define STRATA__DISPATCH(op, t, i) STRATA__DISPATCH_(op, STRATA__UNPAREN t, i)
#define STRATA__DISPATCH_(op, ...) STRATA__DISPATCH__(op, __VA_ARGS__)
#define STRATA__DISPATCH__(op, k, n, c, x, i) op##_##k(n, c, x, i)

/* op PARAM: ", ctype name" */
#define STRATA__PARAM(t, i) STRATA__DISPATCH(STRATA__PARAM, t, i)
#define STRATA__PARAM_INT(n, c, x, i) , c n
#define STRATA__PARAM_FLOAT(n, c, x, i) , c n
#define STRATA__PARAM_ENUM(n, c, x, i) , c n
#define STRATA__PARAM_STRING(n, c, x, i) , const char *n
#define STRATA__PARAM_ARRAY(n, c, x, i) , const c *n
#define STRATA__PARAM_SEQ(n, c, x, i) , const c *n, size_t n##_len
#define STRATA__PARAM_BYTES(n, c, x, i) , const void *n, size_t n##_len

/* op SIZE: advance `o` (payload bytes; fields are byte-packed, no padding) */
#define STRATA__SIZE(t, i) STRATA__DISPATCH(STRATA__SIZE, t, i)
#define STRATA__SIZE_INT(n, c, x, i) o_ += sizeof(c);
#define STRATA__SIZE_FLOAT STRATA__SIZE_INT
#define STRATA__SIZE_ENUM STRATA__SIZE_INT
#define STRATA__SIZE_STRING(n, c, x, i)           \
	const char *s_##n = (n) ? (n) : "(null)"; \
	size_t l_##n = strlen(s_##n) + 1;         \
	o_ += l_##n;
#define STRATA__SIZE_ARRAY(n, c, x, i) o_ += sizeof(c) * (size_t)(x);
#define STRATA__SIZE_SEQ(n, c, x, i)      \
	size_t l_##n = (n) ? n##_len : 0; \
	if (l_##n > 0xffffffu)            \
		l_##n = 0xffffffu;        \
	o_ += 4 + sizeof(c) * l_##n;
#define STRATA__SIZE_BYTES STRATA__SIZE_SEQ

/* op WRITE: store at rec + o */
#define STRATA__WRITE(t, i) STRATA__DISPATCH(STRATA__WRITE, t, i)
#define STRATA__WRITE_INT(n, c, x, i)              \
	{                                          \
		c v_ = (n);                        \
		memcpy(rec_ + o_, &v_, sizeof(c)); \
		o_ += sizeof(c);                   \
	}
#define STRATA__WRITE_FLOAT STRATA__WRITE_INT
#define STRATA__WRITE_ENUM STRATA__WRITE_INT
#define STRATA__WRITE_STRING(n, c, x, i) \
	memcpy(rec_ + o_, s_##n, l_##n); \
	o_ += l_##n;
#define STRATA__WRITE_ARRAY(n, c, x, i)                  \
	memcpy(rec_ + o_, (n), sizeof(c) * (size_t)(x)); \
	o_ += sizeof(c) * (size_t)(x);
#define STRATA__WRITE_SEQ(n, c, x, i)                      \
	{                                                  \
		uint32_t len_ = (uint32_t)l_##n;           \
		memcpy(rec_ + o_, &len_, 4);               \
		o_ += 4;                                   \
	}                                                  \
	if (l_##n) {                                       \
		memcpy(rec_ + o_, (n), sizeof(c) * l_##n); \
		o_ += sizeof(c) * l_##n;                   \
	}
#define STRATA__WRITE_BYTES STRATA__WRITE_SEQ

/* op LONE: an event of one field whose payload is the caller's own bytes
 * (a string, with its NUL; a fixed array): STRATA__LONE_IS(fields) is 1
 * (a constant), STRATA__LONE(fields) the pointer to those bytes; else 0.
 * STRATA__ONE(fields) is 1 for one field, M for more. */
#define STRATA__ONE(...)                                                                                   \
	STRATA__NARG_(__VA_ARGS__, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, \
		      M, M, M, M, M, M, M, 1, 0)
#define STRATA__LONE_IS(...) STRATA__CAT(STRATA__LONE_IS_, STRATA__ONE(__VA_ARGS__))(__VA_ARGS__)
#define STRATA__LONE_IS_M(...) 0
#define STRATA__LONE_IS_1(t) STRATA__DISPATCH(STRATA__LONEK, t, 0)
#define STRATA__LONE(...) STRATA__CAT(STRATA__LONE_, STRATA__ONE(__VA_ARGS__))(__VA_ARGS__)
#define STRATA__LONE_M(...) ((const char *)0)
#define STRATA__LONE_1(t) STRATA__DISPATCH(STRATA__LONEP, t, 0)
#define STRATA__LONEK_INT(n, c, x, i) 0
#define STRATA__LONEK_FLOAT STRATA__LONEK_INT
#define STRATA__LONEK_ENUM STRATA__LONEK_INT
#define STRATA__LONEK_STRING(n, c, x, i) 1
#define STRATA__LONEK_ARRAY STRATA__LONEK_STRING
#define STRATA__LONEK_SEQ STRATA__LONEK_INT /* its count comes first */
#define STRATA__LONEK_BYTES STRATA__LONEK_INT
#define STRATA__LONEP_INT(n, c, x, i) ((const char *)0)
#define STRATA__LONEP_FLOAT STRATA__LONEP_INT
#define STRATA__LONEP_ENUM STRATA__LONEP_INT
#define STRATA__LONEP_STRING(n, c, x, i) s_##n
#define STRATA__LONEP_ARRAY(n, c, x, i) ((const char *)(n))
#define STRATA__LONEP_SEQ STRATA__LONEP_INT
#define STRATA__LONEP_BYTES STRATA__LONEP_INT

/* op ARGV: pointers to the arguments, for field filters */
#define STRATA__ARGV(t, i) STRATA__DISPATCH(STRATA__ARGV, t, i)
#define STRATA__ARGV_INT(n, c, x, i) (const void *)&n,
#define STRATA__ARGV_FLOAT STRATA__ARGV_INT
#define STRATA__ARGV_ENUM STRATA__ARGV_INT
#define STRATA__ARGV_STRING(n, c, x, i) (const void *)s_##n,
#define STRATA__ARGV_ARRAY(n, c, x, i) (const void *)n,
#define STRATA__ARGV_SEQ(n, c, x, i) (const void *)n, (const void *)&l_##n,
#define STRATA__ARGV_BYTES STRATA__ARGV_SEQ

/* op DESC: field descriptor initialisers */
#define STRATA__SIGNED(c) ((c)-1 < (c)1)
#define STRATA__DESC(t, i) STRATA__DISPATCH(STRATA__DESC, t, i)
#define STRATA__DESC_INT(n, c, x, i) {#n, STRATA_FIELD_INTEGER, sizeof(c), STRATA__SIGNED(c), x, 0, NULL},
#define STRATA__DESC_FLOAT(n, c, x, i) {#n, STRATA_FIELD_FLOAT, sizeof(c), 1, 10, 0, NULL},
#define STRATA__DESC_ENUM(n, c, x, i) {#n, STRATA_FIELD_ENUM, sizeof(c), STRATA__SIGNED(c), 10, 0, &x},
#define STRATA__DESC_STRING(n, c, x, i) {#n, STRATA_FIELD_STRING, 1, 0, 10, 0, NULL},
#define STRATA__DESC_ARRAY(n, c, x, i) {#n, STRATA_FIELD_ARRAY, sizeof(c), STRATA__SIGNED(c), 10, x, NULL},
#define STRATA__DESC_SEQ(n, c, x, i) {#n, STRATA_FIELD_SEQUENCE, sizeof(c), STRATA__SIGNED(c), x, 0, NULL},
#define STRATA__DESC_BYTES STRATA__DESC_SEQ

/* op CHECK: compile-time type-class checks on the parameter types */
#ifdef __cplusplus
} /* extern "C" */
#include <type_traits>
namespace strata_detail {
template <typename T> constexpr bool is_int()
{
	return std::is_integral<T>::value || std::is_enum<T>::value;
}
} // namespace strata_detail
#define STRATA__CHECK(t, i) STRATA__DISPATCH(STRATA__CHECK, t, i)
#define STRATA__CHECK_INT(n, c, x, i)                               \
	static_assert(strata_detail::is_int<c>() && sizeof(c) <= 8, \
		      "strata_int/hex/enum: field type must be an integer type of 1 to 8 bytes");
#define STRATA__CHECK_ENUM STRATA__CHECK_INT
#define STRATA__CHECK_FLOAT(n, c, x, i)                                                \
	static_assert(std::is_same<c, float>::value || std::is_same<c, double>::value, \
		      "strata_float: field type must be float or double");
#define STRATA__CHECK_STRING(n, c, x, i)
#define STRATA__CHECK_ARRAY STRATA__CHECK_INT
#define STRATA__CHECK_SEQ STRATA__CHECK_INT
#define STRATA__CHECK_BYTES(n, c, x, i)
extern "C" {
#else
#define STRATA__CHECK(t, i) STRATA__DISPATCH(STRATA__CHECK, t, i)
#define STRATA__CHECK_INT(n, c, x, i)                                                         \
	_Static_assert(_Generic((c)0, float : 0, double : 0, long double : 0, default : 1) && \
			       sizeof(c) <= 8,                                                \
		       "strata_int/hex/enum: field type must be an integer type of 1 to 8 bytes");
#define STRATA__CHECK_ENUM STRATA__CHECK_INT
#define STRATA__CHECK_FLOAT(n, c, x, i)                                    \
	_Static_assert(_Generic((c)0, float : 1, double : 1, default : 0), \
		       "strata_float: field type must be float or double");
#define STRATA__CHECK_STRING(n, c, x, i)
#define STRATA__CHECK_ARRAY STRATA__CHECK_INT
#define STRATA__CHECK_SEQ STRATA__CHECK_INT
#define STRATA__CHECK_BYTES(n, c, x, i)
#endif

/*
 * Call-site argument checks.  In C++ the parameter types already reject a
 * pointer for an integer and a wrong pointer type; a floating argument for
 * an integer field is rejected below.  In C the conversions GCC and Clang
 * only warn about are turned into errors for the call.
 */
#ifdef __cplusplus
#define STRATA__CALL_BEGIN \
	_Pragma("GCC diagnostic push") _Pragma("GCC diagnostic error \"-Wfloat-conversion\"")
#define STRATA__CALL_END _Pragma("GCC diagnostic pop")
#else
#define STRATA__CALL_BEGIN                                                                    \
	_Pragma("GCC diagnostic push") _Pragma("GCC diagnostic error \"-Wfloat-conversion\"") \
		_Pragma("GCC diagnostic error \"-Wint-conversion\"")                          \
			_Pragma("GCC diagnostic error \"-Wincompatible-pointer-types\"")      \
				_Pragma("GCC diagnostic error \"-Wpointer-sign\"") STRATA__CALL_QUAL
#ifdef __clang__
#define STRATA__CALL_QUAL _Pragma("GCC diagnostic error \"-Wincompatible-pointer-types-discards-qualifiers\"")
#else
#define STRATA__CALL_QUAL _Pragma("GCC diagnostic error \"-Wdiscarded-qualifiers\"")
#endif
#define STRATA__CALL_END _Pragma("GCC diagnostic pop")
#endif

#define STRATA__HIDDEN __attribute__((visibility("hidden")))

/* Probes first (strata/probe.h): they see the arguments, not a record. */
#define STRATA__PROBES(st, ...)                                  \
	if (__builtin_expect((st)&STRATA_TP_PROBED, 0)) {        \
		const void *const pargv_[] = {__VA_ARGS__ NULL}; \
		strata_probe_fire(tp_, pargv_);                  \
	}

/* The emitter: computes the size, calls the probes, then for every slot
 * reserves, writes, commits.  Two functions: the full one (probes, field
 * filters, more than one session: argument addresses taken, a loop) and
 * the common one (one session, no probe, no filter: no loop, so that it
 * keeps fewer values across its two calls), which hands over to the full
 * one by a tail call, so that its arguments stay in registers.  The common
 * one's test: the state is one slot bit (flags lie above them); anything
 * else, none included (disabled since the call site looked), is the full
 * one's.  An event whose payload fits STRATA_WRITE_MAX: the common one
 * writes it on its stack first, then one call (strata_write) records it,
 * which keeps the runtime's fast path from packing the record's place into
 * the reservation and unpacking it again at the commit.  For fields whose
 * sizes the types give the test is the compiler's; with strings or
 * sequences it is made at run time on the size just computed, which also
 * bounds every copy into the stack buffer (a string is copied for the
 * length its size counted, as in the ring).  An event of one string or
 * one fixed array, whatever its size, needs no buffer: its payload is the
 * caller's bytes (STRATA__LONE), handed to strata_write as they are. */
#define STRATA__EMIT_FULL(p, e) strata__emitf__##p##__##e
#define STRATA__NAME(t, i) STRATA__DISPATCH(STRATA__NAME, t, i)
#define STRATA__NAME_INT(n, c, x, i) , n
#define STRATA__NAME_FLOAT STRATA__NAME_INT
#define STRATA__NAME_ENUM STRATA__NAME_INT
#define STRATA__NAME_STRING STRATA__NAME_INT
#define STRATA__NAME_ARRAY STRATA__NAME_INT
#define STRATA__NAME_SEQ(n, c, x, i) , n, n##_len
#define STRATA__NAME_BYTES STRATA__NAME_SEQ
#define STRATA__EMIT_SLOTS(...)                                                                   \
	while (m_) {                                                                              \
		unsigned slot_ = (unsigned)__builtin_ctz(m_);                                     \
		struct strata_reservation r_;                                                     \
		char *rec_;                                                                       \
		m_ &= m_ - 1;                                                                     \
		if (st_ & STRATA_TP_FILTERED) {                                                   \
			const void *const argv_[] = {STRATA__FE(STRATA__ARGV, __VA_ARGS__) NULL}; \
			if (!strata_filter_pass(tp_, slot_, argv_))                               \
				continue;                                                         \
		}                                                                                 \
		if (!strata_reserve(&r_, tp_, slot_, size_))                                      \
			continue;                                                                 \
		rec_ = r_.rec; /* a copy: a store through it cannot change it */                  \
		o_ = 0;                                                                           \
		STRATA__FE(STRATA__WRITE, __VA_ARGS__)                                            \
		strata_commit(&r_);                                                               \
	}
#define STRATA__EMITTER(prov, ev, ...)                                                               \
	static __attribute__((noinline, unused)) void STRATA__EMIT_FULL(prov, ev)(                   \
		struct strata_tracepoint * tp_, uint32_t st_ STRATA__FE(STRATA__PARAM, __VA_ARGS__)) \
	{                                                                                            \
		size_t o_ = 0;                                                                       \
		uint32_t m_ = st_ & STRATA_TP_SLOTS_MASK;                                            \
		STRATA__FE(STRATA__SIZE, __VA_ARGS__)                                                \
		STRATA__PROBES(st_, STRATA__FE(STRATA__ARGV, __VA_ARGS__))                           \
		{                                                                                    \
			const size_t size_ = o_;                                                     \
			STRATA__EMIT_SLOTS(__VA_ARGS__)                                              \
		}                                                                                    \
	}                                                                                            \
	static __attribute__((noinline, unused)) void STRATA__EMIT(prov, ev)(                        \
		struct strata_tracepoint * tp_ STRATA__FE(STRATA__PARAM, __VA_ARGS__))               \
	{                                                                                            \
		size_t o_ = 0;                                                                       \
		const uint32_t st_ = __atomic_load_n(&tp_->state, __ATOMIC_RELAXED);                 \
		struct strata_reservation r_;                                                        \
		char *rec_;                                                                          \
		if (__builtin_expect(st_ - 1u >= STRATA_TP_SLOTS_MASK || (st_ & (st_ - 1u)), 0)) {   \
			STRATA__EMIT_FULL(prov, ev)(tp_, st_ STRATA__FE(STRATA__NAME, __VA_ARGS__)); \
			return;                                                                      \
		}                                                                                    \
		STRATA__FE(STRATA__SIZE, __VA_ARGS__)                                                \
		if (STRATA__LONE_IS(__VA_ARGS__)) {                                                  \
			r_.rec = (char *)STRATA__LONE(__VA_ARGS__);                                  \
			strata_write(&r_, tp_, (unsigned)__builtin_ctz(st_), o_);                    \
			return;                                                                      \
		}                                                                                    \
		if (o_ <= STRATA_WRITE_MAX) {                                                        \
			char buf_[STRATA_WRITE_MAX];                                                 \
			const size_t size_ = o_;                                                     \
			r_.rec = rec_ = buf_;                                                        \
			o_ = 0;                                                                      \
			STRATA__FE(STRATA__WRITE, __VA_ARGS__)                                       \
			strata_write(&r_, tp_, (unsigned)__builtin_ctz(st_), size_);                 \
			return;                                                                      \
		}                                                                                    \
		if (!strata_reserve(&r_, tp_, (unsigned)__builtin_ctz(st_), o_))                     \
			return;                                                                      \
		rec_ = r_.rec; /* a copy: a store through it cannot change it */                     \
		o_ = 0;                                                                              \
		STRATA__FE(STRATA__WRITE, __VA_ARGS__)                                               \
		strata_commit(&r_);                                                                  \
	}

#ifdef __cplusplus
#define STRATA__EXTERN_TP(prov, ev) extern "C" STRATA__HIDDEN struct strata_tracepoint STRATA__TP(prov, ev);
#else
#define STRATA__EXTERN_TP(prov, ev) extern STRATA__HIDDEN struct strata_tracepoint STRATA__TP(prov, ev);
#endif

/*
 * C call sites (strata_tracepoint): the arguments first initialize a struct
 * of the emitter's parameters, a member each named after its field, so that
 * a wrong argument's error is that initialization's, at the call, naming
 * both types and the field ("near initialization for 'strata__a_.round'");
 * the members are then passed on, which cannot fail.  The wrapper is
 * inlined and the struct optimized away: the emitter gets its arguments in
 * registers as before.  A leading member lets an event with no fields have
 * one.  C++ call sites call the emitter directly (its brace initialization
 * would refuse narrowing conversions that a call accepts).
 */
#define STRATA__ARGS(p, e) strata__args__##p##__##e
#define STRATA__NPARAMS(p, e) strata__nparams__##p##__##e
#define STRATA__EMIT_ARGS(p, e) strata__emita__##p##__##e
#define STRATA__MEMBER(t, i) STRATA__DISPATCH(STRATA__MEMBER, t, i)
#define STRATA__MEMBER_INT(n, c, x, i) c n;
#define STRATA__MEMBER_FLOAT STRATA__MEMBER_INT
#define STRATA__MEMBER_ENUM STRATA__MEMBER_INT
#define STRATA__MEMBER_STRING(n, c, x, i) const char *n;
#define STRATA__MEMBER_ARRAY(n, c, x, i) const c *n;
#define STRATA__MEMBER_SEQ(n, c, x, i) \
	const c *n;                    \
	size_t n##_len;
#define STRATA__MEMBER_BYTES(n, c, x, i) \
	const void *n;                   \
	size_t n##_len;
#define STRATA__COUNT(t, i) STRATA__DISPATCH(STRATA__COUNT, t, i)
#define STRATA__COUNT_INT(n, c, x, i) +1
#define STRATA__COUNT_FLOAT STRATA__COUNT_INT
#define STRATA__COUNT_ENUM STRATA__COUNT_INT
#define STRATA__COUNT_STRING STRATA__COUNT_INT
#define STRATA__COUNT_ARRAY STRATA__COUNT_INT
#define STRATA__COUNT_SEQ(n, c, x, i) +2
#define STRATA__COUNT_BYTES STRATA__COUNT_SEQ
#define STRATA__PASS(t, i) STRATA__DISPATCH(STRATA__PASS, t, i)
#define STRATA__PASS_INT(n, c, x, i) , a_->n
#define STRATA__PASS_FLOAT STRATA__PASS_INT
#define STRATA__PASS_ENUM STRATA__PASS_INT
#define STRATA__PASS_STRING STRATA__PASS_INT
#define STRATA__PASS_ARRAY STRATA__PASS_INT
#define STRATA__PASS_SEQ(n, c, x, i) , a_->n, a_->n##_len
#define STRATA__PASS_BYTES STRATA__PASS_SEQ
#ifdef __cplusplus
#define STRATA__CALL_ARGS(prov, ev, members, count, pass)
#else
#define STRATA__CALL_ARGS(prov, ev, members, count, pass)                                      \
	struct STRATA__ARGS(prov, ev) {                                                        \
		char strata__first_;                                                           \
		members                                                                        \
	};                                                                                     \
	enum { STRATA__NPARAMS(prov, ev) = 0 count };                                          \
	static inline __attribute__((always_inline, unused)) void STRATA__EMIT_ARGS(prov, ev)( \
		struct strata_tracepoint * tp_, const struct STRATA__ARGS(prov, ev) * a_)      \
	{                                                                                      \
		(void)a_;                                                                      \
		STRATA__EMIT(prov, ev)(tp_ pass);                                              \
	}
#endif

#define STRATA__EVENT_COMMON(prov, ev, ...)                                  \
	STRATA__FE(STRATA__CHECK, __VA_ARGS__)                               \
	STRATA__EXTERN_TP(prov, ev)                                          \
	STRATA__EMITTER(prov, ev, __VA_ARGS__)                               \
	STRATA__CALL_ARGS(prov, ev, STRATA__FE(STRATA__MEMBER, __VA_ARGS__), \
			  STRATA__FE(STRATA__COUNT, __VA_ARGS__), STRATA__FE(STRATA__PASS, __VA_ARGS__))

/* ---- public declaration macros ----------------------------------------- */
#define STRATA_ENUM_VALUE(label, value)                   \
	{                                                 \
		label, (int64_t)(value), (int64_t)(value) \
	}
#define STRATA_ENUM_RANGE(label, first, last)            \
	{                                                \
		label, (int64_t)(first), (int64_t)(last) \
	}

/* STRATA_EVENT(provider, event, loglevel, fields...): 1 to 16 fields. */
#define STRATA_EVENT(prov, ev, loglevel, ...)                               \
	STRATA__EVENT_COMMON(prov, ev, __VA_ARGS__)                         \
	STRATA__DEFINE_EVENT(prov, ev, loglevel, STRATA__NARG(__VA_ARGS__), \
			     STRATA__FE(STRATA__DESC, __VA_ARGS__))

/* An event with no fields. */
#define STRATA_EVENT_NOARGS(prov, ev, loglevel)                                                              \
	STRATA__EXTERN_TP(prov, ev)                                                                          \
	static __attribute__((noinline, unused)) void STRATA__EMIT(prov, ev)(struct strata_tracepoint * tp_) \
	{                                                                                                    \
		uint32_t st_ = __atomic_load_n(&tp_->state, __ATOMIC_RELAXED);                               \
		uint32_t m_ = st_ & STRATA_TP_SLOTS_MASK;                                                    \
		STRATA__PROBES(st_, )                                                                        \
		while (m_) {                                                                                 \
			struct strata_reservation r_;                                                        \
			unsigned slot_ = (unsigned)__builtin_ctz(m_);                                        \
			m_ &= m_ - 1;                                                                        \
			if (strata_reserve(&r_, tp_, slot_, 0))                                              \
				strata_commit(&r_);                                                          \
		}                                                                                            \
	}                                                                                                    \
	STRATA__CALL_ARGS(prov, ev, , , )                                                                    \
	STRATA__DEFINE_EVENT(prov, ev, loglevel, 0, {NULL, 0, 0, 0, 0, 0, NULL})

/* STRATA_ENUM(provider, enum, labels...): labels are STRATA_ENUM_VALUE/RANGE. */
#define STRATA_ENUM(prov, en, ...) STRATA__DEFINE_ENUM(prov, en, __VA_ARGS__)

/* ---- call sites --------------------------------------------------------- */
#define strata_tracepoint_enabled(prov, ev) \
	__builtin_expect(__atomic_load_n(&STRATA__TP(prov, ev).state, __ATOMIC_RELAXED) != 0, 0)

#ifdef __cplusplus
#define strata_tracepoint(prov, ev, ...)                                              \
	do {                                                                          \
		STRATA__CALL_BEGIN                                                    \
		if (strata_tracepoint_enabled(prov, ev))                              \
			STRATA__EMIT(prov, ev)(&STRATA__TP(prov, ev), ##__VA_ARGS__); \
		STRATA__CALL_END                                                      \
	} while (0)
#else
/* The count first, each way in one line; then the arguments (STRATA__CALL_ARGS). */
#define strata_tracepoint(prov, ev, ...)                                                                     \
	do {                                                                                                 \
		_Static_assert(STRATA__NARG(0, ##__VA_ARGS__) - 1 >= STRATA__NPARAMS(prov, ev),              \
			       "strata_tracepoint(" #prov ", " #ev "): too few arguments for the fields of " \
			       "its STRATA_EVENT (a sequence or bytes field takes two: pointer, length)");   \
		_Static_assert(STRATA__NARG(0, ##__VA_ARGS__) - 1 <= STRATA__NPARAMS(prov, ev),              \
			       "strata_tracepoint(" #prov ", " #ev "): too many arguments for the fields "   \
			       "of its STRATA_EVENT");                                                       \
		STRATA__CALL_BEGIN                                                                           \
		if (strata_tracepoint_enabled(prov, ev)) {                                                   \
			const struct STRATA__ARGS(prov, ev) strata__a_ = {0, ##__VA_ARGS__};                 \
			STRATA__EMIT_ARGS(prov, ev)(&STRATA__TP(prov, ev), &strata__a_);                     \
		}                                                                                            \
		STRATA__CALL_END                                                                             \
	} while (0)
#endif

#ifdef __cplusplus
}
#endif
#endif /* STRATA_TRACEPOINT_H */

/*
 * Definitions: emitted only in the one translation unit per module that
 * defines STRATA_DEFINE_PROVIDERS before including its provider headers.
 * Outside the include guard so that a later include after the #define
 * switches definitions on.
 */
#undef STRATA__DEFINE_EVENT
#undef STRATA__DEFINE_ENUM
#if defined(STRATA_DEFINE_PROVIDERS)
#ifdef __cplusplus
#define STRATA__EXTERN_C_BEGIN extern "C" {
#define STRATA__EXTERN_C_END }
#define STRATA__EXTERN_DECL extern "C"
#else
#define STRATA__EXTERN_C_BEGIN
#define STRATA__EXTERN_C_END
#define STRATA__EXTERN_DECL extern
#endif
#define STRATA__DEFINE_EVENT(prov, ev, loglevel, nfields, ...)                                  \
	static const struct strata_field_desc strata__fields__##prov##__##ev[] = {__VA_ARGS__}; \
	static const struct strata_event_desc strata__desc__##prov##__##ev = {                  \
		STRATA_API_VERSION,                                                             \
		(uint32_t)(loglevel),                                                           \
		#prov,                                                                          \
		#ev,                                                                            \
		nfields,                                                                        \
		strata__fields__##prov##__##ev};                                                \
	STRATA__EXTERN_C_BEGIN STRATA__HIDDEN struct strata_tracepoint STRATA__TP(prov, ev) = { \
		0, STRATA_TP_MAGIC, &strata__desc__##prov##__##ev, 0, 0};                       \
	STRATA__EXTERN_C_END                                                                    \
	static struct strata_tracepoint *const strata__tpptr__##prov##__##ev                    \
		__attribute__((used, section("strata_tp"), aligned(sizeof(void *)))) =          \
			&STRATA__TP(prov, ev);
#define STRATA__DEFINE_ENUM(prov, en, ...)                                                      \
	static const struct strata_enum_label strata__labels__##prov##__##en[] = {__VA_ARGS__}; \
	static const struct strata_enum_desc strata__enum__##prov##__##en = {                   \
		#en, sizeof(strata__labels__##prov##__##en) / sizeof(struct strata_enum_label), \
		strata__labels__##prov##__##en};
#ifndef STRATA__MODULE_CTOR_DONE
#define STRATA__MODULE_CTOR_DONE
/* Registers this module's "strata_tp" section; the runtime ignores repeats. */
STRATA__EXTERN_DECL struct strata_tracepoint *const __start_strata_tp[]
	__attribute__((weak, visibility("hidden")));
STRATA__EXTERN_DECL struct strata_tracepoint *const __stop_strata_tp[]
	__attribute__((weak, visibility("hidden")));
static void __attribute__((constructor(101), used)) strata__module_ctor(void)
{
	strata_register_tracepoints(__start_strata_tp, __stop_strata_tp);
}
static void __attribute__((destructor(101), used)) strata__module_dtor(void)
{
	strata_unregister_tracepoints(__start_strata_tp, __stop_strata_tp);
}
#endif
#else
#define STRATA__DEFINE_EVENT(prov, ev, loglevel, nfields, ...)
#define STRATA__DEFINE_ENUM(prov, en, ...)
#endif
