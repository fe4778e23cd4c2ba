/*
 * agg_env.cpp - aggregation asked for by the environment, until sessions
 * can ask for it (docs/probes.md "Aggregation"):
 *
 *     STRATA_AGGREGATE='pthread:mutex_lock:wait_ns by lock; app:req by $tid' prog
 *
 * opens one region per spec at libstrata's load, for the life of the
 * process; `strata top --pid` finds them among the process's descriptors
 * (memfds named "strata-agg").  A forked child gets regions of its own
 * (agg.cpp).  A spec that does not parse is warned about and skipped.
 *
 * Spec: PROVIDER:EVENT[:VALUE_FIELD] [by KEY] [limit N]
 *   (PROVIDER:EVENT may hold '*'; KEY a field, $tid or $event; N keys,
 *   default 256, at most 4096).
 */
#include <errno.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "agg.h"
#include "rt_internal.h"

namespace {

constexpr size_t kMaxEnvRegions = 8;
strata_rt_agg *g_env[kMaxEnvRegions];
strata_agg_spec g_env_spec[kMaxEnvRegions];
size_t g_n_env;

bool copy_word(char *dst, size_t cap, const char *s, size_t n)
{
	if (n == 0 || n >= cap)
		return false;
	memcpy(dst, s, n);
	dst[n] = 0;
	return true;
}

int fail(char *err, size_t len, const char *msg)
{
	if (err && len)
		snprintf(err, len, "%s", msg);
	return -EINVAL;
}

void open_env_regions()
{
	for (size_t i = 0; i < g_n_env; i++)
		if (strata_rt_agg_open(&g_env_spec[i], &g_env[i]) != 0) {
			g_env[i] = nullptr;
			strata::warn("STRATA_AGGREGATE: a region could not be opened");
		}
}

__attribute__((constructor)) void agg_env_init()
{
	const char *env = getenv("STRATA_AGGREGATE"); // read-only walk of environ
	if (!env || !*env)
		return;
	const char *p = env;
	while (*p && g_n_env < kMaxEnvRegions) {
		const char *end = strchr(p, ';');
		size_t n = end ? (size_t)(end - p) : strlen(p);
		char one[512], err[128];
		if (n < sizeof one) {
			memcpy(one, p, n);
			one[n] = 0;
			bool blank = strspn(one, " \t") == n;
			if (!blank && strata_rt_agg_parse(one, &g_env_spec[g_n_env], err, sizeof err) == 0)
				g_n_env++;
			else if (!blank)
				strata::warn("STRATA_AGGREGATE: a spec does not parse: skipped");
		}
		p += n;
		if (*p == ';')
			p++;
	}
	open_env_regions();
}

} // namespace

extern "C" STRATA_EXPORT int strata_rt_agg_parse(const char *text, struct strata_agg_spec *out, char *err,
						 size_t errlen)
{
	if (!text || !out)
		return fail(err, errlen, "no spec");
	strata_agg_spec s{};
	s.max_keys = 256;
	const char *words[6];
	size_t lens[6], nw = 0;
	for (const char *q = text; *q;) {
		q += strspn(q, " \t");
		if (!*q)
			break;
		if (nw == 6)
			return fail(err, errlen, "too many words: PROVIDER:EVENT[:FIELD] [by KEY] [limit N]");
		words[nw] = q;
		lens[nw] = strcspn(q, " \t");
		q += lens[nw++];
	}
	if (nw == 0)
		return fail(err, errlen, "empty spec");
	// PROVIDER:EVENT[:VALUE]
	const char *w = words[0];
	const char *c1 = (const char *)memchr(w, ':', lens[0]);
	const char *c2 = c1 ? (const char *)memchr(c1 + 1, ':', lens[0] - (size_t)(c1 + 1 - w)) : nullptr;
	if (!c1 || c1 == w || c1 + 1 == w + lens[0] || c2 == c1 + 1)
		return fail(err, errlen, "the first word must be PROVIDER:EVENT or PROVIDER:EVENT:FIELD");
	size_t pat_len = c2 ? (size_t)(c2 - w) : lens[0];
	if (!copy_word(s.pattern, sizeof s.pattern, w, pat_len))
		return fail(err, errlen, "pattern too long");
	if (c2 && !copy_word(s.value_field, sizeof s.value_field, c2 + 1, lens[0] - pat_len - 1))
		return fail(err, errlen, "bad value field");
	for (size_t i = 1; i < nw; i += 2) {
		if (i + 1 >= nw)
			return fail(err, errlen, "'by' and 'limit' need a value");
		if (lens[i] == 2 && !strncmp(words[i], "by", 2)) {
			if (!copy_word(s.key_field, sizeof s.key_field, words[i + 1], lens[i + 1]))
				return fail(err, errlen, "bad key");
		} else if (lens[i] == 5 && !strncmp(words[i], "limit", 5)) {
			char num[16];
			char *e;
			if (!copy_word(num, sizeof num, words[i + 1], lens[i + 1]))
				return fail(err, errlen, "bad limit");
			unsigned long v = strtoul(num, &e, 10);
			if (*e || v == 0 || v > STRATA_AGG_MAX_ENTRIES)
				return fail(err, errlen, "limit must be 1..4096");
			s.max_keys = (uint32_t)v;
		} else {
			return fail(err, errlen, "expected 'by KEY' or 'limit N'");
		}
	}
	if (s.key_field[0] == '$' && strcmp(s.key_field, "$tid") && strcmp(s.key_field, "$event"))
		return fail(err, errlen, "a $ key is $tid or $event");
	*out = s;
	return 0;
}
