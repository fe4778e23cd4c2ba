/*
 * event_loop.cpp - the main thread's event loop (event_loop.h).
 */
#include "event_loop.h"

#include <cerrno>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

namespace strata {
namespace daemon_impl {

EventLoop::EventLoop() : epfd_(epoll_create1(EPOLL_CLOEXEC))
{
}

EventLoop::~EventLoop()
{
	for (auto &t : timers_)
		close(t.first);
	if (epfd_ >= 0)
		close(epfd_);
}

bool EventLoop::add(int fd, uint32_t events, Handler h)
{
	struct epoll_event ev = {};
	ev.events = events;
	ev.data.fd = fd;
	if (epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) < 0)
		return false;
	handlers_[fd] = std::move(h);
	return true;
}

bool EventLoop::rearm(int fd, uint32_t events)
{
	struct epoll_event ev = {};
	ev.events = events;
	ev.data.fd = fd;
	return epoll_ctl(epfd_, EPOLL_CTL_MOD, fd, &ev) == 0;
}

void EventLoop::remove(int fd)
{
	epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);
	handlers_.erase(fd);
}

int EventLoop::add_timer(uint64_t first_ns, uint64_t period_ns, Handler h)
{
	int fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (fd < 0)
		return -1;
	struct itimerspec its = {};
	its.it_value.tv_nsec = static_cast<long>(first_ns);
	its.it_interval.tv_sec = static_cast<time_t>(period_ns / 1000000000u);
	its.it_interval.tv_nsec = static_cast<long>(period_ns % 1000000000u);
	auto on_tick = [fd, h = std::move(h)] {
		uint64_t ticks;
		if (read(fd, &ticks, sizeof ticks) == sizeof ticks)
			h();
	};
	if (timerfd_settime(fd, 0, &its, nullptr) < 0 || !add(fd, EPOLLIN, std::move(on_tick))) {
		const int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	timers_[fd] = true;
	return fd;
}

void EventLoop::close_timer(int fd)
{
	remove(fd);
	if (timers_.erase(fd))
		close(fd);
}

int EventLoop::turn(int timeout_ms)
{
	struct epoll_event evs[32];
	int n = epoll_wait(epfd_, evs, 32, timeout_ms);
	if (n < 0)
		return errno == EINTR ? 0 : -errno;
	for (int i = 0; i < n; i++) {
		auto it = handlers_.find(evs[i].data.fd);
		if (it == handlers_.end())
			continue;       // removed by an earlier handler of this batch
		Handler h = it->second; // a copy: the handler may remove itself
		h();
	}
	return 0;
}

} // namespace daemon_impl
} // namespace strata
