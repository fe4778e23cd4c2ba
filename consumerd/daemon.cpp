/*
 * daemon.cpp - the event loop; see daemon.h for the threading contract
 * and daemon_impl.h for the parts.
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
#include "daemon_impl.h"

namespace strata {
namespace daemon_impl {

bool g_verbose = false;
bool g_quiet = false;

void logf(const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	fprintf(stderr, "strata-consumerd: %s\n", buf);
}

std::string hostname()
{
	char buf[256] = {};
	gethostname(buf, sizeof(buf) - 1);
	return buf;
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
	if (r < 0 || listen(fd, backlog) < 0) {
		int e = errno;
		logf("cannot listen on %s: %s", path.c_str(), strerror(e));
		close(fd);
		return -e;
	}
	return fd;
}

// A periodic timer in the event loop: first after first_ns (< 1 s), then
// every period_ns.  Its fd, or -1 with errno.
int Daemon::add_timer(uint64_t first_ns, uint64_t period_ns)
{
	int fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	struct itimerspec its = {};
	its.it_value.tv_nsec = static_cast<long>(first_ns);
	its.it_interval.tv_sec = static_cast<time_t>(period_ns / 1000000000u);
	its.it_interval.tv_nsec = static_cast<long>(period_ns % 1000000000u);
	struct epoll_event ev = {};
	ev.events = EPOLLIN;
	ev.data.fd = fd;
	if (fd >= 0 && (timerfd_settime(fd, 0, &its, nullptr) < 0 || epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) < 0)) {
		const int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
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
	clock_tfd_ = add_timer(std::min<uint64_t>(p, 100000000), p);
	if (clock_tfd_ < 0)
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
	// The kernel's cap (net.core.somaxconn, 4096 by default): every
	// process of a burst connects twice (its join, then its first event's
	// BUFFER hand-over), and a full backlog makes each of them wait
	// (proto::connect_unix) while the main thread accepts.
	lfd_ = listen_on(path_, 4096);
	if (lfd_ < 0 || sigfd_ < 0 || epfd_ < 0)
		return 1;
	struct epoll_event ev = {};
	ev.events = EPOLLIN;
	ev.data.fd = lfd_;
	epoll_ctl(epfd_, EPOLL_CTL_ADD, lfd_, &ev);
	qfd_ = listen_on(path_ + proto::kQuietSuffix, 4096);
	quiet_tfd_ = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (qfd_ >= 0 && quiet_tfd_ >= 0) {
		struct epoll_event q = {};
		q.events = EPOLLIN | EPOLLONESHOT;
		q.data.fd = qfd_;
		epoll_ctl(epfd_, EPOLL_CTL_ADD, qfd_, &q);
		q.events = EPOLLIN;
		q.data.fd = quiet_tfd_;
		epoll_ctl(epfd_, EPOLL_CTL_ADD, quiet_tfd_, &q);
	} else { // processes use the socket
		if (qfd_ >= 0) {
			close(qfd_);
			unlink((path_ + proto::kQuietSuffix).c_str());
		}
		qfd_ = -1;
		logf("no quiet socket: every process start wakes the daemon");
	}
	ev.data.fd = sigfd_;
	epoll_ctl(epfd_, EPOLL_CTL_ADD, sigfd_, &ev);
	start_clock_page();
	start_attacher();
	kwait_efd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (kwait_efd_ >= 0) {
		ev.data.fd = kwait_efd_;
		epoll_ctl(epfd_, EPOLL_CTL_ADD, kwait_efd_, &ev);
	}
	INFO("listening on %s (protocol %u, buffer ABI %u.%u)", path_.c_str(), proto::kVersion, STRATA_ABI_MAJOR,
	     STRATA_ABI_MINOR);
	repair_after_crash();
	restore_sessions(); // restart.cpp: a crashed daemon's active sessions, taken up
	remove_tables(); // a crashed daemon's: their runs are gone
	publish_tables();
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
			} else if (fd == qfd_) {
				arm_quiet(true);
			} else if (fd == quiet_tfd_) {
				arm_quiet(false);
			} else if (fd == kwait_efd_) {
				on_kwait_done();
			} else if (fd == attach_efd_) {
				attach_done();
			} else if (fd == sigfd_) {
				struct signalfd_siginfo si;
				while (read(sigfd_, &si, sizeof(si)) == sizeof(si)) {
					INFO("signal %u: flushing and exiting", si.ssi_signo);
					quit_ = true;
				}
			} else if (fd == trigger_tfd_) {
				uint64_t ticks;
				if (read(trigger_tfd_, &ticks, sizeof ticks) == sizeof ticks) {
					check_triggers();
					tables_dirty_ = true; // a companion may have started or stopped
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
		collect_attaches(); // drains whose process did not wait (attach.cpp)
		answer_pending(false);
		publish_tables();
		if (state_dirty_)
			persist_sessions(); // restart.cpp
	}
	serve_quiet();   // every process that joined from the table is known
	stop_attacher(); // settles: every buffer handed over joins its session
	kwait_quit_.store(true, std::memory_order_relaxed); // their next slice ends them
	for (auto &t : kwaiters_)
		t.second.join();
	kwaiters_.clear();
	answer_pending(true);
	// By index: stopping a session erases its trigger's companion, which
	// always comes after it (trigger.cpp).
	for (size_t i = 0; i < sessions_.size(); i++)
		stop_session(*sessions_[i]);
	sessions_.clear();
	persist_sessions(); // none left: a clean exit ends them (restart.cpp)
	remove_tables();
	conns_.clear();
	for (auto &kv : procs_)
		if (kv.first >= 0)
			close(kv.first);
	unlink(path_.c_str());
	close(lfd_);
	if (qfd_ >= 0) {
		unlink((path_ + proto::kQuietSuffix).c_str());
		close(qfd_);
	}
	if (quiet_tfd_ >= 0)
		close(quiet_tfd_);
	close(sigfd_);
	if (clock_tfd_ >= 0)
		close(clock_tfd_);
	if (trigger_tfd_ >= 0)
		close(trigger_tfd_);
	close(epfd_);
	if (kwait_efd_ >= 0)
		close(kwait_efd_);
	INFO("served %llu state queries and %llu joins from the grant table (%llu by the quiet socket); %llu "
	     "hand-offs and announcements from processes the kernel module answers",
	     static_cast<unsigned long long>(n_queries_), static_cast<unsigned long long>(n_table_joins_),
	     static_cast<unsigned long long>(n_quiet_joins_), static_cast<unsigned long long>(n_handoffs_));
	INFO("exited cleanly");
	return 0;
}

} // namespace daemon_impl

int run_daemon(const DaemonOptions &opt)
{
	daemon_impl::Daemon d;
	return d.run(opt);
}

} // namespace strata
