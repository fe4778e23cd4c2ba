/*
 * json_line_test.cpp - the per-event path's JSON (libtrace/json/json_line.h)
 * against the JsonWriter: each text writer writes, byte for byte, what the
 * writer writes of the same value (the oracle is the writer's text, and
 * std::to_chars and snprintf where the writer states them), and a line put
 * together from JsonPieces' cuts and those values is the document a
 * JsonWriter writes whole.
 */
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <utility>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "json_line.h"
#include "json_writer.h"

using namespace strata;

namespace {

std::string writer_u64(uint64_t v)
{
	std::string s;
	JsonWriter(s).u64(v);
	return s;
}
std::string writer_i64(int64_t v)
{
	std::string s;
	JsonWriter(s).i64(v);
	return s;
}
std::string writer_fixed3(int64_t v)
{
	std::string s;
	JsonWriter(s).fixed(v, 3);
	return s;
}
std::string text_u64(uint64_t v)
{
	char b[32];
	return std::string(b, json_u64_text(b, v));
}
std::string text_i64(int64_t v)
{
	char b[32];
	return std::string(b, json_i64_text(b, v));
}
std::string to_chars_u64(uint64_t v)
{
	char b[32];
	return std::string(b, std::to_chars(b, b + sizeof b, v).ptr);
}

// Values at every digit count's edges, and random ones of every bit length.
std::vector<uint64_t> edge_values()
{
	std::vector<uint64_t> v = {0, 1, 9, 10, 99, 100, UINT32_MAX, uint64_t{UINT32_MAX} + 1, UINT64_MAX};
	for (uint64_t p = 10; p <= UINT64_MAX / 10; p *= 10)
		for (uint64_t d : {p - 1, p, p + 1})
			v.push_back(d);
	std::mt19937_64 rng(7);
	for (int bits = 1; bits <= 64; bits++)
		for (int k = 0; k < 200; k++)
			v.push_back(rng() >> (64 - bits));
	return v;
}

TEST(JsonLine, IntegersAreTheWritersAndToChars)
{
	for (uint64_t v : edge_values()) {
		ASSERT_EQ(text_u64(v), to_chars_u64(v)) << v;
		ASSERT_EQ(text_u64(v), writer_u64(v)) << v;
		const int64_t s = static_cast<int64_t>(v);
		ASSERT_EQ(text_i64(s), writer_i64(s)) << s;
	}
	ASSERT_EQ(text_i64(INT64_MIN), "-9223372036854775808");
	// Every value below 10^6, and a stride through 10^8 (the 8-digit path).
	for (uint64_t v = 0; v < 1000000; v++)
		ASSERT_EQ(text_u64(v), to_chars_u64(v)) << v;
	for (uint64_t v = 1000000; v < 100000000; v += 997)
		ASSERT_EQ(text_u64(v), to_chars_u64(v)) << v;
}

TEST(JsonLine, FixedIsTheWritersWhateverTheCacheHolds)
{
	JsonFixed3Cache c;
	char b[64];
	std::vector<int64_t> vals;
	for (uint64_t v : edge_values()) {
		vals.push_back(static_cast<int64_t>(v));
		vals.push_back(-static_cast<int64_t>(v >> 1));
	}
	vals.push_back(INT64_MIN);
	vals.push_back(INT64_MAX);
	// A trace's times: increasing by small steps across millisecond and
	// second boundaries, with jumps back.
	int64_t t = 999'999'000;
	for (int k = 0; k < 200000; k++) {
		vals.push_back(t);
		t += k % 97 == 0 ? -1234567 : 13 + k % 1000;
	}
	for (int64_t v : vals)
		ASSERT_EQ(std::string(b, json_fixed3_text(b, v, c)), writer_fixed3(v)) << v;
}

TEST(JsonLine, LastSixFillsAMillisecondsLine)
{
	// A line made at a millisecond's first nanosecond, its time's last
	// 7 bytes rewritten, is the line made at the later time.
	const int64_t base = 123456789'000000; // whole milliseconds
	for (uint32_t r : {0u, 1u, 999u, 1000u, 123456u, 999999u}) {
		JsonFixed3Cache c;
		char made[64], want[64];
		char *e = json_fixed3_text(made, base, c);
		json_fixed3_last6(e - 7, r);
		char *w = json_fixed3_text(want, base + r, c);
		ASSERT_EQ(std::string(made, e), std::string(want, w)) << r;
	}
}

TEST(JsonLine, RealsAndPlainStringsAreTheWriters)
{
	const double inf = std::numeric_limits<double>::infinity();
	for (double d : {0.0, -0.0, 1.5, 1e300, -2.5e-300, 0.1, std::nan(""), inf, -inf}) {
		char b[64];
		std::string w;
		JsonWriter(w).f64(d);
		ASSERT_EQ(std::string(b, json_f64_text(b, d)), w) << d;
	}
	for (const char *s : {"", "a", "mutex_lock", "0123456789abcdefghij"}) {
		ASSERT_TRUE(json_plain(s));
		char b[64];
		std::string w;
		JsonWriter(w).str(s);
		ASSERT_EQ(std::string(b, json_plain_text(b, s)), w) << s;
	}
}

TEST(JsonLine, PiecesAndValuesMakeTheWritersDocument)
{
	// The whole document as a JsonWriter writes it...
	std::string whole;
	{
		JsonWriter w(whole, JsonWriter::Style::kCompact);
		w.begin_object().key("traceEvents").begin_array();
		for (int k = 0; k < 3; k++) {
			w.newline();
			w.begin_object().key("ph").str("B").key("name").str("a \"quoted\"\n name");
			w.key("ts").fixed(1000 * k + 7, 3).key("args").begin_object();
			w.key("n").i64(-k).key("s").str("plain").end_object().end_object();
		}
		w.end_array().end_object();
	}
	// ...and put together from its pieces, the values written apart.
	JsonPieces d;
	d.w().begin_object().key("traceEvents").begin_array();
	std::string got = d.rest();
	d.w().newline();
	const std::string first = d.cut();
	d.w().newline();
	const std::string next = d.cut();
	d.w().end_array().end_object();
	const std::string end = d.rest();
	EXPECT_EQ(first, "\n");
	EXPECT_EQ(next, ",\n");

	JsonPieces l;
	l.w().begin_object().key("ph").str("B").key("name").str("a \"quoted\"\n name").key("ts");
	const std::string head = l.cut();
	l.w().key("args").begin_object().key("n");
	const std::string n = l.cut();
	l.w().key("s");
	const std::string s = l.cut();
	l.w().end_object().end_object();
	const std::string close = l.rest();
	EXPECT_EQ(close, "}}");

	JsonFixed3Cache c;
	for (int k = 0; k < 3; k++) {
		char b[64];
		got += k ? next : first;
		got += head;
		got.append(b, json_fixed3_text(b, 1000 * k + 7, c));
		got += n;
		got.append(b, json_i64_text(b, -k));
		got += s;
		got.append(b, json_plain_text(b, "plain"));
		got += close;
	}
	got += end;
	EXPECT_EQ(got, whole);
}

} // namespace

namespace {

// JsonWriter::real() (SQL's REALs, `strata query --json`): the shortest
// text that reads back, always a real, infinities as 1e999; and kCompact's
// rows one a line with the closing bracket on its own (query's layout).
TEST(JsonWriterReal, ShortestAlwaysARealInfinitiesSpelled)
{
	const double inf = std::numeric_limits<double>::infinity();
	const std::pair<double, const char *> cases[] = {
		{1.0, "1.0"},      {-0.0, "-0.0"},         {0.1, "0.1"},
		{1e300, "1e+300"}, {2.5e-300, "2.5e-300"}, {123456789.0, "123456789.0"},
		{inf, "1e999"},    {-inf, "-1e999"},       {std::nan(""), "null"}};
	for (const auto &[v, want] : cases) {
		std::string s;
		JsonWriter(s).real(v);
		EXPECT_EQ(s, want) << v;
	}
}

TEST(JsonWriterReal, CompactRowsOneALine)
{
	std::string s;
	JsonWriter w(s, JsonWriter::Style::kCompact);
	w.begin_array();
	for (int k = 0; k < 2; k++)
		w.newline().begin_object().key("n").i64(k).end_object();
	w.newline().end_array();
	EXPECT_EQ(s, "[\n{\"n\":0},\n{\"n\":1}\n]");
	std::string e;
	JsonWriter(e, JsonWriter::Style::kCompact).begin_array().end_array();
	EXPECT_EQ(e, "[]");
}

} // namespace
