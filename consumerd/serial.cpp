/*
 * serial.cpp - a session's trace over a byte line (serial.h,
 * docs/serial.md).
 */
#include "serial.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <random>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "proto/serial_frame.h"
#include "reader.h"

namespace strata {

namespace {

constexpr int kStallMs = 10000;                  // a device that takes nothing this long breaks the link
constexpr size_t kMetaChunk = 1024;              // TSDL bytes per metadata frame
constexpr uint64_t kMinResendNs = 5000000000ull; // metadata again at least 5 s apart
constexpr uint64_t kMaxFlushNs = 10000000000ull; // what is queued at DESTROY: at most 10 s more (main thread)

uint64_t now_ns()
{
	return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
					     std::chrono::steady_clock::now().time_since_epoch())
					     .count());
}

void put16(std::string &s, uint16_t v)
{
	s.push_back(static_cast<char>(v));
	s.push_back(static_cast<char>(v >> 8));
}
void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = static_cast<uint8_t>(v >> (8 * i));
}

} // namespace

bool is_serial_target(const std::string &relay_field)
{
	return relay_field.compare(0, strlen(kSerialPrefix), kSerialPrefix) == 0;
}

bool parse_serial_target(const std::string &relay_field, SerialTarget &t, std::string &err)
{
	if (!is_serial_target(relay_field)) {
		err = "not a serial target";
		return false;
	}
	std::string v = relay_field.substr(strlen(kSerialPrefix));
	const size_t comma = v.rfind(',');
	if (comma != std::string::npos) {
		const std::string b = v.substr(comma + 1);
		char *end = nullptr;
		errno = 0;
		const unsigned long baud = strtoul(b.c_str(), &end, 10);
		if (b.empty() || *end || errno || baud > 4000000 ||
		    !serial::supported_baud(static_cast<uint32_t>(baud))) {
			err = "serial: '" + b +
			      "' is not a supported speed (9600 ... 115200 ... 4000000 baud)";
			return false;
		}
		t.baud = static_cast<uint32_t>(baud);
		v.resize(comma);
	}
	if (v.empty() || v[0] != '/') {
		err = "serial: the device must be an absolute path";
		return false;
	}
	t.device = v;
	return true;
}

uint64_t serial_subbuf_size(const SerialTarget &t)
{
	uint64_t s = 4096;
	while (s < 128 * 1024 && 2 * s <= t.baud / 10)
		s *= 2;
	return s;
}

std::shared_ptr<SerialLink> SerialLink::open(const SerialTarget &t, int64_t uid, uint64_t subbuf_size,
					     std::string &err)
{
	std::shared_ptr<SerialLink> l(new SerialLink());
	l->target_ = t;
	int flags = O_WRONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC | O_CREAT;
	if (uid >= 0) {
		// Root's daemon working for a user (docs/security.md) opens only
		// what that user owns, creates nothing, follows no link: else any
		// user could have it create an empty root-owned file anywhere
		// (/etc/nologin) or open another's device.
		struct stat pre;
		if (lstat(t.device.c_str(), &pre) != 0 || S_ISLNK(pre.st_mode) ||
		    pre.st_uid != static_cast<uid_t>(uid)) {
			err = "cannot use " + t.device + ": it must exist and belong to you";
			return nullptr;
		}
		flags = (flags & ~O_CREAT) | O_NOFOLLOW;
	}
	int fd = ::open(t.device.c_str(), flags, 0640);
	if (fd < 0) {
		err = errno == ENXIO
			      ? "no process reads the FIFO " + t.device + " (start `strata receive` first)"
			      : "cannot open " + t.device + ": " + strerror(errno);
		return nullptr;
	}
	struct stat st;
	if (fstat(fd, &st) != 0 || (uid >= 0 && st.st_uid != static_cast<uid_t>(uid))) {
		close(fd);
		err = "cannot use " + t.device + ": it must belong to you";
		return nullptr;
	}
	if (S_ISREG(st.st_mode))
		fcntl(fd, F_SETFL, O_APPEND | O_NONBLOCK);
	if (isatty(fd) && !serial::set_raw_tty(fd, t.baud, err)) {
		err = t.device + ": " + err;
		close(fd);
		return nullptr;
	}
	l->fd_ = fd;
	std::random_device rd;
	l->nonce_ = (static_cast<uint64_t>(rd()) << 32) | rd();
	const double rate = static_cast<double>(l->line_bytes_per_s());
	// Four seconds of line, and at least four whole sub-buffers: full
	// packets must be able to pass when the line is idle, and a burst of
	// a few seconds' worth too.  (With serial_subbuf_size, the queue
	// then flushes in about four seconds at DESTROY.)
	// A sub-buffer's packet goes as packets of at most kPieceBytes, each
	// with its own header and frame.
	const size_t pkt = std::min<size_t>(subbuf_size, serial::kMaxPayload);
	const size_t pieces = pkt / (serial::kPieceBytes - STRATA_PACKET_HEADER_SIZE) + 1;
	const size_t framed = pkt + pieces * (STRATA_PACKET_HEADER_SIZE + serial::kHeaderSize +
					      serial::kPacketPrefix + serial::kCrcSize + 2);
	l->depth_ = std::max(4 * rate, 4.0 * static_cast<double>(serial::encoded_max(framed)));
	l->tokens_ = l->depth_;
	l->queue_cap_ = static_cast<size_t>(l->depth_) + serial::encoded_max(serial::kMaxBody);
	l->start_ns_ = l->refilled_ns_ = l->resent_ns_ = now_ns();
	// A delimiter first: whatever the receiver holds before it is ended.
	l->queue_.push_back(std::vector<uint8_t>(1, 0));
	l->queued_ = 1;
	l->thread_ = std::thread([p = l.get()] { p->run(); });
	return l;
}

SerialLink::~SerialLink()
{
	{
		std::lock_guard<std::mutex> g(mu_);
		stop_ = true;
	}
	cv_.notify_all();
	if (thread_.joinable())
		thread_.join();
	if (unsent_frames_)
		fprintf(stderr,
			"strata-consumerd: serial %s: %llu frame(s) still queued were not sent: the line did "
			"not "
			"take them within the flush time at destroy\n",
			target_.device.c_str(), static_cast<unsigned long long>(unsent_frames_));
	if (fd_ >= 0)
		close(fd_);
}

void SerialLink::refill(uint64_t now)
{
	const double rate = static_cast<double>(line_bytes_per_s());
	tokens_ = std::min(depth_, tokens_ + rate * static_cast<double>(now - refilled_ns_) / 1e9);
	refilled_ns_ = now;
}

void SerialLink::push(std::vector<uint8_t> &&frame)
{
	queued_ += frame.size();
	tokens_ -= static_cast<double>(frame.size());
	queue_.push_back(std::move(frame));
	cv_.notify_one();
}

void SerialLink::queue_meta(uint16_t trace, size_t from)
{
	Trace &t = traces_[trace];
	refill(now_ns());
	std::vector<uint8_t> f;
	if (from == 0) {
		std::string a(8, '\0');
		for (int i = 0; i < 8; i++)
			a[i] = static_cast<char>(nonce_ >> (8 * i));
		a.resize(12);
		put32(reinterpret_cast<uint8_t *>(&a[8]), static_cast<uint32_t>(t.text.size()));
		put16(a, static_cast<uint16_t>(t.path.size()));
		a += t.path;
		put16(a, static_cast<uint16_t>(t.channel.size()));
		a += t.channel;
		a.resize(a.size() + 4);
		put32(reinterpret_cast<uint8_t *>(&a[a.size() - 4]), t.empty_bits);
		serial::encode_frame(serial::kAnnounce, trace, serial::kMetaStream, t.meta_seq++,
				     reinterpret_cast<const uint8_t *>(a.data()), a.size(), nullptr, 0, f);
		push(std::move(f));
	}
	for (size_t off = from; off < t.text.size(); off += kMetaChunk) {
		uint8_t o[8];
		put32(o, static_cast<uint32_t>(off));
		put32(o + 4, static_cast<uint32_t>(t.text.size()));
		f.clear();
		serial::encode_frame(serial::kMetadata, trace, serial::kMetaStream, t.meta_seq++, o, 8,
				     reinterpret_cast<const uint8_t *>(t.text.data()) + off,
				     std::min(kMetaChunk, t.text.size() - off), f);
		push(std::move(f));
	}
}

uint16_t SerialLink::add_trace(const std::string &path, const std::string &channel, uint32_t empty_bits)
{
	std::lock_guard<std::mutex> g(mu_);
	Trace t;
	t.path = path.substr(path.find_first_not_of('/') == std::string::npos ? path.size()
									      : path.find_first_not_of('/'));
	t.channel = channel;
	t.empty_bits = empty_bits;
	traces_.push_back(std::move(t));
	return static_cast<uint16_t>(traces_.size() - 1);
}

uint32_t SerialLink::metadata(uint16_t trace, const std::string &text)
{
	std::lock_guard<std::mutex> g(mu_);
	if (trace >= traces_.size())
		return 0;
	const size_t from = traces_[trace].text.size();
	traces_[trace].text += from == 0 && opening_ ? opening_(text) : text;
	queue_meta(trace, from);
	return static_cast<uint32_t>(traces_[trace].text.size());
}

void SerialLink::set_opening_filter(std::function<std::string(const std::string &)> f)
{
	std::lock_guard<std::mutex> g(mu_);
	opening_ = std::move(f);
}

std::string SerialLink::why_broken()
{
	std::lock_guard<std::mutex> g(mu_);
	return why_;
}

void SerialLink::queue_chunks(uint8_t type, uint16_t trace, uint32_t &seq, const std::string &prefix,
			      const std::string &text)
{
	for (size_t off = 0; off < text.size(); off += serial::kRewriteChunk) {
		std::string pre = prefix;
		put32(reinterpret_cast<uint8_t *>(&pre[0]), static_cast<uint32_t>(off));
		std::vector<uint8_t> f;
		serial::encode_frame(type, trace, serial::kMetaStream, seq++,
				     reinterpret_cast<const uint8_t *>(pre.data()), pre.size(),
				     reinterpret_cast<const uint8_t *>(text.data()) + off,
				     std::min(serial::kRewriteChunk, text.size() - off), f);
		push(std::move(f));
	}
}

bool SerialLink::clock_rewrite(const std::string &file_name, const std::string &file,
			       const std::function<std::string(const std::string &)> *rewrite, size_t *n,
			       std::string &err)
{
	std::lock_guard<std::mutex> g(mu_);
	*n = 0;
	if (broken()) {
		err = "the serial line is down: " + why_;
		return false;
	}
	if (file.empty() || file.size() > UINT32_MAX || file_name.size() > 255) {
		err = "a file of " + std::to_string(file.size()) + " bytes cannot be sent";
		return false;
	}
	const uint32_t gen = ++rewrite_gen_;
	// The rewritten texts first (each sub-trace's text as the receiver
	// has it, whole: a text still growing is left as it is).
	std::vector<std::pair<uint16_t, std::string>> texts;
	size_t bytes = file.size();
	if (rewrite)
		for (size_t i = 0; i < traces_.size(); i++) {
			const std::string &t = traces_[i].text;
			if (t.empty() || t.size() > UINT32_MAX)
				continue;
			std::string r = (*rewrite)(t);
			if (r.empty() || r.size() > UINT32_MAX)
				continue;
			bytes += r.size();
			texts.emplace_back(static_cast<uint16_t>(i), std::move(r));
		}
	refill(now_ns());
	// clocks.json, then the rewrites: a receiver that gets a rewrite has
	// the map it names.  Twice when short (as END): a frame damaged on the
	// line costs the first copy only.
	const int copies = bytes <= line_bytes_per_s() ? 2 : 1;
	for (int c = 0; c < copies; c++) {
		std::string fp(serial::kFilePrefix, '\0');
		put32(reinterpret_cast<uint8_t *>(&fp[4]), static_cast<uint32_t>(file.size()));
		put32(reinterpret_cast<uint8_t *>(&fp[8]), gen);
		fp[12] = static_cast<char>(file_name.size());
		fp[13] = 0;
		fp += file_name;
		queue_chunks(serial::kFile, serial::kMetaStream, file_seq_, fp, file);
		for (const auto &[i, r] : texts) {
			std::string rp(serial::kRewritePrefix, '\0');
			put32(reinterpret_cast<uint8_t *>(&rp[4]), static_cast<uint32_t>(r.size()));
			put32(reinterpret_cast<uint8_t *>(&rp[8]),
			      static_cast<uint32_t>(traces_[i].text.size()));
			put32(reinterpret_cast<uint8_t *>(&rp[12]), gen);
			queue_chunks(serial::kRewrite, i, traces_[i].meta_seq, rp, r);
		}
	}
	*n = texts.size();
	return true;
}

bool SerialLink::send(std::vector<std::vector<uint8_t>> &frames, uint64_t pkts, uint64_t bytes,
		      std::string &err)
{
	std::lock_guard<std::mutex> g(mu_);
	if (broken()) {
		pkts_refused_ += pkts;
		pkt_bytes_refused_ += bytes;
		err = "the serial line is down: " + why_;
		return false;
	}
	size_t size = 0;
	for (const auto &f : frames)
		size += f.size();
	refill(now_ns());
	if (tokens_ < static_cast<double>(size) || queued_ + size > queue_cap_) {
		pkts_refused_ += pkts;
		pkt_bytes_refused_ += bytes;
		err = "over the serial line's capacity (" + std::to_string(line_bytes_per_s()) + " B/s)";
		return false;
	}
	pkts_sent_ += pkts;
	pkt_bytes_sent_ += bytes;
	for (auto &f : frames)
		push(std::move(f));
	return true;
}

void SerialLink::refused(uint64_t pkts, uint64_t bytes)
{
	std::lock_guard<std::mutex> g(mu_);
	pkts_refused_ += pkts;
	pkt_bytes_refused_ += bytes;
}

void SerialLink::end(uint16_t trace, const std::vector<uint8_t> &payload)
{
	std::lock_guard<std::mutex> g(mu_);
	if (trace >= traces_.size())
		return;
	// The metadata once more if it is short (within a second of line): a
	// receiver that lost one of its frames releases the packets it holds
	// without waiting for the next period.
	if (traces_[trace].text.size() <= line_bytes_per_s())
		queue_meta(trace, 0);
	refill(now_ns());
	// Twice: the receiver marks the loss of a lane's last packets from it.
	for (int i = 0; i < 2; i++) {
		std::vector<uint8_t> f;
		serial::encode_frame(serial::kEnd, trace, serial::kMetaStream, traces_[trace].meta_seq++,
				     payload.data(), payload.size(), nullptr, 0, f);
		push(std::move(f));
	}
}

std::string SerialLink::describe()
{
	return "serial " + target_.device + " " + std::to_string(target_.baud) + " baud (" +
	       std::to_string(line_bytes_per_s()) + " B/s): " + stats();
}

std::string SerialLink::stats()
{
	std::lock_guard<std::mutex> g(mu_);
	const uint64_t rate = line_bytes_per_s();
	// Over at least a second: a burst is compared with a second of line.
	const double secs = std::max(1.0, static_cast<double>(now_ns() - start_ns_) / 1e9);
	const uint64_t offered =
		static_cast<uint64_t>(static_cast<double>(pkt_bytes_sent_ + pkt_bytes_refused_) / secs);
	std::string s =
		std::to_string(pkts_sent_) + " packet(s) sent (" + std::to_string(pkt_bytes_sent_) + " B; " +
		std::to_string(wire_bytes_) + " B on the line, " + std::to_string(meta_resends_) +
		" metadata resend(s)), " + std::to_string(pkts_refused_) + " refused over capacity (" +
		std::to_string(pkt_bytes_refused_) + " B); the session offered " + std::to_string(offered) +
		" B/s, " + std::to_string(offered * 100 / (rate ? rate : 1)) + "% of the line's " +
		std::to_string(rate) + " B/s";
	if (broken())
		s += " (line down: " + why_ + ")";
	return s;
}

void SerialLink::resend_meta_if_due(uint64_t now)
{
	// Metadata again, at most about a tenth of the line's time.
	size_t meta = 0;
	for (const Trace &t : traces_)
		meta += t.text.size();
	const uint64_t period = std::max<uint64_t>(
		kMinResendNs, meta * 10 * 1000000000ull / std::max<uint64_t>(1, line_bytes_per_s()));
	if (!traces_.empty() && now - resent_ns_ >= period) {
		for (size_t i = 0; i < traces_.size(); i++)
			queue_meta(static_cast<uint16_t>(i), 0);
		meta_resends_++;
		resent_ns_ = now;
	}
}

void SerialLink::run()
{
	std::unique_lock<std::mutex> lk(mu_);
	// At DESTROY: until the queue's bytes would pass at the line's rate,
	// plus a second, and a second past each frame the device took since
	// (a device slower than its baud, a UART emulated under qemu, keeps
	// draining while it moves), never past kMaxFlushNs after the stop.
	uint64_t flush_until = 0, flush_cap = 0;
	for (;;) {
		const uint64_t now = now_ns();
		if (!stop_ && !broken())
			resend_meta_if_due(now);
		if (stop_ && !flush_until) {
			flush_cap = now + kMaxFlushNs;
			flush_until = std::min<uint64_t>(
				flush_cap,
				now + 1000000000ull +
					queued_ * 1000000000ull / std::max<uint64_t>(1, line_bytes_per_s()));
		}
		if (queue_.empty() || broken()) {
			if (stop_)
				return;
			cv_.wait_for(lk, std::chrono::milliseconds(200));
			continue;
		}
		if (stop_ && now >= flush_until) {
			unsent_frames_ = queue_.size();
			return;
		}
		std::vector<uint8_t> f = std::move(queue_.front());
		queue_.pop_front();
		lk.unlock();
		// Write the frame whole (poll-bounded); a device that takes
		// nothing for kStallMs is given up.
		size_t done = 0;
		std::string why;
		int idle_ms = 0;
		while (done < f.size()) {
			ssize_t w = write(fd_, f.data() + done, f.size() - done);
			if (w > 0) {
				done += static_cast<size_t>(w);
				idle_ms = 0;
				continue;
			}
			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0 && errno != EAGAIN) {
				why = std::string("write failed: ") + strerror(errno);
				break;
			}
			if (idle_ms >= kStallMs) {
				why = "the device took nothing for " + std::to_string(kStallMs / 1000) + " s";
				break;
			}
			struct pollfd pf = {fd_, POLLOUT, 0};
			poll(&pf, 1, 100);
			idle_ms += 100;
		}
		lk.lock();
		queued_ -= f.size();
		wire_bytes_ += done;
		if (flush_until && done == f.size()) // stopping, and the device moves
			flush_until = std::max(flush_until,
					       std::min<uint64_t>(flush_cap, now_ns() + 1000000000ull));
		if (!why.empty()) {
			why_ = why;
			broken_.store(true, std::memory_order_release);
			queued_ = 0;
			queue_.clear();
		}
	}
}

namespace {

void put64(uint8_t *p, uint64_t v)
{
	put32(p, static_cast<uint32_t>(v));
	put32(p + 4, static_cast<uint32_t>(v >> 32));
}

// One sub-trace on the line.  Each packet the drain gives is cut at record
// boundaries into packets of at most kPieceBytes (the drain's reader
// walks the records), renumbered per lane, and sent as one frame each;
// the link takes a sub-buffer's packets all or none.  Everything here
// runs on the drain's thread.
class SerialOutput : public Output {
public:
	SerialOutput(std::shared_ptr<SerialLink> link, const std::string &path, const std::string &channel)
	    : link_(std::move(link)), path_(path), channel_(channel)
	{
	}
	void set_reader(Reader *reader) override { reader_ = reader; }
	bool open(const std::string &text, std::string &) override
	{
		const uint32_t empty_bits =
			reader_ ? static_cast<uint32_t>(reader_->empty_header(0, 0).content_size)
				: STRATA_PACKET_HEADER_SIZE * 8;
		trace_ = link_->add_trace(path_, channel_, empty_bits);
		empty_bits_ = empty_bits;
		meta_len_ = link_->metadata(trace_, text);
		opened_ = true;
		return true;
	}
	bool append_metadata(const std::string &text, std::string &) override
	{
		meta_len_ = link_->metadata(trace_, text);
		return true;
	}
	size_t write_packets(uint32_t lane, const struct iovec *iov, int n_iov, const size_t *ends,
			     size_t n_pkts, std::string &err) override
	{
		if (lane >= serial::kMetaStream)
			return 0;
		if (lanes_.size() <= lane)
			lanes_.resize(lane + 1);
		// Gather each packet (its pieces may span iov entries).
		int vi = 0;
		size_t voff = 0, start = 0, stored = n_pkts;
		for (size_t k = 0; k < n_pkts; k++) {
			buf_.clear();
			size_t need = ends[k] - start;
			while (need && vi < n_iov) {
				const size_t take = std::min(need, iov[vi].iov_len - voff);
				const uint8_t *b = static_cast<const uint8_t *>(iov[vi].iov_base) + voff;
				buf_.insert(buf_.end(), b, b + take);
				need -= take;
				voff += take;
				if (voff == iov[vi].iov_len) {
					vi++;
					voff = 0;
				}
			}
			start = ends[k];
			const bool send = stored == n_pkts;
			if (!cut(lane, send)) {
				if (send)
					stored = k;
				continue;
			}
			if (send && !too_big_ && link_->send(frames_, n_cut_, buf_.size(), err)) {
				lanes_[lane].frame_seq += static_cast<uint32_t>(n_cut_);
				continue;
			}
			if (!send || too_big_) // (send() counts what it refuses)
				link_->refused(n_cut_, buf_.size());
			if (send && too_big_) // a record past kMaxPayload: no receiver takes it
				err = "a record larger than a serial frame carries";
			if (send)
				stored = k;
		}
		return stored;
	}
	// Packets close every second (the drain's live tick), so that a slow
	// line carries small packets as the events come.
	uint64_t live_period_ns() const override { return 1000000000ull; }
	void close() override
	{
		if (opened_ && !ended_)
			link_->end(trace_, end_payload());
		ended_ = true;
		reader_ = nullptr;
	}

private:
	struct Lane {
		bool any = false;
		uint64_t last_seq = 0;  // the last sub-buffer packet's packet_seq_num
		uint64_t next = 0;      // packet_seq_num of the next packet cut
		uint64_t records = 0;   // in every packet cut so far
		uint32_t frame_seq = 0; // frames sent on the line (serial_frame.h seq)
		strata_packet_header last{};
	};

	// Cuts the packet in buf_ into frames_ (n_cut_ packets), counted in
	// the lane's numbering whether or not they are then sent.  False for
	// something that is not a packet (not sent, not counted).
	bool cut(uint32_t lane, bool encode)
	{
		constexpr size_t kHdr = STRATA_PACKET_HEADER_SIZE;
		frames_.clear();
		n_cut_ = 0;
		too_big_ = false;
		if (buf_.size() < kHdr)
			return false;
		strata_packet_header ph;
		memcpy(&ph, buf_.data(), kHdr);
		Lane &l = lanes_[lane];
		// A sub-buffer's packets missing before this one (the drain's
		// sequence numbers) stay a gap in the numbering.
		if (l.any && ph.packet_seq_num > l.last_seq + 1)
			l.next += ph.packet_seq_num - l.last_seq - 1;
		l.any = true;
		l.last_seq = ph.packet_seq_num;
		l.last = ph;
		pieces_.clear();
		if (reader_)
			reader_->cut_packet(lane, buf_.data(), buf_.size(), serial::kPieceBytes - kHdr,
					    &pieces_);
		else
			pieces_.push_back({kHdr, buf_.size(), ph.timestamp_begin, ph.timestamp_end, 0});
		for (const Reader::Piece &pc : pieces_) {
			const uint64_t n = pc.end - pc.begin;
			too_big_ = too_big_ || serial::kPacketPrefix + kHdr + n > serial::kMaxPayload;
			if (encode && !too_big_) {
				strata_packet_header h = ph;
				h.timestamp_begin = pc.ts_begin;
				h.timestamp_end = pc.ts_end;
				h.content_size =
					n ? (kHdr + n) * 8 : std::min<uint64_t>(ph.content_size, empty_bits_);
				h.packet_size = (kHdr + n) * 8;
				h.packet_seq_num = l.next;
				uint8_t pre[serial::kPacketPrefix + kHdr];
				put32(pre, meta_len_);
				put64(pre + 4, l.records);
				put32(pre + 12, static_cast<uint32_t>(pc.records));
				memcpy(pre + serial::kPacketPrefix, &h, kHdr);
				std::vector<uint8_t> f;
				serial::encode_frame(serial::kPacket, trace_, static_cast<uint16_t>(lane),
						     l.frame_seq + static_cast<uint32_t>(n_cut_), pre,
						     sizeof pre, buf_.data() + pc.begin, n, f);
				frames_.push_back(std::move(f));
			}
			n_cut_++;
			l.next++;
			l.records += pc.records;
		}
		return true;
	}

	// END: the trace uuid, then each lane that cut packets (serial_frame.h).
	std::vector<uint8_t> end_payload() const
	{
		std::vector<uint8_t> p(18);
		uint16_t n = 0;
		for (size_t i = 0; i < lanes_.size(); i++) {
			const Lane &l = lanes_[i];
			if (!l.any)
				continue;
			memcpy(p.data(), l.last.uuid, 16);
			uint8_t e[serial::kEndLane] = {};
			e[0] = static_cast<uint8_t>(i);
			e[1] = static_cast<uint8_t>(i >> 8);
			put32(e + 4, l.last.stream_id);
			put32(e + 8, static_cast<uint32_t>(l.last.vtid));
			put64(e + 12, l.next);
			put64(e + 20, l.records);
			put64(e + 28, l.last.timestamp_end);
			put64(e + 36, l.last.events_discarded);
			p.insert(p.end(), e, e + serial::kEndLane);
			n++;
		}
		p[16] = static_cast<uint8_t>(n);
		p[17] = static_cast<uint8_t>(n >> 8);
		return p;
	}

	bool opened_ = false, ended_ = false;
	std::shared_ptr<SerialLink> link_;
	std::string path_, channel_;
	uint16_t trace_ = 0;
	Reader *reader_ = nullptr;
	uint32_t empty_bits_ = STRATA_PACKET_HEADER_SIZE * 8;
	uint32_t meta_len_ = 0;
	std::vector<Lane> lanes_;
	std::vector<uint8_t> buf_;
	std::vector<Reader::Piece> pieces_;
	std::vector<std::vector<uint8_t>> frames_;
	uint64_t n_cut_ = 0;
	bool too_big_ = false; // a piece the line cannot carry (cut())
};

} // namespace

std::unique_ptr<Output> serial_output(std::shared_ptr<SerialLink> link, const std::string &rel_path,
				      const std::string &channel, uint32_t n_lanes)
{
	(void)n_lanes;
	return std::make_unique<SerialOutput>(std::move(link), rel_path, channel);
}

} // namespace strata
