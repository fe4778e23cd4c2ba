/*
 * rb_bench - a quick ns/event figure for an event with two int fields, with
 * a reader thread draining (discard mode, default geometry).  Not a test:
 * the bench/ folder does the real comparison with LTTng-UST.
 *     rb_bench [events_per_thread]
 */
#define STRATA_DEFINE_PROVIDERS
#include <strata/tracepoint.h>
STRATA_EVENT(rbbench, two, STRATA_LOGLEVEL_INFO, strata_int(int, a), strata_int(int, b))

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "reader.h"
#include "runtime.h"

namespace {

double run(unsigned threads, long n)
{
	strata_channel_config cfg{};
	strcpy(cfg.name, "channel0");
	const uint8_t uuid[16] = {1};
	int fd = strata_rt_slot_open(0, &cfg, uuid);
	if (fd < 0) {
		std::fprintf(stderr, "slot_open: %d\n", fd);
		std::exit(1);
	}
	strata_rule rule{};
	strcpy(rule.pattern, "*");
	rule.enable = 1;
	rule.loglevel_max = -1;
	strata_rt_slot_set_rules(0, &rule, 1);
	std::string err;
	auto reader = strata::Reader::attach(fd, &err);
	std::atomic<bool> stop{false};
	uint64_t packets = 0;
	std::thread drain([&] {
		std::vector<uint8_t> pkt;
		while (!stop.load(std::memory_order_acquire)) { // pairs with the release below
			bool any = false;
			for (uint32_t l = 0; l < reader->info().n_lanes; l++)
				while (reader->next_packet(l, &pkt, &err) == strata::ReadStatus::kPacket)
					any = true, packets++;
			if (!any) {
				uint32_t seq = reader->prepare_wait();
				reader->wait(seq, 1);
				reader->end_wait();
			}
		}
	});
	auto t0 = std::chrono::steady_clock::now();
	std::vector<std::thread> w;
	for (unsigned t = 0; t < threads; t++)
		w.emplace_back([n] {
			for (long i = 0; i < n; i++)
				strata_tracepoint(rbbench, two, (int)i, (int)(i * 3));
		});
	for (auto &th : w)
		th.join();
	double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
	stop.store(true, std::memory_order_release);
	drain.join();
	uint64_t disc = 0;
	for (uint32_t l = 0; l < reader->info().n_lanes; l++)
		disc += reader->lane_discarded(l);
	std::printf("%u thread(s): %.1f ns/event per thread, %ld events/thread, %llu discarded\n", threads,
		    ns / (double)n, n, (unsigned long long)disc);
	strata_rt_slot_close(0);
	return ns / (double)n;
}

} // namespace

int main(int argc, char **argv)
{
	long n = argc > 1 ? std::atol(argv[1]) : 5000000;
	run(1, n);
	run(2, n);
	return 0;
}
