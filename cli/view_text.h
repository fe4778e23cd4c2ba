// view_text.h - the text of `strata view`'s lines: the line buffer, and
// numbers, times and strings written into it as babeltrace2's text sink
// writes them (cmd_view.cpp; the sink in view_sink.h).  Single-threaded:
// the last second's time text is kept across calls.
#ifndef STRATA_CLI_VIEW_TEXT_H
#define STRATA_CLI_VIEW_TEXT_H

#include <babeltrace2/babeltrace.h>
#include <time.h>

#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace strata {
namespace view {

// The output being built: a fixed buffer written out when it passes
// kFlushAt (one append is a compare and a memcpy: std::string's calls were
// a third of `strata view`'s time).  Lines longer than the buffer grow it.
class LineBuf {
public:
	static constexpr size_t kFlushAt = 1u << 16;
	LineBuf() : buf_(kFlushAt * 2) {}
	void append(const char *p, size_t n)
	{
		if (__builtin_expect(len_ + n > buf_.size(), 0))
			buf_.resize((len_ + n) * 2);
		char *d = buf_.data() + len_;
		len_ += n;
		// Most pieces are short: a call to memcpy, or a loop of n bytes
		// (its exit mispredicted as n varies), costs more than two
		// overlapping fixed-size copies.
		if (n >= 8 && n <= 16) {
			uint64_t a, b;
			memcpy(&a, p, 8);
			memcpy(&b, p + n - 8, 8);
			memcpy(d, &a, 8);
			memcpy(d + n - 8, &b, 8);
		} else if (n >= 4 && n < 8) {
			uint32_t a, b;
			memcpy(&a, p, 4);
			memcpy(&b, p + n - 4, 4);
			memcpy(d, &a, 4);
			memcpy(d + n - 4, &b, 4);
		} else if (n < 4) {
			if (n) { // 1, 2 or 3 bytes: first, middle, last
				d[0] = p[0];
				d[n / 2] = p[n / 2];
				d[n - 1] = p[n - 1];
			}
		} else {
			memcpy(d, p, n);
		}
	}
	LineBuf &operator+=(char c)
	{
		if (__builtin_expect(len_ + 1 > buf_.size(), 0))
			buf_.resize((len_ + 1) * 2);
		buf_[len_++] = c;
		return *this;
	}
	LineBuf &operator+=(const char *p)
	{
		append(p, strlen(p));
		return *this;
	}
	LineBuf &operator+=(const std::string &t)
	{
		append(t.data(), t.size());
		return *this;
	}
	// At least n bytes to write at the end (then commit() their end):
	// digits go straight to the buffer, as a copy through a scratch array
	// reads back bytes just stored piecewise (a stalled store forward).
	char *room(size_t n)
	{
		if (__builtin_expect(len_ + n > buf_.size(), 0))
			buf_.resize((len_ + n) * 2);
		return buf_.data() + len_;
	}
	void commit(const char *end) { len_ = static_cast<size_t>(end - buf_.data()); }
	const char *data() const { return buf_.data(); }
	size_t size() const { return len_; }
	bool empty() const { return len_ == 0; }
	void clear() { len_ = 0; }

private:
	std::vector<char> buf_;
	size_t len_ = 0;
};

// "00" to "99", for writing decimal digits two at a time.
constexpr char kDigitPairs[] =
	"00010203040506070809101112131415161718192021222324252627282930313233343536373839"
	"40414243444546474849505152535455565758596061626364656667686970717273747576777879"
	"8081828384858687888990919293949596979899";

// v in decimal at p (room for 20 bytes); the end.  Its length comes first
// (from its highest bit, then one comparison), so the digits are written
// in place, two at a time, without a loop that counts them.
inline char *put_decimal(char *p, uint64_t v)
{
	struct Pow10 {
		uint64_t v[20];
		constexpr Pow10() : v()
		{
			uint64_t x = 1;
			for (uint64_t &e : v) {
				e = x;
				x *= 10; // wraps once, past the last
			}
		}
	};
	static constexpr Pow10 kPow10{};
	const uint64_t w = v | 1; // as many digits as v (10^k is even), and a bit set
	const unsigned approx = (unsigned)((64 - __builtin_clzll(w)) * 1233) >> 12;
	char *const end = p + approx + (w >= kPow10.v[approx]);
	char *q = end;
	while (v >= 100) {
		const uint64_t r = v % 100;
		v /= 100;
		q -= 2;
		memcpy(q, kDigitPairs + 2 * r, 2);
	}
	if (v >= 10)
		memcpy(q - 2, kDigitPairs + 2 * v, 2);
	else
		q[-1] = (char)('0' + v);
	return end;
}

template <class Out> void append_i64(Out &out, int64_t v)
{
	if constexpr (std::is_same_v<Out, LineBuf>) {
		char *p = out.room(24);
		if (v < 0)
			*p++ = '-';
		out.commit(put_decimal(p, v < 0 ? 0 - (uint64_t)v : (uint64_t)v));
		return;
	}
	char buf[24];
	auto r = std::to_chars(buf, buf + sizeof buf, v);
	out.append(buf, (size_t)(r.ptr - buf));
}

// "[HH:MM:SS.nnnnnnnnn]" in local time; the last second's text is kept, so
// that events within one second cost no time conversion.  Single-threaded
// (the view's one thread).
struct TimeText {
	int64_t sec = INT64_MIN;
	int64_t lo = INT64_MAX; // sec's first ns
	char head[40];
	size_t len = 0;
};
inline TimeText g_time;

template <class Out> void append_time(Out &out, int64_t ns_from_origin)
{
	TimeText &t = g_time;
	int64_t sec, ns;
	if (ns_from_origin >= t.lo && ns_from_origin - t.lo < 1000000000) { // the same second: no division
		sec = t.sec;
		ns = ns_from_origin - t.lo;
	} else {
		sec = ns_from_origin / 1000000000;
		ns = ns_from_origin % 1000000000;
		if (ns < 0) {
			ns += 1000000000;
			sec -= 1;
		}
	}
	if (sec != t.sec) {
		t.lo = sec * 1000000000;
		const time_t tt = static_cast<time_t>(sec);
		struct tm tm;
		int n;
		if (localtime_r(&tt, &tm))
			n = std::snprintf(t.head, sizeof t.head, "[%02d:%02d:%02d.", tm.tm_hour, tm.tm_min,
					  tm.tm_sec);
		else
			n = std::snprintf(t.head, sizeof t.head, "[%" PRId64 ".", sec);
		t.len = n > 0 ? (size_t)n : 0;
		t.sec = sec;
	}
	// Nine digits, two at a time, written where they go (room()).
	const char *const kPairs = kDigitPairs;
	char *const h = out.room(sizeof t.head + 10);
	memcpy(h, t.head, sizeof t.head); // the whole array: fixed size, no call
	char *const d = h + t.len;
	uint32_t v = (uint32_t)ns;
	for (int k = 7; k >= 1; k -= 2) {
		const uint32_t q = v / 100, r = v - q * 100;
		d[k] = kPairs[2 * r];
		d[k + 1] = kPairs[2 * r + 1];
		v = q;
	}
	d[0] = (char)('0' + v);
	d[9] = ']';
	out.commit(d + 10);
}

// The length of the valid UTF-8 sequence at p (1..4), or 0 if it is not one.
inline size_t utf8_len(const unsigned char *p)
{
	const unsigned char c = p[0];
	auto cont = [&](int k) { return (p[k] & 0xC0) == 0x80; };
	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF)
		return cont(1) ? 2 : 0;
	if (c >= 0xE0 && c <= 0xEF) {
		if (!cont(1) || !cont(2) || (c == 0xE0 && p[1] < 0xA0) || (c == 0xED && p[1] > 0x9F))
			return 0;
		return 3;
	}
	if (c >= 0xF0 && c <= 0xF4) {
		if (!cont(1) || !cont(2) || !cont(3) || (c == 0xF0 && p[1] < 0x90) ||
		    (c == 0xF4 && p[1] > 0x8F))
			return 0;
		return 4;
	}
	return 0;
}

// Text of any bytes (NUL-terminated): quotes and backslashes escaped,
// control characters and bytes that are not UTF-8 as \xNN, so that the
// line is valid UTF-8 whatever the trace holds.
template <class Out> void append_escaped(Out &out, const char *s)
{
	for (const unsigned char *p = reinterpret_cast<const unsigned char *>(s); *p;) {
		const size_t n = utf8_len(p); // stops at the NUL: a continuation check fails there
		if (n > 1) {
			out.append(reinterpret_cast<const char *>(p), n);
			p += n;
			continue;
		}
		if (*p == '"' || *p == '\\') {
			out += '\\';
			out += static_cast<char>(*p);
		} else if (*p == '\n') {
			out += "\\n";
		} else if (*p == '\t') {
			out += "\\t";
		} else if (*p < 0x20 || *p == 0x7f || n == 0) {
			static const char hex[] = "0123456789abcdef";
			const char esc[4] = {'\\', 'x', hex[*p >> 4], hex[*p & 15]};
			out.append(esc, 4);
		} else {
			out += static_cast<char>(*p);
		}
		p++;
	}
}

template <class Out> void append_quoted(Out &out, const char *s)
{
	out += '"';
	append_escaped(out, s);
	out += '"';
}

template <class Out>
void append_unsigned(Out &out, uint64_t v, bt_field_class_integer_preferred_display_base base)
{
	char buf[80];
	switch (base) {
	case BT_FIELD_CLASS_INTEGER_PREFERRED_DISPLAY_BASE_HEXADECIMAL: {
		static const char hex[] = "0123456789abcdef";
		char *e = buf + sizeof buf, *p = e;
		do {
			*--p = hex[v & 15];
			v >>= 4;
		} while (v);
		*--p = 'x';
		*--p = '0';
		out.append(p, (size_t)(e - p));
		return;
	}
	case BT_FIELD_CLASS_INTEGER_PREFERRED_DISPLAY_BASE_OCTAL:
		std::snprintf(buf, sizeof buf, "0%" PRIo64, v);
		break;
	case BT_FIELD_CLASS_INTEGER_PREFERRED_DISPLAY_BASE_BINARY: {
		char *p = buf;
		*p++ = '0';
		*p++ = 'b';
		int top = 63;
		while (top > 0 && !((v >> top) & 1))
			top--;
		for (int b = top; b >= 0; b--)
			*p++ = ((v >> b) & 1) ? '1' : '0';
		*p = '\0';
		break;
	}
	default:
		if constexpr (std::is_same_v<Out, LineBuf>) {
			out.commit(put_decimal(out.room(24), v));
		} else {
			out.append(buf, (size_t)(std::to_chars(buf, buf + sizeof buf, v).ptr - buf));
		}
		return;
	}
	out += buf;
}

template <class Out, typename T> void append_real(Out &out, T v)
{
	char buf[64];
	auto r = std::to_chars(buf, buf + sizeof buf, v); // shortest round-trip form
	out.append(buf, (size_t)(r.ptr - buf));
}

} // namespace view
} // namespace strata

#endif
