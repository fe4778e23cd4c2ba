/*
 * top_json.cpp - see top_json.h.
 */
#include "top_json.h"

#include <cstdio>

#include "json_writer.h"

namespace strata {
namespace cli {

std::string agg_key_name(const AggSnapshot &s, const AggKey &k)
{
	if (!k.text.empty())
		return k.text;
	char b[32];
	if (s.key_kind == STRATA_AGG_KEY_NONE)
		return "(all)";
	if (s.key_kind == STRATA_AGG_KEY_TID)
		snprintf(b, sizeof b, "tid %llu", (unsigned long long)k.key);
	else
		snprintf(b, sizeof b, "0x%llx", (unsigned long long)k.key);
	return b;
}

namespace {

void u32_array(JsonWriter &w, const std::vector<uint32_t> &v)
{
	w.begin_array();
	for (uint32_t x : v)
		w.u64(x);
	w.end_array();
}

// {"key": K, "name": ..., "count": N[, "sum", "min", "max", "hist": {bucket: n}]}
void key_json(JsonWriter &w, const AggSnapshot &s, const AggKey &k)
{
	w.newline(2).begin_object();
	w.key("key").u64(k.key).key("name").str(agg_key_name(s, k)).key("count").u64(k.count);
	if (s.has_value && k.count) {
		w.key("sum").i64(k.sum).key("min").i64(k.min).key("max").i64(k.max);
		w.key("hist").begin_object();
		for (unsigned b = 0; b < STRATA_AGG_BUCKETS; b++)
			if (k.hist[b])
				w.key(std::to_string(b)).u64(k.hist[b]);
		w.end_object();
	}
	w.end_object();
}

void region_json(JsonWriter &w, const TopJson &t, const AggSnapshot &s)
{
	w.newline(1).begin_object();
	w.key("pattern").str(s.pattern).key("value").str(s.value_field).key("key").str(s.key_field);
	w.key("hits").u64(s.hits).key("overflow").u64(s.overflow).key("no_value").u64(s.no_value);
	w.key("keys").begin_array();
	for (const AggKey *k : t.keys(s))
		key_json(w, s, *k);
	w.end_array();
	w.end_object();
}

} // namespace

void top_json(std::string &out, const TopJson &t, const std::vector<AggSnapshot> &snaps, const Seen &seen)
{
	JsonWriter w(out);
	w.begin_object();
	if (t.single) {
		w.key("pid").u64(t.pid).key("alive").boolean(seen.exited.empty());
	} else {
		w.key("pids");
		u32_array(w, seen.pids);
		w.key("exited");
		u32_array(w, seen.exited);
	}
	w.key("regions").begin_array();
	for (const AggSnapshot &s : snaps)
		region_json(w, t, s);
	w.end_array();
	if (!t.session.empty()) {
		w.key("session").str(t.session).key("processes").begin_array();
		for (const ProcHits &p : seen.procs) {
			w.newline(1).begin_object();
			w.key("pid").u64(p.pid).key("comm").str(p.comm).key("hits").u64(p.hits);
			w.key("alive").boolean(p.alive).end_object();
		}
		w.end_array();
	}
	w.end_object();
	out += '\n';
}

} // namespace cli
} // namespace strata
