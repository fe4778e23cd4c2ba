/*
 * json_writer.h - a streaming JSON writer with one escaper: whatever bytes
 * a string holds (a command name, a field read from a hostile trace), the
 * text written is valid JSON (RFC 8259).
 *
 * Strings: '"' and '\\' are escaped, control characters (U+0000..U+001F and
 * DEL) are written \n, \t, \r, \b, \f or \u00XX, U+2028 and U+2029 as
 * \u2028 and \u2029 (JavaScript's line separators); valid UTF-8 passes
 * through; every maximal ill-formed subsequence (a stray continuation
 * byte, a truncated sequence, an overlong form, a surrogate, a code point
 * above U+10FFFF, bytes F5..FF) is REPLACED by U+FFFD, one per subsequence
 * (Unicode's "substitution of maximal subparts", what Python's
 * decode('utf-8', 'replace') does).  Numbers: NaN and infinities, which
 * JSON lacks, are written null.
 *
 * The writer appends to a std::string the caller owns, which it may drain
 * (write out and clear) at any point: the writer keeps only its nesting.
 * Commas are the writer's; the caller says what comes next:
 *
 *   std::string out;
 *   JsonWriter w(out);
 *   w.begin_object();
 *   w.key("pid").u64(42);
 *   w.key("comm").str(comm);
 *   w.key("keys").begin_array();
 *   for (...) { w.newline(1); w.begin_object() ... w.end_object(); }
 *   w.end_array();
 *   w.end_object();          // out: {"pid": 42, "comm": "...", "keys": [\n {...}]}
 *
 * A misuse (a value where a key is due, a key in an array, an end that does
 * not match) is a bug of the caller: it asserts in debug builds; release
 * builds write on and `valid()` turns false.  Not thread-safe.
 */
#ifndef STRATA_JSON_WRITER_H
#define STRATA_JSON_WRITER_H

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

// Appends s to out as a JSON string, quotes included (the one escaper).
void json_quote(std::string &out, std::string_view s);
// s as a JSON string, quotes included (CTF metadata's strings too).
inline std::string json_quoted(std::string_view s)
{
	std::string o;
	json_quote(o, s);
	return o;
}

// Whether json_quote() writes s as it is between its quotes: every byte
// printable ASCII (0x20..0x7e) other than '"' and '\\'.  Inlined, eight
// bytes x at a time (the per-event path of `strata export --format
// json`), each test exact for "is there such a byte" (a borrow or carry
// may set more high bits once one is found):
//   a byte below 0x20     (x - 0x20 each) & ~x, its high bit
//   a byte above 0x7e     (x + 0x01 each) | x, its high bit
//   a byte equal to c     the same as below 0x01 of x ^ (c each)
inline bool json_plain(std::string_view s)
{
	constexpr uint64_t kOnes = 0x0101010101010101ull, kHighs = 0x8080808080808080ull;
	const char *p = s.data();
	size_t n = s.size();
	for (; n >= 8; p += 8, n -= 8) {
		uint64_t x;
		std::memcpy(&x, p, 8);
		const uint64_t q = x ^ (kOnes * '"'), b = x ^ (kOnes * '\\');
		const uint64_t bad =
			((x - kOnes * 0x20) & ~x) | (x + kOnes) | x | ((q - kOnes) & ~q) | ((b - kOnes) & ~b);
		if (bad & kHighs)
			return false;
	}
	for (; n; p++, n--) {
		const unsigned char c = static_cast<unsigned char>(*p);
		if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\')
			return false;
	}
	return true;
}

// Whether s is well-formed UTF-8 throughout; and s appended to out with
// every maximal ill-formed subsequence replaced by U+FFFD, as json_quote
// does (text for SQL: `strata query`, processor/query).
bool utf8_well_formed(std::string_view s);
void utf8_append_repaired(std::string &out, std::string_view s);

class JsonWriter {
public:
	enum class Style {
		kSpaced,  // ", " and ": " between items (Python's json.dumps)
		kCompact, // "," and ":"; a newline() pending at an end puts the
			  // closing bracket on a line of its own
		// As kSpaced on a line; an item that newline() starts on a new
		// line follows a bare ",", and a newline() pending at an end puts
		// the closing bracket on its own line (clocks.json's layout).
		kLines,
	};
	explicit JsonWriter(std::string &out, Style style = Style::kSpaced) : out_(out), style_(style) {}

	JsonWriter &begin_object();
	JsonWriter &end_object();
	JsonWriter &begin_array();
	JsonWriter &end_array();
	// A member's name; its value is the next call.
	JsonWriter &key(std::string_view k);

	JsonWriter &str(std::string_view s);
	JsonWriter &i64(int64_t v);
	JsonWriter &u64(uint64_t v);
	// %.17g (round-trips); NaN and infinities: null.
	JsonWriter &f64(double v);
	// The shortest text that reads back as v (std::to_chars), with a '.'
	// or an exponent so that it reads as a real again (1.0, -0.0, 1e+300);
	// an infinity 1e999 or -1e999 (JSON numbers every reader rounds to the
	// infinity: SQL's REALs, `strata query --json`); NaN null.
	JsonWriter &real(double v);
	// v / 10^decimals with exactly `decimals` digits after the point
	// (microseconds from nanoseconds: fixed(ns, 3)); decimals <= 18.
	JsonWriter &fixed(int64_t v, unsigned decimals);
	JsonWriter &boolean(bool v);
	JsonWriter &null();

	// The next item (member or element) starts a new line indented by
	// `indent` spaces (layout only; a top-level value ignores it).
	JsonWriter &newline(unsigned indent = 0);

	// Nesting depth: 0 once the top-level value is complete.
	size_t depth() const { return stack_.size(); }
	// No misuse so far, and (once depth() is 0) one whole value written.
	bool valid() const { return !misused_; }
	bool complete() const { return !misused_ && stack_.empty() && done_; }

private:
	struct Level {
		bool object;
		bool any = false;        // an item written
		bool want_value = false; // object: a key was written
	};
	std::string &out_;
	Style style_;
	std::vector<Level> stack_;
	bool done_ = false, misused_ = false;
	int pending_indent_ = -1;

	void before_value();
	void separator();
	void line_break();
	void misuse();
};

} // namespace strata

#endif
