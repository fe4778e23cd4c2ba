/*
 * daemon.cpp - the Daemon's life (daemon_impl.h): its parts made, its
 * sockets and signals opened, the event loop run, everything flushed and
 * closed at the end.  The threading contract is daemon.h's.
 */
#include "daemon_impl.h"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/un.h>

#include "proto/sock.h"
#include "strata_abi.h"
#include <cstdio>

namespace strata {
namespace daemon_impl {

// The first line of a small file, "" if none.
static std::string first_line(const char *path)
{
	char buf[256] = {};
	FILE *f = fopen(path, "re");
	if (!f)
		return "";
	const bool ok = fgets(buf, sizeof buf, f) != nullptr;
	fclose(f);
	std::string s = ok ? buf : "";
	while (!s.empty() && (s.back() == '\n' || s.back() == ' '))
		s.pop_back();
	return s;
}

// This daemon's machine's name (its sub-traces' env.hostname, its links'
// HELLO).  A machine with no name (the kernel's "(none)", as in a guest
// booted without one) gets /etc/hostname's, else "unnamed-" and the start
// of its boot id: two such guests in one merged view stay apart, and the
// name says why it is not a host name.  Tests only: STRATA_TEST_HOSTNAME
// names it, so that a second daemon on this machine can stand for another
// one (docs/clocks.md).
std::string hostname()
{
	if (const char *h = getenv("STRATA_TEST_HOSTNAME"); h && *h)
		return h;
	char buf[256] = {};
	gethostname(buf, sizeof(buf) - 1);
	std::string name = buf;
	if (!name.empty() && name != "(none)")
		return name;
	name = first_line("/etc/hostname");
	if (!name.empty())
		return name;
	const std::string boot = first_line("/proc/sys/kernel/random/boot_id");
	return "unnamed-" + (boot.size() >= 8 ? boot.substr(0, 8) : std::string("machine"));
}

namespace {
// Run ids name a session's run to the processes; a process outliving this
// daemon must not mistake a new daemon's run for its old one.
uint64_t first_run_id()
{
	uint64_t id;
	if (getrandom(&id, sizeof(id), 0) != sizeof(id))
		id = static_cast<uint64_t>(time(nullptr)) << 20;
	return (id >> 16 << 16) | 1; // never 0 ("not joined")
}
} // namespace

Daemon::Daemon(const DaemonOptions &opt)
    : opt_(opt), path_(opt.socket_path.empty() ? proto::server_socket_path() : opt.socket_path),
      hostname_(hostname()),
      procs_([this](int fd) { return loop_.add(fd, EPOLLIN, [this, fd] { on_exit(fd); }); },
	     [this](int fd) { loop_.remove(fd); }),
      acks_(procs_), tables_(path_), sessions_(*this, SessionTable::Config{path_, hostname_, first_run_id()})
{
}

int Daemon::listen_on(const std::string &path, int backlog)
{
	struct sockaddr_un sa;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	if (path.size() >= sizeof(sa.sun_path)) {
		logf("socket path too long: %s", path.c_str());
		return -ENAMETOOLONG;
	}
	// The directory holding the socket: private (0700) when we create it,
	// open to every user (0755) on a root daemon (access.h).
	size_t slash = path.rfind('/');
	if (slash != std::string::npos && slash > 0) {
		std::string dir = path.substr(0, slash);
		struct stat dst;
		const bool existed = stat(dir.c_str(), &dst) == 0;
		int r = make_dirs(dir, socket_dir_mode());
		if (r < 0) {
			logf("cannot create %s: %s", dir.c_str(), strerror(-r));
			return r;
		}
		open_socket_dir(dir, !existed);
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
	if (r == 0)
		r = chmod(path.c_str(), socket_mode()); // 0666 on a root daemon (access.h)
	if (r < 0 || listen(fd, backlog) < 0) {
		int e = errno;
		logf("cannot listen on %s: %s", path.c_str(), strerror(e));
		close(fd);
		return -e;
	}
	return fd;
}

// The signals, the socket and the quiet socket, in the event loop.
bool Daemon::open_sockets()
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	// Blocked before any drain thread exists, so they all inherit it.
	pthread_sigmask(SIG_BLOCK, &set, nullptr);
	signal(SIGPIPE, SIG_IGN);
	sigfd_ = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	// The kernel's cap (net.core.somaxconn, 4096 by default): every
	// process of a burst connects twice (its join, then its first event's
	// BUFFER hand-over), and a full backlog makes each of them wait
	// (proto::connect_unix) while the main thread accepts.
	lfd_ = listen_on(path_, 4096);
	if (lfd_ < 0 || sigfd_ < 0 || !loop_.ok())
		return false;
	if (!loop_.add(lfd_, EPOLLIN, [this] { accept_conns(); }) ||
	    !loop_.add(sigfd_, EPOLLIN, [this] { on_signal(); })) {
		logf("cannot watch the socket and the signals: %s", strerror(errno));
		return false;
	}
	open_quiet();
	return true;
}

void Daemon::open_quiet()
{
	qfd_ = listen_on(path_ + proto::kQuietSuffix, 4096);
	quiet_tfd_ = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (qfd_ >= 0 && quiet_tfd_ >= 0) {
		if (loop_.add(qfd_, EPOLLIN | EPOLLONESHOT, [this] { arm_quiet(true); })) {
			if (loop_.add(quiet_tfd_, EPOLLIN, [this] { arm_quiet(false); }))
				return;
			loop_.remove(qfd_);
		}
		logf("cannot watch the quiet socket: %s", strerror(errno));
	}
	// Processes use the socket.
	if (qfd_ >= 0) {
		close(qfd_);
		unlink((path_ + proto::kQuietSuffix).c_str());
	}
	qfd_ = -1;
	logf("no quiet socket: every process start wakes the daemon");
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
	const uint64_t p = clock_page_->period_ns();
	if (loop_.add_timer(std::min<uint64_t>(p, 100000000), p, [this] { clock_page_->refresh(); }) < 0)
		logf("clock page refresh timer: %s (the page drifts)", strerror(errno));
	VLOG("clock page published (refresh every %llu ms)", static_cast<unsigned long long>(p / 1000000));
}

// The clock links (sync_link.h), each on its own thread, stamping with the
// clock the daemon's processes use (the page just started, if any).
bool Daemon::start_sync_links()
{
	const ClockInfo me = measure_session_clock();
	for (int follower = 1; follower >= 0; follower--)
		for (const std::string &a : follower ? opt_.sync : opt_.sync_guest) {
			SyncSpec spec;
			std::string err;
			if (!parse_sync(a, follower, &spec, &err)) {
				logf("clock link: %s", err.c_str());
				return false;
			}
			auto l = std::make_unique<SyncLink>(
				spec, hostname_, me, opt_.sync_period_ms * 1000000ull, consumer_page_now);
			if (!l->start(&err)) {
				logf("clock link %s: %s", spec.name.c_str(), err.c_str());
				return false;
			}
			INFO("clock link %s: %s (%s)", spec.name.c_str(), spec.text.c_str(),
			     follower ? "this machine's traces go onto its clock"
				      : "its clock mapped onto this one");
			sync_.add(std::move(l));
		}
	return true;
}

void Daemon::on_signal()
{
	struct signalfd_siginfo si;
	while (read(sigfd_, &si, sizeof(si)) == sizeof(si)) {
		INFO("signal %u: flushing and exiting", si.ssi_signo);
		quit_ = true;
	}
}

// SessionTable::Host: the trigger timer.
bool Daemon::watch_triggers(bool on)
{
	if (!on) {
		loop_.close_timer(trigger_tfd_);
		trigger_tfd_ = -1;
		return false;
	}
	const uint64_t ns = SessionTable::kTriggerLookMs * 1000000ull;
	trigger_tfd_ = loop_.add_timer(ns, ns, [this] {
		sessions_.check_triggers();
		tables_.dirty(); // a companion may have started or stopped
	});
	return trigger_tfd_ >= 0;
}

// SessionTable::Host: a relayed session's clocks (docs/clocks.md,
// "Relayed followers").  A follower's link keeps the sub-traces' metadata
// texts, which go out first saying their clock is not mapped yet.
void Daemon::relay_opened(Session &s)
{
	if (!sync_.follows() || !s.aggregate.empty())
		return;
	s.relay->keep_metadata([env = sync_.relay_pending_env()](const std::string &t) {
		return rewrite_metadata_env(t, env);
	});
}

// ... and at its end they go out again onto the reference's clock, with
// clocks.json beside them.
void Daemon::relay_ending(Session &s)
{
	if (s.aggregate.empty())
		sync_.relay_ending(*s.relay, s.clock, hostname_);
}

void Daemon::publish_tables()
{
	tables_.publish(sessions_, procs_, clock_page_ ? clock_page_->fd() : -1);
}

int Daemon::run()
{
	g_verbose = opt_.verbose;
	g_quiet = opt_.quiet;
	if (!open_sockets())
		return 1;
	start_clock_page();
	if (!start_sync_links())
		return 1;
	// Else BUFFERs are attached on the main thread.
	if (attacher_.start() && !loop_.add(attacher_.efd(), EPOLLIN, [this] { collect_attaches(true); })) {
		logf("cannot watch the attacher thread: %s: BUFFERs are attached on the main thread",
		     strerror(errno));
		attacher_.stop();
	}
	// Else the module's WAITs are not used (processes acknowledge on their
	// connections only).
	if (acks_.start() && !loop_.add(acks_.efd(), EPOLLIN, [this] { acks_.on_wait_done(); })) {
		logf("cannot watch the module's WAIT results: %s: acknowledgements through the module are "
		     "not awaited",
		     strerror(errno));
		acks_.stop();
	}
	INFO("listening on %s (protocol %u, buffer ABI %u.%u)", path_.c_str(), proto::kVersion,
	     STRATA_ABI_MAJOR, STRATA_ABI_MINOR);
	sessions_.repair_after_crash();
	restore_sessions(); // restart.cpp: a crashed daemon's active sessions, taken up
	tables_.remove();   // a crashed daemon's: their runs are gone
	publish_tables();
	if (opt_.ready_fd >= 0) {
		ssize_t w = write(opt_.ready_fd, "ready\n", 6);
		(void)w;
		close(opt_.ready_fd);
	}
	for (;;) {
		if (quit_ && !leaving_)
			leave();                // stopping.cpp: the processes told, one bounded wait
		if (leaving_ && stops_.empty()) // every stop's wait is over (leave()'s too)
			break;
		const int r = loop_.turn(acks_.timeout_ms());
		if (r < 0) {
			logf("epoll_wait: %s", strerror(-r));
			break;
		}
		collect_attaches(); // drains whose process did not wait (attacher.h)
		deliver(acks_.due(false));
		publish_tables();
		persist_later(); // restart.cpp
	}
	shut_down();
	return 0;
}

void Daemon::shut_down()
{
	serve_quiet();     // every process that joined from the table is known
	settle_attaches(); // every buffer handed over joins its session
	attacher_.stop();
	acks_.stop();
	deliver(acks_.due(true));
	// The active disk sessions' clocks.json and metadata clocks, as at a
	// stop (sync_link.h), once stop_all finished their drains.
	std::vector<std::pair<std::string, ClockInfo>> synced;
	proto::StatusReply all;
	Answer none;
	if (!sync_.empty() && sessions_.status(Caller{}, "", all, none))
		for (const proto::SessionStatus &st : all.sessions)
			if (const Session *x = sessions_.find(Caller{}, st.name, none);
			    x && x->state == proto::SessionState::Active && !x->streamed() &&
			    x->aggregate.empty())
				synced.emplace_back(x->out, x->clock);
	sessions_.stop_all();
	for (const auto &o : synced)
		sync_.session_stopped(o.first, o.second, hostname_);
	persist_sessions(); // none left: a clean exit ends them (restart.cpp)
	tables_.remove();
	conns_.clear();
	unlink(path_.c_str());
	close(lfd_);
	if (qfd_ >= 0) {
		unlink((path_ + proto::kQuietSuffix).c_str());
		close(qfd_);
	}
	if (quiet_tfd_ >= 0)
		close(quiet_tfd_);
	close(sigfd_);
	INFO("served %llu state queries and %llu joins from the grant table (%llu by the quiet socket); %llu "
	     "hand-offs and announcements from processes the kernel module answers",
	     static_cast<unsigned long long>(n_queries_), static_cast<unsigned long long>(tables_.joins()),
	     static_cast<unsigned long long>(tables_.quiet_joins()),
	     static_cast<unsigned long long>(n_handoffs_));
	INFO("exited cleanly");
}

} // namespace daemon_impl

int run_daemon(const DaemonOptions &opt)
{
	daemon_impl::Daemon d(opt);
	return d.run();
}

} // namespace strata
