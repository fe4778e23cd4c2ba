/*
 * agg_spec.h - what an aggregation counts (docs/probes.md, "Aggregation"),
 * and its one-line syntax, shared by the runtime (STRATA_AGGREGATE, a
 * session's grant) and the `strata` command (which checks
 * `create --aggregate` before sending it):
 *
 *     PROVIDER:EVENT[:VALUE_FIELD] [by KEY] [limit N]
 *
 * (PROVIDER:EVENT may hold '*'; KEY a field, $tid or $event; N keys,
 * default 256, at most 4096).  Internal, not installed.
 */
#ifndef STRATA_LIBTRACE_AGG_SPEC_H
#define STRATA_LIBTRACE_AGG_SPEC_H

#include <stdint.h>

#include "agg_layout.h"

/* What to aggregate: `pattern`'s events; sum/min/max/histogram of the
 * integer field `value_field` ("" for counts only); keyed by `key_field`
 * ("" none, an integer, enum or string field, "$tid" or "$event"), in at
 * most max_keys entries (rounded up to a power of two, 1..4096). */
struct strata_agg_spec {
	char pattern[128];
	char value_field[64];
	char key_field[64];
	uint32_t max_keys;
	/* A field filter (docs/filters.md): only the hits it passes are
	 * aggregated (and counted in the header's hits); "" all. */
	char filter[256];
};

#ifdef __cplusplus
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace strata {
namespace agg_spec_detail {
inline bool copy_word(char *dst, size_t cap, const char *s, size_t n)
{
	if (n == 0 || n >= cap)
		return false;
	memcpy(dst, s, n);
	dst[n] = 0;
	return true;
}

inline int fail(char *err, size_t len, const char *msg)
{
	if (err && len)
		snprintf(err, len, "%s", msg);
	return -EINVAL;
}
} // namespace agg_spec_detail

// Parses `text` into *out (filter left empty).  0, or -EINVAL with a
// reason in err.
inline int agg_spec_parse(const char *text, struct strata_agg_spec *out, char *err, size_t errlen)
{
	if (!text || !out)
		return agg_spec_detail::fail(err, errlen, "no spec");
	strata_agg_spec s{};
	s.max_keys = 256;
	const char *words[6];
	size_t lens[6], nw = 0;
	for (const char *q = text; *q;) {
		q += strspn(q, " \t");
		if (!*q)
			break;
		if (nw == 6)
			return agg_spec_detail::fail(
				err, errlen, "too many words: PROVIDER:EVENT[:FIELD] [by KEY] [limit N]");
		words[nw] = q;
		lens[nw] = strcspn(q, " \t");
		q += lens[nw++];
	}
	if (nw == 0)
		return agg_spec_detail::fail(err, errlen, "empty spec");
	// PROVIDER:EVENT[:VALUE]
	const char *w = words[0];
	const char *c1 = (const char *)memchr(w, ':', lens[0]);
	const char *c2 = c1 ? (const char *)memchr(c1 + 1, ':', lens[0] - (size_t)(c1 + 1 - w)) : nullptr;
	if (!c1 || c1 == w || c1 + 1 == w + lens[0] || c2 == c1 + 1)
		return agg_spec_detail::fail(err, errlen,
					     "the first word must be PROVIDER:EVENT or PROVIDER:EVENT:FIELD");
	size_t pat_len = c2 ? (size_t)(c2 - w) : lens[0];
	if (!agg_spec_detail::copy_word(s.pattern, sizeof s.pattern, w, pat_len))
		return agg_spec_detail::fail(err, errlen, "pattern too long");
	if (c2 &&
	    !agg_spec_detail::copy_word(s.value_field, sizeof s.value_field, c2 + 1, lens[0] - pat_len - 1))
		return agg_spec_detail::fail(err, errlen, "bad value field");
	for (size_t i = 1; i < nw; i += 2) {
		if (i + 1 >= nw)
			return agg_spec_detail::fail(err, errlen, "'by' and 'limit' need a value");
		if (lens[i] == 2 && !strncmp(words[i], "by", 2)) {
			if (!agg_spec_detail::copy_word(s.key_field, sizeof s.key_field, words[i + 1],
							lens[i + 1]))
				return agg_spec_detail::fail(err, errlen, "bad key");
		} else if (lens[i] == 5 && !strncmp(words[i], "limit", 5)) {
			char num[16];
			char *e;
			if (!agg_spec_detail::copy_word(num, sizeof num, words[i + 1], lens[i + 1]))
				return agg_spec_detail::fail(err, errlen, "bad limit");
			unsigned long v = strtoul(num, &e, 10);
			if (*e || v == 0 || v > STRATA_AGG_MAX_ENTRIES)
				return agg_spec_detail::fail(err, errlen, "limit must be 1..4096");
			s.max_keys = (uint32_t)v;
		} else {
			return agg_spec_detail::fail(err, errlen, "expected 'by KEY' or 'limit N'");
		}
	}
	if (s.key_field[0] == '$' && strcmp(s.key_field, "$tid") && strcmp(s.key_field, "$event"))
		return agg_spec_detail::fail(err, errlen, "a $ key is $tid or $event");
	*out = s;
	return 0;
}

} // namespace strata
#endif
#endif
