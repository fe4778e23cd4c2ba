/*
 * listener.cpp - the daemon's socket and its quiet socket (listener.h).
 */
#include "listener.h"

#include <cerrno>
#include <cstring>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <unistd.h>

#include "access.h"
#include "fs.h"
#include "log.h"
#include "proto/proto.h"
#include "proto/sock.h"

namespace strata {
namespace daemon_impl {

namespace {

// The listening socket at `path`, or -errno (logged); `*made_dir` the
// directory holding it when this call created it.
int listen_on(const std::string &path, int backlog, std::string *made_dir)
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
		if (!existed)
			*made_dir = dir;
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
			::close(fd);
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
		::close(fd);
		return -e;
	}
	return fd;
}

} // namespace

bool Listener::open()
{
	// The kernel's cap (net.core.somaxconn, 4096 by default): every
	// process of a burst connects twice (its join, then its first event's
	// BUFFER hand-over), and a full backlog makes each of them wait
	// (proto::connect_unix) while the main thread accepts.
	lfd_ = listen_on(path_, 4096, &made_dir_);
	if (lfd_ < 0)
		return false;
	if (!loop_.add(lfd_, EPOLLIN, [this] { accept(false); })) {
		logf("cannot watch the socket %s: %s", path_.c_str(), strerror(errno));
		unlink(path_.c_str());
		::close(lfd_);
		lfd_ = -1;
		return false;
	}
	open_quiet();
	open_knock();
	return true;
}

void Listener::open_knock()
{
	const std::string path = path_ + proto::kKnockSuffix;
	struct sockaddr_un sa;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	const int one = 1;
	kfd_ = path.size() < sizeof(sa.sun_path)
		       ? socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)
		       : -1;
	if (kfd_ >= 0) {
		memcpy(sa.sun_path, path.c_str(), path.size() + 1);
		unlink(path.c_str()); // a stale one: the socket's own check found no daemon
		mode_t old = umask(0077);
		const bool bound = bind(kfd_, reinterpret_cast<struct sockaddr *>(&sa), sizeof(sa)) == 0;
		umask(old);
		if (bound && chmod(path.c_str(), socket_mode()) == 0 &&
		    setsockopt(kfd_, SOL_SOCKET, SO_PASSCRED, &one, sizeof one) == 0 &&
		    loop_.add(kfd_, EPOLLIN, [this] { read_knocks(); }))
			return;
		unlink(path.c_str());
	}
	logf("no knock socket (%s): a process that cannot connect is not named", strerror(errno));
	if (kfd_ >= 0)
		::close(kfd_);
	kfd_ = -1;
}

void Listener::read_knocks()
{
	for (int n = 0; kfd_ >= 0 && n < 4096; n++) { // bounded: a flood waits for the next turn
		uint8_t buf[proto::kKnockSize + 1];
		union {
			struct cmsghdr h;
			char space[CMSG_SPACE(sizeof(struct ucred))];
		} ctl;
		struct iovec iov = {buf, sizeof buf};
		struct msghdr mh;
		memset(&mh, 0, sizeof mh);
		mh.msg_iov = &iov;
		mh.msg_iovlen = 1;
		mh.msg_control = ctl.space;
		mh.msg_controllen = sizeof ctl.space;
		const ssize_t r = recvmsg(kfd_, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (r < 0) {
			if (errno != EAGAIN && errno != EINTR)
				logf("knock socket: %s", strerror(errno));
			return;
		}
		const struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		struct ucred cred = {};
		const bool has_cred = c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS;
		if (has_cred)
			memcpy(&cred, CMSG_DATA(c), sizeof cred);
		if (r != static_cast<ssize_t>(proto::kKnockSize) || !has_cred || cred.pid <= 0 ||
		    proto::load_le(buf, 4) != proto::kKnockMagic) {
			static unsigned said; // a hostile peer's flood is not the log's
			if (said < 10 && ++said)
				logf("knock socket: a malformed datagram dropped (%zd bytes)", r);
			continue;
		}
		std::string comm;
		for (size_t i = 8; i < proto::kKnockSize && buf[i]; i++)
			comm += buf[i] >= 0x20 && buf[i] < 0x7f ? static_cast<char>(buf[i]) : '?';
		const uint32_t flags = static_cast<uint32_t>(proto::load_le(buf + 4, 4));
		const int signo = flags & proto::kKnockAsync
					  ? static_cast<int>(flags >> proto::kKnockSignoShift & 0xff)
					  : 0;
		host_.knocked(cred.pid, cred.uid, comm.substr(0, 15), signo);
	}
}

void Listener::close_knock()
{
	if (kfd_ < 0)
		return;
	loop_.remove(kfd_);
	unlink((path_ + proto::kKnockSuffix).c_str());
	::close(kfd_);
	kfd_ = -1;
}

void Listener::open_quiet()
{
	std::string made; // the socket's directory exists by now
	qfd_ = listen_on(path_ + proto::kQuietSuffix, 4096, &made);
	quiet_tfd_ = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (qfd_ >= 0 && quiet_tfd_ >= 0) {
		if (loop_.add(qfd_, EPOLLIN | EPOLLONESHOT, [this] { on_quiet(true); })) {
			if (loop_.add(quiet_tfd_, EPOLLIN, [this] { on_quiet(false); }))
				return;
			loop_.remove(qfd_);
		}
		logf("cannot watch the quiet socket: %s", strerror(errno));
	}
	// Processes use the socket.
	close_quiet();
	logf("no quiet socket: every process start wakes the daemon");
}

void Listener::accept(bool quiet, std::vector<int> *taken)
{
	const int lfd = quiet ? qfd_ : lfd_;
	if (lfd < 0)
		return;
	for (;;) {
		int fd = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0) {
			if (errno != EAGAIN && errno != EINTR)
				logf("accept: %s", strerror(errno));
			return;
		}
		if (host_.take_conn(fd, quiet) && taken)
			taken->push_back(fd);
	}
}

// on_socket: the quiet socket has a connection: wait kQuietDelayNs for more
// (one timer, one wake-up for a burst of starts).  Else the timer fired:
// the host serves the queue, then the socket listens for the next first
// connection.
void Listener::on_quiet(bool on_socket)
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
	host_.serve_quiet();
	if (qfd_ < 0 || loop_.rearm(qfd_, EPOLLIN | EPOLLONESHOT))
		return;
	// Unwatched, its next connections would wait for a command to serve
	// them: no new one finds it, those already queued are served.
	logf("cannot watch the quiet socket again: %s: processes use the socket", strerror(errno));
	unlink((path_ + proto::kQuietSuffix).c_str());
	host_.serve_quiet();
	close_quiet();
}

void Listener::close_quiet()
{
	if (qfd_ >= 0) {
		loop_.remove(qfd_);
		unlink((path_ + proto::kQuietSuffix).c_str());
		::close(qfd_);
		qfd_ = -1;
	}
	if (quiet_tfd_ >= 0) {
		loop_.remove(quiet_tfd_);
		::close(quiet_tfd_);
		quiet_tfd_ = -1;
	}
}

void Listener::close()
{
	if (lfd_ >= 0) {
		loop_.remove(lfd_);
		unlink(path_.c_str());
		::close(lfd_);
		lfd_ = -1;
	}
	close_quiet();
	close_knock();
	// The directory this daemon made for its socket ($XDG_RUNTIME_DIR/strata)
	// goes too, once empty: it may hold another daemon's socket, or the
	// sessions a killed daemon kept (<socket>.state), and then stays.
	if (!made_dir_.empty() && rmdir(made_dir_.c_str()) == 0)
		made_dir_.clear();
}

} // namespace daemon_impl
} // namespace strata
