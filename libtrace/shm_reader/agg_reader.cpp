/*
 * agg_reader.cpp - see agg_reader.h.  Reads are relaxed atomic loads of
 * the writer's words (they change under us), but the entry's state, which
 * is acquired: pairs with the writer's release store of LIVE, so the key
 * and text read after it are the claimer's.
 */
#include "agg_reader.h"

#include <algorithm>
#include <cstring>
#include <map>

namespace strata {
namespace {

template <class T> T load(const T *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

std::string bounded(const char *s, size_t cap)
{
	char tmp[128];
	size_t n = std::min(cap, sizeof tmp);
	memcpy(tmp, s, n); // a copy, then the length: it may change under us
	return std::string(tmp, strnlen(tmp, n));
}

} // namespace

bool agg_read(const void *map, size_t len, AggSnapshot *out, std::string *err)
{
	const auto *h = static_cast<const strata_agg_header *>(map);
	if (!map || len < sizeof *h) {
		*err = "region smaller than its header";
		return false;
	}
	const uint32_t n = load(&h->n_entries);
	if (load(&h->magic) != STRATA_AGG_MAGIC) {
		*err = "not an aggregation region (bad magic)";
		return false;
	}
	const uint32_t version = load(&h->version);
	if ((version != STRATA_AGG_VERSION && version != 1) || load(&h->header_size) != sizeof *h ||
	    load(&h->entry_size) != sizeof(strata_agg_entry)) {
		*err = "aggregation region of another version or layout";
		return false;
	}
	if (n == 0 || n > STRATA_AGG_MAX_ENTRIES || (n & (n - 1)) ||
	    sizeof *h + (size_t)n * sizeof(strata_agg_entry) > len) {
		*err = "aggregation region: entry count does not fit its size";
		return false;
	}
	AggSnapshot s;
	s.pid = load(&h->pid);
	s.key_kind = load(&h->key_kind);
	s.has_value = load(&h->has_value) != 0;
	s.pattern = bounded(h->pattern, sizeof h->pattern);
	s.value_field = bounded(h->value_field, sizeof h->value_field);
	s.key_field = bounded(h->key_field, sizeof h->key_field);
	s.overflow = load(&h->overflow);
	s.no_value = load(&h->no_value);
	// Version 1 counted hits in the header; version 2 leaves them to us:
	// every hit is in one entry's count, in overflow or in no_value.
	s.hits = version == 1 ? load(&h->hits) : s.overflow + s.no_value;
	const auto *e =
		reinterpret_cast<const strata_agg_entry *>(static_cast<const char *>(map) + sizeof *h);
	std::map<std::pair<uint64_t, std::string>, AggKey> merged;
	for (uint32_t i = 0; i < n; i++) {
		// Acquire: pairs with the writer's release store of LIVE.
		if (__atomic_load_n(&e[i].state, __ATOMIC_ACQUIRE) != STRATA_AGG_LIVE)
			continue;
		const uint64_t key = load(&e[i].key);
		std::string text = bounded(e[i].key_text, sizeof e[i].key_text);
		AggKey &k = merged[{key, text}];
		k.key = key;
		k.text = text;
		const uint64_t count = load(&e[i].count);
		k.count += count;
		if (version != 1)
			s.hits += count;
		k.sum = (int64_t)((uint64_t)k.sum + (uint64_t)load(&e[i].sum));
		k.min = std::min(k.min, load(&e[i].min));
		k.max = std::max(k.max, load(&e[i].max));
		for (unsigned b = 0; b < STRATA_AGG_BUCKETS; b++)
			k.hist[b] += load(&e[i].hist[b]);
	}
	for (auto &kv : merged)
		s.keys.push_back(std::move(kv.second));
	std::stable_sort(s.keys.begin(), s.keys.end(),
			 [](const AggKey &a, const AggKey &b) { return a.count > b.count; });
	*out = std::move(s);
	return true;
}

} // namespace strata
