/*
 * desc_rules.h - what a valid event description is, shared by the writer
 * (which refuses to register anything else) and the reader (which refuses
 * to pass anything else to the CTF metadata writer).  Names end up verbatim
 * in TSDL text, so they must be identifiers and labels must not be able to
 * close a string literal.
 */
#ifndef STRATA_LIBTRACE_DESC_RULES_H
#define STRATA_LIBTRACE_DESC_RULES_H

#include <cstddef>
#include <cstdint>

#include "strata_abi.h"

namespace strata {

constexpr size_t kMaxNameLen = 255;  // provider, event and field names
constexpr size_t kMaxLabelLen = 255; // enum labels
constexpr uint32_t kMaxArrayLength = 1u << 20;

// [A-Za-z_][A-Za-z0-9_]*, 1..kMaxNameLen characters, within n bytes.
inline bool valid_identifier(const char *s, size_t n = kMaxNameLen + 1)
{
	size_t i = 0;
	for (; i < n && s[i]; i++) {
		char c = s[i];
		bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
		if (!alpha && !(i > 0 && c >= '0' && c <= '9'))
			return false;
	}
	return i > 0 && i < n && i <= kMaxNameLen;
}

// Printable ASCII without '"' and '\\', 1..kMaxLabelLen, within n bytes.
inline bool valid_label(const char *s, size_t n = kMaxLabelLen + 1)
{
	size_t i = 0;
	for (; i < n && s[i]; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c < 0x20 || c > 0x7e || c == '"' || c == '\\')
			return false;
	}
	return i > 0 && i < n && i <= kMaxLabelLen;
}

inline bool valid_base(unsigned b)
{
	return b == 2 || b == 8 || b == 10 || b == 16;
}

inline bool valid_int_bits(unsigned bits)
{
	return bits == 8 || bits == 16 || bits == 32 || bits == 64;
}

} // namespace strata
#endif
