/*
 * sock.h - blocking-with-deadline message I/O over a Unix stream socket, and
 * where the consumer daemon's socket lives.  Used by the process-side client
 * (inside libstrata), the `strata` command and the tests.  The daemon itself
 * reads non-blocking (consumerd/daemon.cpp) but frames with the same decoder.
 *
 * Every call takes an absolute deadline (CLOCK_MONOTONIC ms): nothing here
 * can wait longer than its caller allowed, which is what keeps a traced
 * process from ever hanging on a stuck daemon.  A negative deadline -T is
 * relative: T ms from the call's first wait (resolve_deadline), so that a
 * call that never waits never reads the clock (a starting process would pay
 * the first touch of the clock's pages, docs/benchmarks.md).  A wait whose
 * deadline has passed still looks once without waiting: a thread kept off
 * its CPU past it takes what arrived meanwhile instead of a timeout.
 */
#ifndef STRATA_PROTO_SOCK_H
#define STRATA_PROTO_SOCK_H

#include <cstdint>
#include <string>
#include <vector>

#include "proto.h"

namespace strata {
namespace proto {

int64_t now_ms(); // async-signal-safe
// A relative deadline (< 0) made absolute now; an absolute one unchanged.
inline int64_t resolve_deadline(int64_t deadline_ms)
{
	return deadline_ms < 0 ? now_ms() - deadline_ms : deadline_ms;
}

// Where a daemon listens: $STRATA_CONSUMERD_SOCKET, else
// $XDG_RUNTIME_DIR/strata/consumerd.sock, else /run/strata/consumerd.sock
// for root and /tmp/strata-<uid>/consumerd.sock for anyone else.
std::string server_socket_path();
// Where a client looks, in order: the environment variable alone when set;
// otherwise server_socket_path() and then, for non-root users, root's
// daemon at /run/strata/consumerd.sock.
std::vector<std::string> client_socket_paths();
// The same without allocation or std::string (a starting process: no heap
// page, no string code to fault in), into out[0..max), each NUL-terminated;
// a path too long for a socket address is left out.  Returns how many.
constexpr size_t kSockPathMax = 108; // sizeof(sockaddr_un::sun_path)
int client_socket_paths(char (*out)[kSockPathMax], int max);

// Non-blocking connect bounded by deadline.  Returns a non-blocking,
// close-on-exec socket fd, or a negative errno (-ENOENT, -ECONNREFUSED: no
// daemon; -ETIMEDOUT).
int connect_unix(const std::string &path, int64_t deadline_ms);

// ---- async-signal-safe primitives (no allocation, no locks) ----------------
// The functions in this block use only system calls and plain memory
// operations: the process-side client calls them from a signal handler.
int connect_unix(const char *path, int64_t deadline_ms);
// Send n bytes, with pass_fd as SCM_RIGHTS on the first byte when >= 0.
int send_all(int fd, const void *data, size_t n, int pass_fd, int64_t deadline_ms);
// Receive exactly n bytes; the first descriptor that comes with them goes
// to *pass_fd if it is -1 (others are closed).  0, -ETIMEDOUT, -ECONNRESET
// at EOF, or -errno.
int recv_all(int fd, void *data, size_t n, int *pass_fd, int64_t deadline_ms);
constexpr size_t kMaxFdsPerRecv = 8;
long recv_some(int fd, void *buf, size_t len, int fds[kMaxFdsPerRecv], size_t *n_fds);
// Wait until fd has something to read (or its peer closed): 1, 0 at the
// deadline, or -errno.
int wait_readable(int fd, int64_t deadline_ms);
// The bytes this end sent that its peer has not read yet (SIOCOUTQ: on a
// Unix stream socket what we sent is charged to us until the peer's read
// consumes it), or -errno.  0: the peer read everything we sent.
long unread_by_peer(int fd);
// -----------------------------------------------------------------------------

// One non-blocking recvmsg: bytes read (0 at EOF) or -errno (-EAGAIN when
// nothing is there).  File descriptors that came with the bytes (SCM_RIGHTS,
// made close-on-exec) are appended to *fds; the caller owns them.
long recv_some(int fd, void *buf, size_t len, std::vector<int> *fds);

// Send one message, with `pass_fd` as SCM_RIGHTS when >= 0.  0 or -errno.
int send_message(int fd, const Message &m, int pass_fd, int64_t deadline_ms);

// Receive one whole message.  A file descriptor received with it is stored
// in *pass_fd (close-on-exec; -1 if none; extra ones are closed).  Returns 0,
// a negative errno (-ETIMEDOUT, -ECONNRESET on EOF), or -EPROTO with `err`
// set by the decoder.
int recv_message(int fd, Message &m, int *pass_fd, int64_t deadline_ms, std::string &err);

// Send a request and wait for the answer with the same seq.
int request(int fd, const Message &req, Message &reply, int64_t deadline_ms, std::string &err);

} // namespace proto
} // namespace strata
#endif
