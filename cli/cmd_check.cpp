// cmd_check.cpp - `strata check [--clean-copy OUT] DIR`: read every packet of
// a Strata trace with Strata's own reader (libtrace/reader/trace_reader.h)
// and say what is damaged, without printing events; with --clean-copy, write
// a copy that babeltrace2 reads, each dropped packet marked in place by a
// gap in its stream's packet sequence numbers (babeltrace2 reports the
// discarded packets there) and each cut packet's lost records counted in
// events_discarded (docs/reading.md, "Damage").
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "commands.h"
#include "strata_abi.h"
#include "trace_reader.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

void check_usage(FILE *f)
{
	std::fputs("usage: strata check [--clean-copy OUT] DIR\n"
		   "\n"
		   "Read every packet of the Strata trace(s) under DIR (every directory holding a\n"
		   "'metadata' file) and report damage: each skipped span of a stream file (file,\n"
		   "offset, bytes, why), each packet cut at a bad record, each sub-trace whose\n"
		   "metadata cannot be read.  Prints no events.\n"
		   "\n"
		   "options:\n"
		   "  --clean-copy OUT  also write a copy of the trace under OUT (a new or empty\n"
		   "                    directory) holding every undamaged packet, that\n"
		   "                    babeltrace2 reads: each dropped packet shows as discarded\n"
		   "                    packets in its place, each cut packet's lost records as\n"
		   "                    discarded events\n"
		   "  -h, --help        this help\n"
		   "\n"
		   "exit status: 0 no damage, 1 damage found (or the trace cannot be read), 2 usage error\n",
		   f);
}

// One stream's clean copy: the packets it keeps, their counts rewritten.
struct CleanStream {
	FILE *out = nullptr;
	uint64_t cut_events = 0; // lost to cut packets so far (cumulative, as the consumer counts)
	bool any = false;
	strata_packet_header last{};
	bool damaged_before = false; // a skipped span before the next packet kept
};

uint64_t header_only_content(const TraceMeta &m)
{
	return m.record_format == STRATA_REC_COMPACT ? STRATA_PACKET_HEADER_SIZE * 8
						     : offsetof(strata_packet_header, vtid) * 8;
}

bool write_packet(CleanStream &cs, const strata_packet_header &h, const uint8_t *body, size_t body_len)
{
	uint8_t hdr[STRATA_PACKET_HEADER_SIZE];
	memcpy(hdr, &h, sizeof h);
	const size_t pad = h.packet_size / 8 - STRATA_PACKET_HEADER_SIZE - body_len;
	static const uint8_t zeros[4096] = {};
	bool ok = fwrite(hdr, 1, sizeof hdr, cs.out) == sizeof hdr &&
		  (!body_len || fwrite(body, 1, body_len, cs.out) == body_len);
	for (size_t left = pad; ok && left;) {
		const size_t n = left < sizeof zeros ? left : sizeof zeros;
		ok = fwrite(zeros, 1, n, cs.out) == n;
		left -= n;
	}
	cs.last = h;
	cs.any = true;
	return ok;
}

// A packet without records whose sequence number leaves a gap: babeltrace2
// reports the packets in the gap as discarded, between its neighbours.
bool write_gap_marker(CleanStream &cs, const TraceMeta &m, uint64_t seq, uint64_t ts)
{
	strata_packet_header h = cs.last;
	h.packet_seq_num = seq;
	h.timestamp_begin = h.timestamp_end = ts;
	h.content_size = header_only_content(m);
	h.packet_size = STRATA_PACKET_HEADER_SIZE * 8;
	return write_packet(cs, h, nullptr, 0);
}

struct Totals {
	uint64_t packets = 0, cut = 0, dropped_bytes = 0;
};

int run_check(const std::string &dir, const std::string &clean)
{
	struct stat st;
	if (stat(dir.c_str(), &st) != 0) {
		std::fprintf(stderr, "strata check: no such trace '%s': %s\n", dir.c_str(),
			     std::strerror(errno));
		return cli::kFail;
	}
	std::vector<std::string> dirs;
	std::string why;
	if (!find_trace_dirs(dir, &dirs, &why)) {
		std::fprintf(stderr, "strata check: %s\n", why.c_str());
		return cli::kFail;
	}
	if (!strata_wrote(dirs)) {
		std::fprintf(
			stderr,
			"strata check: '%s' holds traces Strata did not write (their metadata names another "
			"tracer); babeltrace2 reads them\n",
			dir.c_str());
		return cli::kFail;
	}
	TraceReader r;
	if (!r.open_dirs(dirs, &why)) {
		std::fprintf(stderr, "strata check: %s\n", why.c_str());
		return cli::kFail;
	}
	if (!clean.empty()) {
		std::error_code ec;
		if (fs::exists(clean, ec) && !fs::is_empty(clean, ec)) {
			std::fprintf(stderr,
				     "strata check: '%s' is not empty: give a new or empty directory\n",
				     clean.c_str());
			return cli::kUsage;
		}
	}
	// Index damage: skipped spans, per file.
	std::map<std::string, uint64_t> skipped_at; // file -> bytes skipped before the next packet, in order
	for (const TraceDamage &d : r.damages())
		std::printf("damaged: %s at byte %" PRIu64 " (%" PRIu64 " bytes skipped): %s\n",
			    d.file.c_str(), d.offset, d.bytes, d.why.c_str());
	for (const auto &t : r.traces()) {
		if (t->readable)
			continue;
		std::printf("unreadable sub-trace: %s: %s\n", t->dir.c_str(), t->why.c_str());
	}
	Totals tot;
	std::map<const StreamInfo *, CleanStream> copies;
	bool write_failed = false;
	if (!clean.empty()) {
		for (const auto &t : r.traces()) {
			if (!t->readable)
				continue;
			const fs::path rel = fs::relative(t->dir, dir);
			const fs::path out = fs::path(clean) / rel;
			std::error_code ec;
			fs::create_directories(out, ec);
			std::ifstream in(t->dir + "/metadata", std::ios::binary);
			std::string text((std::istreambuf_iterator<char>(in)),
					 std::istreambuf_iterator<char>());
			text.resize(std::min(text.size(), t->meta.text_used));
			std::ofstream mo(out / "metadata", std::ios::binary);
			mo << text;
			if (ec || !mo)
				write_failed = true;
		}
		for (const auto &s : r.streams()) {
			if (!s->trace->readable || s->packets.empty())
				continue;
			const fs::path out = fs::path(clean) / fs::relative(s->path, dir);
			CleanStream &cs = copies[s.get()];
			cs.out = std::fopen(out.c_str(), "wb");
			if (!cs.out)
				write_failed = true;
		}
	}
	// Which packets follow a skipped span (their stream's index has a hole).
	std::map<std::string, std::vector<std::pair<uint64_t, uint64_t>>> spans; // file -> (offset, bytes)
	for (const TraceDamage &d : r.damages())
		if (d.bytes)
			spans[d.file].emplace_back(d.offset, d.bytes);
	r.check_packets([&](const StreamInfo &s, const PacketEntry &e, uint64_t good, const char *pwhy,
			    const std::vector<uint8_t> &bytes) {
		tot.packets++;
		if (pwhy) {
			tot.cut++;
			std::printf("damaged: %s at byte %" PRIu64 ": packet %" PRIu64
				    " cut at its byte %" PRIu64 " (%" PRIu64
				    " bytes of records dropped): %s\n",
				    s.path.c_str(), e.offset + good, e.seq, good, e.content - good, pwhy);
		}
		auto it = copies.find(&s);
		if (it == copies.end() || !it->second.out)
			return;
		CleanStream &cs = it->second;
		const TraceMeta &m = s.trace->meta;
		// A skipped span right before this packet: were packets lost?
		bool hole = false;
		for (const auto &sp : spans[s.path])
			if (sp.first + sp.second == e.offset)
				hole = true;
		if (hole && cs.any && e.seq == cs.last.packet_seq_num + 1) {
			// The sequence numbers show no gap: only garbage
			// between two whole packets was skipped.
		} else if (hole && !cs.any && e.seq >= 2) {
			strata_packet_header first;
			memcpy(&first, bytes.data(), sizeof first);
			cs.last = first;
			write_failed |= !write_gap_marker(cs, m, 0, e.ts_begin);
		}
		strata_packet_header h;
		memcpy(&h, bytes.data(), sizeof h);
		if (pwhy) {
			cs.cut_events++;
			h.content_size =
				good == STRATA_PACKET_HEADER_SIZE ? header_only_content(m) : good * 8;
			h.packet_size = std::max<uint64_t>(((h.content_size + 63) / 64) * 64,
							   STRATA_PACKET_HEADER_SIZE * 8);
			if (h.timestamp_begin < cs.last.timestamp_end && cs.any)
				h.timestamp_begin = h.timestamp_end = cs.last.timestamp_end;
		}
		h.events_discarded += cs.cut_events;
		const size_t body = (size_t)(h.content_size / 8 > STRATA_PACKET_HEADER_SIZE
						     ? h.content_size / 8 - STRATA_PACKET_HEADER_SIZE
						     : 0);
		write_failed |= !write_packet(cs, h, bytes.data() + STRATA_PACKET_HEADER_SIZE, body);
	});
	// A stream whose last bytes were skipped: a marker after its last packet.
	for (auto &kv : copies) {
		CleanStream &cs = kv.second;
		if (!cs.out)
			continue;
		const StreamInfo &s = *kv.first;
		bool tail = false;
		for (const auto &sp : spans[s.path])
			if (!s.packets.empty() && sp.first >= s.packets.back().offset + s.packets.back().size)
				tail = true;
		if (tail && cs.any)
			write_failed |= !write_gap_marker(cs, s.trace->meta, cs.last.packet_seq_num + 2,
							  cs.last.timestamp_end);
		write_failed |= std::fclose(cs.out) != 0;
	}
	const TraceReadStats &stats = r.stats();
	const bool damaged = stats.damaged || tot.cut || stats.unreadable_traces;
	std::printf("%zu sub-trace(s), %zu stream(s), %" PRIu64 " packet(s) read: ", r.traces().size(),
		    r.streams().size(), tot.packets);
	if (!damaged)
		std::printf("no damage\n");
	else
		std::printf("%" PRIu64 " damaged span(s) (%" PRIu64 " bytes) skipped, %" PRIu64
			    " packet(s) cut, %" PRIu64 " unreadable sub-trace(s)\n",
			    stats.damaged -
				    (uint64_t)std::count_if(r.damages().begin(), r.damages().end(),
							    [](const TraceDamage &d) { return !d.bytes; }),
			    stats.damaged_bytes, tot.cut, stats.unreadable_traces);
	if (!clean.empty()) {
		if (write_failed) {
			std::fprintf(stderr, "strata check: cannot write the clean copy under '%s': %s\n",
				     clean.c_str(), std::strerror(errno));
			return cli::kFail;
		}
		std::printf("clean copy: %s\n", clean.c_str());
	}
	return damaged ? cli::kFail : cli::kOk;
}

} // namespace
} // namespace strata

int strata_cmd_check(int argc, char **argv)
{
	using namespace strata;
	std::string dir, clean;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (cli::is_help(a)) {
			check_usage(stdout);
			return cli::kOk;
		} else if (!std::strcmp(a, "--clean-copy")) {
			if (i + 1 >= argc)
				return cli::usage_error("check", "--clean-copy needs a directory");
			clean = argv[++i];
		} else if (!std::strncmp(a, "--clean-copy=", 13)) {
			clean = a + 13;
		} else if (a[0] == '-' && a[1]) {
			return cli::usage_error("check", std::string("unknown option '") + a + "'");
		} else if (dir.empty()) {
			dir = a;
		} else {
			return cli::usage_error("check", "one trace directory only");
		}
	}
	if (dir.empty())
		return cli::usage_error("check", "which trace? (strata check DIR)");
	return run_check(dir, clean);
}
