/*
 * reader_fuzz.cpp - the consumer's reader against arbitrary buffers (issue
 * 32): the input is a whole trace buffer (a memfd's bytes, as a producer
 * leaves them: tests/fuzz/corpus/ holds real ones, make_seeds.cpp), read
 * as the consumer daemon reads it: attach, descriptors, every packet of
 * every lane (discard mode: as they complete, then the consumer's close of
 * a dead producer's open packets and the trailing-loss packet; overwrite
 * mode: the flight recorder's collection).
 *
 * Oracle: whatever the reader hands out is well-formed, checked here by an
 * independent decoder (tests/unit/rb_decode.h, COMPACT records): the
 * header's sizes, every record decodes to exactly content_size with a
 * described event, timestamps never go back and stay inside their packet,
 * and packets of a lane follow each other (sequence up, timestamps and
 * loss counts never back).  A violation aborts (libFuzzer keeps the input:
 * put it in tests/fuzz/crashers/, which the normal test replays).  And no
 * crash, no read outside the mapping (ASan), no endless loop.
 *
 * Built twice: with clang's libFuzzer (`reader_fuzz`, the bounded CI run)
 * and, with STRATA_FUZZ_MAIN, as a plain program that replays files and
 * directories (`reader_fuzz_replay`, every build, sanitizers included).
 */
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "rb_decode.h"
#include "reader.h"
#ifdef STRATA_FUZZ_MAIN
#include <sys/stat.h>

#include <fstream>

#include "metadata.h"
#endif

namespace {

[[noreturn]] void fail(const char *what, const std::string &detail)
{
	fprintf(stderr, "reader_fuzz: the reader handed out a malformed packet: %s %s\n", what,
		detail.c_str());
	abort();
}

size_t g_packets = 0, g_records = 0; // checked so far (the replay's report)

#ifdef STRATA_FUZZ_MAIN
// The replay's --ctf DIR: each input's packets as a CTF trace DIR/<n>/
// (the daemon's metadata, one stream file per lane), for babeltrace2.
const char *g_ctf_dir = nullptr;
int g_ctf_n = 0;

void write_ctf(const strata::BufferInfo &info, const std::vector<strata::EventInfo> &evs,
	       const std::vector<std::pair<uint32_t, std::vector<uint8_t>>> &got)
{
	if (!g_ctf_dir || got.empty())
		return;
	const std::string dir = std::string(g_ctf_dir) + "/" + std::to_string(g_ctf_n++);
	mkdir(dir.c_str(), 0755);
	strata::TraceEnv env;
	env.record_format = info.record_format;
	env.domain = info.record_format == STRATA_REC_COMPACT ? "ust" : "kernel";
	std::ofstream(dir + "/metadata")
		<< strata::ctf_metadata(info.uuid, strata::ClockInfo(), env, info.stream_id, evs);
	for (const auto &g : got)
		std::ofstream(dir + "/channel0_" + std::to_string(g.first), std::ios::app | std::ios::binary)
			.write((const char *)g.second.data(), (std::streamsize)g.second.size());
}
#endif

struct LaneOracle {
	bool any = false;
	uint64_t seq = 0, ts_end = 0, discarded = 0;
};

void check_packet(const strata::BufferInfo &info, const std::map<uint32_t, strata::EventInfo> &events,
		  uint32_t lane, const std::vector<uint8_t> &p, LaneOracle &lo)
{
	if (p.size() < sizeof(strata_packet_header))
		fail("shorter than its header", std::to_string(p.size()));
	strata_packet_header ph;
	memcpy(&ph, p.data(), sizeof ph);
	if (ph.magic != STRATA_CTF_MAGIC || memcmp(ph.uuid, info.uuid, 16) != 0 ||
	    ph.stream_id != info.lane_stream_id(lane) || ph.lane_id != lane)
		fail("header identity", "lane " + std::to_string(lane));
	if (ph.packet_size != p.size() * 8 || ph.content_size > ph.packet_size || ph.content_size % 8)
		fail("sizes", std::to_string(ph.content_size) + "/" + std::to_string(ph.packet_size) + "/" +
				      std::to_string(p.size()));
	if (ph.timestamp_end < ph.timestamp_begin)
		fail("timestamp_end before timestamp_begin", "");
	if (lo.any && (ph.packet_seq_num <= lo.seq || ph.timestamp_begin < lo.ts_end ||
		       ph.events_discarded < lo.discarded))
		fail("packets of a lane out of order", "seq " + std::to_string(ph.packet_seq_num));
	g_packets++;
	lo.any = true;
	lo.seq = ph.packet_seq_num;
	lo.ts_end = ph.timestamp_end;
	lo.discarded = ph.events_discarded;
	if (info.record_format != STRATA_REC_COMPACT)
		return; // the independent decoder knows the user-space layout only
	std::vector<rbtest::Record> recs;
	std::string err;
	if (!rbtest::decode_packet(p, events, &recs, &err, lane >= info.first_shared))
		fail("records", err);
	g_records += recs.size();
	uint64_t ts = ph.timestamp_begin;
	for (const rbtest::Record &r : recs) {
		if (r.ts < ts || r.ts > ph.timestamp_end)
			fail("record timestamp", std::to_string(r.ts));
		ts = r.ts;
	}
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < sizeof(strata_buffer_header) || size > (64u << 20))
		return 0;
	// The buffer's size is the file's: keep total_size consistent so that
	// mutations reach past the attach check.
	std::vector<uint8_t> buf(data, data + size);
	const uint64_t total = size;
	memcpy(buf.data() + offsetof(strata_buffer_header, total_size), &total, sizeof total);
	int fd = memfd_create("strata-fuzz", MFD_CLOEXEC);
	if (fd < 0 || write(fd, buf.data(), buf.size()) != (ssize_t)buf.size()) {
		perror("reader_fuzz: memfd");
		abort();
	}
	std::string err;
	std::unique_ptr<strata::Reader> r = strata::Reader::attach(fd, &err);
	close(fd);
	if (!r)
		return 0;
	const strata::BufferInfo info = r->info();
	std::vector<strata::EventInfo> evs;
	std::vector<std::string> errs;
	r->read_new_events(&evs, &errs);
	std::vector<std::pair<uint32_t, std::vector<uint8_t>>> got;
	std::vector<uint8_t> p;
	if (info.mode == STRATA_MODE_OVERWRITE) {
		std::vector<std::vector<uint8_t>> pkts;
		for (uint32_t l = 0; l < info.n_lanes; l++) {
			pkts.clear();
			r->collect_overwrite(l, 0, &pkts, &err);
			for (auto &q : pkts)
				got.emplace_back(l, std::move(q));
			if (r->trailing_loss_packet(l, &p))
				got.emplace_back(l, p);
		}
	} else {
		auto drain = [&](uint32_t l) {
			for (uint32_t k = 0; k < 2 * info.n_subbuf + 2; k++) { // at most a ring each
				strata::ReadStatus st = r->next_packet(l, &p, &err);
				if (st == strata::ReadStatus::kEmpty)
					break;
				if (st == strata::ReadStatus::kPacket)
					got.emplace_back(l, p);
			}
		};
		for (uint32_t l = 0; l < info.n_lanes; l++) {
			drain(l);
			r->flush(l, true, 0, &err); // the producer is gone: close what it left open
			drain(l);
			if (r->trailing_loss_packet(l, &p))
				got.emplace_back(l, p);
		}
	}
	// Descriptors the record checks read meanwhile count too.
	r->read_new_events(&evs, &errs);
	std::map<uint32_t, strata::EventInfo> events;
	for (auto &e : evs)
		events[e.id] = e;
	std::vector<LaneOracle> lanes(info.n_lanes);
	for (auto &g : got)
		check_packet(info, events, g.first, g.second, lanes[g.first]);
#ifdef STRATA_FUZZ_MAIN
	write_ctf(info, evs, got);
#endif
	return 0;
}

#ifdef STRATA_FUZZ_MAIN
#include <dirent.h>
#include <sys/stat.h>

#include <fstream>
#include <iterator>

// Replays files, and every file of directories, given as arguments;
// with --ctf DIR first, writes what the reader handed out as CTF traces.
int main(int argc, char **argv)
{
	int n = 0;
	if (argc > 2 && strcmp(argv[1], "--ctf") == 0) {
		g_ctf_dir = argv[2];
		mkdir(g_ctf_dir, 0755);
		argv += 2;
		argc -= 2;
	}
	auto run = [&n](const std::string &path) {
		std::ifstream f(path, std::ios::binary);
		std::vector<uint8_t> d((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
		LLVMFuzzerTestOneInput(d.data(), d.size());
		n++;
	};
	for (int i = 1; i < argc; i++) {
		struct stat st;
		if (stat(argv[i], &st) != 0) {
			perror(argv[i]);
			return 1;
		}
		if (!S_ISDIR(st.st_mode)) {
			run(argv[i]);
			continue;
		}
		DIR *d = opendir(argv[i]);
		while (struct dirent *e = d ? readdir(d) : nullptr)
			if (e->d_name[0] != '.')
				run(std::string(argv[i]) + "/" + e->d_name);
		if (d)
			closedir(d);
	}
	printf("reader_fuzz_replay: %d input(s), %zu packet(s) and %zu record(s) handed out, all "
	       "well-formed\n",
	       n, g_packets, g_records);
	return n && g_packets ? 0 : 1; // a corpus the reader refuses whole tests nothing
}
#endif
