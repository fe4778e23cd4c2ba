/*
 * cmd_receive.cpp - `strata receive DEVICE|- -o DIR`: rebuild the CTF trace
 * a session sends over a byte line (`--serial`, docs/serial.md).
 *
 * Frames come from libtrace/proto/serial_frame.h's decoder: only frames
 * whose CRC checks are used, so no damaged byte reaches the trace.  Each
 * sub-trace the sender announces becomes DIR/<its path> (ust/pid/...,
 * kernel) with its metadata and one stream file per lane.  While frames
 * arrive the trace is always readable: the metadata file grows only up to
 * lengths at which the text is whole, and a packet is appended (one write)
 * only once the metadata it needs is in the file; packets that wait for
 * metadata are held in memory (bounded, kMaxHeld) and dropped, counted, if
 * it never comes.  Lost frames show in the trace as gaps in the packets'
 * packet_seq_num (babeltrace2 reports discarded packets) and are counted
 * per stream, from the frames' own sequence numbers, in the report on
 * stderr at the end (EOF, or SIGINT/SIGTERM for a tty).
 */
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "commands.h"
#include "proto/serial_frame.h"

using namespace strata;

namespace {

constexpr size_t kMaxHeld = 16u << 20; // packets waiting for their metadata, all sub-traces

volatile sig_atomic_t g_stop = 0;
void on_signal(int)
{
	g_stop = 1;
}

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

struct Held {
	uint16_t lane;
	uint32_t need;
	std::vector<uint8_t> pkt;
};

struct SubTrace {
	bool announced = false;
	uint64_t nonce = 0;
	std::string path, channel, dir;
	std::string text;   // contiguous TSDL received from offset 0
	size_t whole = 0;   // largest length <= text.size() at which the text is whole
	size_t written = 0; // bytes of it in DIR/path/metadata
	int meta_fd = -1;
	std::map<uint16_t, int> lane_fd;
	std::map<uint16_t, uint64_t> packets; // written, per lane
	std::vector<Held> held;
	std::vector<size_t> boundaries; // whole lengths announced beyond text.size()
	bool ended = false;             // its kEnd frame came
	std::vector<uint64_t> offered;  // from it: packets the sender's drain offered per lane
};

class Receiver {
public:
	explicit Receiver(const std::string &out) : out_(out) {}
	~Receiver()
	{
		for (auto &kv : traces_) {
			if (kv.second.meta_fd >= 0)
				close(kv.second.meta_fd);
			for (auto &l : kv.second.lane_fd)
				close(l.second);
		}
	}
	void frame(const serial::Frame &f);
	void finish(); // drops what still waits for metadata
	void report(FILE *o, const serial::DecodeStats &ds);
	bool failed() const { return !error_.empty(); }
	const std::string &error() const { return error_; }

private:
	void announce(uint16_t id, const serial::Frame &f);
	void metadata(SubTrace &t, const serial::Frame &f);
	void packet(SubTrace &t, uint16_t id, const serial::Frame &f);
	void flush_metadata(SubTrace &t);
	void release(SubTrace &t);
	bool store(SubTrace &t, uint16_t lane, const uint8_t *p, size_t n);
	void fail(const std::string &why)
	{
		if (error_.empty())
			error_ = why;
	}

	std::string out_;
	std::map<uint16_t, SubTrace> traces_;
	serial::SeqTracker seq_;
	size_t held_bytes_ = 0;
	uint64_t dropped_held_ = 0, bad_packets_ = 0, bad_meta_ = 0;
	std::map<std::pair<uint16_t, uint16_t>, uint64_t> frames_; // good frames per stream
	std::string error_;
};

void Receiver::frame(const serial::Frame &f)
{
	seq_.see(f.trace, f.stream, f.seq);
	frames_[{f.trace, f.stream}]++;
	if (f.type == serial::kAnnounce && f.stream == serial::kMetaStream)
		announce(f.trace, f);
	else if (f.type == serial::kMetadata && f.stream == serial::kMetaStream)
		metadata(traces_[f.trace], f);
	else if (f.type == serial::kPacket && f.stream != serial::kMetaStream)
		packet(traces_[f.trace], f.trace, f);
	else if (f.type == serial::kEnd && f.stream == serial::kMetaStream && f.len >= 2 &&
		 f.len == 2 + 8u * get16(f.payload)) {
		SubTrace &t = traces_[f.trace];
		t.ended = true;
		t.offered.assign(get16(f.payload), 0);
		uint64_t sum = 0;
		for (size_t i = 0; i < t.offered.size(); i++)
			sum += t.offered[i] = get32(f.payload + 2 + 8 * i) |
					      static_cast<uint64_t>(get32(f.payload + 6 + 8 * i)) << 32;
		// Said as it comes: whoever follows the line learns that this
		// sub-trace is complete.
		fprintf(stderr, "strata receive: %s ended: %llu packet(s) offered by the sender\n",
			t.announced ? t.path.c_str() : ("#" + std::to_string(f.trace)).c_str(),
			(unsigned long long)sum);
	} else
		bad_meta_++;
}

void Receiver::announce(uint16_t id, const serial::Frame &f)
{
	// u64 nonce, u32 metadata length, u16 + path, u16 + channel
	const uint8_t *p = f.payload;
	if (f.len < 16) {
		bad_meta_++;
		return;
	}
	uint64_t nonce = get32(p) | static_cast<uint64_t>(get32(p + 4)) << 32;
	const uint32_t meta_len = get32(p + 8);
	const uint16_t np = get16(p + 12);
	if (f.len < 14u + np + 2u) {
		bad_meta_++;
		return;
	}
	std::string path(reinterpret_cast<const char *>(p + 14), np);
	const uint16_t nc = get16(p + 14 + np);
	if (f.len != 16u + np + nc) {
		bad_meta_++;
		return;
	}
	std::string channel(reinterpret_cast<const char *>(p + 16 + np), nc);
	if (!safe_path(path) || !safe_path(channel) || channel.find('/') != std::string::npos) {
		bad_meta_++;
		return;
	}
	SubTrace &t = traces_[id];
	if (t.announced && (t.nonce != nonce || t.path != path)) {
		// Another sub-trace under the same number (the sender started
		// again): the old one is complete as it is.
		release(t);
		t.held.clear();
		if (t.meta_fd >= 0)
			close(t.meta_fd);
		for (auto &l : t.lane_fd)
			close(l.second);
		t = SubTrace();
		seq_.forget_trace(id);
		seq_.see(f.trace, f.stream, f.seq);
	}
	if (!t.announced) {
		t.announced = true;
		t.nonce = nonce;
		t.path = path;
		t.channel = channel;
		std::string dir = out_ + "/" + path;
		struct stat st;
		for (int n = 1; stat(dir.c_str(), &st) == 0; n++)
			dir = out_ + "/" + path + "." + std::to_string(n);
		t.dir = dir;
		if (int r = mkdirs(dir); r < 0) {
			fail("cannot create " + dir + ": " + strerror(-r));
			return;
		}
		t.meta_fd = ::open((dir + "/metadata").c_str(),
				   O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0640);
		if (t.meta_fd < 0) {
			fail("cannot create " + dir + "/metadata: " + strerror(errno));
			return;
		}
	}
	if (meta_len <= t.text.size())
		t.whole = std::max<size_t>(t.whole, meta_len);
	else if (std::find(t.boundaries.begin(), t.boundaries.end(), meta_len) == t.boundaries.end())
		t.boundaries.push_back(meta_len);
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
	if (static_cast<uint64_t>(off) + n > whole) {
		bad_meta_++;
		return;
	}
	if (off <= t.text.size() && off + n > t.text.size())
		t.text.append(reinterpret_cast<const char *>(f.payload + 8) + (t.text.size() - off),
			      off + n - t.text.size());
	if (std::find(t.boundaries.begin(), t.boundaries.end(), whole) == t.boundaries.end())
		t.boundaries.push_back(whole); // each length once: resends repeat them
	flush_metadata(t);
}

void Receiver::flush_metadata(SubTrace &t)
{
	for (size_t i = 0; i < t.boundaries.size();) {
		if (t.boundaries[i] <= t.text.size()) {
			t.whole = std::max(t.whole, t.boundaries[i]);
			t.boundaries[i] = t.boundaries.back();
			t.boundaries.pop_back();
		} else {
			i++;
		}
	}
	if (!t.announced || t.meta_fd < 0 || t.written >= t.whole)
		return;
	if (t.written == 0 && t.text.compare(0, 13, "/* CTF 1.8 */") != 0) {
		fail(t.path + ": the metadata does not start with /* CTF 1.8 */");
		return;
	}
	if (!write_all(t.meta_fd, t.text.data() + t.written, t.whole - t.written)) {
		fail(t.dir + "/metadata: " + strerror(errno));
		return;
	}
	t.written = t.whole;
	release(t);
}

bool Receiver::store(SubTrace &t, uint16_t lane, const uint8_t *p, size_t n)
{
	auto it = t.lane_fd.find(lane);
	if (it == t.lane_fd.end()) {
		const std::string file = t.dir + "/" + t.channel + "_" + std::to_string(lane);
		int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
		if (fd < 0) {
			fail("cannot create " + file + ": " + strerror(errno));
			return false;
		}
		it = t.lane_fd.emplace(lane, fd).first;
	}
	if (!write_all(it->second, p, n)) {
		fail(t.dir + ": " + strerror(errno));
		return false;
	}
	t.packets[lane]++;
	return true;
}

// Packets whose metadata is now in the file, in their arrival order.
void Receiver::release(SubTrace &t)
{
	size_t k = 0;
	for (size_t i = 0; i < t.held.size(); i++) {
		Held &h = t.held[i];
		if (t.announced && h.need <= t.written) {
			held_bytes_ -= h.pkt.size();
			store(t, h.lane, h.pkt.data(), h.pkt.size());
		} else {
			t.held[k++] = std::move(h);
		}
	}
	t.held.resize(k);
}

void Receiver::packet(SubTrace &t, uint16_t id, const serial::Frame &f)
{
	(void)id;
	if (f.len < 4 + 8 || get32(f.payload + 4) != 0xC1FC1FC1u) {
		bad_packets_++;
		return;
	}
	const uint32_t need = get32(f.payload);
	const uint8_t *p = f.payload + 4;
	const size_t n = f.len - 4;
	// In order behind what already waits on this lane.
	bool lane_waits = false;
	for (const Held &h : t.held)
		lane_waits |= h.lane == f.stream;
	if (t.announced && need <= t.written && !lane_waits) {
		store(t, f.stream, p, n);
		return;
	}
	while (held_bytes_ + n > kMaxHeld) {
		// Drop the oldest held packet of any sub-trace.
		bool any = false;
		for (auto &kv : traces_)
			if (!kv.second.held.empty()) {
				held_bytes_ -= kv.second.held.front().pkt.size();
				kv.second.held.erase(kv.second.held.begin());
				dropped_held_++;
				any = true;
				break;
			}
		if (!any)
			break;
	}
	if (held_bytes_ + n > kMaxHeld) {
		dropped_held_++;
		return;
	}
	held_bytes_ += n;
	t.held.push_back({f.stream, need, std::vector<uint8_t>(p, p + n)});
}

void Receiver::finish()
{
	for (auto &kv : traces_) {
		dropped_held_ += kv.second.held.size();
		kv.second.held.clear();
	}
	held_bytes_ = 0;
}

void Receiver::report(FILE *o, const serial::DecodeStats &ds)
{
	uint64_t pkts = 0;
	for (auto &kv : traces_)
		for (auto &l : kv.second.packets)
			pkts += l.second;
	fprintf(o,
		"strata receive: %llu frame(s) good, %llu with a bad CRC, %llu malformed, %llu oversized "
		"(%llu byte(s) rejected); %llu packet(s) written; %llu frame(s) lost (sequence gaps); %llu "
		"packet(s) dropped waiting for metadata\n",
		(unsigned long long)ds.frames, (unsigned long long)ds.bad_crc,
		(unsigned long long)ds.malformed, (unsigned long long)ds.oversized,
		(unsigned long long)ds.bad_bytes, (unsigned long long)pkts,
		(unsigned long long)seq_.lost_total(), (unsigned long long)dropped_held_);
	for (auto &kv : frames_) {
		const uint16_t id = kv.first.first, stream = kv.first.second;
		auto t = traces_.find(id);
		const std::string name =
			t != traces_.end() && t->second.announced ? t->second.path : "#" + std::to_string(id);
		const std::string what =
			stream == serial::kMetaStream
				? "metadata"
				: (t != traces_.end() ? t->second.channel : std::string("lane")) + "_" +
					  std::to_string(stream);
		fprintf(o, "  %s/%s: %llu frame(s), %llu lost", name.c_str(), what.c_str(),
			(unsigned long long)kv.second, (unsigned long long)seq_.lost(id, stream));
		if (stream != serial::kMetaStream && t != traces_.end() && t->second.ended) {
			const uint64_t offered =
				stream < t->second.offered.size() ? t->second.offered[stream] : 0;
			const uint64_t got =
				t->second.packets.count(stream) ? t->second.packets.at(stream) : 0;
			fprintf(o, "; %llu packet(s) offered by the sender, %llu written, %llu missing",
				(unsigned long long)offered, (unsigned long long)got,
				(unsigned long long)(offered > got ? offered - got : 0));
		}
		fputc('\n', o);
	}
	// Sub-traces whose end came: lanes that sent packets none of which
	// arrived have no line above.
	for (auto &kv : traces_)
		for (size_t l = 0; kv.second.ended && l < kv.second.offered.size(); l++)
			if (kv.second.offered[l] && !frames_.count({kv.first, static_cast<uint16_t>(l)}))
				fprintf(o,
					"  %s/%s_%zu: 0 frame(s); %llu packet(s) offered by the sender, 0 "
					"written, %llu missing\n",
					kv.second.path.c_str(), kv.second.channel.c_str(), l,
					(unsigned long long)kv.second.offered[l],
					(unsigned long long)kv.second.offered[l]);
	if (bad_packets_ || bad_meta_)
		fprintf(o,
			"  %llu packet frame(s) and %llu other frame(s) with a good CRC but bad contents "
			"ignored\n",
			(unsigned long long)bad_packets_, (unsigned long long)bad_meta_);
}

} // namespace

namespace {

const cli::Command kReceive = {"receive", "DEVICE[,BAUD] -o DIR",
			       "Rebuild the trace a session streams over a byte line (strata create or\n"
			       "record --serial): DEVICE is a tty (set raw, BAUD default 115200), a FIFO,\n"
			       "a file, or - (standard input).  DIR gets one sub-trace per process and\n"
			       "kernel buffer, readable (babeltrace2 DIR) while frames arrive.  Ends at\n"
			       "end of input, or on SIGINT/SIGTERM; then reports, per stream, the frames\n"
			       "received and lost (docs/serial.md)."};

// The device and -o DIR: kParsed to go on, else the exit status.
int parse_args(int argc, char **argv, std::string &device, std::string &out)
{
	const std::vector<cli::Option> opts = {
		cli::path("output", 'o', "DIR", "a directory",
			  "where the trace goes (created; must not hold a trace)", out),
	};
	std::vector<char *> operands;
	if (const int r = cli::parse(kReceive, opts, argc, argv, operands); r != cli::kParsed)
		return r;
	if (operands.size() > 1)
		return cli::usage_error(kReceive, "one device only");
	if (operands.empty())
		return cli::usage_error(kReceive, "missing DEVICE (or - for standard input)");
	device = operands[0];
	if (out.empty())
		return cli::usage_error(kReceive, "missing -o DIR");
	return cli::kParsed;
}

} // namespace

int strata_cmd_receive(int argc, char **argv)
{
	const char *cmd = "receive";
	std::string device, out;
	if (const int r = parse_args(argc, argv, device, out); r != cli::kParsed)
		return r;
	uint32_t baud = 115200;
	bool baud_given = false;
	if (size_t comma = device.rfind(','); comma != std::string::npos && device != "-") {
		if (!cli::parse_u32(device.c_str() + comma + 1, baud))
			return cli::usage_error(kReceive, "bad speed in " + device);
		baud_given = true;
		device.resize(comma);
	}
	struct stat st;
	if (stat((out + "/metadata").c_str(), &st) == 0)
		return cli::usage_error(kReceive, out + " already holds a trace");
	int fd = 0;
	if (device != "-") {
		fd = open(device.c_str(), O_RDONLY | O_NOCTTY | O_CLOEXEC);
		if (fd < 0) {
			fprintf(stderr, "strata %s: cannot open %s: %s\n", cmd, device.c_str(),
				strerror(errno));
			return cli::kFail;
		}
	}
	if (fd != 0 && isatty(fd)) { // a terminal on standard input is left as it is
		std::string err;
		if (!serial::set_raw_tty(fd, baud, err)) {
			fprintf(stderr, "strata %s: %s: %s\n", cmd, device.c_str(), err.c_str());
			return cli::kFail;
		}
	} else if (baud_given) {
		fprintf(stderr, "strata %s: %s is not a tty: the speed is ignored\n", cmd, device.c_str());
	}
	if (int r = mkdirs(out); r < 0) {
		fprintf(stderr, "strata %s: cannot create %s: %s\n", cmd, out.c_str(), strerror(-r));
		return cli::kFail;
	}
	struct sigaction sa = {};
	sa.sa_handler = on_signal; // no SA_RESTART: read() returns EINTR
	sigaction(SIGINT, &sa, nullptr);
	sigaction(SIGTERM, &sa, nullptr);
	Receiver rx(out);
	serial::FrameDecoder dec;
	setvbuf(stderr, nullptr, _IOLBF, 0);
	std::vector<uint8_t> buf(64 * 1024);
	int rc = cli::kOk;
	while (!g_stop && !rx.failed()) {
		ssize_t n = read(fd, buf.data(), buf.size());
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			fprintf(stderr, "strata %s: read %s: %s\n", cmd, device.c_str(), strerror(errno));
			rc = cli::kFail;
			break;
		}
		if (n == 0)
			break;
		dec.feed(buf.data(), static_cast<size_t>(n), [&](const serial::Frame &f) { rx.frame(f); });
	}
	if (rx.failed()) {
		fprintf(stderr, "strata %s: %s\n", cmd, rx.error().c_str());
		rc = cli::kFail;
	}
	rx.finish();
	rx.report(stderr, dec.stats());
	if (fd > 0)
		close(fd);
	return rc;
}
