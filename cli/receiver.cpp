// receiver.cpp - the Receiver of receiver.h: frames in, the trace's
// files written.
#include "receiver.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>

#include "trace_split.h"

namespace strata {
namespace receive {
namespace {

uint32_t get32(const uint8_t *p)
{
	return p[0] | p[1] << 8 | p[2] << 16 | static_cast<uint32_t>(p[3]) << 24;
}
uint16_t get16(const uint8_t *p)
{
	return static_cast<uint16_t>(p[0] | p[1] << 8);
}

// One write of a whole packet or metadata block: regular files take it
// whole or fail (a full disk); a short write is cut off again (a stream
// file never ends inside a packet) and is an error.
bool write_all(int fd, const void *p, size_t n)
{
	const ssize_t w = write(fd, p, n);
	if (w < 0 || static_cast<size_t>(w) == n)
		return w >= 0;
	const off_t end = lseek(fd, 0, SEEK_END);
	if (end >= w && ftruncate(fd, end - w) != 0)
		fprintf(stderr, "strata receive: cannot cut a torn write: %s\n", strerror(errno));
	errno = ENOSPC;
	return false;
}

// A relative path of [A-Za-z0-9._-] components, none "." or "..".
bool safe_path(const std::string &p)
{
	if (p.empty() || p.size() > 1024 || p[0] == '/')
		return false;
	size_t start = 0;
	for (size_t i = 0; i <= p.size(); i++) {
		if (i == p.size() || p[i] == '/') {
			const std::string c = p.substr(start, i - start);
			if (c.empty() || c == "." || c == "..")
				return false;
			start = i + 1;
			continue;
		}
		const char ch = p[i];
		if (!(isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '_' || ch == '-'))
			return false;
	}
	return true;
}

uint64_t get64(const uint8_t *p)
{
	return get32(p) | static_cast<uint64_t>(get32(p + 4)) << 32;
}

} // namespace

int mkdirs(const std::string &path)
{
	for (size_t i = 1; i <= path.size(); i++)
		if (i == path.size() || path[i] == '/') {
			const std::string p = path.substr(0, i);
			if (mkdir(p.c_str(), 0750) != 0 && errno != EEXIST)
				return -errno;
		}
	return 0;
}

void Receiver::frame(const serial::Frame &f)
{
	seq_.see(f.trace, f.stream, f.seq);
	frames_[{f.trace, f.stream}]++;
	if (f.type == serial::kAnnounce && f.stream == serial::kMetaStream)
		announce(f.trace, f);
	else if (f.type == serial::kMetadata && f.stream == serial::kMetaStream)
		metadata(traces_[f.trace], f);
	else if (f.type == serial::kPacket && f.stream != serial::kMetaStream)
		packet(traces_[f.trace], f);
	else if (f.type == serial::kEnd && f.stream == serial::kMetaStream)
		end(traces_[f.trace], f.trace, f);
	else if (f.type == serial::kFile && f.stream == serial::kMetaStream && f.trace == serial::kMetaStream)
		file(f);
	else if (f.type == serial::kRewrite && f.stream == serial::kMetaStream &&
		 f.trace != serial::kMetaStream)
		rewrite(traces_[f.trace], f);
	else if (f.type > serial::kFile)
		unknown_++; // a later sender's kind: nothing a trace needs
	else
		bad_meta_++;
}

// One chunk of a text in assembly: false for a chunk no honest sender
// sends.  A newer generation starts again; an older one, or one already
// written, is passed over.
bool Receiver::chunk(Assembly &a, uint32_t off, uint32_t total, uint32_t base, uint32_t gen, const uint8_t *p,
		     size_t n)
{
	if (total == 0 || total > kMaxText || base > kMaxText || off % serial::kRewriteChunk ||
	    off >= total || n != std::min<size_t>(serial::kRewriteChunk, total - off))
		return false;
	if (gen <= a.applied || gen < a.gen)
		return true;
	if (gen != a.gen || total != a.total || base != a.base) {
		if (assembling_ - a.text.size() + total > kMaxAssembling)
			return false;
		assembling_ = assembling_ - a.text.size() + total;
		a.gen = gen;
		a.total = total;
		a.base = base;
		a.text.assign(total, '\0');
		a.missing = (total + serial::kRewriteChunk - 1) / serial::kRewriteChunk;
		a.have.assign(a.missing, false);
	}
	const size_t i = off / serial::kRewriteChunk;
	if (!a.have[i]) {
		memcpy(&a.text[off], p, n);
		a.have[i] = true;
		a.missing--;
	}
	return true;
}

// `text` as the file `path`, atomically: written beside the trace (a
// hidden name at DIR's top, where no reader looks) and renamed over.
// keep_fd: the new file's descriptor is left open there (O_APPEND).
bool Receiver::replace(const std::string &path, const std::string &text, int *keep_fd)
{
	const std::string tmp = out_ + "/.strata-receive.tmp";
	const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0640);
	if (fd < 0 || !write_all(fd, text.data(), text.size()) || rename(tmp.c_str(), path.c_str()) != 0) {
		fprintf(stderr, "strata receive: cannot write %s: %s\n", path.c_str(), strerror(errno));
		if (fd >= 0) {
			close(fd);
			unlink(tmp.c_str());
		}
		return false;
	}
	if (keep_fd)
		*keep_fd = fd;
	else
		close(fd);
	return true;
}

// kRewrite: the sub-trace's metadata onto the clock of its sender's
// reference (docs/clocks.md, "Serial followers"), once whole.
void Receiver::rewrite(SubTrace &t, const serial::Frame &f)
{
	const uint8_t *p = f.payload;
	if (f.len < serial::kRewritePrefix ||
	    !chunk(t.rw, get32(p), get32(p + 4), get32(p + 8), get32(p + 12), p + serial::kRewritePrefix,
		   f.len - serial::kRewritePrefix)) {
		bad_meta_++;
		return;
	}
	std::string text;
	if (!t.announced || !take(t.rw, &text))
		return;
	if (text.compare(0, 13, "/* CTF 1.8 */") != 0) {
		bad_meta_++;
		return;
	}
	if (int r = mkdirs(t.dir); r < 0) {
		fail("cannot create " + t.dir + ": " + strerror(-r));
		return;
	}
	int fd = -1;
	if (!replace(t.dir + "/metadata", text, &fd))
		return;
	if (t.meta_fd >= 0)
		close(t.meta_fd);
	t.meta_fd = fd;
	t.rewritten = true;
	t.rw_correlated = text.find("\tsync_state = \"correlated\";") != std::string::npos;
	// The rewrite stands for the text up to `base`; what the sender
	// appended after it follows as before.
	t.whole = std::max<size_t>(t.whole, t.rw.base);
	t.written = std::max<size_t>(t.written, t.rw.base);
	fprintf(stderr, "strata receive: %s: metadata rewritten by the sender at its stop (%s)\n",
		t.path.c_str(),
		t.rw_correlated ? "on its clock link's reference's clock"
				: "its own clock: no map, said uncorrelated");
	release(t);
}

// kFile: clocks.json for DIR's top.
void Receiver::file(const serial::Frame &f)
{
	const uint8_t *p = f.payload;
	if (f.len < serial::kFilePrefix || f.len < serial::kFilePrefix + p[12] || p[13] != 0) {
		bad_meta_++;
		return;
	}
	const std::string name(reinterpret_cast<const char *>(p + serial::kFilePrefix), p[12]);
	if (name != "clocks.json") { // the only one there is
		bad_meta_++;
		return;
	}
	const size_t pre = serial::kFilePrefix + name.size();
	Assembly &a = files_[name];
	if (!chunk(a, get32(p), get32(p + 4), 0, get32(p + 8), p + pre, f.len - pre)) {
		bad_meta_++;
		return;
	}
	std::string text;
	if (!take(a, &text))
		return;
	if (replace(out_ + "/" + name, text, nullptr))
		fprintf(stderr, "strata receive: %s written (the sender's clock links)\n", name.c_str());
}

void Receiver::end(SubTrace &t, uint16_t id, const serial::Frame &f)
{
	// uuid, u16 n, n lanes of kEndLane bytes
	if (f.len < 18 || f.len != 18 + serial::kEndLane * get16(f.payload + 16)) {
		bad_meta_++;
		return;
	}
	if (t.ended)
		return; // the second copy
	t.ended = true;
	memcpy(t.uuid, f.payload, 16);
	uint64_t sum = 0;
	for (size_t i = 0, n = get16(f.payload + 16); i < n; i++) {
		const uint8_t *e = f.payload + 18 + serial::kEndLane * i;
		const uint16_t lane = get16(e);
		if (lane == serial::kMetaStream || get64(e + 12) >= (1ull << 62) ||
		    get64(e + 20) >= (1ull << 62))
			continue; // (no honest sender counts so far: kept clear of overflows)
		LaneEnd &le = t.end[lane];
		le.stream_id = get32(e + 4);
		le.vtid = static_cast<int32_t>(get32(e + 8));
		le.packets = get64(e + 12);
		le.records = get64(e + 20);
		le.ts_end = get64(e + 28);
		le.discarded = get64(e + 36);
		sum += le.packets;
	}
	// Said as it comes: whoever follows the line learns that this
	// sub-trace is complete.
	fprintf(stderr, "strata receive: %s ended: %llu packet(s) offered by the sender\n",
		t.announced ? t.path.c_str() : ("#" + std::to_string(id)).c_str(), (unsigned long long)sum);
	trail(t);
}

void Receiver::announce(uint16_t id, const serial::Frame &f)
{
	// u64 nonce, u32 metadata length, u16 + path, u16 + channel, u32 empty
	const uint8_t *p = f.payload;
	if (f.len < 20) {
		bad_meta_++;
		return;
	}
	uint64_t nonce = get64(p);
	const uint32_t meta_len = get32(p + 8);
	const uint16_t np = get16(p + 12);
	if (f.len < 14u + np + 2u) {
		bad_meta_++;
		return;
	}
	std::string path(reinterpret_cast<const char *>(p + 14), np);
	const uint16_t nc = get16(p + 14 + np);
	if (f.len != 20u + np + nc) {
		bad_meta_++;
		return;
	}
	std::string channel(reinterpret_cast<const char *>(p + 16 + np), nc);
	const uint32_t empty_bits = get32(p + 16 + np + nc);
	if (!safe_path(path) || !safe_path(channel) || channel.find('/') != std::string::npos ||
	    empty_bits > kHdr * 8 || empty_bits < offsetof(strata_packet_header, lane_id) * 8 + 32) {
		bad_meta_++;
		return;
	}
	SubTrace &t = traces_[id];
	if (t.announced && (t.nonce != nonce || t.path != path)) {
		// Another sub-trace under the same number (the sender started
		// again): the old one is complete as it is.
		release(t);
		for (const Piece &h : t.held)
			held_bytes_ -= h.pkt.size();
		close_files(t);
		t = SubTrace();
		seq_.forget_trace(id);
		seq_.see(f.trace, f.stream, f.seq);
	}
	if (!t.announced) {
		t.announced = true;
		t.nonce = nonce;
		t.path = path;
		t.channel = channel;
		t.empty_bits = empty_bits;
		// Its directory: the path, or path.N if that is taken (by an
		// earlier sub-trace under the same name: a sender that started
		// again).  Made with the first metadata it can hold: a sub-trace
		// whose metadata never comes leaves nothing (an empty metadata
		// file would make the whole trace unreadable).
		std::string dir = out_ + "/" + path;
		struct stat st;
		int &n = suffix_[path]; // the next N: no search from 1 each time
		if (n > 0)
			dir = out_ + "/" + path + "." + std::to_string(n);
		while (stat(dir.c_str(), &st) == 0)
			dir = out_ + "/" + path + "." + std::to_string(++n);
		n++;
		t.dir = dir;
	}
	if (meta_len <= t.text.size())
		t.whole = std::max<size_t>(t.whole, meta_len);
	else if (meta_len <= kMaxText)
		t.boundaries.insert(meta_len);
	flush_metadata(t);
}

void Receiver::metadata(SubTrace &t, const serial::Frame &f)
{
	if (f.len < 8) {
		bad_meta_++;
		return;
	}
	const uint32_t off = get32(f.payload), whole = get32(f.payload + 4);
	const size_t n = f.len - 8;
	if (static_cast<uint64_t>(off) + n > whole || whole > kMaxText) {
		bad_meta_++;
		return;
	}
	if (off <= t.text.size() && off + n > t.text.size())
		t.text.append(reinterpret_cast<const char *>(f.payload + 8) + (t.text.size() - off),
			      off + n - t.text.size());
	if (whole > t.text.size())
		t.boundaries.insert(whole); // each length once: resends repeat them
	else
		t.whole = std::max<size_t>(t.whole, whole);
	flush_metadata(t);
}

void Receiver::flush_metadata(SubTrace &t)
{
	while (!t.boundaries.empty() && *t.boundaries.begin() <= t.text.size()) {
		t.whole = std::max(t.whole, *t.boundaries.begin());
		t.boundaries.erase(t.boundaries.begin());
	}
	if (!t.announced || t.written >= t.whole || failed())
		return;
	if (t.written == 0 && t.text.compare(0, 13, "/* CTF 1.8 */") != 0) {
		fail(t.path + ": the metadata does not start with /* CTF 1.8 */");
		return;
	}
	if (t.meta_fd < 0) {
		if (int r = mkdirs(t.dir); r < 0) {
			fail("cannot create " + t.dir + ": " + strerror(-r));
			return;
		}
		t.meta_fd = ::open((t.dir + "/metadata").c_str(),
				   O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0640);
		if (t.meta_fd < 0) {
			fail("cannot create " + t.dir + "/metadata: " + strerror(errno));
			return;
		}
	}
	if (!write_all(t.meta_fd, t.text.data() + t.written, t.whole - t.written)) {
		fail(t.dir + "/metadata: " + strerror(errno));
		return;
	}
	t.written = t.whole;
	release(t);
}

bool Receiver::append(SubTrace &t, uint16_t lane, LaneOut &L, const void *p, size_t n)
{
	if (L.fd < 0) {
		const std::string file = t.dir + "/" + t.channel + "_" + std::to_string(lane);
		L.fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
		if (L.fd < 0) {
			fail("cannot create " + file + ": " + strerror(errno));
			return false;
		}
	}
	if (!write_all(L.fd, p, n)) {
		fail(t.dir + ": " + strerror(errno));
		return false;
	}
	return true;
}

// An empty packet where packets are missing, stamped from the end of what
// precedes to the start of what follows.  Numbered seq (the sender's number
// of the packet after the missing ones) + the marks before it: a gap of
// gap_pkts after the lane's last packet (babeltrace2: discarded packets).
// Its events_discarded is `disc` + every missing event so far (discarded
// events).  A lane without a packet yet first gets one empty packet
// without loss, stamped at ts_begin: a CTF reader counts discarded events
// from a stream's second packet on.
void Receiver::mark(SubTrace &t, uint16_t lane, LaneOut &L, strata_packet_header h, uint64_t ts_begin,
		    uint64_t ts_end, uint64_t seq, uint64_t disc, uint64_t gap_pkts, uint64_t gap_events)
{
	h.content_size = t.empty_bits;
	h.packet_size = kHdr * 8;
	h.timestamp_begin = ts_begin;
	h.timestamp_end = std::max(ts_begin, ts_end);
	if (!L.have && L.marks == 0) {
		strata_packet_header z = h;
		z.timestamp_end = ts_begin;
		z.packet_seq_num = 0;
		z.events_discarded = 0;
		if (!append(t, lane, L, &z, kHdr))
			return;
		L.marks++;
	}
	h.packet_seq_num = seq + L.marks;
	h.events_discarded = disc + L.added + gap_events;
	if (!append(t, lane, L, &h, kHdr))
		return;
	L.marks++;
	L.added += gap_events;
	L.lost_pkts += gap_pkts;
	L.lost_events += gap_events;
	L.ts_end = h.timestamp_end;
}

// A packet whose metadata is in the file, in the lane's order.
void Receiver::store(SubTrace &t, Piece &p)
{
	LaneOut &L = t.lanes[p.lane];
	strata_packet_header h;
	memcpy(&h, p.pkt.data(), kHdr);
	const uint64_t s = h.packet_seq_num;
	// In order after what the lane has (the line keeps the sender's
	// order): anything else is not what an honest sender sends.
	if (L.trailed || (L.have && (s < L.next_seq || p.before < L.records)) ||
	    h.timestamp_begin < L.ts_end) {
		bad_packets_++;
		return;
	}
	const uint64_t gap_p = s - (L.have ? L.next_seq : 0);
	const uint64_t gap_e = p.before - (L.have ? L.records : 0);
	if (gap_p || gap_e)
		mark(t, p.lane, L, h, L.have ? L.ts_end : h.timestamp_begin, h.timestamp_begin, s,
		     L.have ? L.last_disc : 0, gap_p, gap_e);
	const uint64_t disc = h.events_discarded;
	h.packet_seq_num = s + L.marks;
	h.events_discarded = disc + L.added;
	memcpy(p.pkt.data(), &h, kHdr);
	if (!append(t, p.lane, L, p.pkt.data(), p.pkt.size()))
		return;
	L.have = true;
	L.next_seq = s + 1;
	L.records = p.before + p.records;
	L.last_disc = disc;
	L.ts_end = h.timestamp_end;
	L.tmpl = h;
	L.written++;
}

// After the END frame, once nothing of the sub-trace waits for metadata:
// each lane's packets after its last one here that never came, marked.
void Receiver::trail(SubTrace &t)
{
	if (t.trailed || !t.ended || !t.held.empty() || !t.announced || t.written == 0 || t.meta_fd < 0)
		return;
	t.trailed = true;
	for (auto &kv : t.end) {
		const LaneEnd &e = kv.second;
		LaneOut &L = t.lanes[kv.first];
		if (L.trailed)
			continue;
		L.trailed = true;
		const uint64_t seq = L.have ? L.next_seq : 0, rec = L.have ? L.records : 0;
		if (e.packets < seq || e.records < rec || (e.packets == seq && e.records == rec))
			continue;
		strata_packet_header h = L.tmpl;
		if (!L.have) {
			h = strata_packet_header{};
			h.magic = 0xC1FC1FC1u;
			memcpy(h.uuid, t.uuid, 16);
			h.stream_id = e.stream_id;
			h.stream_instance_id = kv.first;
			h.lane_id = kv.first;
			h.vtid = e.vtid;
		}
		const uint64_t from = L.have ? L.ts_end : e.ts_end;
		mark(t, kv.first, L, h, from, e.ts_end, e.packets, std::max(e.discarded, L.last_disc),
		     e.packets - seq, e.records - rec);
	}
}

// Packets whose metadata is now in the file, in their arrival order.
void Receiver::release(SubTrace &t)
{
	while (!t.held.empty() && t.announced && t.held.front().need <= t.written) {
		Piece &p = t.held.front();
		held_bytes_ -= p.pkt.size();
		t.lanes[p.lane].held--;
		store(t, p);
		t.held.pop_front();
	}
	trail(t);
}

void Receiver::packet(SubTrace &t, const serial::Frame &f)
{
	// u32 need, u64 records before, u32 records, the CTF packet
	constexpr size_t kPre = serial::kPacketPrefix;
	strata_packet_header h;
	if (f.len < kPre + kHdr) {
		bad_packets_++;
		return;
	}
	memcpy(&h, f.payload + kPre, kHdr);
	const size_t n = f.len - kPre;
	if (h.magic != 0xC1FC1FC1u || h.packet_size != n * 8 || h.content_size > h.packet_size ||
	    h.content_size < offsetof(strata_packet_header, vtid) * 8 ||
	    h.timestamp_begin > h.timestamp_end || h.packet_seq_num >= (1ull << 62) ||
	    get64(f.payload + 4) >= (1ull << 62)) {
		bad_packets_++;
		return;
	}
	Piece p;
	p.no = arrivals_++;
	p.lane = f.stream;
	p.need = get32(f.payload);
	p.before = get64(f.payload + 4);
	p.records = get32(f.payload + 12);
	p.pkt.assign(f.payload + kPre, f.payload + f.len);
	// In order behind what already waits.
	if (t.announced && p.need <= t.written && t.held.empty()) {
		store(t, p);
		return;
	}
	while (held_bytes_ + n > kMaxHeld && !held_order_.empty()) {
		// Drop the oldest held packet of any sub-trace: its lane's next
		// packet or END marks it missing.  (Entries of packets stored
		// meanwhile are passed over, each once.)
		const auto o = held_order_.front();
		held_order_.pop_front();
		auto it = traces_.find(o.second);
		if (it == traces_.end() || it->second.held.empty() || it->second.held.front().no != o.first)
			continue;
		held_bytes_ -= it->second.held.front().pkt.size();
		it->second.lanes[it->second.held.front().lane].held--;
		it->second.held.pop_front();
		dropped_held_++;
	}
	if (held_bytes_ + n > kMaxHeld) {
		dropped_held_++;
		return;
	}
	held_bytes_ += n;
	t.lanes[p.lane].held++;
	held_order_.emplace_back(p.no, f.trace);
	t.held.push_back(std::move(p));
}

void Receiver::finish()
{
	for (auto &kv : traces_) {
		dropped_held_ += kv.second.held.size();
		kv.second.held.clear();
		for (auto &l : kv.second.lanes)
			l.second.held = 0;
		trail(kv.second);
	}
	held_bytes_ = 0;
	held_order_.clear();
}

} // namespace receive
} // namespace strata
