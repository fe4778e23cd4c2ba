/*
 * filter_test.cpp - field filters end to end: `strata enable-event
 * --filter` on a session of a private strata-consumerd, a traced process
 * (traced_app, tp-sync) emitting ctltest:tick {thread, seq}, and the trace
 * read back with babeltrace2.
 *
 * Oracle: the multiset of (thread, seq) babeltrace2 prints is exactly the
 * emitted events the filter accepts (2 threads x 2000 events: nothing is
 * discarded at this size); a filter with a syntax error is
 * refused by the CLI (exit 2, column on stderr) before anything is sent;
 * a rule naming a field the event lacks records nothing.  A second test
 * changes a filter while a tp-async process runs (the process compiles it
 * in its signal handler) and checks each batch against the rules then
 * acknowledged.
 */
#include "daemon_fixture.h"

#include <cstdio>
#include <poll.h>
#include <map>
#include <vector>

using strata_test::Daemon;
using namespace strata;

namespace {

int run(const char *exe, const std::vector<std::string> &args, bool quiet = false)
{
	return strata_test::run_exe(exe, args, -1, nullptr, quiet);
}

// (thread, seq) -> how many times babeltrace2 printed it; -1 on failure.
int read_trace(const std::string &dir, std::map<std::pair<uint64_t, uint64_t>, int> *out)
{
	std::string cmd = std::string(STRATA_BABELTRACE2) + " '" + dir + "' 2>&1";
	FILE *f = popen(cmd.c_str(), "r");
	if (!f)
		return -1;
	char line[4096];
	int lines = 0;
	while (fgets(line, sizeof line, f)) {
		const char *p = strstr(line, "ctltest:tick:");
		const char *q = p ? strstr(p, "thread = ") : nullptr;
		unsigned long long t, s;
		if (!q || sscanf(q, "thread = %llu, seq = %llu", &t, &s) != 2) {
			ADD_FAILURE() << "unexpected babeltrace2 output: " << line;
			continue;
		}
		(*out)[{t, s}]++;
		lines++;
	}
	int st = pclose(f);
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? lines : -1;
}

} // namespace

TEST(Filter, SessionRecordsExactlyTheMatchingEvents)
{
	Daemon d;
	ASSERT_TRUE(d.start(STRATA_CONSUMERD_EXE));
	const std::string out = d.dir + "/f";
	const char *filter = "seq >= 100 && seq < 150 || thread == 1 && seq < 5 || !(seq < 1990)";
	EXPECT_EQ(run(STRATA_CLI_EXE, {"create", "f", "-o", out}), 0);
	// Refused by the CLI with the column, nothing sent (exit 2).
	EXPECT_EQ(run(STRATA_CLI_EXE, {"enable-event", "f", "ctltest:tick", "--filter", "seq = 3"}, true), 2);
	EXPECT_EQ(run(STRATA_CLI_EXE, {"enable-event", "f", "ctltest:tick", "--filter", "seq > \"x"}, true),
		  2);
	EXPECT_EQ(run(STRATA_CLI_EXE, {"enable-event", "f", "ctltest:tick", "--filter", filter}), 0);
	// Names a field ctltest:tick lacks: matches nothing, adds nothing.
	EXPECT_EQ(run(STRATA_CLI_EXE, {"enable-event", "f", "ctltest:*", "--filter", "size > 0"}), 0);
	EXPECT_EQ(run(STRATA_CLI_EXE, {"start", "f"}), 0);
	EXPECT_EQ(run(STRATA_TRACED_APP, {"2", "2000"}), 0);
	EXPECT_EQ(run(STRATA_CLI_EXE, {"stop", "f"}), 0);

	std::map<std::pair<uint64_t, uint64_t>, int> want, got;
	for (uint64_t t = 0; t < 2; t++)
		for (uint64_t s = 0; s < 2000; s++)
			if ((s >= 100 && s < 150) || (t == 1 && s < 5) || !(s < 1990))
				want[{t, s}] = 1;
	int n = read_trace(out, &got);
	EXPECT_EQ(n, 50 + 10 + 50 + 5 + 10);
	EXPECT_EQ(got, want);
}

// traced_app in "serve" mode under tp-async: one batch per line written.
TEST(Filter, RunningAsyncProcessFollowsAFilterChange)
{
	Daemon d;
	ASSERT_TRUE(d.start(STRATA_CONSUMERD_EXE));
	const std::string out = d.dir + "/a";
	CtlClient c;
	std::string t, err;
	ASSERT_EQ(c.open("", err), 0) << err;
	ASSERT_EQ(c.command(proto::Create{"a", out, {}}, t), 0) << t;
	ASSERT_EQ(c.command(proto::EnableEvent{"a", {"ctltest:tick", -1, 1, "seq < 10"}}, t), 0) << t;
	ASSERT_EQ(c.command(proto::Start{"a"}, t), 0) << t;

	int in[2], back[2];
	ASSERT_EQ(pipe2(in, O_CLOEXEC), 0);
	ASSERT_EQ(pipe2(back, O_CLOEXEC), 0);
	pid_t pid = fork();
	if (pid == 0) {
		dup2(in[0], 0);
		dup2(back[1], 1);
		execl(STRATA_ASYNC_APP, STRATA_ASYNC_APP, "2", "1000", "serve", static_cast<char *>(nullptr));
		_exit(127);
	}
	close(in[0]);
	close(back[1]);
	auto batch = [&]() {
		if (write(in[1], "\n", 1) != 1)
			return false;
		std::string got;
		char ch;
		struct pollfd pf = {back[0], POLLIN, 0};
		while (got.size() < 3 && poll(&pf, 1, 20000) == 1 && read(back[0], &ch, 1) == 1)
			got += ch;
		return got == "ok\n";
	};
	ASSERT_TRUE(batch()); // seq 0..999, both threads: "seq < 10"
	// Added while the process runs: applied in its signal handler, acknowledged.
	ASSERT_EQ(c.command(proto::EnableEvent{"a",
					       {"ctltest:tick", -1, 1,
						"seq >= 1990 || thread == 1 && seq >= 1000 && seq < 1003"}},
			    t),
		  0)
		<< t;
	ASSERT_EQ(c.command(proto::Wait{10000}, t), 0) << t;
	EXPECT_EQ(t, "acknowledged by 1 process(es)");
	ASSERT_TRUE(batch()); // seq 1000..1999: either filter
	close(in[1]);
	EXPECT_EQ(strata_test::wait_child(pid, 20000), 0);
	close(back[0]);
	ASSERT_EQ(c.command(proto::Stop{"a"}, t), 0) << t;

	std::map<std::pair<uint64_t, uint64_t>, int> want, got;
	for (uint64_t th = 0; th < 2; th++)
		for (uint64_t s = 0; s < 2000; s++)
			if (s < 10 || s >= 1990 || (th == 1 && s >= 1000 && s < 1003))
				want[{th, s}] = 1;
	EXPECT_EQ(read_trace(out, &got), 10 + 10 + 10 + 10 + 3);
	EXPECT_EQ(got, want);
}
