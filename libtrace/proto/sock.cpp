/*
 * sock.cpp - see sock.h.  Single-threaded per fd: one caller owns a socket.
 */
#include "sock.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

namespace strata {
namespace proto {

int64_t now_ms()
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

namespace {
// Appends `s` to out[0..cap) at *n; false (and out unchanged past *n) when
// it does not fit with its NUL.
bool append(char *out, size_t cap, size_t *n, const char *s)
{
	const size_t k = strlen(s);
	if (cap - *n <= k)
		return false;
	memcpy(out + *n, s, k + 1);
	*n += k;
	return true;
}

bool server_path(char *out, size_t cap)
{
	size_t n = 0;
	const char *env = getenv("STRATA_CONSUMERD_SOCKET");
	if (env && *env)
		return append(out, cap, &n, env);
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	if (xdg && *xdg == '/')
		return append(out, cap, &n, xdg) && append(out, cap, &n, "/strata/consumerd.sock");
	if (geteuid() == 0)
		return append(out, cap, &n, "/run/strata/consumerd.sock");
	char uid[16];
	snprintf(uid, sizeof(uid), "%u", static_cast<unsigned>(geteuid()));
	return append(out, cap, &n, "/tmp/strata-") && append(out, cap, &n, uid) &&
	       append(out, cap, &n, "/consumerd.sock");
}
} // namespace

std::string server_socket_path()
{
	char p[kMaxPath + 1];
	return server_path(p, sizeof(p)) ? p : "";
}

int client_socket_paths(char (*out)[kSockPathMax], int max)
{
	int n = 0;
	if (n < max && server_path(out[n], kSockPathMax))
		n++;
	const char *env = getenv("STRATA_CONSUMERD_SOCKET");
	size_t k = 0;
	if (!(env && *env) && geteuid() != 0 && n < max &&
	    append(out[n], kSockPathMax, &k, "/run/strata/consumerd.sock"))
		n++;
	return n;
}

std::vector<std::string> client_socket_paths()
{
	char p[2][kSockPathMax];
	const int n = client_socket_paths(p, 2);
	return std::vector<std::string>(p, p + n);
}

namespace {
// Wait for `events` on fd until the deadline: 1 ready, 0 timeout, -errno.
// Past the deadline, one look without waiting before the timeout: a thread
// kept off its CPU past it (a loaded machine) finds what arrived meanwhile.
int wait_fd(int fd, short events, int64_t deadline_ms)
{
	deadline_ms = resolve_deadline(deadline_ms);
	for (;;) {
		const int64_t left = deadline_ms - now_ms();
		struct pollfd p = {fd, events, 0};
		const int r = poll(&p, 1, static_cast<int>(left <= 0 ? 0 : left > 60000 ? 60000 : left));
		if (r > 0)
			return 1;
		if (r < 0 && errno != EINTR)
			return -errno;
		if (r == 0 && left <= 0)
			return 0;
	}
}

// One blocking connect of the non-blocking fd, bounded by the deadline
// (SO_SNDTIMEO bounds an AF_UNIX connect's wait for backlog room): 0, or
// -errno (-ETIMEDOUT once the deadline passed).  Async-signal-safe.
int connect_blocking(int fd, const struct sockaddr_un *sa, int64_t deadline_ms)
{
	const int64_t left = resolve_deadline(deadline_ms) - now_ms();
	if (left <= 0)
		return -ETIMEDOUT;
	struct timeval tv = {static_cast<time_t>(left / 1000), static_cast<suseconds_t>(left % 1000 * 1000)};
	const int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) < 0 ||
	    fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0)
		return -errno;
	int r = connect(fd, reinterpret_cast<const struct sockaddr *>(sa), sizeof(*sa));
	const int e = r < 0 ? errno : 0;
	const struct timeval zero = {0, 0};
	if (fcntl(fd, F_SETFL, fl) < 0 || setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &zero, sizeof zero) < 0)
		return -errno;
	if (r == 0)
		return 0;
	return e == EAGAIN || e == EINPROGRESS ? -ETIMEDOUT : -e;
}
} // namespace

int connect_unix(const std::string &path, int64_t deadline_ms)
{
	return connect_unix(path.c_str(), deadline_ms);
}

int connect_unix(const char *path, int64_t deadline_ms)
{
	struct sockaddr_un sa;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	const size_t len = strlen(path);
	if (len == 0 || len >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, len + 1);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	for (;;) {
		if (connect(fd, reinterpret_cast<struct sockaddr *>(&sa), sizeof(sa)) == 0)
			return fd;
		int e = errno;
		if (e == EINTR)
			continue;
		if (e == EAGAIN) {
			// AF_UNIX: the listener's backlog is full and nothing was
			// connected.  poll() reports such a socket writable at once
			// (it was returned as connected before: the first send then
			// failed with ENOTCONN under a burst of joins, issue 38); a
			// blocking connect waits for room in the backlog, bounded by
			// SO_SNDTIMEO.  Then the socket goes back to non-blocking.
			const int r = connect_blocking(fd, &sa, deadline_ms);
			if (r == -EINTR)
				continue;
			if (r == 0)
				return fd;
			close(fd);
			return r;
		}
		if (e == EINPROGRESS) {
			// In progress: wait, bounded.
			int w = wait_fd(fd, POLLOUT, deadline_ms);
			if (w == 1) {
				int soerr = 0;
				socklen_t l = sizeof(soerr);
				if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &l) == 0 && soerr == 0)
					return fd;
				close(fd);
				return -(soerr ? soerr : ECONNREFUSED);
			}
			close(fd);
			return w == 0 ? -ETIMEDOUT : w;
		}
		close(fd);
		return -e;
	}
}

int send_all(int fd, const void *data, size_t n, int pass_fd, int64_t deadline_ms)
{
	const uint8_t *bytes = static_cast<const uint8_t *>(data);
	size_t off = 0;
	bool fd_sent = pass_fd < 0;
	while (off < n) {
		struct iovec iov = {const_cast<uint8_t *>(bytes) + off, n - off};
		struct msghdr mh;
		memset(&mh, 0, sizeof(mh));
		mh.msg_iov = &iov;
		mh.msg_iovlen = 1;
		alignas(struct cmsghdr) char cbuf[CMSG_SPACE(sizeof(int))];
		if (!fd_sent) {
			memset(cbuf, 0, sizeof(cbuf));
			mh.msg_control = cbuf;
			mh.msg_controllen = sizeof(cbuf);
			struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
			c->cmsg_level = SOL_SOCKET;
			c->cmsg_type = SCM_RIGHTS;
			c->cmsg_len = CMSG_LEN(sizeof(int));
			memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
		}
		ssize_t r = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (r > 0) {
			off += static_cast<size_t>(r);
			fd_sent = true;
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			int w = wait_fd(fd, POLLOUT, deadline_ms);
			if (w == 1)
				continue;
			return w == 0 ? -ETIMEDOUT : w;
		}
		return r < 0 ? -errno : -EIO;
	}
	return 0;
}

int send_message(int fd, const Message &m, int pass_fd, int64_t deadline_ms)
{
	std::vector<uint8_t> bytes = encode(m);
	return send_all(fd, bytes.data(), bytes.size(), pass_fd, deadline_ms);
}

long recv_some(int fd, void *buf, size_t len, std::vector<int> *fds)
{
	int got[kMaxFdsPerRecv];
	size_t n = 0;
	long r = recv_some(fd, buf, len, got, &n);
	fds->insert(fds->end(), got, got + n);
	return r;
}

long recv_some(int fd, void *buf, size_t len, int fds[kMaxFdsPerRecv], size_t *n_fds)
{
	*n_fds = 0;
	struct iovec iov = {buf, len};
	struct msghdr mh;
	memset(&mh, 0, sizeof(mh));
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	alignas(struct cmsghdr) char cbuf[CMSG_SPACE(kMaxFdsPerRecv * sizeof(int))];
	mh.msg_control = cbuf;
	mh.msg_controllen = sizeof(cbuf);
	ssize_t r;
	do
		r = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k; i++) {
			int got;
			memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (*n_fds < kMaxFdsPerRecv)
				fds[(*n_fds)++] = got;
			else
				close(got);
		}
	}
	return r;
}

int recv_all(int fd, void *data, size_t n, int *pass_fd, int64_t deadline_ms)
{
	uint8_t *buf = static_cast<uint8_t *>(data);
	size_t off = 0;
	while (off < n) {
		int fds[kMaxFdsPerRecv];
		size_t nfds = 0;
		long r = recv_some(fd, buf + off, n - off, fds, &nfds);
		for (size_t i = 0; i < nfds; i++) {
			if (pass_fd && *pass_fd < 0)
				*pass_fd = fds[i];
			else
				close(fds[i]);
		}
		if (r == -EAGAIN || r == -EWOULDBLOCK) {
			int w = wait_fd(fd, POLLIN, deadline_ms);
			if (w == 1)
				continue;
			return w == 0 ? -ETIMEDOUT : w;
		}
		if (r < 0)
			return static_cast<int>(r);
		if (r == 0)
			return -ECONNRESET;
		off += static_cast<size_t>(r);
	}
	return 0;
}

int wait_readable(int fd, int64_t deadline_ms)
{
	return wait_fd(fd, POLLIN, deadline_ms);
}

long unread_by_peer(int fd)
{
	int n = 0;
	return ioctl(fd, SIOCOUTQ, &n) == 0 ? n : -errno;
}

int recv_message(int fd, Message &m, int *pass_fd, int64_t deadline_ms, std::string &err)
{
	if (pass_fd)
		*pass_fd = -1;
	std::vector<uint8_t> buf(kHeaderSize);
	int r = recv_all(fd, buf.data(), kHeaderSize, pass_fd, deadline_ms);
	Header h;
	if (r == 0) {
		DecodeResult d = decode_header(buf.data(), buf.size(), h);
		if (!d) {
			err = d.text;
			r = -EPROTO;
		}
	}
	if (r == 0) {
		buf.resize(kHeaderSize + h.length);
		r = recv_all(fd, buf.data() + kHeaderSize, h.length, pass_fd, deadline_ms);
	}
	if (r == 0) {
		DecodeResult d = decode(buf.data(), buf.size(), m);
		if (!d) {
			err = d.text;
			r = -EPROTO;
		}
	}
	if (r < 0 && pass_fd && *pass_fd >= 0) {
		close(*pass_fd);
		*pass_fd = -1;
	}
	if (r < 0 && r != -EPROTO)
		err = r == -ETIMEDOUT    ? "timed out waiting for the daemon"
		      : r == -ECONNRESET ? "connection closed by the peer"
					 : strerror(-r);
	return r;
}

int request(int fd, const Message &req, Message &reply, int64_t deadline_ms, std::string &err)
{
	int r = send_message(fd, req, -1, deadline_ms);
	if (r < 0) {
		err = std::string("send: ") + strerror(-r);
		return r;
	}
	r = recv_message(fd, reply, nullptr, deadline_ms, err);
	if (r == 0 && reply.seq != req.seq) {
		err = "reply out of sequence";
		return -EPROTO;
	}
	return r;
}

} // namespace proto
} // namespace strata
