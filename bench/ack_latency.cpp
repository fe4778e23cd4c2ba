/*
 * ack_latency.cpp - how long a controller waits for a change to be applied
 * everywhere: the time from sending ENABLE_EVENT/DISABLE_EVENT to the
 * answer of the WAIT that follows it (every signalled process re-queried,
 * quiesced and closed its connection), with 1, 10 and 100 running tp-async
 * processes.  Not a test: it prints p50/p99/max over the toggles.
 *
 *   strata-bench-ack-latency [TOGGLES (default 200)] [COUNTS... (default 1 10 100)]
 */
#include "daemon_fixture.h"

#include <algorithm>
#include <chrono>
#include <vector>

using namespace strata;

namespace {

int run(size_t n_procs, int toggles)
{
	strata_test::Daemon d;
	if (!d.start(STRATA_CONSUMERD_EXE)) {
		fprintf(stderr, "cannot start the daemon\n");
		return 1;
	}
	// n processes in "serve" mode, idle until their stdin closes.
	std::vector<pid_t> pids;
	int in[2];
	if (pipe2(in, O_CLOEXEC) < 0)
		return 1;
	for (size_t i = 0; i < n_procs; i++) {
		pid_t p = fork();
		if (p == 0) {
			dup2(in[0], 0);
			int null = open("/dev/null", O_WRONLY);
			dup2(null, 1);
			execl(STRATA_ASYNC_APP, STRATA_ASYNC_APP, "1", "1", "serve",
			      static_cast<char *>(nullptr));
			_exit(127);
		}
		pids.push_back(p);
	}
	close(in[0]);
	CtlClient c;
	std::string t;
	if (c.open("", t) < 0)
		return 1;
	// Every process registered (LIST), polled with a deadline.
	for (int64_t end = proto::now_ms() + 30000;;) {
		proto::Message m;
		if (c.call(proto::List{}, m, t) < 0)
			return 1;
		if (std::get<proto::ListReply>(m.body).entries.size() >= n_procs)
			break;
		if (proto::now_ms() > end) {
			fprintf(stderr, "processes did not register\n");
			return 1;
		}
		struct pollfd none;
		poll(&none, 0, 5);
	}
	const std::string out = d.dir + "/out";
	c.command(proto::Create{"s", out, {}}, t);
	c.command(proto::EnableEvent{"s", {"ctltest:*", -1, 1, ""}}, t);
	c.command(proto::Start{"s"}, t);
	if (c.command(proto::Wait{30000}, t) != 0) {
		fprintf(stderr, "start: %s\n", t.c_str());
		return 1;
	}
	std::vector<double> us;
	int failed = 0;
	for (int i = 0; i < toggles; i++) {
		proto::Rule r{"ctltest:*", -1, static_cast<uint32_t>(i % 2 == 0 ? 0 : 1), ""};
		auto t0 = std::chrono::steady_clock::now();
		if (r.enable)
			c.command(proto::EnableEvent{"s", r}, t);
		else
			c.command(proto::DisableEvent{"s", r}, t);
		int st = c.command(proto::Wait{10000}, t);
		auto t1 = std::chrono::steady_clock::now();
		failed += st != 0;
		us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
	}
	c.command(proto::Stop{"s"}, t);
	close(in[1]);
	for (pid_t p : pids)
		strata_test::wait_child(p, 20000);
	std::sort(us.begin(), us.end());
	auto pct = [&](double q) { return us[std::min(us.size() - 1, static_cast<size_t>(q * us.size()))]; };
	printf("%4zu process(es): %d toggles (rule change + WAIT): p50 %8.0f us  p99 %8.0f us  max %8.0f "
	       "us%s\n",
	       n_procs, toggles, pct(0.50), pct(0.99), us.back(), failed ? "  (some WAITs timed out)" : "");
	return 0;
}

} // namespace

int main(int argc, char **argv)
{
	int toggles = argc > 1 ? atoi(argv[1]) : 200;
	std::vector<size_t> counts;
	for (int i = 2; i < argc; i++)
		counts.push_back(static_cast<size_t>(atoi(argv[i])));
	if (counts.empty())
		counts = {1, 10, 100};
	signal(SIGPIPE, SIG_IGN);
	for (size_t n : counts)
		if (run(n, toggles < 2 ? 2 : toggles) != 0)
			return 1;
	return 0;
}
