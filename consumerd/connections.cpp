/*
 * connections.cpp - the daemon's peers (connections.h): take, read, frame,
 * HELLO, answer, drop.  The contract is connections.h's.
 */
#include "connections.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sys/epoll.h>
#include <sys/resource.h>

#include "access.h"
#include "log.h"
#include "proto/sock.h"

namespace strata {
namespace daemon_impl {

void Connections::send(Conn &c, uint32_t seq, proto::Body body, int pass_fd)
{
	if (c.table) // a table join reads no answer (grant_tables.h); refusals are logged
		return;
	if (c.role == proto::Role::Controller)
		host_.before_controller_answer(); // persistence.h: kept before a controller hears of it
	proto::Message m;
	m.seq = seq;
	m.body = std::move(body);
	m.version = c.version;
	if (c.corked) {
		if (pass_fd < 0) {
			const std::vector<uint8_t> b = proto::encode(m);
			c.out.insert(c.out.end(), b.begin(), b.end());
			return;
		}
		// A descriptor travels with its own message's bytes (the
		// process receives it with that message): what is queued
		// leaves first.
		if (!c.out.empty()) {
			int q = proto::send_all(c.fd, c.out.data(), c.out.size(), -1,
						proto::now_ms() + kReplyTimeoutMs);
			c.out.clear();
			if (q < 0)
				VLOG("send to pid %d failed: %s", c.cred.pid, strerror(-q));
		}
	}
	int r = proto::send_message(c.fd, m, pass_fd, proto::now_ms() + kReplyTimeoutMs);
	if (r < 0)
		VLOG("send to pid %d failed: %s", c.cred.pid, strerror(-r));
	if (r < 0 && c.asked)
		c.answer_lost = true;
}

void Connections::flush_out(Conn &c)
{
	c.corked = false;
	if (c.table) // HELLO_REPLY, queued before REGISTER said so: nobody reads it
		c.out.clear();
	if (c.out.empty())
		return;
	if (c.role == proto::Role::Controller)
		host_.before_controller_answer(); // as in send()
	int r = proto::send_all(c.fd, c.out.data(), c.out.size(), -1, proto::now_ms() + kReplyTimeoutMs);
	c.out.clear();
	if (r < 0)
		VLOG("send to pid %d failed: %s", c.cred.pid, strerror(-r));
	if (r < 0 && c.asked)
		c.answer_lost = true;
}

void Connections::reply(Conn &c, uint32_t seq, int status, const std::string &text)
{
	proto::Reply r;
	r.status = status;
	r.text = text.size() > proto::kMaxText ? text.substr(0, proto::kMaxText) : text;
	send(c, seq, r);
}

void Connections::drop(int fd)
{
	loop_.remove(fd);
	auto it = conns_.find(fd);
	if (it == conns_.end())
		return;
	Conn &c = *it->second;
	flush_out(c); // an error answer goes out before the close
	Host::Ended e;
	e.id = c.id;
	e.pid = c.cred.pid;
	e.registered = c.registered;
	e.kmod = c.kmod;
	e.registered_at = c.registered_at;
	e.answer_lost = c.answer_lost;
	for (auto &g : c.grants)
		e.granted.push_back(g.second.session_id);
	conns_.erase(it);
	host_.closed(e);
}

size_t max_conns()
{
	static const size_t n = [] {
		struct rlimit r;
		const size_t floor = 1024;
		if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur == RLIM_INFINITY)
			return floor;
		const size_t usable = r.rlim_cur > 256 ? static_cast<size_t>(r.rlim_cur) - 256 : 0;
		return std::max(floor, usable * 2 / 3);
	}();
	return n;
}

// Listener::Host: a connection accepted (or a test's socketpair end).
bool Connections::take_conn(int fd, bool quiet)
{
	if (conns_.size() >= max_conns()) {
		close(fd);
		logf("too many connections, refusing one");
		return false;
	}
	auto c = std::make_unique<Conn>();
	c->fd = fd; // closed with c when refused
	c->id = next_id_++;
	c->quiet = quiet;
	socklen_t l = sizeof(c->cred);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c->cred, &l) < 0)
		return false;
	if (!loop_.add(fd, EPOLLIN | EPOLLRDHUP, [this, fd] {
		    auto it = conns_.find(fd);
		    if (it != conns_.end())
			    on_readable(*it->second);
	    })) {
		// Kept unwatched its client would wait for an answer
		// for good: refused, as when there are too many.
		logf("cannot watch a new connection: %s: refusing it", strerror(errno));
		return false;
	}
	conns_[fd] = std::move(c);
	return true;
}

// Listener::Host: the quiet socket's queue (listener.h): every connection
// taken and what it sent read now, so that a command or a stop sees the
// processes that joined from the table before it.
void Connections::serve_quiet()
{
	listener_.read_knocks();
	std::vector<int> fds;
	listener_.accept(true, &fds);
	for (int fd : fds) {
		auto it = conns_.find(fd); // handling one may have dropped another
		if (it != conns_.end())
			on_readable(*it->second);
	}
}

void Connections::on_readable(Conn &c)
{
	const int fd = c.fd;
	uint8_t buf[65536];
	std::vector<int> fds;
	for (;;) {
		fds.clear();
		long r = proto::recv_some(fd, buf, sizeof(buf), &fds);
		if (r == -EAGAIN || r == -EWOULDBLOCK)
			break;
		for (int got : fds) {
			if (c.fds.size() < kMaxQueuedFds)
				c.fds.push_back(got);
			else
				close(got);
		}
		if (r <= 0) { // EOF or error: the peer is gone
			// It closed with our answer unread (af_unix: ECONNRESET).
			if (r == -ECONNRESET && c.asked)
				c.answer_lost = true;
			drop(fd);
			return;
		}
		c.in.insert(c.in.end(), buf, buf + r);
		size_t off = 0;
		if (!frame(c, off)) {
			drop(fd);
			return;
		}
		host_.before_answers(); // grant_tables.h: a process a controller starts sees the change
		flush_out(c);
		c.in.erase(c.in.begin(), c.in.begin() + static_cast<long>(off));
	}
}

// Every complete message in c.in from `off` on decoded and handled, its
// answers corked; `off` past the last one.  False: close the connection.
bool Connections::frame(Conn &c, size_t &off)
{
	c.corked = true;
	while (c.in.size() - off >= proto::kHeaderSize) {
		proto::Header h;
		proto::DecodeResult d = proto::decode_header(c.in.data() + off, proto::kHeaderSize, h);
		if (d && h.length > proto::kMaxPayload) { // a reply's larger limit is for clients only
			d.error = proto::Error::Oversized;
			d.text = "payload of " + std::to_string(h.length) + " bytes exceeds " +
				 std::to_string(proto::kMaxPayload);
		}
		if (!d) {
			logf("pid %d: %s; closing its connection", c.cred.pid, d.text.c_str());
			reply(c, h.seq, -EPROTO, d.text);
			return false;
		}
		if (c.in.size() - off - proto::kHeaderSize < h.length)
			break;
		proto::Message m;
		d = proto::decode(c.in.data() + off, proto::kHeaderSize + h.length, m);
		off += proto::kHeaderSize + h.length;
		if (!d) {
			logf("pid %d: bad message: %s; closing its connection", c.cred.pid, d.text.c_str());
			reply(c, h.seq, -EPROTO, d.text);
			return false;
		}
		if (!handle(c, m))
			return false;
	}
	return true;
}

// A connection that has not said HELLO yet: is the HELLO waiting in its
// socket (with what it read already) a process's?  Peeked, not consumed.
bool Connections::hello_from_process(const Conn &c)
{
	uint8_t buf[512];
	size_t have = std::min(c.in.size(), sizeof(buf));
	if (have) // an empty vector's data() may be null
		memcpy(buf, c.in.data(), have);
	const ssize_t n = recv(c.fd, buf + have, sizeof(buf) - have, MSG_PEEK | MSG_DONTWAIT);
	if (n > 0)
		have += static_cast<size_t>(n);
	proto::Header h;
	if (have < proto::kHeaderSize || !proto::decode_header(buf, proto::kHeaderSize, h) ||
	    h.length > have - proto::kHeaderSize)
		return false;
	proto::Message m;
	return proto::decode(buf, proto::kHeaderSize + h.length, m) && m.type() == proto::Type::Hello &&
	       std::get<proto::Hello>(m.body).role == static_cast<uint32_t>(proto::Role::Process);
}

// A process hands its buffer over and closes without waiting for the
// answer (libtrace/control/sync_query.cpp), so a BUFFER may still sit in a
// socket, or a connection in the listen queue, when a controller's STOP
// arrives.  Everything processes sent before now is read and handled
// first: the STOP of `strata record` comes after its command exited, and
// so after every BUFFER that command's processes sent.  Controllers'
// connections are left alone (their commands keep their order), and so is
// a connection whose HELLO is not all there yet.
void Connections::serve_pending()
{
	if (serving_pending_)
		return;
	serving_pending_ = true;
	listener_.accept(false);
	serve_quiet();
	std::vector<int> fds;
	for (auto &kv : conns_) {
		const Conn &c = *kv.second;
		if (c.hello ? c.role == proto::Role::Process : hello_from_process(c))
			fds.push_back(kv.first);
	}
	for (int fd : fds) {
		auto it = conns_.find(fd); // handling one may have dropped another
		if (it != conns_.end())
			on_readable(*it->second);
	}
	serving_pending_ = false;
}

Conn *Connections::by_id(uint64_t id)
{
	for (auto &kv : conns_)
		if (kv.second->id == id)
			return kv.second.get();
	return nullptr;
}

pid_t Connections::pid_of(uint64_t id)
{
	const Conn *c = by_id(id);
	return c ? c->cred.pid : 0;
}

void Connections::read_process(pid_t pid)
{
	std::vector<int> mine;
	for (auto &c : conns_)
		if (c.second->cred.pid == pid && c.second->role == proto::Role::Process)
			mine.push_back(c.first);
	for (int fd : mine) {
		auto c = conns_.find(fd);
		if (c != conns_.end())
			on_readable(*c->second); // may drop it (EOF)
	}
}

// Returns false to close the connection.
bool Connections::handle(Conn &c, const proto::Message &m)
{
	if (c.hello) {
		c.asked = false; // it read the answer and went on (REGISTER sets it again)
		return host_.dispatch(c, m);
	}
	if (m.type() != proto::Type::Hello) {
		reply(c, m.seq, -EPROTO, "HELLO expected first");
		return false;
	}
	hello(c, m.seq, std::get<proto::Hello>(m.body));
	return c.hello;
}

void Connections::hello(Conn &c, uint32_t seq, const proto::Hello &m)
{
	if (m.max_version < proto::kMinVersion || m.min_version > proto::kVersion) {
		reply(c, seq, -EPROTONOSUPPORT,
		      "no common protocol version: client speaks " + std::to_string(m.min_version) + ".." +
			      std::to_string(m.max_version) + ", daemon " +
			      std::to_string(proto::kMinVersion) + ".." + std::to_string(proto::kVersion));
		return;
	}
	std::string why;
	if (m.role != static_cast<uint32_t>(proto::Role::Process) && !peer_in_our_pidns(c.fd, c.cred, why)) {
		reply(c, seq, -EPERM,
		      "pid " + std::to_string(c.cred.pid) + " may not control this daemon: " + why +
			      "; a container's processes are traced, never controllers (docs/security.md)");
		return;
	}
	c.hello = true;
	c.role = static_cast<proto::Role>(m.role);
	proto::HelloReply r;
	r.version = std::min<uint16_t>(m.max_version, proto::kVersion);
	c.version = r.version; // this answer and everything after it
	r.server_pid = static_cast<uint32_t>(getpid());
	send(c, seq, r);
}

} // namespace daemon_impl
} // namespace strata
