// cmd_check.cpp - `strata check [--clean-copy OUT] DIR`: read every packet of
// a Strata trace with Strata's own reader (processor/ctf/trace_reader.h)
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
#include "json_writer.h"
#include "options.h"
#include "strata_abi.h"
#include "trace_reader.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

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

// What the check found, in the order found.
struct Finding {
	// "skipped" (a span of a stream file), "cut" (a packet's records),
	// "missing" (packets the index names past the file's end: bytes,
	// packet = how many), "index" (the index itself), "unreadable" (a
	// sub-trace), "clocks", "metadata".
	const char *kind;
	std::string file;
	uint64_t offset = 0, bytes = 0, packet = 0;
	std::string why;
};

struct Report {
	std::vector<Finding> findings;
	uint64_t packets = 0, cut = 0;
};

// The trace under `dir`, opened by Strata's reader; 0 or the exit status.
int open_trace(const std::vector<std::string> &roots, TraceReader &r)
{
	struct stat st;
	for (const std::string &root : roots)
		if (stat(root.c_str(), &st) != 0) {
			std::fprintf(stderr, "strata check: no such trace '%s': %s\n", root.c_str(),
				     std::strerror(errno));
			return cli::kFail;
		}
	std::vector<std::string> dirs;
	std::string why;
	r.walk_headers(true); // the index checked against every header, not trusted
	if (!find_trace_dirs(roots, &dirs, &why) ||
	    (!strata_wrote(dirs) && (why = "'" + roots_label(roots) +
					   "' holds traces Strata did not write (their metadata "
					   "names another tracer); babeltrace2 reads them",
				     true)) ||
	    !r.open_dirs(dirs, &why)) {
		std::fprintf(stderr, "strata check: %s\n", why.c_str());
		return cli::kFail;
	}
	return 0;
}

// The clean copy of every stream (CleanStream), fed packet by packet.
class CleanCopy {
public:
	CleanCopy(const std::string &dir, const std::string &out) : dir_(dir), out_(out) {}
	void open(const TraceReader &r);
	void packet(const StreamInfo &s, const PacketEntry &e, uint64_t good, const char *why,
		    const std::vector<uint8_t> &bytes);
	bool close();

private:
	bool follows_skip(const StreamInfo &s, uint64_t offset) const;
	std::string dir_, out_;
	std::map<const StreamInfo *, CleanStream> copies_;
	std::map<std::string, std::vector<std::pair<uint64_t, uint64_t>>>
		spans_;                            // file -> skipped (offset, bytes)
	std::map<std::string, uint64_t> seq_ends_; // file -> its index's last sequence number + 1
	bool failed_ = false;
};

void CleanCopy::open(const TraceReader &r)
{
	// Skipped spans, and packets missing from a stream's end (a marker
	// after its last packet kept says they are lost).
	for (const TraceDamage &d : r.damages()) {
		if (d.bytes || d.missing_bytes)
			spans_[d.file].emplace_back(d.offset, d.bytes ? d.bytes : d.missing_bytes);
		if (d.missing_seq_end)
			seq_ends_[d.file] = d.missing_seq_end;
	}
	for (const auto &t : r.traces()) {
		if (!t->readable)
			continue;
		const fs::path out = fs::path(out_) / fs::relative(t->dir, dir_);
		std::error_code ec;
		fs::create_directories(out, ec);
		std::ifstream in(t->dir + "/metadata", std::ios::binary);
		std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
		text.resize(std::min(text.size(), t->meta.text_used)); // a damaged text: what was read of it
		std::ofstream mo(out / "metadata", std::ios::binary);
		mo << text;
		failed_ |= ec || !mo;
		// A follower's clock map goes along (docs/clocks.md), where it
		// lies under DIR.
		if (t->meta.map) {
			const fs::path rel =
				fs::path(t->meta.map->file)
					.lexically_relative(fs::absolute(dir_).lexically_normal());
			if (!rel.empty() && *rel.begin() != "..") {
				fs::create_directories((fs::path(out_) / rel).parent_path(), ec);
				fs::copy_file(t->meta.map->file, fs::path(out_) / rel,
					      fs::copy_options::overwrite_existing, ec);
				failed_ |= static_cast<bool>(ec);
			}
		}
	}
	for (const auto &s : r.streams()) {
		if (!s->trace->readable || s->packets.empty())
			continue;
		CleanStream &cs = copies_[s.get()];
		cs.out = std::fopen((fs::path(out_) / fs::relative(s->path, dir_)).c_str(), "wb");
		failed_ |= !cs.out;
	}
}

bool CleanCopy::follows_skip(const StreamInfo &s, uint64_t offset) const
{
	auto it = spans_.find(s.path);
	if (it != spans_.end())
		for (const auto &sp : it->second)
			if (sp.first + sp.second == offset)
				return true;
	return false;
}

void CleanCopy::packet(const StreamInfo &s, const PacketEntry &e, uint64_t good, const char *why,
		       const std::vector<uint8_t> &bytes)
{
	auto it = copies_.find(&s);
	if (it == copies_.end() || !it->second.out)
		return;
	CleanStream &cs = it->second;
	const TraceMeta &m = s.trace->meta;
	strata_packet_header h;
	memcpy(&h, bytes.data(), sizeof h);
	// Packets lost before the first one kept: a marker before it whose
	// sequence number leaves the gap (a gap between two kept packets
	// shows by itself).
	if (!cs.any && e.seq >= 2 && follows_skip(s, e.offset)) {
		cs.last = h;
		failed_ |= !write_gap_marker(cs, m, 0, e.ts_begin);
	}
	if (why) { // cut after its last good record; the rest counted as one lost event
		cs.cut_events++;
		h.content_size = good == STRATA_PACKET_HEADER_SIZE ? header_only_content(m) : good * 8;
		h.packet_size =
			std::max<uint64_t>(((h.content_size + 63) / 64) * 64, STRATA_PACKET_HEADER_SIZE * 8);
		if (cs.any && h.timestamp_begin < cs.last.timestamp_end)
			h.timestamp_begin = h.timestamp_end = cs.last.timestamp_end;
	}
	h.events_discarded += cs.cut_events;
	const size_t body = (size_t)(h.content_size / 8 > STRATA_PACKET_HEADER_SIZE
					     ? h.content_size / 8 - STRATA_PACKET_HEADER_SIZE
					     : 0);
	failed_ |= !write_packet(cs, h, bytes.data() + STRATA_PACKET_HEADER_SIZE, body);
}

bool CleanCopy::close()
{
	for (auto &kv : copies_) {
		CleanStream &cs = kv.second;
		if (!cs.out)
			continue;
		const StreamInfo &s = *kv.first;
		// The stream's last bytes skipped: a marker after its last packet.
		bool tail = false;
		auto it = spans_.find(s.path);
		if (it != spans_.end())
			for (const auto &sp : it->second)
				tail |= sp.first >= s.packets.back().offset + s.packets.back().size;
		// Packets missing past the file's end (its index names them):
		// the marker's number leaves exactly their gap.
		uint64_t seq = cs.last.packet_seq_num + 2;
		auto m = seq_ends_.find(s.path);
		if (m != seq_ends_.end() && m->second > seq)
			seq = m->second;
		if (tail && cs.any)
			failed_ |= !write_gap_marker(cs, s.trace->meta, seq, cs.last.timestamp_end);
		failed_ |= std::fclose(cs.out) != 0;
	}
	return !failed_;
}

void print_text(const Report &rep, const TraceReader &r)
{
	for (const Finding &f : rep.findings) {
		if (!strcmp(f.kind, "skipped"))
			std::printf("damaged: %s at byte %" PRIu64 " (%" PRIu64 " bytes skipped): %s\n",
				    f.file.c_str(), f.offset, f.bytes, f.why.c_str());
		else if (!strcmp(f.kind, "cut"))
			std::printf("damaged: %s at byte %" PRIu64 ": packet %" PRIu64 " cut there (%" PRIu64
				    " bytes of records dropped): %s\n",
				    f.file.c_str(), f.offset, f.packet, f.bytes, f.why.c_str());
		else
			std::printf("%s: %s: %s\n", f.kind, f.file.c_str(), f.why.c_str());
	}
	const TraceReadStats &st = r.stats();
	std::printf("%zu sub-trace(s), %zu stream(s), %" PRIu64 " packet(s) read: ", r.traces().size(),
		    r.streams().size(), rep.packets);
	if (rep.findings.empty())
		std::printf("no damage\n");
	else
		std::printf(
			"%" PRIu64 " damaged span(s) (%" PRIu64 " bytes) skipped, %" PRIu64
			" packet(s) cut, %" PRIu64 " packet(s) missing (%" PRIu64 " bytes), %" PRIu64
			" unreadable sub-trace(s)\n",
			(uint64_t)std::count_if(rep.findings.begin(), rep.findings.end(),
						[](const Finding &f) { return !strcmp(f.kind, "skipped"); }),
			st.damaged_bytes, rep.cut, st.missing_packets, st.missing_bytes,
			st.unreadable_traces);
}

void print_json(const Report &rep, const TraceReader &r, const std::string &clean)
{
	std::string out;
	JsonWriter j(out);
	j.begin_object().key("damaged").boolean(!rep.findings.empty());
	j.key("sub_traces").u64(r.traces().size()).key("streams").u64(r.streams().size());
	j.key("packets").u64(rep.packets).key("packets_cut").u64(rep.cut);
	j.key("bytes_skipped").u64(r.stats().damaged_bytes);
	j.key("packets_missing").u64(r.stats().missing_packets);
	j.key("bytes_missing").u64(r.stats().missing_bytes);
	j.key("unreadable_sub_traces").u64(r.stats().unreadable_traces);
	j.key("findings").begin_array();
	for (const Finding &f : rep.findings) {
		j.newline(2).begin_object().key("kind").str(f.kind).key("file").str(f.file);
		if (strcmp(f.kind, "unreadable"))
			j.key("offset").u64(f.offset).key("bytes").u64(f.bytes);
		if (!strcmp(f.kind, "cut"))
			j.key("packet").u64(f.packet);
		if (!strcmp(f.kind, "missing"))
			j.key("packets").u64(f.packet);
		j.key("why").str(f.why).end_object();
	}
	j.end_array();
	if (!clean.empty())
		j.key("clean_copy").str(clean);
	j.end_object();
	std::printf("%s\n", out.c_str());
}

int run_check(const std::vector<std::string> &roots, const std::string &clean, bool json)
{
	TraceReader r;
	if (int rc = open_trace(roots, r))
		return rc;
	const std::string &dir = roots[0]; // the clean copy's base: one DIR only
	std::error_code ec;
	if (!clean.empty() && fs::exists(clean, ec) && !fs::is_empty(clean, ec)) {
		std::fprintf(stderr, "strata check: '%s' is not empty: give a new or empty directory\n",
			     clean.c_str());
		return cli::kUsage;
	}
	Report rep;
	for (const TraceDamage &d : r.damages()) {
		const bool clocks =
			d.file.size() >= 11 && d.file.compare(d.file.size() - 11, 11, "clocks.json") == 0;
		if (d.index || d.missing_packets || d.missing_bytes) {
			rep.findings.push_back({d.index ? "index" : "missing", d.file, d.offset,
						d.missing_bytes, d.missing_packets, d.why});
			continue;
		}
		rep.findings.push_back({d.bytes  ? "skipped"
					: clocks ? "clocks"
						 : "metadata",
					d.file, d.offset, d.bytes, 0, d.why});
	}
	for (const auto &t : r.traces())
		if (!t->readable)
			rep.findings.push_back({"unreadable", t->dir, 0, 0, 0, t->why});
	CleanCopy copy(dir, clean);
	if (!clean.empty())
		copy.open(r);
	r.check_packets([&](const StreamInfo &s, const PacketEntry &e, uint64_t good, const char *why,
			    const std::vector<uint8_t> &bytes) {
		rep.packets++;
		if (why) {
			rep.cut++;
			rep.findings.push_back(
				{"cut", s.path, e.offset + good, e.content - good, e.seq, why});
		}
		if (!clean.empty())
			copy.packet(s, e, good, why, bytes);
	});
	const bool copied = clean.empty() || copy.close();
	if (json)
		print_json(rep, r, copied ? clean : "");
	else
		print_text(rep, r);
	if (!copied) {
		std::fprintf(stderr, "strata check: cannot write the clean copy under '%s': %s\n",
			     clean.c_str(), std::strerror(errno));
		return cli::kFail;
	}
	if (!clean.empty() && !json)
		std::printf("clean copy: %s\n", clean.c_str());
	return rep.findings.empty() ? cli::kOk : cli::kFail;
}

} // namespace
} // namespace strata

int strata_cmd_check(int argc, char **argv)
{
	using namespace strata;
	std::string clean;
	bool json = false;
	static const cli::Command kCmd = {
		"check", "[--clean-copy OUT] [--json] DIR...",
		"Read every packet of the Strata trace(s) under DIR (every directory holding a 'metadata' "
		"file) "
		"and report damage: each skipped span of a stream file (file, offset, bytes, why), each "
		"packet cut "
		"at a bad record, each sub-trace whose metadata cannot be read, the packets a stream "
		"file lacks of those its packet index (index/<stream>.idx, written as the trace was "
		"recorded) names (an emptied, cut or removed file), and each packet index that is "
		"missing or bad.  Several DIRs (a host's and its guests' traces) are checked as one.  "
		"Prints no events.",
		"", "Exit status: 0 no damage, 1 damage found (or the trace cannot be read), 2 usage error."};
	const std::vector<cli::Option> opts = {
		cli::path("clean-copy", 0, "OUT", "a directory",
			  "also write a copy of the trace under OUT (a new or empty directory) holding every "
			  "undamaged packet, that babeltrace2 reads: each dropped packet shows as discarded "
			  "packets "
			  "in its place, each cut packet's lost records as discarded events",
			  clean),
		cli::flag("json", 0, "the report as one JSON object (damage, sub-traces, counts)", json),
	};
	std::vector<char *> operands;
	if (int r = cli::parse(kCmd, opts, argc, argv, operands); r != cli::kParsed)
		return r;
	if (operands.empty())
		return cli::usage_error(kCmd, "which trace? (strata check DIR)");
	if (operands.size() > 1 && !clean.empty())
		return cli::usage_error(kCmd, "--clean-copy copies one trace directory: one DIR");
	return run_check(std::vector<std::string>(operands.begin(), operands.end()), clean, json);
}
