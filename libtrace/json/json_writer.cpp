/*
 * json_writer.cpp - see json_writer.h.
 */
#include "json_writer.h"

#include <cassert>
#include <charconv>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "json_line.h"

namespace strata {

namespace {

// The length of the well-formed UTF-8 sequence at s[0..n) (n > 0, s[0] >=
// 0x80), or 0 with *bad = the length of its maximal ill-formed subpart
// (Unicode 15, table 3-7: the second byte's range depends on the first).
size_t utf8_length(const unsigned char *s, size_t n, size_t *bad)
{
	const unsigned char c = s[0];
	size_t len;
	unsigned char lo = 0x80, hi = 0xbf;
	if (c >= 0xc2 && c <= 0xdf)
		len = 2;
	else if (c >= 0xe0 && c <= 0xef)
		len = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
	else if (c >= 0xf0 && c <= 0xf4)
		len = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
	else {
		*bad = 1; // a continuation byte, C0, C1, F5..FF
		return 0;
	}
	for (size_t k = 1; k < len; k++) {
		const unsigned char b = k < n ? s[k] : 0;
		if (k >= n || b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xbf)) {
			*bad = k;
			return 0;
		}
	}
	return len;
}

void escape_control(std::string &out, unsigned char c)
{
	switch (c) {
	case '\n':
		out += "\\n";
		return;
	case '\t':
		out += "\\t";
		return;
	case '\r':
		out += "\\r";
		return;
	case '\b':
		out += "\\b";
		return;
	case '\f':
		out += "\\f";
		return;
	}
	char b[8];
	std::snprintf(b, sizeof b, "\\u%04x", c);
	out += b;
}

} // namespace

bool utf8_well_formed(std::string_view s)
{
	const auto *p = reinterpret_cast<const unsigned char *>(s.data());
	for (size_t i = 0, bad = 0; i < s.size();) {
		if (p[i] < 0x80) {
			i++;
			continue;
		}
		const size_t len = utf8_length(p + i, s.size() - i, &bad);
		if (!len)
			return false;
		i += len;
	}
	return true;
}

void utf8_append_repaired(std::string &out, std::string_view s)
{
	const auto *p = reinterpret_cast<const unsigned char *>(s.data());
	for (size_t i = 0, bad = 0; i < s.size();) {
		size_t j = i; // a run of ASCII at once
		while (j < s.size() && p[j] < 0x80)
			j++;
		out.append(s.data() + i, j - i);
		if ((i = j) >= s.size())
			break;
		const size_t len = utf8_length(p + i, s.size() - i, &bad);
		if (len)
			out.append(s.data() + i, len);
		else
			out += "\xef\xbf\xbd"; // U+FFFD
		i += len ? len : bad;
	}
}

namespace {

// A short string with nothing to escape (keys, names, most values), with
// `pre` before it and `post` after it, in one append: the per-event path
// of `strata export --format json`.
bool quote_plain(std::string &out, std::string_view pre, std::string_view s, std::string_view post)
{
	char b[128];
	const size_t n = s.size();
	if (pre.size() + n + post.size() + 2 > sizeof b || !json_plain(s))
		return false;
	// An empty string_view may hold a null pointer, which memcpy must not
	// be given even for 0 bytes (UBSan).
	char *d = b;
	if (!pre.empty())
		std::memcpy(d, pre.data(), pre.size());
	d += pre.size();
	*d++ = '"';
	if (n)
		std::memcpy(d, s.data(), n);
	d += n;
	*d++ = '"';
	if (!post.empty())
		std::memcpy(d, post.data(), post.size());
	d += post.size();
	out.append(b, static_cast<size_t>(d - b));
	return true;
}

} // namespace

void json_quote(std::string &out, std::string_view s)
{
	if (quote_plain(out, {}, s, {}))
		return;
	const auto *p = reinterpret_cast<const unsigned char *>(s.data());
	const size_t n = s.size();
	out += '"';
	for (size_t i = 0; i < n;) {
		const unsigned char c = p[i];
		if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
			size_t j = i + 1; // a run of plain ASCII at once
			while (j < n && p[j] >= 0x20 && p[j] < 0x7f && p[j] != '"' && p[j] != '\\')
				j++;
			out.append(s.data() + i, j - i);
			i = j;
		} else if (c == '"' || c == '\\') {
			out += '\\';
			out += static_cast<char>(c);
			i++;
		} else if (c < 0x80) {
			escape_control(out, c);
			i++;
		} else {
			size_t bad = 0;
			const size_t len = utf8_length(p + i, n - i, &bad);
			if (!len) {
				out += "\xef\xbf\xbd"; // U+FFFD
				i += bad;
			} else if (len == 3 && c == 0xe2 && p[i + 1] == 0x80 && (p[i + 2] & 0xfe) == 0xa8) {
				out += p[i + 2] == 0xa8 ? "\\u2028" : "\\u2029";
				i += 3;
			} else {
				out.append(s.data() + i, len);
				i += len;
			}
		}
	}
	out += '"';
}

void JsonWriter::misuse()
{
	misused_ = true;
	assert(!"JsonWriter misused");
}

void JsonWriter::separator()
{
	Level &l = stack_.back();
	if (l.any)
		out_ += style_ == Style::kCompact || (style_ == Style::kLines && pending_indent_ >= 0) ? ","
												       : ", ";
	l.any = true;
	line_break();
}

void JsonWriter::line_break()
{
	if (pending_indent_ >= 0) {
		out_ += '\n';
		out_.append(static_cast<size_t>(pending_indent_), ' ');
	}
	pending_indent_ = -1;
}

// Where a value goes: at the top (once), after a key, or as an element.
void JsonWriter::before_value()
{
	if (stack_.empty()) {
		if (done_)
			misuse();
		done_ = true;
		pending_indent_ = -1;
		return;
	}
	Level &l = stack_.back();
	if (l.object) {
		if (!l.want_value)
			misuse();
		l.want_value = false;
		return;
	}
	separator();
}

JsonWriter &JsonWriter::key(std::string_view k)
{
	if (stack_.empty() || !stack_.back().object || stack_.back().want_value) {
		misuse();
		return *this;
	}
	const std::string_view colon = style_ == Style::kCompact ? ":" : ": ";
	Level &l = stack_.back();
	if (pending_indent_ < 0 &&
	    quote_plain(out_, l.any ? (style_ == Style::kCompact ? "," : ", ") : "", k, colon)) {
		l.any = true; // separator() and json_quote() in one append
	} else {
		separator();
		json_quote(out_, k);
		out_ += colon;
	}
	l.want_value = true;
	return *this;
}

JsonWriter &JsonWriter::begin_object()
{
	before_value();
	out_ += '{';
	stack_.push_back(Level{true});
	return *this;
}

JsonWriter &JsonWriter::begin_array()
{
	before_value();
	out_ += '[';
	stack_.push_back(Level{false});
	return *this;
}

JsonWriter &JsonWriter::end_object()
{
	if (stack_.empty() || !stack_.back().object || stack_.back().want_value) {
		misuse();
		return *this;
	}
	stack_.pop_back();
	if (style_ != Style::kSpaced)
		line_break();
	out_ += '}';
	pending_indent_ = -1;
	return *this;
}

JsonWriter &JsonWriter::end_array()
{
	if (stack_.empty() || stack_.back().object) {
		misuse();
		return *this;
	}
	stack_.pop_back();
	if (style_ != Style::kSpaced)
		line_break();
	out_ += ']';
	pending_indent_ = -1;
	return *this;
}

JsonWriter &JsonWriter::str(std::string_view s)
{
	before_value();
	json_quote(out_, s);
	return *this;
}

JsonWriter &JsonWriter::i64(int64_t v)
{
	return fixed(v, 0);
}

JsonWriter &JsonWriter::u64(uint64_t v)
{
	before_value();
	char b[24];
	out_.append(b, static_cast<size_t>(json_u64_text(b, v) - b));
	return *this;
}

JsonWriter &JsonWriter::f64(double v)
{
	if (!std::isfinite(v))
		return null();
	before_value();
	char b[40];
	out_.append(b, static_cast<size_t>(json_f64_text(b, v) - b));
	return *this;
}

JsonWriter &JsonWriter::real(double v)
{
	if (std::isnan(v))
		return null();
	before_value();
	if (std::isinf(v)) {
		out_ += v > 0 ? "1e999" : "-1e999";
		return *this;
	}
	char b[40];
	const std::string_view t(b, static_cast<size_t>(std::to_chars(b, b + sizeof b, v).ptr - b));
	out_ += t;
	if (t.find_first_of(".e") == std::string_view::npos)
		out_ += ".0";
	return *this;
}

JsonWriter &JsonWriter::fixed(int64_t v, unsigned decimals)
{
	before_value();
	if (decimals > 18)
		decimals = 18;
	uint64_t scale = 1;
	for (unsigned k = 0; k < decimals; k++)
		scale *= 10;
	const bool neg = v < 0;
	const uint64_t a = neg ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
	// json_line.h's digits, which the per-event path of `strata export
	// --format json` writes without a writer.
	char b[48];
	char *p = b;
	if (neg)
		*p++ = '-';
	p = json_u64_text(p, a / scale);
	if (decimals) {
		*p++ = '.';
		uint64_t f = a % scale;
		for (unsigned k = decimals; k-- > 0;) {
			p[k] = static_cast<char>('0' + f % 10);
			f /= 10;
		}
		p += decimals;
	}
	out_.append(b, static_cast<size_t>(p - b));
	return *this;
}

JsonWriter &JsonWriter::boolean(bool v)
{
	before_value();
	out_ += v ? "true" : "false";
	return *this;
}

JsonWriter &JsonWriter::null()
{
	before_value();
	out_ += "null";
	return *this;
}

JsonWriter &JsonWriter::newline(unsigned indent)
{
	pending_indent_ = static_cast<int>(indent);
	return *this;
}

} // namespace strata
