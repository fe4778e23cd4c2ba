// json_text.cpp - see json_text.h.
#include "json_text.h"

namespace strata {
namespace query {

size_t utf8_seq(const unsigned char *s, size_t n)
{
	const unsigned c = s[0];
	if (c < 0x80)
		return 1;
	size_t len;
	unsigned cp, min;
	if ((c & 0xe0) == 0xc0) {
		len = 2, cp = c & 0x1f, min = 0x80;
	} else if ((c & 0xf0) == 0xe0) {
		len = 3, cp = c & 0x0f, min = 0x800;
	} else if ((c & 0xf8) == 0xf0) {
		len = 4, cp = c & 0x07, min = 0x10000;
	} else {
		return 0;
	}
	if (n < len)
		return 0;
	for (size_t k = 1; k < len; k++) {
		if ((s[k] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[k] & 0x3f);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

bool utf8_valid(const char *s, size_t n)
{
	const auto *u = (const unsigned char *)s;
	for (size_t i = 0; i < n;) {
		if (u[i] < 0x80) {
			i++;
			continue;
		}
		const size_t k = utf8_seq(u + i, n - i);
		if (!k)
			return false;
		i += k;
	}
	return true;
}

void utf8_append(std::string *out, const char *s, size_t n)
{
	const auto *u = (const unsigned char *)s;
	for (size_t i = 0; i < n;) {
		const size_t k = utf8_seq(u + i, n - i);
		if (k) {
			out->append(s + i, k);
			i += k;
		} else {
			out->append("\xef\xbf\xbd");
			i++;
		}
	}
}

void json_string(std::string *out, const char *s, size_t n)
{
	static const char kHex[] = "0123456789abcdef";
	const auto *u = (const unsigned char *)s;
	out->push_back('"');
	for (size_t i = 0; i < n;) {
		const unsigned char c = u[i];
		if (c >= 0x80) {
			const size_t k = utf8_seq(u + i, n - i);
			if (k)
				out->append(s + i, k);
			else
				out->append("\xef\xbf\xbd");
			i += k ? k : 1;
			continue;
		}
		i++;
		switch (c) {
		case '"':
			out->append("\\\"");
			break;
		case '\\':
			out->append("\\\\");
			break;
		case '\n':
			out->append("\\n");
			break;
		case '\t':
			out->append("\\t");
			break;
		case '\r':
			out->append("\\r");
			break;
		default:
			if (c < 0x20 || c == 0x7f) {
				const char e[] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 15]};
				out->append(e, sizeof e);
			} else {
				out->push_back((char)c);
			}
		}
	}
	out->push_back('"');
}

} // namespace query
} // namespace strata
