/*
 * cmd_record.cpp - `strata record [OPTIONS] -- CMD [ARGS]`: trace one
 * command with nothing started by hand.
 *
 *   1. a daemon answers on the usual socket: use it; otherwise start a
 *      private strata-consumerd on a private socket and wait until it says
 *      it listens (a pipe it writes "ready" to: no sleeping);
 *   2. create a session, enable the rules, start it;
 *   3. run CMD with STRATA_CONSUMERD_SOCKET pointing at that daemon, so its
 *      tp-sync (or tp-async) constructor joins the session before main();
 *   4. when CMD ends: stop (the daemon flushes and completes the trace),
 *      destroy, stop the private daemon;
 *   5. exit with CMD's status (128 + signal if it was killed).
 *
 * Its parts, one file a role, are listed in record.h; this file runs them
 * and holds step 5: CMD run and waited for, and the signals meanwhile.
 */
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <string>
#include <vector>

#include "commands.h"
#include "record.h"

using namespace strata;
using namespace strata::cli::record;

namespace {

// Signals (SIGINT, SIGTERM, SIGQUIT, SIGHUP) are caught from the start to
// the end of `record`: while CMD runs they go to it; before it runs they
// stop `record` from starting it; after it ended they change nothing (the
// trace is completed and the session destroyed whatever arrives).  No
// default action is ever restored in `record` itself: the daemon's ending
// of the session (CREATE's kCreateOwned) covers only what cannot be caught.
volatile sig_atomic_t g_child = 0;
volatile sig_atomic_t g_signal = 0;   // the last one caught
volatile sig_atomic_t g_nsignals = 0; // how many were caught

void on_signal(int sig)
{
	g_signal = sig;
	g_nsignals = g_nsignals + 1;
	if (g_child > 0)
		kill(g_child, sig);
}

// Catch the signals above (old: their previous actions, for CMD).
void catch_signals(struct sigaction old[4])
{
	struct sigaction sa = {};
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	for (int k = 0; k < 4; k++)
		sigaction(kCaught[k], &sa, &old[k]);
	// Its stderr closed (a terminal gone, a pipe's reader killed) must not
	// end it between STOP and DESTROY.
	signal(SIGPIPE, SIG_IGN);
}

// Our children now (record is single-threaded: its one task's list), but
// the private daemon's `except`.  Zombies included.
std::vector<pid_t> children(pid_t except)
{
	std::vector<pid_t> v;
	char path[64];
	snprintf(path, sizeof path, "/proc/self/task/%d/children", static_cast<int>(getpid()));
	FILE *f = fopen(path, "re");
	if (!f)
		return v;
	int pid;
	while (fscanf(f, "%d", &pid) == 1)
		if (pid != except)
			v.push_back(pid);
	fclose(f);
	return v;
}

// How a process ended, for a message: "exited with status N" or "was
// killed by signal N (NAME)".
std::string how_ended(int st)
{
	char b[96];
	if (WIFSIGNALED(st))
		snprintf(b, sizeof b, "was killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
	else
		snprintf(b, sizeof b, "exited with status %d", WEXITSTATUS(st));
	return b;
}

// A private daemon of ours ended (`st`, reaped) while CMD or what it left
// ran: another is started on its socket, where it takes the session up
// from the state the dead one kept (docs/crash.md, "The daemon dies"): it
// re-attaches CMD's buffers, whose writers noticed nothing and counted what
// they could not write meanwhile, so that the trace goes on and its counts
// stay exact.  At most kRestarts times: a daemon that keeps dying is left
// dead, and the trace repaired at the end.
constexpr int kRestarts = 3;
// `running`: what ran ("CMD", "what CMD started").
void restart_daemon(PrivateDaemon &priv, int st, const std::string &running)
{
	priv.pid = -1;
	priv.restarts++;
	fprintf(stderr,
		"strata record: its daemon %s while %s ran: starting another to take the session up\n",
		how_ended(st).c_str(), running.c_str());
	const std::string e = priv.restart();
	if (!e.empty())
		fprintf(stderr, "strata record: %s\n", e.c_str());
}

// Whether record still restarts its private daemon when it dies.
bool watched(const PrivateDaemon &priv)
{
	return priv.pid > 0 && priv.restarts < kRestarts;
}

// After CMD exited: the processes it started that outlived it (daemons
// that called setsid or forked twice) were reparented to record, the
// subreaper; record keeps recording until they all exit.  A signal caught
// meanwhile (^C) is forwarded to each of them.  The caught signals are
// blocked but inside ppoll, so none is missed between a look and the wait.
// The private daemon is watched meanwhile as while CMD ran (its pidfd in
// the same ppoll): one that dies is started again (restart_daemon).
void follow_descendants(PrivateDaemon &priv, const char *cmd)
{
	sigset_t caught, before;
	sigemptyset(&caught);
	for (int sig : kCaught)
		sigaddset(&caught, sig);
	sigprocmask(SIG_BLOCK, &caught, &before);
	sig_atomic_t seen = 0; // a signal CMD got is for them too
	bool said = false;
	for (;;) {
		std::vector<pid_t> kids = children(priv.pid), live;
		bool reaped = false;
		for (pid_t k : kids) {
			int st;
			if (waitpid(k, &st, WNOHANG) == k)
				reaped = true;
			else
				live.push_back(k);
		}
		// A child that exited gave us its own children before it became
		// a zombie (the kernel reparents them at its exit), but our list
		// may have been read as it did: `memcached -d`'s first child,
		// gone between its fork and our look, hid the daemon once
		// (e2e.nothing_recorded under ASan).  So a pass that reaped looks
		// again; the zombies are gone from the next one.
		if (live.empty() && reaped)
			continue;
		if (live.empty())
			break;
		if (!said) {
			std::string pids;
			for (pid_t k : live)
				pids += (pids.empty() ? "" : " ") + std::to_string(k);
			fprintf(stderr,
				"strata record: %s exited, and %zu process(es) it started still run (pid "
				"%s): "
				"recording until they exit (^C ends them)\n",
				cmd, live.size(), pids.c_str());
			said = true;
		}
		if (g_nsignals != seen) {
			seen = g_nsignals;
			for (pid_t k : live)
				kill(k, g_signal);
		}
		std::vector<struct pollfd> fds;
		for (pid_t k : live) {
			int fd = static_cast<int>(syscall(SYS_pidfd_open, k, 0));
			if (fd >= 0)
				fds.push_back({fd, POLLIN, 0});
		}
		if (fds.empty())
			break; // no pidfd (Linux < 5.3): not followed
		const pid_t daemon = watched(priv) ? priv.pid : -1;
		const int dfd = daemon > 0 ? static_cast<int>(syscall(SYS_pidfd_open, daemon, 0)) : -1;
		if (dfd >= 0)
			fds.push_back({dfd, POLLIN, 0});
		ppoll(fds.data(), fds.size(), nullptr, &before);
		for (const struct pollfd &p : fds)
			close(p.fd);
		int st;
		if (daemon > 0 && waitpid(daemon, &st, WNOHANG) == daemon)
			restart_daemon(priv, st, std::string("what ") + cmd + " started");
	}
	sigprocmask(SIG_SETMASK, &before, nullptr);
}

// In the forked child: CMD with the daemon's socket, the preloaded
// libraries and the JVM agent in its environment; exec's errno to exec_fd.
[[noreturn]] void exec_command(const Record &rec, const std::string &sock, bool serial_on_stdout,
			       const struct sigaction old[4], const sigset_t &before, int exec_fd)
{
	for (int k = 0; k < 4; k++)
		sigaction(kCaught[k], &old[k], nullptr);
	signal(SIGPIPE, SIG_DFL);
	sigprocmask(SIG_SETMASK, &before, nullptr);
	setenv("STRATA_CONSUMERD_SOCKET", sock.c_str(), 1);
	// `--serial -`: our standard output carries the frames; the
	// command's own output there would land inside them (and, on a
	// file, overwrite them from its own offset), so it goes to our
	// standard error (docs/serial.md).
	if (serial_on_stdout)
		dup2(STDERR_FILENO, STDOUT_FILENO);
	if (!rec.preload_env.empty()) {
		const char *old_env = getenv("LD_PRELOAD");
		std::string v = rec.preload_env + (old_env && *old_env ? std::string(":") + old_env : "");
		setenv("LD_PRELOAD", v.c_str(), 1);
	}
	if (!rec.jvm_agent.empty()) { // every JVM CMD starts loads the agent
		// and finds the Java API (strata.Event) whatever its class path:
		// `java -cp app.jar Main` runs a Main compiled against strata.jar.
		// The boot class path comes after the JDK's own classes and before
		// the application's; the natives resolve in the agent library.
		const char *old_env = getenv("JAVA_TOOL_OPTIONS");
		std::string v = "-agentpath:" + rec.jvm_agent +
				(rec.java_api.empty() ? "" : " -Xbootclasspath/a:" + rec.java_api) +
				(old_env && *old_env ? std::string(" ") + old_env : "");
		setenv("JAVA_TOOL_OPTIONS", v.c_str(), 1);
	}
	execvp(rec.command[0], rec.command);
	const int e = errno;
	if (exec_fd >= 0) {
		ssize_t n = write(exec_fd, &e, sizeof e);
		(void)n;
	}
	_exit(127);
}

// Step 5a: fork and exec CMD.  While it runs, ^C and kill go to it; we
// finish the trace.  The signals are blocked from the last look at g_signal
// until g_child is set: one that arrives in between is forwarded once
// unblocked.
Child spawn_command(const Record &rec, const std::string &sock, const struct sigaction old[4])
{
	Child c;
	sigset_t caught, before;
	sigemptyset(&caught);
	for (int sig : kCaught)
		sigaddset(&caught, sig);
	sigprocmask(SIG_BLOCK, &caught, &before);
	// Orphans among CMD's descendants become ours: follow_descendants.
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	// exec's errno comes back through this pipe; EOF means exec succeeded.
	int exec_pipe[2] = {-1, -1};
	c.early_signal = g_signal;
	if (!c.early_signal && pipe2(exec_pipe, O_CLOEXEC) != 0)
		exec_pipe[0] = exec_pipe[1] = -1;
	// Decided before the fork: the child makes no system call of ours
	// before exec (kernel tests pair the program's own syscalls).
	const std::string self_out = "serial:/proc/" + std::to_string(getpid()) + "/fd/1";
	const std::string &relay = rec.create.relay;
	const bool serial_on_stdout =
		relay == self_out || relay.compare(0, self_out.size() + 1, self_out + ",") == 0;
	c.pid = c.early_signal ? -1 : fork();
	if (c.pid == 0)
		exec_command(rec, sock, serial_on_stdout, old, before, exec_pipe[1]);
	c.fork_errno = errno;
	if (c.pid > 0)
		g_child = c.pid;
	sigprocmask(SIG_SETMASK, &before, nullptr);
	if (exec_pipe[1] >= 0)
		close(exec_pipe[1]);
	if (exec_pipe[0] >= 0) {
		ssize_t n;
		while ((n = read(exec_pipe[0], &c.exec_errno, sizeof c.exec_errno)) < 0 && errno == EINTR) {
		}
		if (n != (ssize_t)sizeof c.exec_errno)
			c.exec_errno = 0;
		close(exec_pipe[0]);
	}
	if (c.exec_errno)
		fprintf(stderr, "strata record: cannot run %s: %s\n", rec.command[0], strerror(c.exec_errno));
	return c;
}

// Step 5b: wait for CMD.  A private daemon of ours that ends meanwhile (the
// kernel's OOM killer, a crash) is started again (restart_daemon).
// Our children are CMD, that daemon and CMD's orphans (we are their
// subreaper): one waitpid for any of them, so that the daemon's end wakes
// us as CMD's does; an orphan reaped here had ended anyway.
void wait_cmd_and_daemon(Child &c, PrivateDaemon &priv, const char *name)
{
	for (;;) {
		if (!watched(priv)) {
			while (waitpid(c.pid, &c.status, 0) < 0 && errno == EINTR) {
			}
			return;
		}
		int st;
		const pid_t w = waitpid(-1, &st, 0);
		if (w < 0 && errno == EINTR)
			continue;
		if (w == c.pid || (w < 0 && errno == ECHILD)) {
			if (w == c.pid)
				c.status = st;
			return;
		}
		if (w == priv.pid)
			restart_daemon(priv, st, name);
		// else an orphan of CMD's
	}
}

// Step 5b: wait for CMD and for what it left running.  record's exit status
// so far: CMD's.
int wait_command(Child &c, PrivateDaemon &priv, const char *name)
{
	if (c.early_signal) {
		fprintf(stderr, "strata record: signal %d before %s started: not run\n", c.early_signal,
			name);
		return 128 + c.early_signal;
	}
	if (c.pid < 0) {
		fprintf(stderr, "strata record: fork: %s\n", strerror(c.fork_errno));
		return cli::kFail;
	}
	wait_cmd_and_daemon(c, priv, name);
	g_child = 0;
	follow_descendants(priv, name);
	return WIFEXITED(c.status) ? WEXITSTATUS(c.status) : 128 + WTERMSIG(c.status);
}

} // namespace

int strata_cmd_record(int argc, char **argv)
{
	Record rec;
	int r = parse_args(argc, argv, rec);
	if (r < 0)
		r = prepare(rec);
	if (r >= 0)
		return r;

	struct sigaction old_actions[4];
	catch_signals(old_actions);
	PrivateDaemon priv;
	CtlClient cl;
	if (!open_daemon(cl, priv) || !start_session(cl, priv, rec))
		return cli::kFail;

	const std::string sock = cl.path();
	Child child = spawn_command(rec, sock, old_actions);
	const int exit_code = wait_command(child, priv, rec.command[0]);

	// The signals stay caught (see on_signal) while the trace is completed.
	if (!child.early_signal)
		rejoin_daemon(cl, sock, rec.create.session, priv.pid > 0 || priv.restarts > 0,
			      priv.restarts > 0);
	return finish(cl, priv, rec, child, exit_code);
}
