/*
 * json_reader.h - JSON text read into a tree (RFC 8259), for the files
 * Strata reads back (clocks.json: libtrace/clocksync/clocks_file.h).
 *
 * The text is hostile: the parse is linear in its size, its depth bounded
 * (16), a number kept as written (at most 40 characters, checked against
 * JSON's grammar) and converted only when asked, range-checked.  Strings
 * are decoded: escapes (\n, \u00e9, a surrogate pair) become the bytes
 * they stand for in UTF-8; a lone surrogate is refused.  What the writer
 * (json_writer.h) writes, this reads back to the same values.
 */
#ifndef STRATA_JSON_READER_H
#define STRATA_JSON_READER_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace strata {

struct JsonValue {
	enum Kind { Null, Bool, Num, Str, Arr, Obj } kind = Null;
	bool b = false;
	std::string text; // Num: as written; Str: the decoded bytes
	std::vector<JsonValue> arr;
	std::vector<std::pair<std::string, JsonValue>> obj;
	size_t begin = 0, end = 0; // the value's bytes in the text: [begin, end)

	// An object's member (the first of that name), or null.
	const JsonValue *get(const char *key) const;
	bool as_int(int64_t *out) const;   // a whole number in int64_t
	bool as_double(double *out) const; // a finite number
	bool is_str(const char *s) const { return kind == Str && text == s; }
};

// The text as one JSON value (depth at most 16, linear in the text).
// False with *why ("not JSON: ... at byte N") otherwise.
bool parse_json(const std::string &text, JsonValue *out, std::string *why);

} // namespace strata

#endif
