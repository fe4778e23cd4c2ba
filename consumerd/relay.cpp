/*
 * relay.cpp - see relay.h for the contract, docs/relay.md for the protocol
 * subset: the link's connections, its streams, their metadata and
 * packets.  Its live side (empty packets, beacons) is relay_live.cpp; a
 * drain's output over it, relay_output.cpp.
 *
 * Control messages: a 24-byte header { circuit_id u64 (0), data_size u64,
 * cmd u32, cmd_version u32 (0) } then data_size bytes; most commands are
 * answered with a fixed-size reply, SEND_METADATA with none.  Data
 * messages: a 32-byte header { circuit_id u64 (0), stream_id u64,
 * net_seq_num u64, data_size u32, padding_size u32 } then the packet.
 */
#include "relay.h"

#include <cerrno>
#include <cstring>
#include <ctime>
#include <vector>
#include <endian.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "relay_wire.h"
#include "strata_abi.h"

namespace strata {

using namespace relay_wire;

namespace {

constexpr int kIoTimeoutMs = 3000;      // any one send or answer
constexpr int kPendingTimeoutMs = 5000; // the relay storing a stream's last packets
constexpr uint32_t kMajor = 2, kMinor = 10;
constexpr uint32_t kLttngOk = 10; // LTTNG_OK in lttng's error codes

// Fixed field sizes of the 2.4 create-session and 2.2 add-stream payloads.
constexpr size_t kSessionNameLen = 255, kHostNameLen = 64;
constexpr size_t kChannelNameLen = 264, kPathLen = 4096;
constexpr size_t kPathMax = 255; // the relay's LTTNG_NAME_MAX bound on 2.2 paths

void put_name(std::string &s, const std::string &v, size_t field)
{
	std::string f(field, '\0');
	memcpy(&f[0], v.data(), std::min(v.size(), field - 1));
	s += f;
}
// A TCP connection to host:port within kIoTimeoutMs, non-blocking after.
int dial(const std::string &host, uint16_t port, std::string &err)
{
	struct addrinfo hints = {}, *res = nullptr;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_family = AF_UNSPEC;
	int r = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
	if (r != 0) {
		err = "cannot resolve relay host '" + host + "': " + gai_strerror(r);
		return -1;
	}
	int fd = -1;
	err = "no address";
	for (struct addrinfo *a = res; a; a = a->ai_next) {
		fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
		if (fd < 0) {
			err = strerror(errno);
			continue;
		}
		int e = 0;
		if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
			e = errno;
			if (e == EINPROGRESS) {
				struct pollfd p = {fd, POLLOUT, 0};
				int n;
				do
					n = poll(&p, 1, kIoTimeoutMs);
				while (n < 0 && errno == EINTR);
				socklen_t len = sizeof e;
				if (n == 0)
					e = ETIMEDOUT;
				else if (n < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len) != 0)
					e = errno;
			}
		}
		if (e == 0) {
			int one = 1;
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
			break;
		}
		err = strerror(e);
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0)
		err = "cannot connect to lttng-relayd at " + host + ":" + std::to_string(port) + ": " + err;
	return fd;
}

bool path_safe(const std::string &s)
{
	return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos;
}

} // namespace

bool parse_relay_target(const std::string &text, RelayTarget &t, std::string &err)
{
	t = RelayTarget();
	std::string host = text, rest;
	if (!host.empty() && host[0] == '[') { // [v6addr]:ports
		size_t e = host.find(']');
		if (e == std::string::npos) {
			err = "relay '" + text + "': missing ']'";
			return false;
		}
		rest = host.substr(e + 1);
		host = host.substr(1, e - 1);
		if (!rest.empty() && rest[0] != ':') {
			err = "relay '" + text + "': expected ':' after ']'";
			return false;
		}
		if (!rest.empty())
			rest = rest.substr(1);
	} else {
		size_t c = host.find(':');
		if (c != std::string::npos) {
			rest = host.substr(c + 1);
			host = host.substr(0, c);
		}
	}
	if (host.empty() || host.size() > 253) {
		err = "relay '" + text + "': expected HOST[:CTRL_PORT[:DATA_PORT]]";
		return false;
	}
	t.host = host;
	auto port = [&](const std::string &p, uint16_t &out) {
		char *end = nullptr;
		errno = 0;
		unsigned long v = p.empty() ? 0 : strtoul(p.c_str(), &end, 10);
		if (p.empty() || *end || errno || v == 0 || v > 65535) {
			err = "relay '" + text + "': bad port '" + p + "'";
			return false;
		}
		out = static_cast<uint16_t>(v);
		return true;
	};
	if (rest.empty())
		return true;
	size_t c = rest.find(':');
	if (!port(rest.substr(0, c), t.ctrl_port))
		return false;
	if (c == std::string::npos) {
		if (t.ctrl_port == 65535) {
			err = "relay '" + text + "': no data port after 65535";
			return false;
		}
		t.data_port = static_cast<uint16_t>(t.ctrl_port + 1);
		return true;
	}
	return port(rest.substr(c + 1), t.data_port);
}

std::shared_ptr<RelayLink> RelayLink::open(const RelayTarget &t, const std::string &session,
					   const std::string &hostname, uint32_t live_timer_us,
					   std::string &err)
{
	if (!path_safe(session) || session.size() >= kSessionNameLen || !path_safe(hostname) ||
	    hostname.size() >= kHostNameLen) {
		err = "relay: session name and hostname must be path-safe names (hostname < 64 bytes)";
		return nullptr;
	}
	std::shared_ptr<RelayLink> l(new RelayLink());
	l->target_ = t;
	l->ctrl_ = dial(t.host, t.ctrl_port, err);
	if (l->ctrl_ < 0)
		return nullptr;
	l->data_ = dial(t.host, t.data_port, err);
	if (l->data_ < 0)
		return nullptr;
	// Version: each side proposes, both use the lower minor.
	std::string v;
	put32(v, kMajor);
	put32(v, kMinor);
	uint8_t vr[8];
	if (!l->command(kVersion, v, vr, sizeof vr, err))
		return nullptr;
	if (get32(vr) != kMajor || get32(vr + 4) < 4) {
		err = "relay speaks protocol " + std::to_string(get32(vr)) + "." +
		      std::to_string(get32(vr + 4)) + ", Strata needs 2.4 or later";
		return nullptr;
	}
	l->minor_ = std::min(kMinor, get32(vr + 4));
	std::string cs;
	put_name(cs, session, kSessionNameLen);
	put_name(cs, hostname, kHostNameLen);
	put32(cs, live_timer_us);
	put32(cs, 0); // not a snapshot session
	uint8_t cr[12];
	if (!l->command(kCreateSession, cs, cr, sizeof cr, err))
		return nullptr;
	if (get32(cr + 8) != kLttngOk) {
		err = "lttng-relayd refused to create session '" + session + "' (code " +
		      std::to_string(get32(cr + 8)) + ")";
		return nullptr;
	}
	l->relay_session_ = get64(cr);
	char stamp[32];
	time_t now = time(nullptr);
	struct tm tm;
	localtime_r(&now, &tm);
	strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
	l->base_ = hostname + "/" + session + "-" + stamp;
	return l;
}

RelayLink::~RelayLink()
{
	close_gate();
	close_streams();
	if (ctrl_ >= 0)
		close(ctrl_);
	if (data_ >= 0)
		close(data_);
}

// Each stream closed on the relay before the connections are (DESTROY).
// lttng-relayd 2.13.9, when a control connection closes, marks the session
// closed first and then closes its streams one at a time; a live reader
// asking in between is told HUP for a stream it has read to the end (the
// session is closed) while that stream is still published, and its next
// GET_NEW_STREAMS makes the stream anew, read from its start: the reader
// then asks for new streams forever (the kernel VM test's reader, still
// running 120 s after destroy, lttng-relayd's debug log showing the
// stream sent anew).  A stream closed by CLOSE_STREAM is unpublished as it
// closes.  Its last packet is the last one sent (a stop waited until the
// relay stored it); a stream without packets, and a metadata stream, say
// none (-1).  Data streams first: a reader reads no metadata after them.
void RelayLink::close_streams()
{
	std::lock_guard<std::mutex> g(mu_);
	std::string err;
	for (const bool metadata : {false, true})
		for (const auto &a : added_) {
			if (a.second != metadata)
				continue;
			const auto it = streams_.find(a.first);
			const uint64_t sent = it == streams_.end() ? 0 : it->second.next_seq;
			std::string p;
			put64(p, a.first);
			put64(p, sent ? sent - 1 : UINT64_MAX);
			uint8_t r[4];
			if (!command(kCloseStream, p, r, sizeof r, err))
				return; // the link broke: closing the connections closes the rest
		}
}

std::string RelayLink::why_broken()
{
	std::lock_guard<std::mutex> g(mu_);
	return why_;
}

bool RelayLink::fail(const std::string &why, std::string &err)
{
	if (!broken_.load(std::memory_order_relaxed)) {
		why_ = why;
		if (ctrl_ >= 0)
			close(ctrl_);
		if (data_ >= 0)
			close(data_);
		ctrl_ = data_ = -1;
		// Release: why_ is set before a reader sees broken().
		broken_.store(true, std::memory_order_release);
	}
	err = "relay link down: " + why_;
	return false;
}

bool RelayLink::send_bytes(int fd, const void *p, size_t n, const char *what, std::string &err)
{
	const char *c = static_cast<const char *>(p);
	const int64_t deadline = now_ms() + kIoTimeoutMs;
	bool late = false;
	while (n) {
		ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w > 0) {
			c += w;
			n -= static_cast<size_t>(w);
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
			return fail(std::string("sending ") + what + ": " + strerror(errno), err);
		// Past the deadline, one look without waiting: a thread kept off
		// its CPU that long fails only if the socket is still not ready.
		const int64_t left = deadline - now_ms();
		struct pollfd pf = {fd, POLLOUT, 0};
		if (late || poll(&pf, 1, left > 0 ? static_cast<int>(left) : 0) == 0)
			return fail(std::string("sending ") + what + ": no progress in " +
					    std::to_string(kIoTimeoutMs) + " ms",
				    err);
		late = left <= 0;
	}
	return true;
}

bool RelayLink::recv_bytes(int fd, void *p, size_t n, const char *what, std::string &err)
{
	char *c = static_cast<char *>(p);
	const int64_t deadline = now_ms() + kIoTimeoutMs;
	bool late = false;
	while (n) {
		ssize_t r = ::recv(fd, c, n, MSG_DONTWAIT);
		if (r > 0) {
			c += r;
			n -= static_cast<size_t>(r);
			continue;
		}
		if (r == 0)
			return fail(std::string("answer to ") + what + ": the relay closed the connection",
				    err);
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return fail(std::string("answer to ") + what + ": " + strerror(errno), err);
		const int64_t left = deadline - now_ms(); // as send_bytes'
		struct pollfd pf = {fd, POLLIN, 0};
		if (late || poll(&pf, 1, left > 0 ? static_cast<int>(left) : 0) == 0)
			return fail(std::string("no answer to ") + what + " in " +
					    std::to_string(kIoTimeoutMs) + " ms",
				    err);
		late = left <= 0;
	}
	return true;
}

// mu_ held by the caller, or the link not shared yet (open).
bool RelayLink::command(uint32_t cmd, const std::string &payload, void *reply, size_t reply_len,
			std::string &err)
{
	if (broken_.load(std::memory_order_acquire))
		return fail(why_, err);
	std::string m;
	put64(m, 0);
	put64(m, payload.size());
	put32(m, cmd);
	put32(m, 0);
	m += payload;
	const std::string what = "command " + std::to_string(cmd);
	if (!send_bytes(ctrl_, m.data(), m.size(), what.c_str(), err))
		return false;
	return reply_len == 0 || recv_bytes(ctrl_, reply, reply_len, what.c_str(), err);
}

// mu_ held.
bool RelayLink::add_stream_locked(const std::string &channel, const std::string &path, uint64_t &id,
				  std::string &err)
{
	std::vector<uint64_t> ids;
	if (!add_streams_locked({channel}, path, ids, err))
		return false;
	id = ids[0];
	return true;
}

// mu_ held.  One ADD_STREAM per channel, written at once, then their
// answers read (the relay answers a connection's commands in order).
bool RelayLink::add_streams_locked(const std::vector<std::string> &channels, const std::string &path,
				   std::vector<uint64_t> &ids, std::string &err)
{
	ids.clear();
	std::string m;
	for (const std::string &channel : channels) {
		if (path.size() >= kPathMax || channel.size() >= kChannelNameLen) {
			err = "relay: stream path too long for the relay (" + path + ")";
			return false;
		}
		std::string p;
		put_name(p, channel, kChannelNameLen);
		put_name(p, path, kPathLen);
		put64(p, 0); // no tracefile rotation
		put64(p, 0);
		put64(m, 0);
		put64(m, p.size());
		put32(m, kAddStream);
		put32(m, 0);
		m += p;
	}
	if (broken_.load(std::memory_order_relaxed)) // under mu_, which fail() holds
		return fail(why_, err);
	if (!send_bytes(ctrl_, m.data(), m.size(), "streams", err))
		return false;
	std::string refused; // the first refusal; every answer is read still
	for (const std::string &channel : channels) {
		uint8_t r[12];
		if (!recv_bytes(ctrl_, r, sizeof r, "streams", err))
			return false;
		if (get32(r + 8) != kLttngOk) {
			if (refused.empty())
				refused = "relay refused stream " + path + "/" + channel + " (code " +
					  std::to_string(get32(r + 8)) + ")";
			continue;
		}
		ids.push_back(get64(r));
		added_.emplace_back(ids.back(), channel == "metadata");
	}
	if (refused.empty())
		return true;
	err = refused;
	return false;
}

// mu_ held.
bool RelayLink::streams_sent_locked(std::string &err)
{
	uint8_t r[4];
	if (!command(kStreamsSent, std::string(), r, sizeof r, err))
		return false;
	if (get32(r) != kLttngOk) {
		err = "relay refused STREAMS_SENT (code " + std::to_string(get32(r)) + ")";
		return false;
	}
	return true;
}

bool RelayLink::publish(Publication &p, std::string &err)
{
	std::lock_guard<std::mutex> g(mu_);
	std::vector<std::string> names{"metadata"};
	names.insert(names.end(), p.channels.begin(), p.channels.end());
	std::vector<uint64_t> ids;
	if (!add_streams_locked(names, p.path, ids, err))
		return false;
	p.meta_id = ids[0];
	p.ids.assign(ids.begin() + 1, ids.end());
	if (keep_)
		kept_[p.meta_id].path = p.path;
	if (!send_kept_metadata_locked(p.meta_id, p.metadata, err) || !streams_sent_locked(err))
		return false;
	if (p.empty.size() != p.ids.size()) // not live
		return true;
	for (size_t i = 0; i < p.ids.size(); i++) {
		Stream &st = streams_[p.ids[i]];
		st.empty = p.empty[i];
		st.has_empty = true;
	}
	nudge_locked(p.retired_ts, p.period_ns);
	return true;
}

bool RelayLink::send_metadata(uint64_t id, const std::string &text, std::string &err)
{
	std::lock_guard<std::mutex> g(mu_);
	return send_kept_metadata_locked(id, text, err);
}

// mu_ held.  A kept stream's text (keep_metadata) is kept as sent.
bool RelayLink::send_kept_metadata_locked(uint64_t id, const std::string &text, std::string &err)
{
	auto k = kept_.find(id);
	if (k == kept_.end())
		return send_metadata_locked(id, text, err);
	const std::string t = k->second.text.empty() && at_open_ ? at_open_(text) : text;
	if (!send_metadata_locked(id, t, err))
		return false;
	k->second.text += t;
	return true;
}

// mu_ held.
bool RelayLink::send_metadata_locked(uint64_t id, const std::string &text, std::string &err)
{
	std::string p;
	put64(p, id);
	put32(p, 0); // no padding
	p += text;
	return command(kSendMetadata, p, nullptr, 0, err); // unanswered
}

void RelayLink::keep_metadata(std::function<std::string(const std::string &)> at_open)
{
	std::lock_guard<std::mutex> g(mu_);
	keep_ = true;
	at_open_ = std::move(at_open);
}

size_t RelayLink::rewrite_metadata(const std::function<std::string(const std::string &)> &rewrite,
				   std::string &err)
{
	std::lock_guard<std::mutex> g(mu_);
	std::map<uint64_t, Kept> now;
	size_t n = 0;
	for (auto &[id, k] : kept_) {
		// ADD_STREAM of a path that has a metadata stream: lttng-relayd
		// 2.13 opens <path>/metadata again with O_TRUNC; the stream is
		// never published (no STREAMS_SENT follows on this link), so live
		// readers see only the first one, whose text they read.
		const std::string t = rewrite(k.text);
		uint64_t nid = 0;
		if (!add_stream_locked("metadata", k.path, nid, err) || !send_metadata_locked(nid, t, err)) {
			now.emplace(id, std::move(k)); // what the relay holds: unknown
			continue;
		}
		now.emplace(nid, Kept{k.path, t});
		n++;
	}
	kept_ = std::move(now);
	return n;
}

bool RelayLink::put_file(const std::string &name, const std::string &bytes, std::string &err)
{
	if (bytes.empty() || bytes.size() > UINT32_MAX) {
		err = "relay: a file of " + std::to_string(bytes.size()) + " bytes cannot be sent";
		return false;
	}
	uint64_t id = 0;
	{
		std::lock_guard<std::mutex> g(mu_);
		if (!add_stream_locked(name, base_, id, err))
			return false;
		// One "packet": the bytes, and an index entry (the relay counts a
		// stream of a 2.4+ peer stored once data and index are both in).
		std::string h;
		put64(h, 0);
		put64(h, id);
		put64(h, 0); // net sequence number
		put32(h, static_cast<uint32_t>(bytes.size()));
		put32(h, 0);
		std::string x;
		put64(x, id);
		put64(x, 0);
		put64(x, static_cast<uint64_t>(bytes.size()) * 8); // packet_size
		put64(x, static_cast<uint64_t>(bytes.size()) * 8); // content_size
		for (int i = 0; i < 4; i++)                        // stamps, discarded, stream class
			put64(x, 0);
		if (minor_ >= 8) {
			put64(x, 0);
			put64(x, 0);
		}
		uint8_t r[4];
		if (broken_.load(std::memory_order_relaxed)) // under mu_, which fail() holds
			return fail(why_, err);
		if (!send_bytes(data_, h.data(), h.size(), "a data header", err) ||
		    !send_bytes(data_, bytes.data(), bytes.size(), "a file", err) ||
		    !command(kSendIndex, x, r, sizeof r, err))
			return false;
		if (get32(r) != kLttngOk) {
			err = "relay refused the index of " + name + " (code " + std::to_string(get32(r)) +
			      ")";
			return false;
		}
	}
	return wait_stored(id, 0, err);
}

bool RelayLink::send_packet(uint64_t id, const uint8_t *pkt, size_t n, std::string &err)
{
	std::lock_guard<std::mutex> g(mu_);
	return send_packet_locked(id, pkt, n, err);
}

uint64_t RelayLink::packets_sent(uint64_t id)
{
	std::lock_guard<std::mutex> g(mu_);
	auto it = streams_.find(id);
	return it == streams_.end() ? 0 : it->second.next_seq;
}

// mu_ held.  The index is the packet's header (CTF packet context), its
// sizes those of the bytes the relay stores.
bool RelayLink::send_packet_locked(uint64_t id, const uint8_t *pkt, size_t n, std::string &err)
{
	strata_packet_header ph;
	if (n < sizeof ph) {
		err = "packet shorter than its header";
		return false;
	}
	if (n > UINT32_MAX) {
		err = "packet too large for the relay's data header";
		return false;
	}
	memcpy(&ph, pkt, sizeof ph);
	Stream &st = streams_[id];
	const uint64_t seq = st.next_seq;
	std::string h;
	put64(h, 0);
	put64(h, id);
	put64(h, seq);
	put32(h, static_cast<uint32_t>(n));
	put32(h, 0); // packets are stored whole: no padding to add
	std::string x;
	put64(x, id);
	put64(x, seq);
	put64(x, static_cast<uint64_t>(n) * 8);
	put64(x, std::min<uint64_t>(ph.content_size, static_cast<uint64_t>(n) * 8));
	put64(x, ph.timestamp_begin);
	put64(x, ph.timestamp_end);
	put64(x, ph.events_discarded);
	put64(x, ph.stream_id);
	if (minor_ >= 8) {
		put64(x, ph.stream_instance_id);
		put64(x, ph.packet_seq_num);
	}
	uint8_t r[4];
	if (broken_.load(std::memory_order_acquire))
		return fail(why_, err);
	if (!send_bytes(data_, h.data(), h.size(), "a data header", err) ||
	    !send_bytes(data_, pkt, n, "a packet", err))
		return false;
	if (!command(kSendIndex, x, r, sizeof r, err))
		return false;
	if (get32(r) != kLttngOk) {
		err = "relay refused a packet index (code " + std::to_string(get32(r)) + ")";
		return false;
	}
	if (st.next_seq == 0)
		st.first_pseq = ph.packet_seq_num;
	st.next_seq++;
	st.stream_class = ph.stream_id;
	st.safe_ts = std::max(st.safe_ts, ph.timestamp_end);
	st.pseq = ph.packet_seq_num;
	st.discarded = ph.events_discarded;
	return true;
}

void RelayLink::loss(uint64_t &events, uint64_t &packets)
{
	std::lock_guard<std::mutex> g(mu_);
	events = packets = 0;
	for (const auto &kv : streams_) {
		const Stream &st = kv.second;
		if (!st.next_seq)
			continue;
		events += st.discarded;
		const uint64_t span = st.pseq - st.first_pseq + 1; // packets from the first to the last
		packets += span > st.next_seq ? span - st.next_seq : 0;
	}
}

bool RelayLink::wait_stored(uint64_t id, uint64_t last_seq, std::string &err)
{
	std::string p;
	put64(p, id);
	put64(p, last_seq);
	uint8_t r[4];
	// The data connection is not answered: ask until the relay has stored
	// (data and index) up to last_seq, within a bound.
	const int64_t deadline = now_ms() + kPendingTimeoutMs;
	for (;;) {
		{
			std::lock_guard<std::mutex> g(mu_);
			if (!command(kDataPending, p, r, sizeof r, err))
				return false;
		}
		if (get32(r) == 0)
			return true;
		if (now_ms() >= deadline) {
			err = "relay still storing stream " + std::to_string(id) + " after " +
			      std::to_string(kPendingTimeoutMs) + " ms";
			return false;
		}
		struct timespec ts = {0, 2000000}; // 2 ms between polls of the relay
		nanosleep(&ts, nullptr);
	}
}

} // namespace strata
