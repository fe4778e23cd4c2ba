// pt_cxx.cpp - a C++ program using std::mutex, std::condition_variable and
// std::shared_mutex (all on pthread underneath), for the LD_PRELOAD tests.
// Checks its own results; writes what it did as JSON to argv[1].
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <unistd.h>
#include <vector>

std::mutex strata_cxx_mutex;
std::shared_mutex strata_cxx_shared;
// The clock variants: pthread_mutex_clocklock, pthread_cond_clockwait,
// pthread_rwlock_clock{rd,wr}lock underneath.
std::timed_mutex strata_cxx_timed;
std::shared_timed_mutex strata_cxx_stm;
std::condition_variable strata_cxx_cv;
static long counter;

// Ping-pong over a condition variable: 100 rounds.  The mutex and the
// condition variable are the caller's: they live as long as main's other
// locks, so that no other lock of the run takes their address.
static void ping_pong(std::mutex &m, std::condition_variable &cv)
{
	int turn = 0;
	std::thread other([&] {
		for (int i = 0; i < 100; i++) {
			std::unique_lock<std::mutex> l(m);
			cv.wait(l, [&] { return turn == 1; });
			turn = 0;
			cv.notify_one();
		}
	});
	for (int i = 0; i < 100; i++) {
		std::unique_lock<std::mutex> l(m);
		turn = 1;
		cv.notify_one();
		cv.wait(l, [&] { return turn == 0; });
	}
	other.join();
}

#ifndef __SANITIZE_THREAD__
// The clock variants, each timed wait taken (or timing out) as expected.
static bool clock_variants()
{
	using namespace std::chrono_literals;
	for (int i = 0; i < 50; i++) {
		if (!strata_cxx_timed.try_lock_for(5s))
			return false;
		strata_cxx_timed.unlock();
	}
	for (int i = 0; i < 20; i++) {
		if (!strata_cxx_stm.try_lock_shared_for(5s))
			return false;
		strata_cxx_stm.unlock_shared();
		if (!strata_cxx_stm.try_lock_for(5s))
			return false;
		strata_cxx_stm.unlock();
	}
	{
		std::mutex cm;
		std::unique_lock<std::mutex> l(cm);
		for (int i = 0; i < 10; i++)
			if (strata_cxx_cv.wait_for(l, 1ms) != std::cv_status::timeout)
				return false;
	}
	return true;
}
#endif

int main(int argc, char **argv)
{
	if (std::getenv("STRATA_PT_EXPECT_PRELOAD")) {
		Dl_info di;
		void *f = dlsym(RTLD_DEFAULT, "pthread_mutex_lock");
		if (!f || !dladdr(f, &di) || !di.dli_fname ||
		    !std::strstr(di.dli_fname, "libstrata-pthread")) {
			std::fprintf(stderr, "LD_PRELOAD of libstrata-pthread not applied\n");
			return 3;
		}
	}
	const int threads = 4, iters = 500;
	std::vector<std::thread> ts;
	for (int t = 0; t < threads; t++)
		ts.emplace_back([] {
			for (int i = 0; i < iters; i++) {
				std::lock_guard<std::mutex> g(strata_cxx_mutex);
				counter++;
			}
		});
	for (auto &t : ts)
		t.join();
	if (counter != threads * iters) {
		std::fprintf(stderr, "counter %ld, expected %d\n", counter, threads * iters);
		return 1;
	}

	std::mutex m;
	std::condition_variable cv;
	ping_pong(m, cv);

	long sum = 0;
	std::vector<std::thread> rs;
	for (int t = 0; t < 3; t++)
		rs.emplace_back([&] {
			for (int i = 0; i < 100; i++) {
				if (i % 10 == 0) {
					std::unique_lock<std::shared_mutex> w(strata_cxx_shared);
					sum++;
				} else {
					std::shared_lock<std::shared_mutex> r(strata_cxx_shared);
					(void)sum;
				}
			}
		});
	for (auto &t : rs)
		t.join();
	if (sum != 30)
		return 1;

#ifndef __SANITIZE_THREAD__ /* TSan has no interceptor for the clock variants */
	if (!clock_variants())
		return 1;
#endif
	if (argc > 1) {
		FILE *f = std::fopen(argv[1], "w");
		if (!f)
			return 2;
		std::fprintf(f,
			     "{\"pid\": %d, \"mutex\": \"%p\", \"mutex_acq\": %d, \"shared\": \"%p\", "
			     "\"shared_acq\": 300",
			     static_cast<int>(getpid()), static_cast<void *>(&strata_cxx_mutex),
			     threads * iters, static_cast<void *>(&strata_cxx_shared));
#ifndef __SANITIZE_THREAD__
		std::fprintf(f,
			     ", \"timed\": \"%p\", \"timed_acq\": 50, \"stm\": \"%p\", \"stm_acq\": 40,"
			     " \"cv\": \"%p\", \"cv_timeouts\": 10",
			     static_cast<void *>(&strata_cxx_timed), static_cast<void *>(&strata_cxx_stm),
			     static_cast<void *>(&strata_cxx_cv));
#endif
		std::fprintf(f, "}\n");
		std::fclose(f);
	}
	return 0;
}
