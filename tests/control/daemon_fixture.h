/*
 * daemon_fixture.h - start a private strata-consumerd for one test and stop
 * it: a temporary directory, a socket in it, the --ready-fd pipe to know
 * when it listens (no sleeping), SIGTERM and its exit status at the end.
 */
#ifndef STRATA_TESTS_CONTROL_DAEMON_FIXTURE_H
#define STRATA_TESTS_CONTROL_DAEMON_FIXTURE_H

#include <gtest/gtest.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <string>
#include <vector>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "control/ctl_client.h"
#include "proto/sock.h"

namespace strata_test {

inline std::string make_temp_dir(const char *tag)
{
	std::string t = std::string("/tmp/strata-") + tag + "-XXXXXX";
	if (!mkdtemp(&t[0]))
		return "";
	return t;
}

inline void remove_tree(const std::string &dir)
{
	if (dir.size() > 12 && dir.rfind("/tmp/strata-", 0) == 0) {
		std::string cmd = "rm -rf '" + dir + "'";
		if (system(cmd.c_str()) != 0)
			fprintf(stderr, "cannot remove %s\n", dir.c_str());
	}
}

class Daemon {
public:
	std::string dir, socket;
	std::string log; // with to_log: its stderr, in dir
	pid_t pid = -1;

	// Start strata-consumerd; true once it listens.  to_log: its stderr
	// goes to `log` (read it with log_text()).
	bool start(const char *exe, bool to_log = false)
	{
		dir = make_temp_dir("ctl");
		socket = dir + "/consumerd.sock";
		int p[2];
		if (pipe(p) < 0)
			return false;
		if (to_log)
			log = dir + "/consumerd.log";
		pid = fork();
		if (pid == 0) {
			close(p[0]);
			if (!log.empty()) {
				int l = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
				if (l >= 0)
					dup2(l, 2);
			}
			std::string fd = std::to_string(p[1]);
			execl(exe, exe, "--socket", socket.c_str(), "--ready-fd", fd.c_str(), "-v",
			      static_cast<char *>(nullptr));
			_exit(127);
		}
		close(p[1]);
		char buf[8] = {};
		struct pollfd pf = {p[0], POLLIN, 0};
		bool ok = poll(&pf, 1, 20000) == 1 && read(p[0], buf, sizeof(buf)) > 0;
		close(p[0]);
		if (ok)
			setenv("STRATA_CONSUMERD_SOCKET", socket.c_str(), 1);
		return ok;
	}

	// SIGTERM and wait: returns the exit status (or -1).
	int stop()
	{
		if (pid <= 0)
			return -1;
		kill(pid, SIGTERM);
		int st = 0;
		while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
		}
		pid = -1;
		return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	}

	bool alive() const { return pid > 0 && kill(pid, 0) == 0; }

	std::string log_text() const
	{
		std::string t;
		if (FILE *f = fopen(log.c_str(), "r")) {
			char buf[4096];
			size_t n;
			while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
				t.append(buf, n);
			fclose(f);
		}
		return t;
	}

	~Daemon()
	{
		stop();
		remove_tree(dir);
		unsetenv("STRATA_CONSUMERD_SOCKET");
	}
};

// Wait until a child exits, with a deadline: the exit status or -1.
inline int wait_child(pid_t pid, int timeout_ms)
{
	int64_t end = strata::proto::now_ms() + timeout_ms;
	int st;
	while (strata::proto::now_ms() < end) {
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		struct pollfd none;
		poll(&none, 0, 5); // polling a condition with a deadline
	}
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	return -1;
}

// Run exe with args in a child: stdin from stdin_fd when >= 0, stderr to
// /dev/null when quiet.  With out_pid, returns 0 at once and stores the
// child's pid; otherwise waits (60 s deadline) and returns its exit status
// (128+sig if killed, -1 on timeout).
inline int run_exe(const char *exe, const std::vector<std::string> &args, int stdin_fd = -1,
		   pid_t *out_pid = nullptr, bool quiet = false)
{
	pid_t pid = fork();
	if (pid == 0) {
		if (stdin_fd >= 0)
			dup2(stdin_fd, 0);
		if (quiet) {
			int null = open("/dev/null", O_WRONLY);
			dup2(null, 2);
		}
		std::vector<char *> av;
		av.push_back(const_cast<char *>(exe));
		for (auto &a : args)
			av.push_back(const_cast<char *>(a.c_str()));
		av.push_back(nullptr);
		execv(av[0], av.data());
		_exit(127);
	}
	if (out_pid) {
		*out_pid = pid;
		return 0;
	}
	return wait_child(pid, 60000);
}

} // namespace strata_test
#endif
