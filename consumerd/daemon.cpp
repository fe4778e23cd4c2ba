/*
 * daemon.cpp - see daemon.h for the threading contract.
 *
 * Objects, all owned by the main thread:
 *   Session  a named recording: slot 0..15, owner uid, output directory,
 *            one channel configuration, rules, state, clock (measured once
 *            at CREATE and written identically into every sub-trace), and
 *            the drains of the buffers attached to it.
 *   Proc     a registered traced process: peer pid/uid (SO_PEERCRED), comm,
 *            tracepoint names (for LIST), pidfd (exit detection: the
 *            process does not keep its socket open).
 *   Conn     a connected socket: role after HELLO, partial input, received
 *            fds, and for a process the slots granted to it.
 *
 * Generations (docs/control-protocol.md, "Acknowledged changes"): every
 * change that reaches running processes bumps change_; a process's state
 * query stamps its connection with the generation current at REGISTER, and
 * that connection's close acknowledges every generation up to the stamp.
 *
 * With the kernel module answering (kabi 2, kernel_source.h): a process
 * that registered with it (Proc::kmod, REGISTER flag kRegisterModule) is
 * signalled by the module, not by us, and acknowledges to the module; its
 * connections here only announce events or hand a buffer over.  A WAIT or
 * a version-1 answer that waits for such processes runs the module's WAIT
 * on a thread of its own (KWait): the thread only calls kernel_wait and
 * hands its result to the main thread through kwait_done_ (mutex) and an
 * eventfd; everything else stays on the main thread.
 */
#include "daemon.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <deque>
#include <dirent.h>
#include <map>
#include <memory>
#include <fcntl.h>
#include <mutex>
#include <set>
#include <thread>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <unistd.h>

#include "abi/strata_abi.h"
#include "clock_page.h"
#include "control/names.h"
#include "drain.h"
#include "kernel_source.h"
#include "metadata.h"
#include "proto/proto.h"
#include "proto/sock.h"
#include "repair.h"

namespace strata {
namespace {

bool g_verbose = false;

void logf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void logf(const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	fprintf(stderr, "strata-consumerd: %s\n", buf);
}
#define VLOG(...) do { if (g_verbose) logf(__VA_ARGS__); } while (0)
bool g_quiet = false;
#define INFO(...) do { if (!g_quiet) logf(__VA_ARGS__); } while (0)

constexpr size_t kMaxConns = 1024;
constexpr size_t kMaxQueuedFds = 16;
constexpr int64_t kReplyTimeoutMs = 2000;

std::string hostname()
{
	char buf[256] = {};
	gethostname(buf, sizeof(buf) - 1);
	return buf;
}

// Which processes a rule applies to: everyone of the session's user when
// both lists are empty, else the listed pids and process names (comm).
struct Target {
	std::vector<uint32_t> pids;
	std::vector<std::string> names;
};

struct Session {
	uint64_t id = 0;
	uint64_t run_id = 0; // new at each START: what grants name (SessionGrant.session_id)
	std::string name;
	uint32_t slot = 0;
	uid_t uid = 0;
	std::string out;
	proto::ChannelConfig channel;
	std::vector<proto::Rule> rules;
	std::vector<Target> targets; // one per rule
	proto::SessionState state = proto::SessionState::Created;
	ClockInfo clock;
	Owner owner;         // set when a root daemon works for another user
	std::vector<std::unique_ptr<Drain>> drains;
};

struct Proc {
	pid_t pid = 0;
	uid_t uid = 0;
	std::string comm;
	std::string date;
	std::vector<proto::EventName> events;
	int pidfd = -1;
	int signo = 0;        // asynchronous enablement: signal it on changes
	bool kmod = false;    // signalled by the module, acknowledges to it
	uint64_t acked = 0;   // highest generation it acknowledged
	std::vector<Drain *> drains;
};

// A controller's answer held back until the processes signalled about a
// change have re-queried (or exited), or until its deadline.  Version 1:
// the answer to the change itself (1 s hold); version 2: the answer to WAIT.
struct PendingReply {
	uint64_t conn_id = 0;
	uint32_t seq = 0;
	std::string text;
	bool wait = false;            // a WAIT: -ETIMEDOUT at the deadline
	// (pid, generation it must acknowledge): acknowledgements must come
	// from queries that registered at or after that generation
	std::vector<std::pair<pid_t, uint64_t>> waiting;
	size_t signalled = 0;
	int64_t deadline = 0;
	// Module generations to WAIT for (the changes' kernel_apply/kernel_stop)
	// and whether that WAIT still runs (kwait_id != 0: answer after it).
	std::vector<uint64_t> kgens;
	uint64_t kwait_id = 0;
};

// A module WAIT's result, from its thread to the main thread.
struct KWaitDone {
	uint64_t id = 0;
	int status = 0;                 // 0 or -errno of the last WAIT
	std::vector<uint32_t> missing;  // with -ETIMEDOUT
};

struct Grant {
	uint64_t session_id = 0;
	uint8_t uuid[16] = {};
};

struct Conn {
	uint64_t id = 0;
	uint64_t registered_at = 0; // change counter when it sent REGISTER
	uint16_t version = proto::kProcessVersion; // negotiated at HELLO
	// Version 2 controller: processes signalled about this connection's
	// changes since its last WAIT, with the generation each must ack.
	std::map<pid_t, uint64_t> unacked;
	int fd = -1;
	struct ucred cred = {};
	bool hello = false;
	proto::Role role = proto::Role::Process;
	std::vector<uint8_t> in;
	// While the messages of one read are handled, their answers collect
	// here and leave in one send (flush_out): a process that sent HELLO and
	// REGISTER together wakes once for both answers.
	std::vector<uint8_t> out;
	bool corked = false;
	std::deque<int> fds;
	bool registered = false;
	bool kmod = false;             // REGISTER with kRegisterModule
	std::vector<uint64_t> kgens;   // module generations of this controller's changes since its WAIT
	std::map<uint32_t, Grant> grants;
	~Conn()
	{
		for (int f : fds)
			close(f);
		if (fd >= 0)
			close(fd);
	}
};

class Daemon {
public:
	int run(const DaemonOptions &opt);

private:
	int listen_on(const std::string &path);
	void accept_conns();
	void on_readable(Conn &c);
	bool handle(Conn &c, const proto::Message &m);
	void send(Conn &c, uint32_t seq, proto::Body body, int pass_fd = -1);
	void reply(Conn &c, uint32_t seq, int status, const std::string &text);
	void flush_out(Conn &c);
	void drop(int fd);
	void on_exit(int pidfd);
	// Asynchronous enablement: signal the processes a change of `s`
	// concerns, answer `c` once they acknowledged (or at the deadline).
	// `rule` >= 0: only the processes that rule targets, else those any
	// rule of `s` targets.
	void notify_and_reply(Conn &c, uint32_t seq, const Session &s, const std::string &text, int rule = -1);
	void do_wait(Conn &c, uint32_t seq, const proto::Wait &m);
	static bool targets(const Session &s, size_t rule, const Proc &p);
	static std::vector<proto::Rule> rules_for(const Session &s, const Proc &p);
	void acknowledge(pid_t pid, uint64_t registered_at);
	void start_kwait(PendingReply &p);
	void on_kwait_done();
	void answer_pending(bool all);
	int pending_timeout_ms() const;
	void start_clock_page();

	bool visible(const Conn &c, const Session &s) const { return c.cred.uid == 0 || c.cred.uid == s.uid; }
	Session *find(const Conn &c, const std::string &name, uint32_t seq, bool &answered);
	void stop_session(Session &s);

	void do_hello(Conn &c, uint32_t seq, const proto::Hello &m);
	void do_register(Conn &c, uint32_t seq, const proto::Register &m);
	void do_buffer(Conn &c, uint32_t seq, const proto::Buffer &m);
	bool module_grant(const Conn &c, uint32_t slot, int fd, Grant &grant);
	KmodGrant grant_of(const Session &s) const;
	void move_off_busy_slot(Session &s);
	Proc &proc_for(pid_t pid, uid_t uid);
	void adopt_early(Session &s);
	void adopt_early_buffer(Session &s, int buf, pid_t holder, uid_t uid, std::set<std::pair<dev_t, ino_t>> &seen);
	void save_active();
	void repair_after_crash();
	void do_create(Conn &c, uint32_t seq, const proto::Create &m);
	void do_rule(Conn &c, uint32_t seq, const std::string &name, proto::Rule r, Target t = {});
	void do_status(Conn &c, uint32_t seq, const proto::Status &m);
	void do_list(Conn &c, uint32_t seq);

	int epfd_ = -1, lfd_ = -1, sigfd_ = -1;
	std::string path_;
	std::map<int, std::unique_ptr<Conn>> conns_;
	std::map<int, Proc> procs_;  // by pidfd
	std::map<pid_t, int> pid_to_pidfd_;
	std::vector<std::unique_ptr<Session>> sessions_;
	uint64_t next_session_id_ = 1;
	uint64_t next_run_id_ = 1;
	uint64_t next_conn_id_ = 1;
	uint64_t change_ = 0; // counts notified changes
	uint64_t kgen_ = 0;   // the module generation of the change being notified (0: none)
	std::vector<PendingReply> pending_;
	// Module WAITs (see the file comment).
	int kwait_efd_ = -1;
	uint64_t next_kwait_ = 1;
	std::map<uint64_t, std::thread> kwaiters_; // by KWaitDone::id
	std::mutex kwait_mu_;
	std::vector<KWaitDone> kwait_done_; // guarded by kwait_mu_
	// Set once at exit (relaxed: a stop request polled between WAIT slices;
	// the join that follows is the synchronisation).
	std::atomic<bool> kwait_quit_{false};
	// State queries answered here (REGISTER without kRegisterModule), and
	// module processes' hand-offs and announcements: logged at exit.
	uint64_t n_queries_ = 0, n_handoffs_ = 0;
	std::string hostname_;
	bool adopt_early_ = false; // DaemonOptions::adopt_early
	bool quit_ = false;
	std::unique_ptr<ClockPage> clock_page_; // null: TSC unusable
	int clock_tfd_ = -1;                    // its refresh timer
};

int Daemon::listen_on(const std::string &path)
{
	struct sockaddr_un sa;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	if (path.size() >= sizeof(sa.sun_path)) {
		logf("socket path too long: %s", path.c_str());
		return -ENAMETOOLONG;
	}
	// The directory holding the socket: private (0700) when we create it.
	size_t slash = path.rfind('/');
	if (slash != std::string::npos && slash > 0) {
		std::string dir = path.substr(0, slash);
		int r = make_dirs(dir, 0700);
		if (r < 0) {
			logf("cannot create %s: %s", dir.c_str(), strerror(-r));
			return r;
		}
	}
	// A socket file already there: refuse if a daemon answers, else stale.
	struct stat st;
	if (lstat(path.c_str(), &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			logf("%s exists and is not a socket", path.c_str());
			return -EEXIST;
		}
		int fd = proto::connect_unix(path, proto::now_ms() + 500);
		if (fd >= 0) {
			close(fd);
			logf("another strata-consumerd already listens on %s", path.c_str());
			return -EADDRINUSE;
		}
		unlink(path.c_str());
	}
	memcpy(sa.sun_path, path.c_str(), path.size() + 1);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	mode_t old = umask(0077);
	int r = bind(fd, reinterpret_cast<struct sockaddr *>(&sa), sizeof(sa));
	umask(old);
	if (r < 0 || listen(fd, 128) < 0) {
		int e = errno;
		logf("cannot listen on %s: %s", path.c_str(), strerror(e));
		close(fd);
		return -e;
	}
	return fd;
}

void Daemon::send(Conn &c, uint32_t seq, proto::Body body, int pass_fd)
{
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
	if (c.out.empty())
		return;
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
	conns_.erase(it);
}

// Does `pid` catch `signo` right now?  A process that exec'd since it
// registered has its handlers reset, and a real-time signal's default
// action would kill it: never send one it does not catch.
static bool catches(pid_t pid, int signo)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/status", static_cast<int>(pid));
	FILE *f = fopen(path, "re");
	if (!f)
		return false;
	char line[256];
	unsigned long long mask = 0;
	bool found = false;
	while (!found && fgets(line, sizeof(line), f))
		found = sscanf(line, "SigCgt: %llx", &mask) == 1;
	fclose(f);
	return found && signo >= 1 && signo <= 64 && (mask >> (signo - 1)) & 1;
}

bool Daemon::targets(const Session &s, size_t rule, const Proc &p)
{
	if (!(s.uid == 0 || s.uid == p.uid))
		return false;
	if (rule >= s.targets.size())
		return true;
	const Target &t = s.targets[rule];
	if (t.pids.empty() && t.names.empty())
		return true;
	for (uint32_t pid : t.pids)
		if (static_cast<pid_t>(pid) == p.pid)
			return true;
	for (const std::string &n : t.names) // comm is cut at 15 bytes
		if (n == p.comm || (n.size() > 15 && p.comm.size() == 15 && n.compare(0, 15, p.comm) == 0))
			return true;
	return false;
}

std::vector<proto::Rule> Daemon::rules_for(const Session &s, const Proc &p)
{
	std::vector<proto::Rule> v;
	for (size_t i = 0; i < s.rules.size(); i++)
		if (targets(s, i, p))
			v.push_back(s.rules[i]);
	return v;
}

void Daemon::notify_and_reply(Conn &c, uint32_t seq, const Session &s, const std::string &text, int rule)
{
	PendingReply p;
	p.conn_id = c.id;
	p.seq = seq;
	p.text = text;
	const uint64_t gen = ++change_;
	p.deadline = proto::now_ms() + 1000;
	for (auto &kv : procs_) {
		Proc &pr = kv.second;
		if (!pr.signo || kv.first < 0)
			continue;
		bool concerned = false;
		if (rule >= 0)
			concerned = targets(s, static_cast<size_t>(rule), pr);
		else if (s.rules.empty()) // a grant without rules: every process of the uid
			concerned = s.uid == 0 || s.uid == pr.uid;
		else
			for (size_t i = 0; i < s.rules.size() && !concerned; i++)
				concerned = targets(s, i, pr);
		if (!concerned)
			continue;
		if (pr.kmod && !kernel_registered(pr.pid)) {
			// It closed its registration: the module cannot reach it, it
			// falls back to our query (kmod_link.h), so we signal it.
			VLOG("pid %d no longer holds /dev/strata: signalled by us", pr.pid);
			pr.kmod = false;
		}
		if (pr.kmod) { // the module signalled it (kernel_apply/kernel_stop)
			if (kgen_)
				p.waiting.emplace_back(pr.pid, gen);
			continue;
		}
		if (!catches(pr.pid, pr.signo)) {
			VLOG("pid %d no longer catches signal %d (exec?): not signalled", pr.pid, pr.signo);
			continue;
		}
		if (syscall(SYS_pidfd_send_signal, kv.first, pr.signo, nullptr, 0) == 0)
			p.waiting.emplace_back(pr.pid, gen);
		else
			VLOG("pid %d: cannot signal: %s", pr.pid, strerror(errno));
	}
	p.signalled = p.waiting.size();
	if (kgen_)
		p.kgens.push_back(kgen_);
	kgen_ = 0;
	if (c.version >= 2) { // answered now; WAIT asks for the acknowledgements
		for (auto &w : p.waiting)
			c.unacked[w.first] = gen;
		c.kgens.insert(c.kgens.end(), p.kgens.begin(), p.kgens.end());
		reply(c, seq, 0,
		      text + " (generation " + std::to_string(gen) + ", " + std::to_string(p.signalled) +
			      " running process(es) signalled)");
		return;
	}
	if (p.waiting.empty()) {
		reply(c, seq, 0, text);
		return;
	}
	start_kwait(p);
	pending_.push_back(std::move(p));
}

void Daemon::do_wait(Conn &c, uint32_t seq, const proto::Wait &m)
{
	PendingReply p;
	p.conn_id = c.id;
	p.seq = seq;
	p.wait = true;
	p.deadline = proto::now_ms() + m.timeout_ms;
	for (auto &u : c.unacked) {
		auto it = pid_to_pidfd_.find(u.first);
		if (it == pid_to_pidfd_.end()) // exited: nothing left to apply
			continue;
		const Proc &pr = procs_[it->second];
		if (pr.kmod || pr.acked < u.second) // the module knows whether it acknowledged
			p.waiting.push_back(u);
	}
	p.signalled = c.unacked.size();
	c.unacked.clear();
	p.kgens.swap(c.kgens);
	start_kwait(p);
	pending_.push_back(std::move(p));
	answer_pending(false);
}

// If `p` waits for processes the module signalled: WAIT on the module, on a
// thread of its own (the event loop goes on), until p's deadline.
void Daemon::start_kwait(PendingReply &p)
{
	bool kmod = false;
	for (auto &w : p.waiting) {
		auto it = pid_to_pidfd_.find(w.first);
		kmod = kmod || (it != pid_to_pidfd_.end() && procs_[it->second].kmod);
	}
	if (!kmod || p.kgens.empty() || kwait_efd_ < 0)
		return;
	std::vector<uint64_t> gens = p.kgens;
	std::sort(gens.begin(), gens.end());
	gens.erase(std::unique(gens.begin(), gens.end()), gens.end());
	const int64_t end = p.deadline;
	const uint64_t id = p.kwait_id = next_kwait_++;
	kwaiters_.emplace(id, std::thread([this, id, gens, end] {
		KWaitDone d;
		d.id = id;
		std::vector<uint32_t> missing;
		for (uint64_t g : gens) {
			int r;
			// In slices, so that the daemon's exit never waits long.
			for (;;) {
				const int64_t left = std::max<int64_t>(0, end - proto::now_ms());
				r = kernel_wait(g, static_cast<uint32_t>(std::min<int64_t>(left, 200)), missing);
				if (r != -ETIMEDOUT || left <= 200 || kwait_quit_.load(std::memory_order_relaxed))
					break;
			}
			if (r == 0)
				continue;
			if (d.status == 0 || d.status == -ETIMEDOUT)
				d.status = r;
			d.missing.insert(d.missing.end(), missing.begin(), missing.end());
			if (r != -ETIMEDOUT)
				break;
		}
		{
			std::lock_guard<std::mutex> lk(kwait_mu_);
			kwait_done_.push_back(std::move(d));
		}
		const uint64_t one = 1;
		ssize_t w = write(kwait_efd_, &one, sizeof one); // wakes the event loop
		(void)w;
	}));
}

// Main thread: module WAITs that finished.  Their processes not reported
// missing acknowledged.
void Daemon::on_kwait_done()
{
	uint64_t n;
	ssize_t r = read(kwait_efd_, &n, sizeof n);
	(void)r;
	std::vector<KWaitDone> done;
	{
		std::lock_guard<std::mutex> lk(kwait_mu_);
		done.swap(kwait_done_);
	}
	for (KWaitDone &d : done) {
		auto t = kwaiters_.find(d.id);
		if (t != kwaiters_.end()) { // it has finished but for returning
			t->second.join();
			kwaiters_.erase(t);
		}
		const std::set<uint32_t> missing(d.missing.begin(), d.missing.end());
		for (PendingReply &p : pending_) {
			if (p.kwait_id != d.id)
				continue;
			p.kwait_id = 0;
			if (d.status != 0 && d.status != -ETIMEDOUT)
				continue; // the module could not tell: nobody counts as acknowledged
			p.waiting.erase(std::remove_if(p.waiting.begin(), p.waiting.end(),
						       [&](const std::pair<pid_t, uint64_t> &w) {
							       auto it = pid_to_pidfd_.find(w.first);
							       return it != pid_to_pidfd_.end() &&
								      procs_[it->second].kmod &&
								      !missing.count(static_cast<uint32_t>(w.first));
						       }),
					p.waiting.end());
		}
	}
}

void Daemon::acknowledge(pid_t pid, uint64_t registered_at)
{
	for (PendingReply &p : pending_)
		p.waiting.erase(std::remove_if(p.waiting.begin(), p.waiting.end(),
					       [&](const std::pair<pid_t, uint64_t> &w) {
						       return w.first == pid && registered_at >= w.second;
					       }),
				p.waiting.end());
}

void Daemon::answer_pending(bool all)
{
	const int64_t now = proto::now_ms();
	for (size_t i = 0; i < pending_.size();) {
		PendingReply &p = pending_[i];
		if (!all && !p.waiting.empty() && (now < p.deadline || p.kwait_id)) {
			i++;
			continue;
		}
		for (auto &kv : conns_) {
			if (kv.second->id != p.conn_id)
				continue;
			size_t acked = p.signalled - p.waiting.size();
			if (!p.wait) {
				reply(*kv.second, p.seq, 0,
				      p.text + " (" + std::to_string(acked) + " of " + std::to_string(p.signalled) +
					      " running process(es) applied it)");
			} else if (p.waiting.empty()) {
				reply(*kv.second, p.seq, 0,
				      "acknowledged by " + std::to_string(acked) + " process(es)");
			} else {
				std::string t = "not acknowledged in time by " + std::to_string(p.waiting.size()) + " of " +
						std::to_string(p.signalled) + " process(es):";
				for (auto &w : p.waiting) {
					auto it = pid_to_pidfd_.find(w.first);
					t += " " + std::to_string(w.first) + " (" +
					     (it != pid_to_pidfd_.end() ? procs_[it->second].comm : std::string("?")) + ")";
				}
				reply(*kv.second, p.seq, -ETIMEDOUT, t);
			}
			break;
		}
		pending_.erase(pending_.begin() + static_cast<long>(i));
	}
}

int Daemon::pending_timeout_ms() const
{
	if (pending_.empty())
		return -1;
	int64_t first = INT64_MAX;
	for (const PendingReply &p : pending_)
		if (!p.kwait_id) // those are answered when their module WAIT ends
			first = std::min(first, p.deadline);
	if (first == INT64_MAX)
		return -1;
	int64_t left = first - proto::now_ms();
	return left < 0 ? 0 : static_cast<int>(left);
}

void Daemon::accept_conns()
{
	for (;;) {
		int fd = accept4(lfd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
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
		flush_out(c);
		c.in.erase(c.in.begin(), c.in.begin() + static_cast<long>(off));
	}
}

Session *Daemon::find(const Conn &c, const std::string &name, uint32_t seq, bool &answered)
{
	answered = false;
	for (auto &s : sessions_) {
		if (s->name != name)
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
				const KmodGrant g = grant_of(*s);
				kernel_apply(s->slot, s->uid, s->rules, s->channel, s->out, s->clock, s->owner, hostname_, s->drains, &g,
					     &kgen_);
				if (adopt_early_)
					adopt_early(*s);
				save_active();
				notify_and_reply(c, seq, *s, "session '" + s->name + "' started");
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
				notify_and_reply(c, seq, *s, "session '" + s->name + "' stopped; trace in " + s->out);
			}
		}
		return true;
	case Type::Destroy:
		if (!ctl)
			break;
		if (Session *s = find(c, std::get<proto::Destroy>(m.body).session, seq, found)) {
			const bool was_active = s->state == proto::SessionState::Active;
			Session gone; // who to signal: the processes its rules targeted
			gone.uid = s->uid;
			gone.rules = s->rules;
			gone.targets = s->targets;
			stop_session(*s);
			std::string out = s->out, name = s->name;
			for (auto &p : procs_) { // the session's drains die with it
				auto &v = p.second.drains;
				v.erase(std::remove_if(v.begin(), v.end(),
						       [&](Drain *d) {
							       for (auto &x : s->drains)
								       if (x.get() == d)
									       return true;
							       return false;
						       }),
					v.end());
			}
			sessions_.erase(std::find_if(sessions_.begin(), sessions_.end(),
						     [&](const std::unique_ptr<Session> &x) { return x.get() == s; }));
			INFO("session %s destroyed", name.c_str());
			const std::string text = "session '" + name + "' destroyed; trace in " + out;
			if (was_active) { // its processes close their slot
				notify_and_reply(c, seq, gone, text);
			} else {
				reply(c, seq, 0, text);
			}
		}
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

void Daemon::do_register(Conn &c, uint32_t seq, const proto::Register &m)
{
	if (m.abi_major != STRATA_ABI_MAJOR) {
		reply(c, seq, -EPROTONOSUPPORT,
		      "buffer ABI " + std::to_string(m.abi_major) + " not supported (daemon: " +
			      std::to_string(STRATA_ABI_MAJOR) + ")");
		return;
	}
	c.registered = true;
	const pid_t pid = c.cred.pid;
	// The peer's credentials, not the payload's, decide (the payload's pid
	// is in the process's own pid namespace and is only informational).
	Proc *p = &proc_for(pid, c.cred.uid);
	p->comm = m.comm;
	if (p->date.empty())
		p->date = local_timestamp();
	if (!m.events.empty() || p->events.empty()) // a re-query from a signal handler lists none
		p->events = m.events;
	p->signo = (m.flags & proto::kRegisterAsync) ? static_cast<int>(m.signo) : 0;
	p->kmod = (m.flags & proto::kRegisterModule) != 0;
	c.registered_at = change_;
	VLOG("pid %d (%s) registered, %zu tracepoints%s", pid, m.comm.c_str(), m.events.size(),
	     p->kmod ? " (the module answers its state queries)" : "");
	if (p->kmod) { // an announcement or a hand-off: no grant from us
		c.kmod = true;
		n_handoffs_++;
		send(c, seq, proto::RegisterReply{});
		return;
	}
	n_queries_++;

	proto::RegisterReply rr;
	for (auto &s : sessions_) {
		if (s->state != proto::SessionState::Active || !(s->uid == 0 || s->uid == c.cred.uid))
			continue;
		// Only the rules that target this process; none (in a session
		// that has rules): no buffer.
		std::vector<proto::Rule> rules = rules_for(*s, *p);
		if (rules.empty() && !s->rules.empty())
			continue;
		proto::SessionGrant g;
		g.slot = s->slot;
		g.session_id = s->run_id;
		g.channel = s->channel;
		g.rules = std::move(rules);
		if (getrandom(g.trace_uuid, sizeof(g.trace_uuid), 0) != sizeof(g.trace_uuid))
			for (auto &b : g.trace_uuid)
				b = static_cast<uint8_t>(rand());
		g.trace_uuid[6] = static_cast<uint8_t>((g.trace_uuid[6] & 0x0f) | 0x40); // v4
		g.trace_uuid[8] = static_cast<uint8_t>((g.trace_uuid[8] & 0x3f) | 0x80);
		Grant &gr = c.grants[s->slot];
		gr.session_id = s->run_id;
		memcpy(gr.uuid, g.trace_uuid, 16);
		rr.sessions.push_back(std::move(g));
	}
	// The clock page travels with the answer (SCM_RIGHTS), read-only.
	send(c, seq, rr, clock_page_ ? clock_page_->fd() : -1);
}

// The process record of `pid`, made (with a pidfd for exit detection) on
// first sight.
Proc &Daemon::proc_for(pid_t pid, uid_t uid)
{
	auto it = pid_to_pidfd_.find(pid);
	Proc *p = nullptr;
	if (it != pid_to_pidfd_.end()) {
		p = &procs_[it->second];
	} else {
		int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
		if (pidfd < 0) {
			// Without exit detection the drain still ends at STOP.
			logf("pid %d: pidfd_open: %s (exit detection off)", pid, strerror(errno));
			static int fake = -2;
			pidfd = fake--;
		} else {
			struct epoll_event ev = {};
			ev.events = EPOLLIN;
			ev.data.fd = pidfd;
			epoll_ctl(epfd_, EPOLL_CTL_ADD, pidfd, &ev);
		}
		p = &procs_[pidfd];
		p->pidfd = pidfd;
		pid_to_pidfd_[pid] = pidfd;
	}
	p->pid = pid;
	p->uid = uid;
	return *p;
}

// Early buffers: a process that found no daemon at start and had
// STRATA_EARLY set records into a buffer of its own (slot 15, memfd
// "strata-slot-15", see libtrace/control/sync_query.cpp).  With
// --adopt-early, a session that starts adopts the early buffers of the
// processes it may trace (its owner's, or all for root) that no drain reads
// yet: the buffer is opened through
// /proc/PID/fd and drained like any other, from its first event.  The
// buffer is hostile like any other: Drain validates it.
void Daemon::adopt_early(Session &s)
{
	DIR *proc = opendir("/proc");
	if (!proc)
		return;
	std::set<std::pair<dev_t, ino_t>> seen; // buffers adopted by this call
	while (struct dirent *de = readdir(proc)) {
		char *end = nullptr;
		const long pid = strtol(de->d_name, &end, 10);
		if (pid <= 0 || *end || pid == getpid())
			continue;
		const std::string base = std::string("/proc/") + de->d_name;
		struct stat st;
		if (stat(base.c_str(), &st) != 0 || !(s.uid == 0 || st.st_uid == s.uid))
			continue;
		auto known = pid_to_pidfd_.find(static_cast<pid_t>(pid));
		if (known != pid_to_pidfd_.end() && !procs_[known->second].drains.empty())
			continue; // already drained by a session of ours
		DIR *fds = opendir((base + "/fd").c_str());
		if (!fds)
			continue;
		// Every early buffer the process holds: its own, and those it keeps
		// for its forked children (libtrace/slots.cpp; the child may have
		// exited).  The header names the producer; a buffer seen through
		// several processes (a child inherits its siblings') is adopted once.
		while (struct dirent *fe = readdir(fds)) {
			char target[128];
			const std::string link = base + "/fd/" + fe->d_name;
			ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
			if (n <= 0)
				continue;
			target[n] = 0;
			if (strncmp(target, "/memfd:strata-slot-15", 21) != 0)
				continue;
			int buf = open(link.c_str(), O_RDWR | O_CLOEXEC);
			if (buf < 0)
				continue;
			adopt_early_buffer(s, buf, static_cast<pid_t>(pid), st.st_uid, seen);
		}
		closedir(fds);
	}
	closedir(proc);
}

// One early buffer `buf` (owned here) found in process `holder`.
void Daemon::adopt_early_buffer(Session &s, int buf, pid_t holder, uid_t uid, std::set<std::pair<dev_t, ino_t>> &seen)
{
	struct stat bst;
	if (fstat(buf, &bst) != 0 || !seen.insert({bst.st_dev, bst.st_ino}).second) {
		close(buf);
		return;
	}
	{
		strata_buffer_header hdr;
		if (pread(buf, &hdr, sizeof hdr, 0) != static_cast<ssize_t>(sizeof hdr) ||
		    hdr.magic != STRATA_ABI_MAGIC) {
			close(buf);
			return; // not made yet (a child that never opened it), or not ours
		}
		// The producer: the holder itself, or a child it keeps the buffer of.
		const long pid = hdr.pid > 0 && static_cast<pid_t>(hdr.pid) != holder ? static_cast<long>(hdr.pid) : holder;
		if (pid != holder) {
			auto known = pid_to_pidfd_.find(static_cast<pid_t>(pid));
			if (known != pid_to_pidfd_.end() && !procs_[known->second].drains.empty()) {
				close(buf);
				return; // already drained by a session of ours
			}
		}
		std::string comm(hdr.comm, strnlen(hdr.comm, sizeof hdr.comm));
		Proc &p = proc_for(static_cast<pid_t>(pid), uid);
		if (p.comm.empty())
			p.comm = comm.empty() ? std::string("pid") : comm;
		if (p.date.empty())
			p.date = local_timestamp();
		std::string dir = s.out + "/ust/pid/" + file_safe(p.comm) + "-" + std::to_string(p.pid) + "-" + p.date;
		for (int k = 1; access(dir.c_str(), F_OK) == 0; k++)
			dir = s.out + "/ust/pid/" + file_safe(p.comm) + "-" + std::to_string(p.pid) + "-" + p.date + "." +
			      std::to_string(k);
		TraceEnv env;
		env.procname = p.comm;
		env.pid = p.pid;
		env.hostname = hostname_;
		std::string err;
		std::unique_ptr<Drain> d = Drain::create(buf, hdr.trace_uuid, dir, s.clock, env, s.owner, err);
		if (!d) {
			logf("pid %ld: early buffer rejected: %s", pid, err.c_str());
			return;
		}
		d->start();
		p.drains.push_back(d.get());
		s.drains.push_back(std::move(d));
		INFO("pid %ld (%s): adopted its early buffer into session %s", pid, p.comm.c_str(), s.name.c_str());
	}
}

void Daemon::do_buffer(Conn &c, uint32_t seq, const proto::Buffer &m)
{
	int fd = -1;
	if (m.status == 0) {
		if (c.fds.empty()) {
			reply(c, seq, -EBADF, "BUFFER without its file descriptor");
			return;
		}
		fd = c.fds.front();
		c.fds.pop_front();
	}
	Grant grant;
	if (c.kmod) { // granted by the module: our session in that slot, the buffer's own uuid
		if (!module_grant(c, m.slot, fd, grant)) {
			if (fd >= 0)
				close(fd);
			reply(c, seq, -ESTALE, "no session of yours is active in slot " + std::to_string(m.slot));
			return;
		}
	} else {
		auto g = c.grants.find(m.slot);
		if (g == c.grants.end()) {
			if (fd >= 0)
				close(fd);
			reply(c, seq, -EINVAL, "slot " + std::to_string(m.slot) + " was not granted");
			return;
		}
		grant = g->second;
		c.grants.erase(g);
	}
	if (m.status != 0) {
		logf("pid %d could not open its buffer for slot %u: %s", c.cred.pid, m.slot, strerror(-m.status));
		reply(c, seq, 0, "noted");
		return;
	}
	Session *s = nullptr;
	for (auto &x : sessions_)
		if (x->run_id == grant.session_id)
			s = x.get();
	if (!s || s->state != proto::SessionState::Active) {
		close(fd);
		reply(c, seq, -ESTALE, "the session is no longer active");
		return;
	}
	auto pit = pid_to_pidfd_.find(c.cred.pid);
	Proc &p = procs_[pit->second];
	std::string dir = s->out + "/ust/pid/" + file_safe(p.comm) + "-" + std::to_string(p.pid) + "-" + p.date;
	for (int n = 1; access(dir.c_str(), F_OK) == 0; n++)
		dir = s->out + "/ust/pid/" + file_safe(p.comm) + "-" + std::to_string(p.pid) + "-" + p.date +
		      "." + std::to_string(n);
	TraceEnv env;
	env.procname = p.comm;
	env.pid = p.pid;
	env.hostname = hostname_;
	std::string err;
	std::unique_ptr<Drain> d = Drain::create(fd, grant.uuid, dir, s->clock, env, s->owner, err);
	if (!d) {
		logf("pid %d slot %u: buffer rejected: %s", c.cred.pid, m.slot, err.c_str());
		reply(c, seq, -EINVAL, "buffer rejected: " + err);
		return;
	}
	// Validated and mapped: answer now, the process is waiting in its
	// constructor.  The thread start and all file work (directories,
	// metadata) come after; a failure there is logged by the drain thread
	// and costs the process only its bounded buffer.
	reply(c, seq, 0, "ok");
	d->start();
	p.drains.push_back(d.get());
	s->drains.push_back(std::move(d));
	VLOG("pid %d: draining slot %u into %s", p.pid, m.slot, dir.c_str());
}

// A BUFFER from a process the module answers: the session is ours in that
// slot, active, visible to the peer and set in the module with its grant;
// the trace uuid is the buffer's own (each process draws its own, so that
// babeltrace2 never merges two processes' sub-traces).  The buffer header
// is hostile: Drain::create validates all of it.
bool Daemon::module_grant(const Conn &c, uint32_t slot, int fd, Grant &grant)
{
	for (auto &x : sessions_) {
		if (x->slot != slot || x->state != proto::SessionState::Active || !(x->uid == 0 || x->uid == c.cred.uid) ||
		    !kernel_grants(slot))
			continue;
		grant.session_id = x->run_id;
		strata_buffer_header h;
		if (fd >= 0) {
			if (pread(fd, &h, sizeof h, 0) != static_cast<ssize_t>(sizeof h))
				return false;
			memcpy(grant.uuid, h.trace_uuid, 16);
		}
		return true;
	}
	return false;
}

// What the module hands a process with the session's rules (kernel_source.h).
KmodGrant Daemon::grant_of(const Session &s) const
{
	KmodGrant g;
	g.session_id = s.run_id;
	g.channel = s.channel;
	g.sock_path = path_;
	for (const Target &t : s.targets)
		g.targets.emplace_back(t.pids, t.names);
	return g;
}

// START: a slot another daemon set in the module meanwhile would collide
// (-EBUSY): take one free in both.
void Daemon::move_off_busy_slot(Session &s)
{
	const uint32_t busy = kernel_busy_slots();
	if (!(busy & (1u << s.slot)))
		return;
	uint32_t used = busy;
	for (auto &x : sessions_)
		if (x.get() != &s)
			used |= 1u << x->slot;
	for (uint32_t slot = 0; slot < proto::kMaxSlots; slot++)
		if (!(used & (1u << slot))) {
			INFO("session %s: slot %u is taken in the kernel module, using slot %u", s.name.c_str(), s.slot,
			     slot);
			s.slot = slot;
			return;
		}
}

void Daemon::do_create(Conn &c, uint32_t seq, const proto::Create &m)
{
	for (auto &s : sessions_)
		if (s->name == m.session) {
			reply(c, seq, -EEXIST, "a session named '" + m.session + "' already exists");
			return;
		}
	uint32_t used = kernel_busy_slots(); // another daemon's sessions in the module
	for (auto &s : sessions_)
		used |= 1u << s->slot;
	uint32_t slot = 0;
	while (slot < proto::kMaxSlots && (used & (1u << slot)))
		slot++;
	if (slot == proto::kMaxSlots) {
		reply(c, seq, -ENOSPC, "all 16 session slots are in use");
		return;
	}
	struct stat st;
	bool existed = stat(m.output_dir.c_str(), &st) == 0;
	Owner owner;
	if (c.cred.uid != 0 && geteuid() == 0) {
		// A root daemon writes for a user only where that user could:
		// under a directory the user owns.
		std::string anc = m.output_dir;
		while (anc.size() > 1 && lstat(anc.c_str(), &st) != 0)
			anc = anc.substr(0, std::max<size_t>(anc.rfind('/'), 1));
		if (lstat(anc.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != c.cred.uid) {
			reply(c, seq, -EACCES, "the output directory must be inside a directory you own (" + anc + " is not)");
			return;
		}
		owner.uid = c.cred.uid;
		owner.gid = c.cred.gid;
	}
	int r = make_dirs(m.output_dir, 0750, owner);
	if (r < 0) {
		reply(c, seq, r, "cannot create " + m.output_dir + ": " + strerror(-r));
		return;
	}
	if (existed) {
		RepairStats rs = repair_tree(m.output_dir);
		if (rs.repaired)
			INFO("repaired %llu torn stream file(s) under %s", static_cast<unsigned long long>(rs.repaired),
			     m.output_dir.c_str());
	}
	auto s = std::make_unique<Session>();
	s->id = next_session_id_++;
	s->name = m.session;
	s->slot = slot;
	s->uid = c.cred.uid;
	s->out = m.output_dir;
	s->channel = m.channel;
	s->clock = measure_session_clock();
	s->owner = owner;
	INFO("session %s created (slot %u, %s mode) -> %s", s->name.c_str(), slot,
	     m.channel.mode == STRATA_MODE_OVERWRITE ? "overwrite" : "discard", s->out.c_str());
	sessions_.push_back(std::move(s));
	reply(c, seq, 0, m.output_dir);
}

void Daemon::do_rule(Conn &c, uint32_t seq, const std::string &name, proto::Rule r, Target t)
{
	bool found;
	Session *s = find(c, name, seq, found);
	if (!s)
		return;
	// An earlier rule that matches exactly what this one matches (same
	// pattern, level, filter and targets) can never decide anything: later
	// rules win.  Dropping it keeps enable/disable toggles from filling
	// the 32 rules.
	for (size_t i = s->rules.size(); i-- > 0;) {
		const proto::Rule &o = s->rules[i];
		const Target &ot = s->targets[i];
		if (o.pattern == r.pattern && o.loglevel_max == r.loglevel_max && o.filter == r.filter &&
		    ot.pids == t.pids && ot.names == t.names) {
			s->rules.erase(s->rules.begin() + static_cast<long>(i));
			s->targets.erase(s->targets.begin() + static_cast<long>(i));
		}
	}
	if (s->rules.size() >= proto::kMaxRules) {
		reply(c, seq, -ENOSPC, "session '" + name + "' already has " + std::to_string(proto::kMaxRules) + " rules");
		return;
	}
	s->rules.push_back(r);
	const bool all = t.pids.empty() && t.names.empty();
	s->targets.push_back(std::move(t));
	std::string text = std::string(r.enable ? "enabled " : "disabled ") + r.pattern + " in session '" + name + "'";
	if (!all)
		text += " for the chosen processes";
	if (s->state == proto::SessionState::Active) {
		const KmodGrant g = grant_of(*s);
		kernel_apply(s->slot, s->uid, s->rules, s->channel, s->out, s->clock, s->owner, hostname_, s->drains, &g, &kgen_);
	}
	if (s->state == proto::SessionState::Active)
		notify_and_reply(c, seq, *s, text, static_cast<int>(s->rules.size() - 1));
	else
		reply(c, seq, 0, text);
}

void Daemon::do_status(Conn &c, uint32_t seq, const proto::Status &m)
{
	proto::StatusReply sr;
	for (auto &s : sessions_) {
		if (!visible(c, *s) || (!m.session.empty() && m.session != s->name))
			continue;
		proto::SessionStatus st;
		st.name = s->name;
		st.slot = s->slot;
		st.state = static_cast<uint32_t>(s->state);
		st.uid = s->uid;
		st.output_dir = s->out;
		st.channel = s->channel;
		st.rules = s->rules;
		st.n_buffers = static_cast<uint32_t>(s->drains.size());
		for (auto &d : s->drains) {
			st.packets += d->counters().packets.load(std::memory_order_relaxed);
			st.bytes += d->counters().bytes.load(std::memory_order_relaxed);
			st.errors += d->counters().errors.load(std::memory_order_relaxed);
		}
		sr.sessions.push_back(std::move(st));
	}
	if (!m.session.empty() && sr.sessions.empty()) {
		bool found;
		find(c, m.session, seq, found); // answers ENOENT or EPERM
		return;
	}
	send(c, seq, sr);
}

void Daemon::do_list(Conn &c, uint32_t seq)
{
	proto::ListReply lr;
	for (auto &kv : procs_) {
		const Proc &p = kv.second;
		if (c.cred.uid != 0 && p.uid != c.cred.uid)
			continue;
		for (const auto &e : p.events)
			lr.entries.push_back({static_cast<uint32_t>(p.pid), p.comm, e.name, e.loglevel});
	}
	send(c, seq, lr);
}

// The output directories of the active sessions, one per line, in
// "<socket>.active" (written whole, then renamed).  A daemon killed while
// sessions were active leaves the file behind; the next daemon on the same
// socket repairs those directories before anything else
// (repair_after_crash): a stream file cut inside a packet by the kill is
// trimmed to its last whole packet, so babeltrace2 reads the trace again.
void Daemon::save_active()
{
	const std::string file = path_ + ".active", tmp = file + ".tmp";
	std::string text;
	for (auto &x : sessions_)
		if (x->state == proto::SessionState::Active)
			text += x->out + "\n";
	if (text.empty()) {
		unlink(file.c_str());
		return;
	}
	int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	const bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
	close(fd);
	if (!ok || rename(tmp.c_str(), file.c_str()) != 0)
		unlink(tmp.c_str());
}

void Daemon::repair_after_crash()
{
	const std::string file = path_ + ".active";
	FILE *f = fopen(file.c_str(), "re");
	if (!f)
		return;
	char line[4200];
	while (fgets(line, sizeof line, f)) {
		line[strcspn(line, "\n")] = 0;
		struct stat st;
		if (line[0] != '/' || stat(line, &st) != 0 || !S_ISDIR(st.st_mode))
			continue;
		RepairStats rs = repair_tree(line);
		INFO("previous daemon ended with session output %s active: %llu stream file(s) examined, %llu "
		     "repaired", line, static_cast<unsigned long long>(rs.files),
		     static_cast<unsigned long long>(rs.repaired));
	}
	fclose(f);
	unlink(file.c_str());
}

void Daemon::stop_session(Session &s)
{
	if (s.state != proto::SessionState::Active)
		return;
	kgen_ = kernel_stop(s.slot); // kernel probes stop before the drains flush
	for (auto &d : s.drains)
		d->finish(false);
	for (auto &d : s.drains)
		d->join();
	s.state = proto::SessionState::Stopped;
	save_active();
	uint64_t packets = 0;
	for (auto &d : s.drains)
		packets += d->counters().packets.load(std::memory_order_relaxed);
	INFO("session %s stopped: %zu buffer(s), %llu packet(s) written", s.name.c_str(), s.drains.size(),
	     static_cast<unsigned long long>(packets));
}

void Daemon::on_exit(int pidfd)
{
	auto it = procs_.find(pidfd);
	if (it == procs_.end())
		return;
	VLOG("pid %d (%s) exited", it->second.pid, it->second.comm.c_str());
	acknowledge(it->second.pid, UINT64_MAX); // nothing left to apply
	for (Drain *d : it->second.drains)
		d->finish(true); // the drain flushes and closes on its own thread
	pid_to_pidfd_.erase(it->second.pid);
	epoll_ctl(epfd_, EPOLL_CTL_DEL, pidfd, nullptr);
	close(pidfd);
	procs_.erase(it);
}

// The clock page (clock_page.h) and its refresh timer: first after 100 ms,
// then every period.  Without a usable TSC processes keep clock_gettime.
void Daemon::start_clock_page()
{
	std::string why;
	clock_page_ = ClockPage::create(&why);
	if (!clock_page_) {
		VLOG("no clock page: %s", why.c_str());
		return;
	}
	clock_tfd_ = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	const uint64_t p = clock_page_->period_ns();
	struct itimerspec its = {};
	its.it_value.tv_nsec = std::min<uint64_t>(p, 100000000);
	its.it_interval.tv_sec = static_cast<time_t>(p / 1000000000u);
	its.it_interval.tv_nsec = static_cast<long>(p % 1000000000u);
	struct epoll_event ev = {};
	ev.events = EPOLLIN;
	ev.data.fd = clock_tfd_;
	if (clock_tfd_ < 0 || timerfd_settime(clock_tfd_, 0, &its, nullptr) < 0 ||
	    epoll_ctl(epfd_, EPOLL_CTL_ADD, clock_tfd_, &ev) < 0)
		logf("clock page refresh timer: %s (the page drifts)", strerror(errno));
	VLOG("clock page published (refresh every %llu ms)", static_cast<unsigned long long>(p / 1000000));
}

int Daemon::run(const DaemonOptions &opt)
{
	g_verbose = opt.verbose;
	g_quiet = opt.quiet;
	hostname_ = hostname();
	adopt_early_ = opt.adopt_early;
	// Run ids name a session's run to the processes; a process outliving
	// this daemon must not mistake a new daemon's run for its old one.
	if (getrandom(&next_run_id_, sizeof(next_run_id_), 0) != sizeof(next_run_id_))
		next_run_id_ = static_cast<uint64_t>(time(nullptr)) << 20;
	next_run_id_ = (next_run_id_ >> 16 << 16) | 1; // never 0 ("not joined")
	path_ = opt.socket_path.empty() ? proto::server_socket_path() : opt.socket_path;

	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	// Blocked before any drain thread exists, so they all inherit it.
	pthread_sigmask(SIG_BLOCK, &set, nullptr);
	signal(SIGPIPE, SIG_IGN);
	sigfd_ = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	epfd_ = epoll_create1(EPOLL_CLOEXEC);
	lfd_ = listen_on(path_);
	if (lfd_ < 0 || sigfd_ < 0 || epfd_ < 0)
		return 1;
	struct epoll_event ev = {};
	ev.events = EPOLLIN;
	ev.data.fd = lfd_;
	epoll_ctl(epfd_, EPOLL_CTL_ADD, lfd_, &ev);
	ev.data.fd = sigfd_;
	epoll_ctl(epfd_, EPOLL_CTL_ADD, sigfd_, &ev);
	start_clock_page();
	kwait_efd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (kwait_efd_ >= 0) {
		ev.data.fd = kwait_efd_;
		epoll_ctl(epfd_, EPOLL_CTL_ADD, kwait_efd_, &ev);
	}
	INFO("listening on %s (protocol %u, buffer ABI %u.%u)", path_.c_str(), proto::kVersion, STRATA_ABI_MAJOR,
	     STRATA_ABI_MINOR);
	repair_after_crash();
	if (opt.ready_fd >= 0) {
		ssize_t w = write(opt.ready_fd, "ready\n", 6);
		(void)w;
		close(opt.ready_fd);
	}

	while (!quit_) {
		struct epoll_event evs[32];
		int n = epoll_wait(epfd_, evs, 32, pending_timeout_ms());
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			logf("epoll_wait: %s", strerror(errno));
			break;
		}
		for (int i = 0; i < n; i++) {
			int fd = evs[i].data.fd;
			if (fd == lfd_) {
				accept_conns();
			} else if (fd == kwait_efd_) {
				on_kwait_done();
			} else if (fd == sigfd_) {
				struct signalfd_siginfo si;
				while (read(sigfd_, &si, sizeof(si)) == sizeof(si)) {
					INFO("signal %u: flushing and exiting", si.ssi_signo);
					quit_ = true;
				}
			} else if (fd == clock_tfd_) {
				uint64_t ticks;
				if (read(clock_tfd_, &ticks, sizeof ticks) == sizeof ticks)
					clock_page_->refresh();
			} else if (procs_.count(fd)) {
				on_exit(fd);
			} else {
				auto it = conns_.find(fd);
				if (it != conns_.end())
					on_readable(*it->second);
			}
		}
		answer_pending(false);
	}
	kwait_quit_.store(true, std::memory_order_relaxed); // their next slice ends them
	for (auto &t : kwaiters_)
		t.second.join();
	kwaiters_.clear();
	answer_pending(true);
	for (auto &s : sessions_)
		stop_session(*s);
	sessions_.clear();
	conns_.clear();
	for (auto &kv : procs_)
		if (kv.first >= 0)
			close(kv.first);
	unlink(path_.c_str());
	close(lfd_);
	close(sigfd_);
	if (clock_tfd_ >= 0)
		close(clock_tfd_);
	close(epfd_);
	if (kwait_efd_ >= 0)
		close(kwait_efd_);
	INFO("served %llu state queries; %llu hand-offs and announcements from processes the kernel module answers",
	     static_cast<unsigned long long>(n_queries_), static_cast<unsigned long long>(n_handoffs_));
	INFO("exited cleanly");
	return 0;
}

} // namespace

int run_daemon(const DaemonOptions &opt)
{
	Daemon d;
	return d.run(opt);
}

} // namespace strata
