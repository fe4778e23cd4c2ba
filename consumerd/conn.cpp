/*
 * conn.cpp - the control connections (daemon_impl.h): accept, read,
 * frame, route each message to its handler, answer, drop.
 *
 * Contract: main thread only.  Every byte read goes through the protocol
 * decoder; a peer that sends garbage gets an error REPLY and is dropped.
 * Answers to one read collect in Conn::out (corked) and leave in one send;
 * a send never blocks longer than kReplyTimeoutMs.
 */
#include "daemon_impl.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sys/epoll.h>
#include <sys/resource.h>

#include "proto/sock.h"

namespace strata {
namespace daemon_impl {

void Daemon::send(Conn &c, uint32_t seq, proto::Body body, int pass_fd)
{
	if (c.table) // a table join reads no answer (grant_tables.h); refusals are logged
		return;
	if (c.role == proto::Role::Controller)
		persist_.save_if_changed(); // persistence.h: kept before a controller hears of it
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
}

void Daemon::flush_out(Conn &c)
{
	c.corked = false;
	if (c.table) // HELLO_REPLY, queued before REGISTER said so: nobody reads it
		c.out.clear();
	if (c.out.empty())
		return;
	if (c.role == proto::Role::Controller)
		persist_.save_if_changed(); // as in send()
	int r = proto::send_all(c.fd, c.out.data(), c.out.size(), -1, proto::now_ms() + kReplyTimeoutMs);
	c.out.clear();
	if (r < 0)
		VLOG("send to pid %d failed: %s", c.cred.pid, strerror(-r));
}

void Daemon::reply(Conn &c, uint32_t seq, int status, const std::string &text)
{
	proto::Reply r;
	r.status = status;
	r.text = text.size() > proto::kMaxText ? text.substr(0, proto::kMaxText) : text;
	send(c, seq, r);
}

void Daemon::drop(int fd)
{
	loop_.remove(fd);
	auto it = conns_.find(fd);
	if (it == conns_.end())
		return;
	Conn &c = *it->second;
	flush_out(c); // an error answer goes out before the close
	Proc *p = c.registered ? procs_.find(c.cred.pid) : nullptr;
	// A process closes its connection after applying what it was granted
	// (and quiescing): that is its acknowledgement.
	if (c.registered && !c.kmod) { // a module process acknowledges to the module
		if (p)
			p->acked = std::max(p->acked, c.registered_at);
		acks_.acknowledge(c.cred.pid, c.registered_at);
	}
	const int gone_pidfd =
		p && p->gone ? p->pidfd : 0; // a process that exited before we read it: its exit is now
	const uint64_t conn_id = c.id;
	const pid_t peer = c.cred.pid;
	conns_.erase(it);
	acks_.forget(conn_id);
	if (gone_pidfd)
		on_exit(gone_pidfd);
	// The sessions this connection owned (CREATE with kCreateOwned) end
	// with it, whatever ended it; nobody is left to answer.
	end_owned(conn_id, peer);
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
bool Daemon::take_conn(int fd, bool quiet)
{
	if (conns_.size() >= max_conns()) {
		close(fd);
		logf("too many connections, refusing one");
		return false;
	}
	auto c = std::make_unique<Conn>();
	c->fd = fd; // closed with c when refused
	c->id = next_conn_id_++;
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
void Daemon::serve_quiet()
{
	std::vector<int> fds;
	listener_.accept(true, &fds);
	for (int fd : fds) {
		auto it = conns_.find(fd); // handling one may have dropped another
		if (it != conns_.end())
			on_readable(*it->second);
	}
}

void Daemon::on_readable(Conn &c)
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
			drop(fd);
			return;
		}
		c.in.insert(c.in.end(), buf, buf + r);
		size_t off = 0;
		if (!frame(c, off)) {
			drop(fd);
			return;
		}
		publish_tables(); // before a controller's answer: a process it starts sees the change
		flush_out(c);
		c.in.erase(c.in.begin(), c.in.begin() + static_cast<long>(off));
	}
}

// Every complete message in c.in from `off` on decoded and handled, its
// answers corked; `off` past the last one.  False: close the connection.
bool Daemon::frame(Conn &c, size_t &off)
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
bool Daemon::hello_from_process(const Conn &c)
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
void Daemon::serve_pending()
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

Conn *Daemon::conn_by_id(uint64_t id)
{
	for (auto &kv : conns_)
		if (kv.second->id == id)
			return kv.second.get();
	return nullptr;
}

pid_t Daemon::conn_pid(uint64_t id)
{
	const Conn *c = conn_by_id(id);
	return c ? c->cred.pid : 0;
}

namespace {
// Who may send a message type: a process before or after its REGISTER, or
// a controller.
enum class From { Unregistered, Registered, Controller };
// What a controller's command does to the sessions the state file keeps
// (persistence.h): a question that only reads them leaves the file as it is.
enum class Effect { Reads, Changes };
} // namespace

// Returns false to close the connection.
bool Daemon::handle(Conn &c, const proto::Message &m)
{
	using proto::Type;
	struct Route {
		Type type;
		From from;
		Effect effect; // a process's messages: what their handlers mark (procs.cpp)
		Command fn;
	};
	// WAIT and SNAPSHOT are counted as changes: they settle what processes
	// sent, and the file is rewritten after them as before.
	static const Route routes[] = {
		{Type::Register, From::Unregistered, Effect::Changes, &Daemon::do_register},
		{Type::Buffer, From::Registered, Effect::Changes, &Daemon::do_buffer},
		{Type::AggRegion, From::Registered, Effect::Changes, &Daemon::do_agg_region},
		{Type::AggFetch, From::Controller, Effect::Reads, &Daemon::do_agg_fetch},
		{Type::Create, From::Controller, Effect::Changes, &Daemon::do_create},
		{Type::EnableEvent, From::Controller, Effect::Changes, &Daemon::do_enable},
		{Type::DisableEvent, From::Controller, Effect::Changes, &Daemon::do_disable},
		{Type::TargetRule, From::Controller, Effect::Changes, &Daemon::do_target_rule},
		{Type::Start, From::Controller, Effect::Changes, &Daemon::do_start},
		{Type::Stop, From::Controller, Effect::Changes, &Daemon::do_stop},
		{Type::Destroy, From::Controller, Effect::Changes, &Daemon::do_destroy},
		{Type::List, From::Controller, Effect::Reads, &Daemon::do_list},
		{Type::Wait, From::Controller, Effect::Changes, &Daemon::do_wait},
		{Type::Snapshot, From::Controller, Effect::Changes, &Daemon::do_snapshot},
		{Type::SnapshotOn, From::Controller, Effect::Changes, &Daemon::do_snapshot_on},
		{Type::Status, From::Controller, Effect::Reads, &Daemon::do_status},
	};
	if (!c.hello) {
		if (m.type() != Type::Hello) {
			reply(c, m.seq, -EPROTO, "HELLO expected first");
			return false;
		}
		do_hello(c, m.seq, std::get<proto::Hello>(m.body));
		return c.hello;
	}
	const bool ctl = c.role == proto::Role::Controller;
	const From from = ctl ? From::Controller : c.registered ? From::Registered : From::Unregistered;
	const Route *route = nullptr;
	for (const Route &r : routes)
		if (r.type == m.type() && r.from == from)
			route = &r;
	// persistence.h: sessions may change, except on a question that only
	// reads them (the table's Reads), whose answer then describes what
	// the state file already holds, or what serve_quiet/settle_attaches
	// below integrate, which marks the state dirty itself (procs.cpp).
	// Not rewriting the file there keeps `strata status` cheap with
	// thousands of live buffers (issue 38).  A command refused below
	// changes nothing.
	if (ctl && route && route->effect == Effect::Changes)
		persist_.changed();
	if (ctl) {
		serve_quiet();     // a command sees every process that joined from the table
		settle_attaches(); // a command sees every buffer already handed over
		tables_.dirty();   // it may change what a process is granted
	}
	sessions_.take_kgen(); // what a change makes is the change's (Answer::kgen)
	if (route) {
		(this->*route->fn)(c, m);
		return true;
	}
	reply(c, m.seq, -EPERM,
	      "message type " + std::to_string(static_cast<int>(m.type())) +
		      " not allowed here for this role");
	return true;
}

void Daemon::answer(Conn &c, uint32_t seq, const Answer &a)
{
	if (a.status != 0 || !a.notify) {
		reply(c, seq, a.status, a.text);
		return;
	}
	PendingReply p = acks_.signal(a.who, a.rule, a.kgen);
	p.conn_id = c.id;
	p.seq = seq;
	p.text = a.text;
	if (c.version >= 2) { // answered now; WAIT asks for the acknowledgements
		acks_.owe(c.id, p);
		reply(c, seq, 0,
		      a.text + " (generation " + std::to_string(acks_.generation()) + ", " +
			      std::to_string(p.signalled) + " running process(es) signalled)");
		return;
	}
	if (p.waiting.empty()) {
		reply(c, seq, 0, a.text);
		return;
	}
	acks_.hold(std::move(p));
}

void Daemon::deliver(const std::vector<DueReply> &due)
{
	for (const DueReply &d : due)
		if (d.gate)
			end_stop(d); // stopping.cpp
		else if (Conn *c = conn_by_id(d.conn_id))
			reply(*c, d.seq, d.status, d.text);
}

void Daemon::do_hello(Conn &c, uint32_t seq, const proto::Hello &m)
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
