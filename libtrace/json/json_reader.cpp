// json_reader.cpp - JSON text read into a tree; contract in json_reader.h.
#include "json_reader.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace strata {

namespace {

constexpr int kMaxDepth = 16;
constexpr size_t kMaxNumber = 40;

// Appends code point c (at most U+10FFFF, not a surrogate) in UTF-8.
void put_utf8(std::string *out, uint32_t c)
{
	if (c < 0x80) {
		out->push_back(static_cast<char>(c));
	} else if (c < 0x800) {
		out->push_back(static_cast<char>(0xc0 | (c >> 6)));
		out->push_back(static_cast<char>(0x80 | (c & 0x3f)));
	} else if (c < 0x10000) {
		out->push_back(static_cast<char>(0xe0 | (c >> 12)));
		out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3f)));
		out->push_back(static_cast<char>(0x80 | (c & 0x3f)));
	} else {
		out->push_back(static_cast<char>(0xf0 | (c >> 18)));
		out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3f)));
		out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3f)));
		out->push_back(static_cast<char>(0x80 | (c & 0x3f)));
	}
}

// Whether t is a number by JSON's grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
bool json_number(const std::string &t)
{
	size_t i = 0;
	const auto digits = [&]() {
		const size_t b = i;
		while (i < t.size() && t[i] >= '0' && t[i] <= '9')
			i++;
		return i > b;
	};
	if (i < t.size() && t[i] == '-')
		i++;
	if (i < t.size() && t[i] == '0')
		i++;
	else if (!digits())
		return false;
	if (i < t.size() && t[i] == '.' && (++i, !digits()))
		return false;
	if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
		i++;
		if (i < t.size() && (t[i] == '+' || t[i] == '-'))
			i++;
		if (!digits())
			return false;
	}
	return i == t.size();
}

// Recursive descent, depth bounded, linear in the text.
struct Parser {
	const std::string &s;
	size_t i = 0;
	std::string err;

	void ws()
	{
		while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r'))
			i++;
	}
	bool fail(const char *what)
	{
		if (err.empty())
			err = std::string(what) + " at byte " + std::to_string(i);
		return false;
	}
	// Four hex digits at s[i..), i past them.
	bool hex4(uint32_t *out)
	{
		if (s.size() - i < 4)
			return fail("a \\u escape cut short");
		uint32_t v = 0;
		for (int k = 0; k < 4; k++, i++) {
			const char c = s[i];
			const int d = c >= '0' && c <= '9'   ? c - '0'
				      : c >= 'a' && c <= 'f' ? c - 'a' + 10
				      : c >= 'A' && c <= 'F' ? c - 'A' + 10
							     : -1;
			if (d < 0)
				return fail("a \\u escape with a non-hex digit");
			v = v << 4 | static_cast<uint32_t>(d);
		}
		*out = v;
		return true;
	}
	// \uXXXX (a surrogate pair: two), i at the 'u'.
	bool unicode(std::string *out)
	{
		i++;
		uint32_t c;
		if (!hex4(&c))
			return false;
		if (c >= 0xdc00 && c <= 0xdfff)
			return fail("a lone low surrogate");
		if (c >= 0xd800 && c <= 0xdbff) {
			uint32_t lo;
			if (s.compare(i, 2, "\\u") != 0 || (i += 2, !hex4(&lo)) || lo < 0xdc00 || lo > 0xdfff)
				return fail("a high surrogate not followed by a low one");
			c = 0x10000 + ((c - 0xd800) << 10) + (lo - 0xdc00);
		}
		put_utf8(out, c);
		return true;
	}
	// The escape at s[i] (past its '\\'), i past it.
	bool escape(std::string *out)
	{
		static const char kFrom[] = "\"\\/bfnrt", kTo[] = "\"\\/\b\f\n\r\t";
		if (i >= s.size())
			return fail("a string not closed");
		if (s[i] == 'u')
			return unicode(out);
		const char *p = std::strchr(kFrom, s[i]);
		if (!p || !*p)
			return fail("an unknown escape in a string");
		out->push_back(kTo[p - kFrom]);
		i++;
		return true;
	}
	bool string(std::string *out)
	{
		if (i >= s.size() || s[i] != '"')
			return fail("a string expected");
		for (i++; i < s.size() && s[i] != '"';) {
			if (static_cast<unsigned char>(s[i]) < 0x20)
				return fail("a control character in a string");
			if (s[i] == '\\') {
				i++;
				if (!escape(out))
					return false;
				continue;
			}
			out->push_back(s[i++]);
		}
		if (i >= s.size())
			return fail("a string not closed");
		i++;
		return true;
	}
	bool value(JsonValue *v, int depth)
	{
		if (depth > kMaxDepth)
			return fail("nested too deep");
		ws();
		if (i >= s.size())
			return fail("the text ends where a value was expected");
		v->begin = i;
		const bool r = value_at(v, depth);
		v->end = i;
		return r;
	}
	// An object's or an array's items, i past its opening bracket.
	bool items(JsonValue *v, int depth)
	{
		const bool is_obj = v->kind == JsonValue::Obj;
		const char close = is_obj ? '}' : ']';
		ws();
		if (i < s.size() && s[i] == close) {
			i++;
			return true;
		}
		for (;;) {
			ws();
			JsonValue *item;
			if (is_obj) {
				v->obj.emplace_back();
				if (!string(&v->obj.back().first))
					return false;
				ws();
				if (i >= s.size() || s[i] != ':')
					return fail("':' expected");
				i++;
				item = &v->obj.back().second;
			} else {
				v->arr.emplace_back();
				item = &v->arr.back();
			}
			if (!value(item, depth + 1))
				return false;
			ws();
			if (i < s.size() && s[i] == ',') {
				i++;
				continue;
			}
			if (i < s.size() && s[i] == close) {
				i++;
				return true;
			}
			return fail(is_obj ? "',' or '}' expected" : "',' or ']' expected");
		}
	}
	bool value_at(JsonValue *v, int depth)
	{
		const char c = s[i];
		if (c == '{' || c == '[') {
			v->kind = c == '{' ? JsonValue::Obj : JsonValue::Arr;
			i++;
			return items(v, depth);
		}
		if (c == '"') {
			v->kind = JsonValue::Str;
			return string(&v->text);
		}
		for (const char *w : {"true", "false", "null"})
			if (s.compare(i, strlen(w), w) == 0) {
				v->kind = w[0] == 'n' ? JsonValue::Null : JsonValue::Bool;
				v->b = w[0] == 't';
				i += strlen(w);
				return true;
			}
		const size_t b = i;
		while (i < s.size() && i - b <= kMaxNumber && std::strchr("0123456789+-.eE", s[i]) && s[i])
			i++;
		v->kind = JsonValue::Num;
		v->text = s.substr(b, i - b);
		if (i - b > kMaxNumber)
			return fail("a number too long");
		if (!json_number(v->text))
			return fail("a value expected");
		return true;
	}
};

} // namespace

const JsonValue *JsonValue::get(const char *key) const
{
	for (const auto &kv : obj)
		if (kv.first == key)
			return &kv.second;
	return nullptr;
}

bool JsonValue::as_int(int64_t *out) const
{
	if (kind != Num)
		return false;
	errno = 0;
	char *end = nullptr;
	const long long x = strtoll(text.c_str(), &end, 10);
	if (errno || *end)
		return false;
	*out = x;
	return true;
}

bool JsonValue::as_double(double *out) const
{
	if (kind != Num)
		return false;
	char *end = nullptr;
	const double x = strtod(text.c_str(), &end);
	if (*end || !std::isfinite(x))
		return false;
	*out = x;
	return true;
}

bool parse_json(const std::string &text, JsonValue *out, std::string *why)
{
	Parser p{text, 0, {}};
	*out = JsonValue();
	if (!p.value(out, 0)) {
		*why = "not JSON: " + p.err;
		return false;
	}
	p.ws();
	if (p.i != text.size()) {
		*why = "not JSON: text after the value at byte " + std::to_string(p.i);
		return false;
	}
	return true;
}

} // namespace strata
