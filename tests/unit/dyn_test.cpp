/*
 * Events declared at run time (include/strata/dynamic.h) against the real
 * reader: every field kind read back exactly, a declaration after the
 * slot opened (descriptors appended, the reader learns them), log levels
 * and field filters as for static events, release and revival, and every
 * refusal with its code; the packed entry (strata_dyn_emit_packed) against
 * the same values, with filters, and its refusals.
 */
#include <strata/dynamic.h>

#include <errno.h>

#include <cmath>
#include <functional>

#include "rb_test_util.h"

using namespace rbtest;

namespace {

const strata_dyn_field kAll[] = {
	{"count", STRATA_FIELD_INTEGER, 4, 0, 10, 0}, {"delta", STRATA_FIELD_INTEGER, 8, 1, 10, 0},
	{"flags", STRATA_FIELD_INTEGER, 2, 0, 16, 0}, {"ratio", STRATA_FIELD_FLOAT, 8, 1, 0, 0},
	{"small", STRATA_FIELD_FLOAT, 4, 1, 0, 0},    {"what", STRATA_FIELD_STRING, 0, 0, 0, 0},
	{"rgb", STRATA_FIELD_ARRAY, 1, 0, 10, 3},     {"ids", STRATA_FIELD_SEQUENCE, 4, 0, 10, 0},
	{"ok", STRATA_FIELD_INTEGER, 1, 0, 10, 0},
};
constexpr uint32_t kNAll = sizeof kAll / sizeof kAll[0];

void emit_all(strata_dyn_event *ev, uint32_t i, const char *what)
{
	const uint8_t rgb[3] = {1, 2, (uint8_t)i};
	const uint32_t ids[4] = {i, i + 1, i + 2, i + 3};
	union strata_dyn_value v[kNAll];
	v[0].u = i;
	v[1].i = -(int64_t)i * 1000;
	v[2].u = 0xbeef;
	v[3].f = i / 4.0;
	v[4].f = 0.5;
	v[5].s = what;
	v[6].seq.ptr = rgb;
	v[7].seq.ptr = ids;
	v[7].seq.len = i % 5;
	v[8].u = 1;
	strata_dyn_emit(ev, v, kNAll);
}

// The n records emit_all (or packed_all) wrote for i = 0..n-1, `what(i)`
// their string.
void expect_all(const std::vector<Record> &recs, const char *name, uint32_t n,
		const std::function<std::string(uint32_t)> &what)
{
	ASSERT_EQ(recs.size(), n);
	for (uint32_t i = 0; i < n; i++) {
		const Record &r = recs[i];
		ASSERT_EQ(r.name, name);
		ASSERT_EQ(r.fields.size(), kNAll);
		EXPECT_EQ(r.fields[0].u, i);
		EXPECT_EQ((int64_t)r.fields[1].u, -(int64_t)i * 1000);
		EXPECT_EQ(r.fields[2].u, 0xbeefu);
		EXPECT_EQ(r.fields[3].f, i / 4.0);
		EXPECT_EQ(r.fields[4].f, 0.5);
		EXPECT_EQ(r.fields[5].s, what(i));
		EXPECT_EQ(r.fields[6].elems, (std::vector<uint64_t>{1, 2, i & 0xff}));
		std::vector<uint64_t> ids;
		for (uint32_t k = 0; k < i % 5; k++)
			ids.push_back(i + k);
		EXPECT_EQ(r.fields[7].elems, ids);
		EXPECT_EQ(r.fields[8].u, 1u);
	}
}

} // namespace

TEST(Dynamic, EveryKindReadsBackExactly)
{
	Slot s(4, config(STRATA_MODE_DISCARD, 1, 4, 65536), {rule("dyn:*")});
	ASSERT_TRUE(s.reader);
	// Declared after the slot opened: the descriptor is appended to the
	// open slot's table and the event armed by the slot's rules.
	strata_dyn_event *ev = nullptr;
	ASSERT_EQ(0, strata_dyn_declare("dyn", "all", STRATA_LOGLEVEL_INFO, kAll, kNAll, &ev));
	ASSERT_NE(ev, nullptr);
	EXPECT_TRUE(strata_dyn_enabled(ev));
	constexpr uint32_t kN = 200;
	for (uint32_t i = 0; i < kN; i++)
		emit_all(ev, i, i % 2 ? "odd" : nullptr);
	expect_all(drain_records(s), "dyn:all", kN, [](uint32_t i) { return i % 2 ? "odd" : "(null)"; });
	strata_dyn_release(ev);
}

TEST(Dynamic, LogLevelsFiltersAndPatternsAsStaticEvents)
{
	const strata_dyn_field f[] = {{"n", STRATA_FIELD_INTEGER, 4, 0, 10, 0}};
	strata_dyn_event *info = nullptr, *debug = nullptr, *other = nullptr;
	ASSERT_EQ(0, strata_dyn_declare("dynlv", "info", STRATA_LOGLEVEL_INFO, f, 1, &info));
	ASSERT_EQ(0, strata_dyn_declare("dynlv", "debug", STRATA_LOGLEVEL_DEBUG, f, 1, &debug));
	ASSERT_EQ(0, strata_dyn_declare("dynother", "x", STRATA_LOGLEVEL_INFO, f, 1, &other));
	strata_rule r = rule("dynlv:*", true, STRATA_LOGLEVEL_INFO);
	strcpy(r.filter, "n >= 10");
	Slot s(5, config(STRATA_MODE_DISCARD, 1, 4, 65536), {r});
	ASSERT_TRUE(s.reader);
	EXPECT_TRUE(strata_dyn_enabled(info));
	EXPECT_FALSE(strata_dyn_enabled(debug)); // above the rule's log level
	EXPECT_FALSE(strata_dyn_enabled(other)); // not matched by the pattern
	for (uint32_t i = 0; i < 20; i++)
		for (strata_dyn_event *e : {info, debug, other}) {
			union strata_dyn_value v[1];
			v[0].u = i;
			strata_dyn_emit(e, v, 1);
		}
	std::vector<Record> recs = drain_records(s);
	ASSERT_EQ(recs.size(), 10u); // the filter kept n = 10..19 of dynlv:info
	for (size_t k = 0; k < recs.size(); k++) {
		EXPECT_EQ(recs[k].name, "dynlv:info");
		EXPECT_EQ(recs[k].fields[0].u, 10 + k);
	}
	for (strata_dyn_event *e : {info, debug, other})
		strata_dyn_release(e);
}

TEST(Dynamic, RedeclareReleaseAndRevive)
{
	const strata_dyn_field f[] = {{"n", STRATA_FIELD_INTEGER, 8, 0, 10, 0}};
	strata_dyn_event *a = nullptr, *b = nullptr;
	ASSERT_EQ(0, strata_dyn_declare("dynre", "ev", STRATA_LOGLEVEL_INFO, f, 1, &a));
	ASSERT_EQ(0, strata_dyn_declare("dynre", "ev", STRATA_LOGLEVEL_INFO, f, 1, &b));
	EXPECT_EQ(a, b); // same name and shape: the same handle, counted
	Slot s(6, config(STRATA_MODE_DISCARD, 1, 4, 65536), {rule("dynre:*")});
	ASSERT_TRUE(s.reader);
	union strata_dyn_value v[1];
	v[0].u = 1;
	strata_dyn_emit(a, v, 1);
	strata_dyn_release(a);
	EXPECT_TRUE(strata_dyn_enabled(b)); // one declaration left
	v[0].u = 2;
	strata_dyn_emit(b, v, 1);
	const uint32_t old_id = b->id;
	strata_dyn_release(b);
	EXPECT_FALSE(strata_dyn_enabled(b)); // released: off, handle still valid
	v[0].u = 3;
	strata_dyn_emit(b, v, 1); // records nothing
	strata_dyn_event *c = nullptr;
	ASSERT_EQ(0, strata_dyn_declare("dynre", "ev", STRATA_LOGLEVEL_INFO, f, 1, &c));
	EXPECT_EQ(c, a); // revived, under a new id
	EXPECT_NE(c->id, old_id);
	EXPECT_TRUE(strata_dyn_enabled(c));
	v[0].u = 4;
	strata_dyn_emit(c, v, 1);
	v[0].u = 5;
	strata_dyn_emit(c, v, 2); // wrong arity: nothing
	std::vector<Record> recs = drain_records(s);
	ASSERT_EQ(recs.size(), 3u);
	EXPECT_EQ(recs[0].fields[0].u, 1u);
	EXPECT_EQ(recs[1].fields[0].u, 2u);
	EXPECT_EQ(recs[2].fields[0].u, 4u);
	for (const Record &r : recs)
		EXPECT_EQ(r.name, "dynre:ev");
	strata_dyn_release(c);
}

namespace {

// emit_all's values as the packed payload strata_dyn_emit_packed takes.
std::vector<char> packed_all(uint32_t i, const char *what)
{
	std::vector<char> b;
	auto put = [&](const void *p, size_t n) { b.insert(b.end(), (const char *)p, (const char *)p + n); };
	const uint32_t count = i;
	const int64_t delta = -(int64_t)i * 1000;
	const uint16_t flags = 0xbeef;
	const double ratio = i / 4.0;
	const float small = 0.5f;
	const uint8_t rgb[3] = {1, 2, (uint8_t)i};
	const uint32_t n_ids = i % 5;
	const uint8_t ok = 1;
	put(&count, 4);
	put(&delta, 8);
	put(&flags, 2);
	put(&ratio, 8);
	put(&small, 4);
	const char *w = what ? what : "(null)";
	put(w, strlen(w) + 1);
	put(rgb, 3);
	put(&n_ids, 4);
	for (uint32_t k = 0; k < n_ids; k++) {
		const uint32_t id = i + k;
		put(&id, 4);
	}
	put(&ok, 1);
	return b;
}

} // namespace

// The packed entry (the Java API's): the same records as strata_dyn_emit
// from the same values, and a payload whose layout does not match the
// fields records nothing.
TEST(Dynamic, PackedPayloadRecordsTheSameAndBadLayoutsNothing)
{
	Slot s(7, config(STRATA_MODE_DISCARD, 1, 4, 65536), {rule("dynp:*")});
	ASSERT_TRUE(s.reader);
	strata_dyn_event *ev = nullptr;
	ASSERT_EQ(0, strata_dyn_declare("dynp", "all", STRATA_LOGLEVEL_INFO, kAll, kNAll, &ev));
	constexpr uint32_t kN = 100;
	// Payloads of 41 to 57 bytes and, with the long string, 76 to 92,
	// packed ones by one call (strata_write) whatever their size, the
	// others by reserve, copy and commit.
	static const char kLong[] = "a string that takes the payload past 64 b";
	auto what_of = [](uint32_t i) -> const char * {
		return i % 3 ? (i % 4 == 1 ? kLong : "packed") : nullptr;
	};
	for (uint32_t i = 0; i < kN; i++) {
		const char *what = what_of(i);
		if (i % 2) {
			std::vector<char> b = packed_all(i, what);
			strata_dyn_emit_packed(ev, b.data(), b.size());
		} else {
			emit_all(ev, i, what);
		}
	}
	// Refused, each recording nothing: a string without its NUL, a byte
	// short, a byte over, a sequence count past the limit, no payload.
	std::vector<char> good = packed_all(3, "x");
	std::vector<char> bad = good;
	const size_t str_at = 4 + 8 + 2 + 8 + 4;
	bad[str_at + 1] = 'y'; // "xy..." runs into the next field's bytes
	bad.resize(str_at + 2);
	strata_dyn_emit_packed(ev, bad.data(), bad.size());
	strata_dyn_emit_packed(ev, good.data(), good.size() - 1);
	bad = good;
	bad.push_back(0);
	strata_dyn_emit_packed(ev, bad.data(), bad.size());
	bad = good;
	const uint32_t huge = 0x1000000;
	memcpy(bad.data() + str_at + 2 + 3, &huge, 4);
	strata_dyn_emit_packed(ev, bad.data(), bad.size());
	strata_dyn_emit_packed(ev, nullptr, good.size());
	expect_all(drain_records(s), "dynp:all", kN,
		   [&](uint32_t i) { return what_of(i) ? what_of(i) : "(null)"; });
	strata_dyn_release(ev);
}

// A field filter on a packed payload: the integer after a string sits at
// odd offsets; the filter still reads its value.  Strings of 22 to 41
// bytes: both sides of the walk's 32-byte inline scan.
TEST(Dynamic, PackedPayloadPassesFilters)
{
	const strata_dyn_field f[] = {{"s", STRATA_FIELD_STRING, 0, 0, 0, 0},
				      {"n", STRATA_FIELD_INTEGER, 4, 0, 10, 0}};
	strata_dyn_event *ev = nullptr;
	ASSERT_EQ(0, strata_dyn_declare("dynpf", "x", STRATA_LOGLEVEL_INFO, f, 2, &ev));
	strata_rule r = rule("dynpf:*", true, STRATA_LOGLEVEL_INFO);
	strcpy(r.filter, "n >= 10");
	Slot s(8, config(STRATA_MODE_DISCARD, 1, 4, 65536), {r});
	ASSERT_TRUE(s.reader);
	for (uint32_t i = 0; i < 20; i++) {
		std::string str(i + 22, 'a'); // 22..41: around the 32-byte inline scan, n at odd offsets
		std::vector<char> b(str.begin(), str.end());
		b.push_back(0);
		b.insert(b.end(), (const char *)&i, (const char *)&i + 4);
		strata_dyn_emit_packed(ev, b.data(), b.size());
	}
	std::vector<Record> recs = drain_records(s);
	ASSERT_EQ(recs.size(), 10u);
	for (size_t k = 0; k < recs.size(); k++) {
		EXPECT_EQ(recs[k].fields[1].u, 10 + k);
		EXPECT_EQ(recs[k].fields[0].s, std::string(10 + k + 22, 'a'));
	}
	strata_dyn_release(ev);
}

TEST(Dynamic, BadDeclarationsAreRefusedWithAReason)
{
	strata_dyn_event *ev = reinterpret_cast<strata_dyn_event *>(1);
	auto one = [&](strata_dyn_field f) {
		return strata_dyn_declare("dynbad", "ev", STRATA_LOGLEVEL_INFO, &f, 1, &ev);
	};
	const strata_dyn_field ok = {"n", STRATA_FIELD_INTEGER, 4, 0, 10, 0};
	EXPECT_EQ(-EINVAL, strata_dyn_declare("1bad", "ev", 6, &ok, 1, &ev));
	EXPECT_EQ(ev, nullptr); // *out cleared on failure
	EXPECT_EQ(-EINVAL, strata_dyn_declare("dynbad", "has space", 6, &ok, 1, &ev));
	EXPECT_EQ(-EINVAL, strata_dyn_declare(nullptr, "ev", 6, &ok, 1, &ev));
	EXPECT_EQ(-EINVAL, strata_dyn_declare("dynbad", "ev", 8, &ok, 1, &ev)); // log level
	EXPECT_EQ(-EINVAL, strata_dyn_declare("dynbad", "ev", 6, nullptr, 1, &ev));
	EXPECT_EQ(-EINVAL, strata_dyn_declare("dynbad", "ev", 6, &ok, 1, nullptr));
	EXPECT_EQ(-EINVAL, one({"n", STRATA_FIELD_ENUM, 4, 0, 10, 0}));    // needs labels
	EXPECT_EQ(-EINVAL, one({"n", 99, 4, 0, 10, 0}));                   // unknown kind
	EXPECT_EQ(-EINVAL, one({"n", STRATA_FIELD_INTEGER, 3, 0, 10, 0})); // size
	EXPECT_EQ(-EINVAL, one({"n", STRATA_FIELD_INTEGER, 16, 0, 10, 0}));
	EXPECT_EQ(-EINVAL, one({"n", STRATA_FIELD_FLOAT, 2, 1, 0, 0}));
	EXPECT_EQ(-EINVAL, one({"n", STRATA_FIELD_INTEGER, 4, 0, 7, 0}));       // base
	EXPECT_EQ(-EINVAL, one({"n", STRATA_FIELD_ARRAY, 4, 0, 10, 0}));        // no length
	EXPECT_EQ(-EINVAL, one({"n", STRATA_FIELD_ARRAY, 4, 0, 10, 1u << 30})); // absurd
	EXPECT_EQ(-EINVAL, one({nullptr, STRATA_FIELD_INTEGER, 4, 0, 10, 0}));
	EXPECT_EQ(-EINVAL, one({"a-b", STRATA_FIELD_INTEGER, 4, 0, 10, 0}));
	std::vector<strata_dyn_field> many(STRATA_DESC_MAX_FIELDS + 1, ok);
	std::vector<std::string> names(many.size());
	for (size_t i = 0; i < many.size(); i++) {
		names[i] = "f" + std::to_string(i);
		many[i].name = names[i].c_str();
	}
	EXPECT_EQ(-E2BIG, strata_dyn_declare("dynbad", "ev", 6, many.data(), (uint32_t)many.size(), &ev));
	// Duplicate name, other shape.
	strata_dyn_event *good = nullptr;
	ASSERT_EQ(0, strata_dyn_declare("dynbad", "dup", 6, &ok, 1, &good));
	const strata_dyn_field other = {"n", STRATA_FIELD_INTEGER, 8, 0, 10, 0};
	EXPECT_EQ(-EEXIST, strata_dyn_declare("dynbad", "dup", 6, &other, 1, &ev));
	EXPECT_EQ(-EEXIST, strata_dyn_declare("dynbad", "dup", 5, &ok, 1, &ev));
	strata_dyn_release(good);
	for (int e : {0, -EINVAL, -E2BIG, -EEXIST, -ENOSPC, -ENOMEM, -EBUSY, -12345})
		EXPECT_GT(strlen(strata_dyn_strerror(e)), 5u);
}
