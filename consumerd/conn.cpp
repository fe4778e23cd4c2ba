/*
 * conn.cpp - the control connection (daemon_impl.h).
 *
 * Contract: main thread only.  Every byte read goes through the protocol
 * decoder; a peer that sends garbage gets an error REPLY and is dropped.
 * Answers to one read collect in Conn::out (corked) and leave in one send;
 * a send never blocks longer than kReplyTimeoutMs.
 */
#include "daemon_impl.h"

namespace strata {
namespace daemon_impl {

void Daemon::send(Conn &c, uint32_t seq, proto::Body body, int pass_fd)
{
	if (c.table) // a table join reads no answer (grant_table.cpp); refusals are logged
		return;
	if (state_dirty_ && c.role == proto::Role::Controller)
		persist_sessions(); // restart.cpp: kept before a controller hears of it
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
			int q = proto::send_all(c.fd, c.out.data(), c.out.size(), -1, proto::now_ms() + kReplyTimeoutMs);
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
	if (state_dirty_ && c.role == proto::Role::Controller)
		persist_sessions(); // as in send()
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
	epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);
	auto it = conns_.find(fd);
	if (it == conns_.end())
		return;
	flush_out(*it->second); // an error answer goes out before the close
	// A process closes its connection after applying what it was granted
	// (and quiescing): that is its acknowledgement.
	if (it->second->registered && !it->second->kmod) { // a module process acknowledges to the module
		auto p = pid_to_pidfd_.find(it->second->cred.pid);
		if (p != pid_to_pidfd_.end()) {
			Proc &pr = procs_[p->second];
			pr.acked = std::max(pr.acked, it->second->registered_at);
		}
		acknowledge(it->second->cred.pid, it->second->registered_at);
	}
	int gone_pidfd = 0; // a process that exited before we read it: its exit is now
	if (it->second->registered) {
		auto p = pid_to_pidfd_.find(it->second->cred.pid);
		if (p != pid_to_pidfd_.end() && procs_[p->second].gone)
			gone_pidfd = p->second;
	}
	const uint64_t conn_id = it->second->id;
	const pid_t peer = it->second->cred.pid;
	conns_.erase(it);
	if (gone_pidfd)
		on_exit(gone_pidfd);
	// The sessions this connection owned (CREATE with kCreateOwned) end
	// with it, whatever ended it: their controller (`strata record`)
	// exited, was killed, or closed the connection.
	for (;;) {
		auto s = std::find_if(sessions_.begin(), sessions_.end(),
				      [&](const std::unique_ptr<Session> &x) { return x->owner_conn == conn_id; });
		if (s == sessions_.end())
			break;
		INFO("session %s: its owner (pid %d) closed its connection", (*s)->name.c_str(), peer);
		destroy_session(**s, nullptr, 0);
	}
}

void Daemon::accept_conns(int lfd, std::vector<int> *accepted)
{
	if (lfd < 0)
		lfd = lfd_;
	for (;;) {
		int fd = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0) {
			if (errno != EAGAIN && errno != EINTR)
				logf("accept: %s", strerror(errno));
			return;
		}
		if (conns_.size() >= kMaxConns) {
			close(fd);
			logf("too many connections, refusing one");
			continue;
		}
		auto c = std::make_unique<Conn>();
		c->fd = fd;
		c->id = next_conn_id_++;
		socklen_t l = sizeof(c->cred);
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c->cred, &l) < 0) {
			close(fd);
			c->fd = -1;
			continue;
		}
		struct epoll_event ev = {};
		ev.events = EPOLLIN | EPOLLRDHUP;
		ev.data.fd = fd;
		epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev);
		conns_[fd] = std::move(c);
		if (accepted)
			accepted->push_back(fd);
	}
}

// The quiet socket's queue (proto.h, kQuietSuffix): every connection
// accepted and what it sent read now, so that a command or a stop sees the
// processes that joined from the table before it.
void Daemon::serve_quiet()
{
	if (qfd_ < 0)
		return;
	std::vector<int> fds;
	accept_conns(qfd_, &fds);
	for (int fd : fds) {
		auto it = conns_.find(fd); // handling one may have dropped another
		if (it != conns_.end()) {
			it->second->quiet = true;
			on_readable(*it->second);
		}
	}
}

// on_socket: the quiet socket has a connection: wait kQuietDelayNs for more
// (one timer, one wake-up for a burst of starts).  Else the timer fired:
// serve the queue, then listen for the next first connection.
void Daemon::arm_quiet(bool on_socket)
{
	constexpr long kQuietDelayNs = 20 * 1000 * 1000;
	if (on_socket && quiet_tfd_ >= 0) {
		struct itimerspec its = {};
		its.it_value.tv_nsec = kQuietDelayNs;
		if (timerfd_settime(quiet_tfd_, 0, &its, nullptr) == 0)
			return;
	}
	uint64_t ticks;
	if (quiet_tfd_ >= 0 && read(quiet_tfd_, &ticks, sizeof ticks) < 0 && errno != EAGAIN)
		logf("quiet timer: %s", strerror(errno));
	serve_quiet();
	struct epoll_event ev = {};
	ev.events = EPOLLIN | EPOLLONESHOT;
	ev.data.fd = qfd_;
	epoll_ctl(epfd_, EPOLL_CTL_MOD, qfd_, &ev);
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
		// Frame and handle every complete message.
		c.corked = true;
		size_t off = 0;
		while (c.in.size() - off >= proto::kHeaderSize) {
			proto::Header h;
			proto::DecodeResult d = proto::decode_header(c.in.data() + off, proto::kHeaderSize, h);
			if (!d) {
				logf("pid %d: %s; closing its connection", c.cred.pid, d.text.c_str());
				reply(c, h.seq, -EPROTO, d.text);
				drop(fd);
				return;
			}
			if (c.in.size() - off - proto::kHeaderSize < h.length)
				break;
			proto::Message m;
			d = proto::decode(c.in.data() + off, proto::kHeaderSize + h.length, m);
			off += proto::kHeaderSize + h.length;
			if (!d) {
				logf("pid %d: bad message: %s; closing its connection", c.cred.pid, d.text.c_str());
				reply(c, h.seq, -EPROTO, d.text);
				drop(fd);
				return;
			}
			if (!handle(c, m)) {
				drop(fd);
				return;
			}
		}
		publish_tables(); // before a controller's answer: a process it starts sees the change
		flush_out(c);
		c.in.erase(c.in.begin(), c.in.begin() + static_cast<long>(off));
	}
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
	accept_conns();
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

Session *Daemon::find(const Conn &c, const std::string &name, uint32_t seq, bool &answered)
{
	answered = false;
	for (auto &s : sessions_) {
		if (s->name != name || s->companion_of)
			continue;
		if (visible(c, *s))
			return s.get();
		reply(const_cast<Conn &>(c), seq, -EPERM, "session '" + name + "' belongs to another user");
		answered = true;
		return nullptr;
	}
	reply(const_cast<Conn &>(c), seq, -ENOENT, "no session named '" + name + "'");
	answered = true;
	return nullptr;
}

// Returns false to close the connection.
bool Daemon::handle(Conn &c, const proto::Message &m)
{
	using proto::Type;
	const uint32_t seq = m.seq;
	if (!c.hello) {
		if (m.type() != Type::Hello) {
			reply(c, seq, -EPROTO, "HELLO expected first");
			return false;
		}
		do_hello(c, seq, std::get<proto::Hello>(m.body));
		return c.hello;
	}
	const bool ctl = c.role == proto::Role::Controller;
	state_dirty_ |= ctl; // restart.cpp: sessions may change
	if (ctl) {
		serve_quiet();     // a command sees every process that joined from the table
		settle_attaches(); // a command sees every buffer already handed over
		tables_dirty_ = true; // it may change what a process is granted
	}
	bool found;
	kgen_ = 0; // set by the change being handled, if the module took it
	switch (m.type()) {
	case Type::Register:
		if (ctl || c.registered)
			break;
		do_register(c, seq, std::get<proto::Register>(m.body));
		return true;
	case Type::Buffer:
		if (ctl || !c.registered)
			break;
		do_buffer(c, seq, std::get<proto::Buffer>(m.body));
		return true;
	case Type::Create:
		if (!ctl)
			break;
		do_create(c, seq, std::get<proto::Create>(m.body));
		return true;
	case Type::EnableEvent:
		if (!ctl)
			break;
		do_rule(c, seq, std::get<proto::EnableEvent>(m.body).session, std::get<proto::EnableEvent>(m.body).rule);
		return true;
	case Type::DisableEvent:
		if (!ctl)
			break;
		{
			proto::Rule r = std::get<proto::DisableEvent>(m.body).rule;
			r.enable = 0;
			do_rule(c, seq, std::get<proto::DisableEvent>(m.body).session, r);
		}
		return true;
	case Type::Start:
		if (!ctl)
			break;
		if (Session *s = find(c, std::get<proto::Start>(m.body).session, seq, found)) {
			if (s->state == proto::SessionState::Active) {
				reply(c, seq, -EALREADY, "session '" + s->name + "' is already started");
			} else {
				s->state = proto::SessionState::Active;
				s->run_id = next_run_id_++;
				move_off_busy_slot(*s);
				INFO("session %s started (slot %u)", s->name.c_str(), s->slot);
				apply_kernel(*s);
				if (adopt_early_)
					adopt_early(*s);
				std::string text = "session '" + s->name + "' started", err;
				if (s->trigger && !start_trigger(*s, err))
					text += "; no snapshots on " + s->trigger->pattern + ": " + err;
				save_active();
				notify_and_reply(c, seq, *s, text);
			}
		}
		return true;
	case Type::Stop:
		if (!ctl)
			break;
		if (Session *s = find(c, std::get<proto::Stop>(m.body).session, seq, found)) {
			if (s->state != proto::SessionState::Active) {
				reply(c, seq, -EALREADY, "session '" + s->name + "' is not started");
			} else {
				stop_session(*s);
				// One line: the answer's own suffix follows (notify.cpp).
				std::string problems;
				for (char ch : session_problems(*s)) // lines, each ending in \n
					problems += ch == '\n' ? std::string("; ") : std::string(1, ch);
				if (!problems.empty())
					problems = "; problems: " + problems.substr(0, problems.size() - 2);
				notify_and_reply(c, seq, *s,
						 "session '" + s->name + "' stopped; trace in " + trace_place(*s) + trigger_summary(*s) +
							 (s->serial ? "; " + s->serial->stats() : "") + problems);
			}
		}
		return true;
	case Type::Destroy:
		if (!ctl)
			break;
		if (Session *s = find(c, std::get<proto::Destroy>(m.body).session, seq, found))
			destroy_session(*s, &c, seq);
		return true;
	case Type::List:
		if (!ctl)
			break;
		do_list(c, seq);
		return true;
	case Type::Wait:
		if (!ctl)
			break;
		do_wait(c, seq, std::get<proto::Wait>(m.body));
		return true;
	case Type::TargetRule:
		if (!ctl)
			break;
		{
			const proto::TargetRule &t = std::get<proto::TargetRule>(m.body);
			do_rule(c, seq, t.session, t.rule, Target{t.pids, t.names});
		}
		return true;
	case Type::Snapshot:
		if (!ctl)
			break;
		do_snapshot(c, seq, std::get<proto::Snapshot>(m.body));
		return true;
	case Type::SnapshotOn:
		if (!ctl)
			break;
		do_snapshot_on(c, seq, std::get<proto::SnapshotOn>(m.body));
		return true;
	case Type::Status:
		if (!ctl)
			break;
		do_status(c, seq, std::get<proto::Status>(m.body));
		return true;
	default:
		break;
	}
	reply(c, seq, -EPERM, "message type " + std::to_string(static_cast<int>(m.type())) +
				      " not allowed here for this role");
	return true;
}

void Daemon::do_hello(Conn &c, uint32_t seq, const proto::Hello &m)
{
	if (m.max_version < proto::kMinVersion || m.min_version > proto::kVersion) {
		reply(c, seq, -EPROTONOSUPPORT,
		      "no common protocol version: client speaks " + std::to_string(m.min_version) + ".." +
			      std::to_string(m.max_version) + ", daemon " + std::to_string(proto::kMinVersion) +
			      ".." + std::to_string(proto::kVersion));
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
