/*
 * json_property.cpp - random bytes through the JSON writer and through each
 * JSON output a test can drive without a trace: `strata export --format
 * json`'s sink (processor/export/json_sink.cpp), `strata analyze mutex --format json`
 * (processor/analyze/analyze_report.cpp) and `strata top --json` (cli/top_json.cpp), and
 * the repair of text for SQL (utf8_append_repaired, utf8_well_formed).
 * The strings are random bytes: NULs, control characters, quotes,
 * backslashes, valid UTF-8 and every kind of invalid UTF-8 (stray
 * continuation bytes, truncated sequences, overlongs, surrogates, above
 * U+10FFFF, F5..FF).
 *
 * usage: json_property SEED CASES > records
 *
 * Writes one record per document, which check_json_property.py parses
 * with a strict parser and compares with what went in:
 *   CASE KIND N            KIND: writer, export, analyze, top or text
 *   N lines of tokens      writer: the document's scalars in order
 *                          ("s HEX" a string or key, "i N", "u N", "d HEX"
 *                          ("w HEX": whether HEX's bytes are well-formed UTF-8)
 *                          a double's bits, "x V D" V/10^D, "b 0|1", "n");
 *                          the others: "s HEX", the strings put in
 *   LEN                    then LEN bytes of the document, then "\n"
 */
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "analyze_report.h"
#include "export_sink.h"
#include "json_writer.h"
#include "top_json.h"

using namespace strata;

namespace {

std::mt19937_64 rng;

uint64_t below(uint64_t n)
{
	return n ? rng() % n : 0;
}

// Pieces that make the interesting cases likely.
const char *const kPieces[] = {
	"\x00",
	"\x01",
	"\x1f",
	"\x7f",
	"\"",
	"\\",
	"\n",
	"\t",
	"/",
	"\xc3\xa9",
	"\xe2\x82\xac",
	"\xf0\x9f\x98\x80",
	"\xe2\x80\xa8",
	"\xe2\x80\xa9",
	"\xef\xbf\xbd",
	"\xef\xbb\xbf",
	"\x80",
	"\xbf",
	"\xc0\x80",
	"\xc1\xbf",
	"\xc3",
	"\xe2\x82",
	"\xf0\x9f\x98",
	"\xe0\x80\x80",
	"\xe0\x9f\xbf",
	"\xed\xa0\x80",
	"\xed\xbf\xbf",
	"\xf0\x80\x80\x80",
	"\xf4\x90\x80\x80",
	"\xf5\x80\x80\x80",
	"\xf8\x88\x80\x80\x80",
	"\xfe",
	"\xff",
	"a",
	"Z",
	"0",
	" ",
};
const size_t kPieceLen[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 3, 4, 3, 3, 3, 3, 1, 1, 2,
			    2, 1, 2, 3, 3, 3, 3, 3, 4, 4, 4, 5, 1, 1, 1, 1, 1, 1};
static_assert(sizeof kPieces / sizeof kPieces[0] == sizeof kPieceLen / sizeof kPieceLen[0],
	      "one length a piece");

std::string random_bytes()
{
	std::string s;
	const uint64_t parts = below(12);
	for (uint64_t k = 0; k < parts; k++) {
		if (below(3) == 0) {
			s += static_cast<char>(below(256));
		} else {
			const size_t i = below(sizeof kPieceLen / sizeof kPieceLen[0]);
			s.append(kPieces[i], kPieceLen[i]);
		}
	}
	return s;
}

std::string hex(const std::string &s)
{
	std::string o = "-"; // never an empty token
	char b[4];
	for (unsigned char c : s) {
		std::snprintf(b, sizeof b, "%02x", c);
		o += b;
	}
	return o;
}

void record(const char *kind, const std::vector<std::string> &tokens, const std::string &doc)
{
	std::printf("CASE %s %zu\n", kind, tokens.size());
	for (const std::string &t : tokens)
		std::printf("%s\n", t.c_str());
	std::printf("%zu\n", doc.size());
	std::fwrite(doc.data(), 1, doc.size(), stdout);
	std::printf("\n");
}

// ---- the writer: a random document, its scalars noted in order --------------

struct Doc {
	JsonWriter w;
	std::vector<std::string> tokens;
	explicit Doc(std::string &out)
	    : w(out, below(2) ? JsonWriter::Style::kSpaced : JsonWriter::Style::kCompact)
	{
	}
};

void random_value(Doc &d, int depth);

void random_scalar(Doc &d)
{
	char b[64];
	switch (below(7)) {
	case 0: {
		const std::string s = random_bytes();
		d.w.str(s);
		d.tokens.push_back("s " + hex(s));
		return;
	}
	case 1: {
		const int64_t v = static_cast<int64_t>(rng()) >> below(64);
		d.w.i64(v);
		std::snprintf(b, sizeof b, "i %" PRId64, v);
		break;
	}
	case 2: {
		const uint64_t v = rng() >> below(64);
		d.w.u64(v);
		std::snprintf(b, sizeof b, "u %" PRIu64, v);
		break;
	}
	case 3: {
		double v;
		uint64_t bits = rng();
		std::memcpy(&v, &bits, sizeof v); // any double: NaNs, infinities, subnormals
		if (below(2))
			v = static_cast<double>(static_cast<int64_t>(rng() % 2000001) - 1000000) / 1000;
		std::memcpy(&bits, &v, sizeof v);
		d.w.f64(v);
		std::snprintf(b, sizeof b, std::isfinite(v) ? "d %016" PRIx64 : "n", bits);
		break;
	}
	case 4: {
		const int64_t v = static_cast<int64_t>(rng()) >> below(64);
		const unsigned dec = static_cast<unsigned>(below(10));
		d.w.fixed(v, dec);
		std::snprintf(b, sizeof b, "x %" PRId64 " %u", v, dec);
		break;
	}
	case 5: {
		const bool v = below(2);
		d.w.boolean(v);
		std::snprintf(b, sizeof b, "b %d", v ? 1 : 0);
		break;
	}
	default:
		d.w.null();
		std::snprintf(b, sizeof b, "n");
	}
	d.tokens.push_back(b);
}

void random_value(Doc &d, int depth)
{
	const uint64_t pick = depth > 4 ? 2 : below(3);
	if (below(4) == 0)
		d.w.newline(static_cast<unsigned>(below(4)));
	if (pick == 2) {
		random_scalar(d);
		return;
	}
	const uint64_t n = below(5);
	if (pick == 0) {
		d.w.begin_object();
		for (uint64_t k = 0; k < n; k++) {
			const std::string key = random_bytes();
			d.w.key(key);
			d.tokens.push_back("s " + hex(key));
			random_value(d, depth + 1);
		}
		d.w.end_object();
	} else {
		d.w.begin_array();
		for (uint64_t k = 0; k < n; k++)
			random_value(d, depth + 1);
		d.w.end_array();
	}
}

bool writer_case()
{
	std::string out;
	Doc d(out);
	random_value(d, 0);
	if (!d.w.complete()) {
		std::fprintf(stderr, "json_property: the writer says its document is incomplete\n");
		return false;
	}
	record("writer", d.tokens, out);
	return true;
}

// ---- export's Chrome JSON ---------------------------------------------------

// A random string, noted.
std::string put(std::vector<std::string> &tokens)
{
	std::string s = random_bytes();
	tokens.push_back("s " + hex(s));
	return s;
}

void export_case()
{
	std::vector<std::string> t;
	char *mem = nullptr;
	size_t len = 0;
	FILE *f = open_memstream(&mem, &len);
	std::unique_ptr<exp::Sink> sink = exp::make_json_sink(f, 1000);
	sink->process(1, 10, put(t));
	sink->thread(2, 1, 10, 11, put(t));
	sink->child_track(3, 0, 0, 0, "global", false); // its name is not written
	sink->child_track(4, 1, 10, 0, put(t), true);   // a counter
	exp::Args args(2);
	const std::string s0 = put(t); // args view their strings
	args[0].kind = exp::Arg::Str;
	args[0].name = "s";
	args[0].s = s0;
	args[1].kind = exp::Arg::Real;
	args[1].name = "d";
	args[1].d = below(2) ? NAN : INFINITY;
	sink->begin(1500, 2, put(t), args, 0);
	sink->end(1600, 2, args, 7);
	sink->complete(1700, 1800, 2, put(t), args, 7, 0);
	sink->instant(1900, 3, put(t), args);
	sink->counter(2000, 4, -5);
	sink->sched_switch(2100, 0, 1, "prev", 0, 120, 0, put(t), 11, 120); // prev_comm: not written
	sink->wakeup(2200, 0, 1, 1, put(t), 11, 120, 0);
	// A second machine: its name, its kernel's instants, its CPU.
	sink->machine(1, 5, put(t));
	sink->child_track(6, 5, exp::machine_pid(1), 0, "kernel", false);
	sink->instant(2250, 6, put(t), args);
	sink->sched_switch(2300, 1, 2, "prev", 0, 120, 0, put(t), exp::machine_id(1, 11), 120);
	sink->finish();
	std::fclose(f);
	record("export", t, std::string(mem, len));
	std::free(mem);
}

// ---- analyze mutex's JSON ---------------------------------------------------

void analyze_case()
{
	std::vector<std::string> t;
	analyze::Report r;
	r.procs.resize(2);
	for (analyze::Process &p : r.procs)
		p.name = put(t);
	r.locks.resize(1 + below(2));
	for (analyze::LockStats &l : r.locks) {
		l.kind = put(t);
		l.name.function = put(t);
		l.wait_mean = 12.5;
		l.acquisitions = 3;
		l.contended = 1;
		l.sites.resize(1);
		l.sites[0].sym.function = put(t);
		l.sites[0].sym.location = put(t);
		l.sites[0].stack = {1, 2};
		l.sites[0].stack_syms.resize(1);
		l.sites[0].stack_syms[0].function = put(t);
		l.blockers.resize(1);
		l.blockers[0].sym.location = put(t);
	}
	r.missing_debug.resize(1);
	r.missing_debug[0].object = put(t);
	r.missing_debug[0].package = put(t);
	r.conds.resize(1);
	r.conds[0].name.function = put(t);
	r.counts_unfinished = {0, 1};
	std::ostringstream o;
	analyze::write_json(o, r, analyze::Options());
	record("analyze", t, o.str());
}

// ---- top --json -------------------------------------------------------------

void top_case()
{
	std::vector<std::string> t;
	std::vector<AggSnapshot> snaps(1 + below(2));
	for (AggSnapshot &s : snaps) {
		s.pattern = put(t);
		s.value_field = put(t);
		s.key_field = put(t);
		s.has_value = true;
		s.key_kind = STRATA_AGG_KEY_EVENT;
		s.keys.resize(1 + below(3));
		for (AggKey &k : s.keys) {
			k.text = "k" + random_bytes(); // "": the key's number is shown
			t.push_back("s " + hex(k.text));
			k.count = 1 + below(5);
			k.sum = static_cast<int64_t>(rng());
			k.min = INT64_MIN;
			k.max = INT64_MAX;
			k.hist[below(STRATA_AGG_BUCKETS)] = 1;
		}
	}
	cli::Seen seen;
	seen.pids = {1, 2};
	seen.exited = {2};
	seen.procs.resize(1);
	cli::TopJson tj;
	tj.single = below(2);
	tj.pid = 7;
	if (below(2)) { // a session's view: its name and its processes
		tj.session = "s" + random_bytes();
		t.push_back("s " + hex(tj.session));
		seen.procs[0].comm = put(t);
	}
	tj.keys = [](const AggSnapshot &s) {
		std::vector<const AggKey *> v;
		for (const AggKey &k : s.keys)
			v.push_back(&k);
		return v;
	};
	std::string out;
	cli::top_json(out, tj, snaps, seen);
	record("top", t, out);
}

// Text for SQL (`strata query`): the repaired bytes as a string, and
// whether the bytes were well-formed; the checker compares both with
// Python's decoding of the bytes.
void text_case()
{
	const std::string s = random_bytes();
	std::string repaired, out;
	utf8_append_repaired(repaired, s);
	JsonWriter w(out);
	w.begin_array().str(repaired).boolean(utf8_well_formed(s)).end_array();
	record("text", {"s " + hex(s), "w " + hex(s)}, out);
}

} // namespace

int main(int argc, char **argv)
{
	if (argc != 3) {
		std::fprintf(stderr, "usage: json_property SEED CASES\n");
		return 2;
	}
	rng.seed(std::strtoull(argv[1], nullptr, 10));
	const long cases = std::strtol(argv[2], nullptr, 10);
	for (long k = 0; k < cases; k++) {
		if (!writer_case())
			return 1;
		text_case();
		if (k % 4 == 0) {
			export_case();
			analyze_case();
			top_case();
		}
	}
	return std::fflush(stdout) == 0 ? 0 : 1;
}
