/*
 * json_line.h - JSON for a per-event path: the syntax a JsonWriter writes,
 * cut into pieces once (JsonPieces), and the values written between them
 * at the writer's own bytes, without a writer (the json_*_text() writers).
 *
 * `strata export --format json` writes one compact object a line for every
 * event of a trace; a JsonWriter per event was most of its time.  What an
 * event's line holds apart from its values (its phase, its name, its
 * track's pid and tid, its arguments' names) repeats from one event to the
 * next: a JsonWriter writes it once, into JsonPieces, which hands its text
 * back as pieces cut where a value goes; the event's path copies the
 * pieces and writes the values with the writers below.  So every byte of
 * syntax is the writer's, and every value is written as JsonWriter writes
 * it (JsonWriter's u64, i64, fixed and f64 are these writers): the line is
 * byte for byte the one a JsonWriter would have written.
 *
 *   JsonPieces t;
 *   t.w().begin_object().key("ph").str("B").key("name").str(name).key("ts");
 *   const std::string head = t.cut();     // {"ph":"B","name":"...","ts":
 *   t.w().end_object();
 *   const std::string close = t.rest();   // }
 *   ... per event: head, json_fixed3_text(p, ts, cache), close.
 *
 * An array's elements one a line: newline() before the first and before
 * the next, each cut (the separators "\n" and ",\n").
 *
 * A string value is written here only when json_plain() (nothing to
 * escape): the caller writes the event with a JsonWriter otherwise.  The
 * text writers write at a char * the caller has made room at (each says
 * how much) and return the end of what they wrote.
 */
#ifndef STRATA_JSON_LINE_H
#define STRATA_JSON_LINE_H

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include "json_writer.h"

namespace strata {

// A JsonWriter (compact) whose text is taken back in pieces.
class JsonPieces {
public:
	JsonPieces() : w_(text_, JsonWriter::Style::kCompact) {}
	JsonWriter &w() { return w_; }
	// The text written since the last cut up to where a value is due
	// (after a key, or in an array: its separator included): the writer
	// then goes on past a value the caller writes itself in its place.
	std::string cut()
	{
		w_.null(); // the value's place, dropped
		std::string s;
		s.swap(text_);
		s.resize(s.size() - 4);
		return s;
	}
	// The text written since the last cut (the end of a line).
	std::string rest()
	{
		std::string s;
		s.swap(text_);
		return s;
	}

private:
	std::string text_;
	JsonWriter w_;
};

namespace json_digits {

// The three digits of 0..999, zero-padded, and a fourth byte (the '.'
// after the first 3 of a time's ddd.ddd): each copied in one 4-byte move.
struct Digits3 {
	char d[1000][4];
	constexpr explicit Digits3(char pad) : d()
	{
		for (int i = 0; i < 1000; i++) {
			d[i][0] = static_cast<char>('0' + i / 100);
			d[i][1] = static_cast<char>('0' + i / 10 % 10);
			d[i][2] = static_cast<char>('0' + i % 10);
			d[i][3] = pad;
		}
	}
};
inline constexpr Digits3 kDigits3('.');

// The two digits of 0..99.
struct Digits2 {
	char d[200];
	constexpr Digits2() : d()
	{
		for (int i = 0; i < 100; i++) {
			d[2 * i] = static_cast<char>('0' + i / 10);
			d[2 * i + 1] = static_cast<char>('0' + i % 10);
		}
	}
};
inline constexpr Digits2 kDigits2;

// v's digits ending at e (20 bytes of room before it): the start.  Two
// digits at a time from the end, four a step while v is large.
template <class U> __attribute__((always_inline)) inline char *backwards(char *e, U v)
{
	while (v >= 10000) { // 4 digits a step: half the divisions
		const unsigned r = static_cast<unsigned>(v % 10000);
		v /= 10000;
		const unsigned hi = r / 100;
		e -= 4;
		std::memcpy(e, kDigits2.d + 2 * hi, 2);
		std::memcpy(e + 2, kDigits2.d + 2 * (r - hi * 100), 2);
	}
	if (v >= 100) {
		const unsigned r = static_cast<unsigned>(v % 100);
		v /= 100;
		e -= 2;
		std::memcpy(e, kDigits2.d + 2 * r, 2);
	}
	if (v >= 10) {
		e -= 2;
		std::memcpy(e, kDigits2.d + 2 * v, 2);
	} else {
		*--e = static_cast<char>('0' + v);
	}
	return e;
}

// The 8 digits of v < 10^8, zero-padded, as the 8 bytes of the result
// (the first digit its lowest byte): its two 4-digit halves, then their
// 2-digit quarters, then their digits, split in parallel by multiplying
// by reciprocals in the lanes of one 64-bit integer (x / 100 is
// x * 5243 >> 19 for x < 10^4, x / 10 is x * 103 >> 10 for x < 100; no
// lane's product reaches the next).  Checked against std::to_chars for
// every v < 10^8 (tests/unit/json_property.cpp).
__attribute__((always_inline)) inline uint64_t eight(uint32_t v)
{
	const uint64_t x = (v / 10000) | static_cast<uint64_t>(v % 10000) << 32;
	const uint64_t hund = ((x * 5243) >> 19) & 0x0000007F0000007Full;
	const uint64_t y = hund | (x - hund * 100) << 16;
	const uint64_t tens = ((y * 103) >> 10) & 0x000F000F000F000Full;
	const uint64_t z = tens | (y - tens * 10) << 8;
	return z + 0x3030303030303030ull;
}

} // namespace json_digits

// v in decimal at p, as std::to_chars writes it (JsonWriter::u64's
// digits); 24 bytes of room (up to 8 written past the end).  The length
// from v's bit length, then the digits in 8-byte moves below 2^32.
__attribute__((always_inline)) inline char *json_u64_text(char *p, uint64_t v)
{
	using namespace json_digits;
	static constexpr uint64_t kPow10[20] = {1ull,
						10ull,
						100ull,
						1000ull,
						10000ull,
						100000ull,
						1000000ull,
						10000000ull,
						100000000ull,
						1000000000ull,
						10000000000ull,
						100000000000ull,
						1000000000000ull,
						10000000000000ull,
						100000000000000ull,
						1000000000000000ull,
						10000000000000000ull,
						100000000000000000ull,
						1000000000000000000ull,
						10000000000000000000ull};
	if (v == 0) {
		*p = '0';
		return p + 1;
	}
	const unsigned t = static_cast<unsigned>(64 - __builtin_clzll(v)) * 1233 >> 12; // ~log10
	const unsigned n = t + 1 - (v < kPow10[t]);
	if (v < 100000000) { // the last n of eight()'s 8 (8 bytes written)
		const uint64_t d = eight(static_cast<uint32_t>(v)) >> (8 * (8 - n));
		std::memcpy(p, &d, 8);
		return p + n;
	}
	if (v <= UINT32_MAX) { // 1 or 2 digits, then 8
		const uint32_t top = static_cast<uint32_t>(v / 100000000);
		const uint64_t d = eight(static_cast<uint32_t>(v - top * uint64_t{100000000}));
		if (top >= 10)
			std::memcpy(p, kDigits2.d + 2 * top, 2);
		else
			*p = static_cast<char>('0' + top);
		std::memcpy(p + n - 8, &d, 8);
		return p + n;
	}
	backwards(p + n, v);
	return p + n;
}
// JsonWriter::i64's digits (24 bytes of room).
__attribute__((always_inline)) inline char *json_i64_text(char *p, int64_t v)
{
	if (v < 0) {
		*p++ = '-';
		return json_u64_text(p, 0 - static_cast<uint64_t>(v));
	}
	return json_u64_text(p, static_cast<uint64_t>(v));
}

// JsonWriter::f64's text: %.17g (it round-trips), null for a NaN or an
// infinity, which JSON lacks (40 bytes of room).
inline char *json_f64_text(char *p, double v)
{
	if (!std::isfinite(v)) {
		std::memcpy(p, "null", 4);
		return p + 4;
	}
	return p + std::snprintf(p, 40, "%.17g", v);
}

// A string with nothing to escape (json_plain(s)), quoted, at p
// (s.size() + 2 bytes of room): JsonWriter::str's text of it.
__attribute__((always_inline)) inline char *json_plain_text(char *p, std::string_view s)
{
	*p++ = '"';
	if (!s.empty()) // an empty view may hold a null pointer
		std::memcpy(p, s.data(), s.size());
	p += s.size();
	*p++ = '"';
	return p;
}

// json_fixed3_text()'s digits of the previous value's thousands of
// thousands (successive times of a trace share them).
struct JsonFixed3Cache {
	uint64_t hi = UINT64_MAX;
	uint64_t base = 0; // hi * 1000000: the first unit of hi
	char text[16] = {};
	size_t len = 0;
};

// JsonWriter::fixed(v, 3) at p (32 bytes of room): microseconds from
// nanoseconds.  The digits above the last three whole thousands come
// from `c` when they are the previous call's, the last three and the
// fraction from a table: a conversion of every digit was a sixth of the
// JSON export's time.
__attribute__((always_inline)) inline char *json_fixed3_text(char *p, int64_t v, JsonFixed3Cache &c)
{
	using namespace json_digits;
	if (v < 0)
		*p++ = '-';
	const uint64_t a = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
	// Most often of the previous call's hi: the rest in 32 bits.
	const uint64_t r = a - c.base;
	if (__builtin_expect(r < 1000000 && c.hi != UINT64_MAX, 1)) {
		const uint32_t r32 = static_cast<uint32_t>(r), us = r32 / 1000;
		std::memcpy(p, c.text, sizeof c.text);
		p += c.len;
		std::memcpy(p, kDigits3.d[us], 4); // ddd.
		std::memcpy(p + 4, kDigits3.d[r32 - us * 1000], 4);
		return p + 7;
	}
	const uint64_t q = a / 1000;
	if (q < 1000) {
		p = std::to_chars(p, p + 24, q).ptr;
		*p++ = '.';
	} else {
		const uint64_t hi = q / 1000; // at most 13 digits
		if (hi != c.hi) {
			c.len = static_cast<size_t>(std::to_chars(c.text, c.text + sizeof c.text, hi).ptr -
						    c.text);
			c.hi = hi;
			c.base = hi * 1000000;
		}
		std::memcpy(p, c.text, sizeof c.text); // 16 bytes fit in the 32
		p += c.len;
		std::memcpy(p, kDigits3.d[q % 1000], 4); // ddd.
		p += 4;
	}
	std::memcpy(p, kDigits3.d[a % 1000], 4); // the 4th past the end: room
	return p + 3;
}

// The last 7 bytes of json_fixed3_text() (ddd.ddd) of a value r below
// 10^6 past the first unit of its thousands of thousands, at p (8 bytes of
// room): a line made once for a millisecond, its times filled in.
__attribute__((always_inline)) inline void json_fixed3_last6(char *p, uint32_t r)
{
	using namespace json_digits;
	const uint32_t q = r / 1000;
	std::memcpy(p, kDigits3.d[q], 4); // ddd.
	std::memcpy(p + 4, kDigits3.d[r - q * 1000], 3);
}

} // namespace strata

#endif
