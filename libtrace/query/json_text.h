/*
 * json_text.h - text as SQL and JSON take it: valid UTF-8 (each byte of an
 * invalid sequence becomes U+FFFD) and, in JSON, escaped quotes,
 * backslashes and control characters.  The one place the query tables and
 * `strata query --json` escape text.
 */
#ifndef STRATA_QUERY_JSON_TEXT_H
#define STRATA_QUERY_JSON_TEXT_H

#include <cstddef>
#include <string>

namespace strata {
namespace query {

// Length of the valid UTF-8 sequence at s[0..n) (1..4), or 0 if invalid
// (overlong forms, surrogates and code points past U+10FFFF are invalid).
size_t utf8_seq(const unsigned char *s, size_t n);
// Whether s[0..n) is valid UTF-8 throughout.
bool utf8_valid(const char *s, size_t n);
// s[0..n) with each byte of an invalid sequence replaced by U+FFFD.
void utf8_append(std::string *out, const char *s, size_t n);
// s[0..n) as a JSON string, quotes included, appended to out.
void json_string(std::string *out, const char *s, size_t n);

} // namespace query
} // namespace strata
#endif
