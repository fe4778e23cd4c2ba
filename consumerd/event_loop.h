/*
 * event_loop.h - the main thread's event loop: each watched descriptor
 * mapped to its handler.
 *
 * Contract:
 *   - owns the epoll set and the timers it made (add_timer); the other
 *     descriptors stay their owners' (a connection's socket is its Conn's,
 *     a pidfd the process registry's): remove() only stops watching;
 *   - main thread only: add, rearm, remove and turn are called there, and
 *     every handler runs there, one at a time;
 *   - a handler may add or remove any descriptor, itself included: turn()
 *     looks each ready descriptor up when its turn comes, so one removed
 *     by an earlier handler of the same batch is skipped;
 *   - each watch has a generation, carried in its events with the
 *     descriptor: a descriptor closed by an earlier handler of a batch and
 *     its number given to a new watch (a process's pidfd closed at its
 *     exit, the next process's pidfd opened) does not run the new watch's
 *     handler for the old one's event (a connection's or a pidfd's event
 *     would run a live process's exit handler and end its drains).
 */
#ifndef STRATA_CONSUMERD_EVENT_LOOP_H
#define STRATA_CONSUMERD_EVENT_LOOP_H

#include <cstdint>
#include <functional>
#include <map>

namespace strata {
namespace daemon_impl {

class EventLoop {
public:
	using Handler = std::function<void()>;

	EventLoop();
	~EventLoop(); // closes the epoll set and the timers
	EventLoop(const EventLoop &) = delete;
	EventLoop &operator=(const EventLoop &) = delete;

	bool ok() const { return epfd_ >= 0; }
	// Watch `fd` for `events` (EPOLLIN...): `h` runs when it is ready.
	// False (errno from epoll_ctl, nothing kept) when it cannot be
	// watched: every caller handles it (refuses the peer, or says in the
	// log what it runs without), never keeps a descriptor unwatched.
	bool add(int fd, uint32_t events, Handler h);
	// EPOLL_CTL_MOD: a one-shot descriptor armed again.
	bool rearm(int fd, uint32_t events);
	// Stop watching `fd` (not closed).
	void remove(int fd);
	// A periodic timer: first after first_ns (< 1 s), then every
	// period_ns; `h` runs once per expiry read.  Its fd, or -1 with errno.
	int add_timer(uint64_t first_ns, uint64_t period_ns, Handler h);
	// A timer of add_timer's removed and closed.
	void close_timer(int fd);
	// One turn: wait up to timeout_ms (-1: no limit) and run the ready
	// descriptors' handlers, every one ready by the end of the wait (more
	// batches of 32 looked for without waiting, at most 64 batches).  0,
	// or -errno of epoll_wait (EINTR is 0).
	int turn(int timeout_ms);

private:
	struct Watch {
		uint32_t gen; // add()'s count when it was made
		Handler h;
	};
	int epfd_ = -1;
	uint32_t next_gen_ = 0;
	std::map<int, Watch> handlers_;
	std::map<int, bool> timers_; // fds this loop made and closes
};

} // namespace daemon_impl
} // namespace strata
#endif
