/*
 * listener.h - where peers connect: the daemon's socket and its quiet
 * socket (proto.h, kQuietSuffix), their files, and the quiet socket's
 * delay (docs/consumerd.md, "The listener").
 *
 * A process that joins from its grant table connects to the quiet socket,
 * which is read in batches: its first connection arms a timer
 * (kQuietDelayNs), whose expiry has the host serve the whole queue, one
 * wake-up for a burst of starts; a controller's command serves it earlier
 * (its processes are known before the command is handled).  Everything
 * else connects to the socket, served as soon as it is ready.
 *
 * Contract:
 *   - main thread only: open, accept and close are called there, and the
 *     handlers it registers with the event loop run there;
 *   - it owns the two listening sockets, their files (made at open,
 *     unlinked at close) and the quiet timer; an accepted descriptor is
 *     the host's from Host::take_conn on (a refused one the host closes);
 *   - accept() takes every connection queued on one socket, in order, and
 *     hands each over before it returns; it reads nothing from them;
 *   - the quiet socket is one-shot in the event loop: after its timer
 *     fires the host serves the queue (Host::serve_quiet), then the socket
 *     is armed again;
 *   - the knock socket (proto.h, kKnockSuffix) takes datagrams from
 *     processes whose connect() timed out; read as they come and before
 *     every command and stop (Connections::serve_quiet), each handed to
 *     Host::knocked; without it (logged) such a process is only told on
 *     its own stderr;
 *   - what it cannot watch is never kept unwatched: the socket -> open()
 *     fails (the daemon does not start); the quiet socket, its timer, or
 *     its re-arming -> the quiet socket is closed and unlinked, which the
 *     log says, and processes connect to the socket instead
 *     (libtrace/control/sync_marks.cpp, connect_quiet_first).
 */
#ifndef STRATA_CONSUMERD_LISTENER_H
#define STRATA_CONSUMERD_LISTENER_H

#include <string>
#include <sys/types.h>
#include <vector>

#include "event_loop.h"

namespace strata {
namespace daemon_impl {

class Listener {
public:
	// What the listener hands its connections to (the Connections,
	// connections.h).
	class Host {
	public:
		virtual ~Host() = default;
		// `fd` (accepted non-blocking and close-on-exec; quiet: from the
		// quiet socket) is the host's now.  False: refused (and closed).
		virtual bool take_conn(int fd, bool quiet) = 0;
		// The quiet socket's delay passed: the host accepts its queue
		// (accept(true, ...)) and reads what each connection sent.
		virtual void serve_quiet() = 0;
		// A process whose connect() timed out knocked (proto.h,
		// kKnockSuffix): its pid and uid from the datagram's
		// credentials, its comm and update signal (0: none, or an
		// older library) from the payload (printable, <= 15; 1-255).
		virtual void knocked(pid_t pid, uid_t uid, const std::string &comm, int signo) = 0;
	};

	Listener(EventLoop &loop, Host &host, std::string path)
	    : loop_(loop), host_(host), path_(std::move(path))
	{
	}
	~Listener() { close(); }
	Listener(const Listener &) = delete;
	Listener &operator=(const Listener &) = delete;

	// The socket (false: it cannot listen or be watched, logged) and the
	// quiet socket (without it: logged, processes use the socket).
	bool open();
	// Every connection queued on the socket (quiet: the quiet socket)
	// handed to Host::take_conn; those it took appended to `taken`.
	void accept(bool quiet, std::vector<int> *taken = nullptr);
	// Every knock queued on the knock socket handed to Host::knocked
	// (malformed ones and those without credentials dropped, logged).
	void read_knocks();
	// Both sockets unwatched, closed and unlinked (again: nothing); the
	// socket's directory removed if open() made it and it is empty.
	void close();
	bool listening() const { return lfd_ >= 0; }
	bool has_quiet() const { return qfd_ >= 0; }

private:
	void open_quiet();
	void close_quiet();
	void open_knock();
	void close_knock();
	void on_quiet(bool on_socket);

	EventLoop &loop_;
	Host &host_;
	const std::string path_;
	int lfd_ = -1;
	int qfd_ = -1, quiet_tfd_ = -1; // the quiet socket (one-shot) and its delay
	int kfd_ = -1;                  // the knock socket (datagrams)
	std::string made_dir_;          // the socket's directory, when open() created it
};

} // namespace daemon_impl
} // namespace strata
#endif
