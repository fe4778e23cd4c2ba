/*
 * record_session.cpp - `strata record`'s steps 3 and 4 (record.h): a
 * daemon, the running one or a private one of its own (PrivateDaemon:
 * started on a private socket, ready when it says so, ended with
 * record), then the session: created (owned by this connection, scoped
 * to CMD's process tree where it can be), its rules enabled, started.
 * After CMD, the session found again when another daemon took it up.
 */
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <string>
#include <vector>

#include "strata_kabi.h"
#include "commands.h"
#include "proto/sock.h"
#include "record.h"

namespace strata {
namespace cli {
namespace record {

namespace {

// Our own daemon instead of the running one, `cl` connected to it.
bool go_private(CtlClient &cl, PrivateDaemon &priv)
{
	std::string err, e = priv.start();
	if (!e.empty() || cl.open(priv.socket, err) < 0) {
		fprintf(stderr, "strata record: %s\n", e.empty() ? err.c_str() : e.c_str());
		return false;
	}
	return true;
}

// The directories of private daemons that ended without their record's
// stop(): a record killed by SIGKILL leaves its directory (its daemon,
// told by PR_SET_PDEATHSIG, removes only its socket and `.state/`), and
// a daemon killed with it leaves its empty `.state/` too.  No daemon takes
// a private one's sessions up (docs/crash.md), so such a directory of
// ours (not a link) is removed when it has no socket and nothing but an
// empty `.state/`, and was last changed over a minute ago: a live record's
// daemon binds within 10 s of the directory's making (wait_ready) or is
// given up.  rmdir removes only what is empty; a kept session's file or a
// socket leaves the directory as it is.
void sweep_stale_dirs(const char *base)
{
	constexpr time_t kStaleS = 60;
	static const char kPrefix[] = "strata-record-";
	DIR *d = opendir(base);
	if (!d)
		return;
	const time_t now = time(nullptr);
	while (const struct dirent *e = readdir(d)) {
		if (strncmp(e->d_name, kPrefix, sizeof kPrefix - 1) != 0 ||
		    strlen(e->d_name) != sizeof kPrefix - 1 + 6) // mkdtemp's XXXXXX
			continue;
		const std::string dir = std::string(base) + "/" + e->d_name;
		struct stat st, sock;
		if (lstat(dir.c_str(), &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
		    now - st.st_mtime < kStaleS || lstat((dir + "/consumerd.sock").c_str(), &sock) == 0)
			continue;
		rmdir((dir + "/consumerd.sock.state").c_str());
		rmdir(dir.c_str());
	}
	closedir(d);
}

} // namespace

// Start it and wait (bounded) until it listens.  "" or an error text.
std::string PrivateDaemon::start()
{
	std::string exe = cli::find_consumerd();
	if (exe.empty())
		return "no strata-consumerd running, and none found next to strata or in PATH";
	std::string e = make_dir();
	if (!e.empty())
		return e;
	return spawn(exe);
}

std::string PrivateDaemon::restart()
{
	std::string exe = cli::find_consumerd();
	if (exe.empty() || socket.empty())
		return "strata-consumerd is no longer found next to strata or in PATH";
	return spawn(exe);
}

// The daemon `exe` on `socket`, waited for until it listens.
std::string PrivateDaemon::spawn(const std::string &exe)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return std::string("pipe: ") + strerror(errno);
	const pid_t parent = getpid();
	pid = fork();
	if (pid < 0)
		return std::string("fork: ") + strerror(errno);
	if (pid == 0)
		exec_daemon(exe, parent, p);
	close(p[1]);
	return wait_ready(p[0]);
}

// Its directory, which holds its socket: in $XDG_RUNTIME_DIR, else
// $TMPDIR, else /tmp, the first whose socket path fits a sockaddr_un (a
// deep TMPDIR, such as a build tree's, would leave the daemon unable to
// bind); removed, empty, by stop().  Earlier records' stale ones there
// go first (sweep_stale_dirs).
std::string PrivateDaemon::make_dir()
{
	static const char kLeaf[] = "/strata-record-XXXXXX/consumerd.sock";
	const char *bases[] = {getenv("XDG_RUNTIME_DIR"), getenv("TMPDIR"), "/tmp"};
	const char *base = "/tmp";
	for (const char *b : bases)
		if (b && *b == '/' && strlen(b) + sizeof(kLeaf) <= proto::kSockPathMax) {
			base = b;
			break;
		}
	sweep_stale_dirs(base);
	std::string tmpl = std::string(base) + "/strata-record-XXXXXX";
	std::vector<char> t(tmpl.begin(), tmpl.end());
	t.push_back(0);
	if (!mkdtemp(t.data()))
		return std::string("mkdtemp: ") + strerror(errno);
	dir = t.data();
	socket = dir + "/consumerd.sock";
	// Root's daemon serves every user (docs/security.md): a command
	// that drops to another uid (setpriv, su, a service) still
	// reaches it.  Another user's daemon stays private (0700).
	if (geteuid() == 0 && chmod(dir.c_str(), 0755) < 0)
		return std::string("chmod ") + dir + ": " + strerror(errno);
	return "";
}

// In the forked child: the daemon, told to write "ready" to p[1].
void PrivateDaemon::exec_daemon(const std::string &exe, pid_t parent, const int p[2])
{
	close(p[0]);
	int w = fcntl(p[1], F_DUPFD, 3); // without close-on-exec
	std::string fd = std::to_string(w);
	setpgid(0, 0); // the terminal's ^C is for CMD, not the daemon
	// Record's handlers (a copy of them runs here until exec) would
	// swallow the SIGTERM below: every signal held while the default
	// actions come back, so that one arriving meanwhile waits, then
	// takes its default action at the unblock (a SIGKILLed record at
	// 2 ms left its daemon running for good: e2e.record_kill).
	sigset_t all, none;
	sigfillset(&all);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &all, nullptr);
	for (int sig : kCaught) // ignored or caught in record
		signal(sig, SIG_DFL);
	signal(SIGPIPE, SIG_DFL);
	// ... but `record`'s end is its end, even by SIGKILL: it
	// flushes every session and exits (a SIGTERM, sent when the
	// thread that forked it, record's only one, exits).
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	if (getppid() != parent)
		_exit(0); // record is gone already
	sigprocmask(SIG_SETMASK, &none, nullptr);
	execl(exe.c_str(), exe.c_str(), "--socket", socket.c_str(), "--ready-fd", fd.c_str(), "--quiet",
	      static_cast<char *>(nullptr));
	fprintf(stderr, "strata record: cannot run %s: %s\n", exe.c_str(), strerror(errno));
	_exit(127);
}

// The daemon writes "ready\n" on `fd` once listening; EOF means it
// died.  Closes fd.
std::string PrivateDaemon::wait_ready(int fd)
{
	char buf[16];
	size_t got = 0;
	int64_t deadline = proto::now_ms() + 10000;
	while (got < 6) {
		struct pollfd pf = {fd, POLLIN, 0};
		int64_t left = deadline - proto::now_ms();
		// Past the deadline, one look without waiting (as proto's waits).
		const int pr = poll(&pf, 1, left <= 0 ? 0 : static_cast<int>(left));
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr == 0) {
			close(fd);
			return "strata-consumerd did not become ready within 10 s";
		}
		ssize_t n = read(fd, buf + got, sizeof(buf) - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			close(fd);
			return "strata-consumerd exited during start-up (see its messages above)";
		}
		got += static_cast<size_t>(n);
	}
	close(fd);
	return "";
}

// The daemon's files in `d` (named after its socket), the state
// directory's too, and `d` if that empties it.
static void remove_files(const std::string &d)
{
	DIR *dp = opendir(d.c_str());
	if (!dp)
		return;
	while (const struct dirent *e = readdir(dp))
		if (strncmp(e->d_name, "consumerd.sock", 14) == 0 || strstr(e->d_name, ".session"))
			if (unlinkat(dirfd(dp), e->d_name, 0) < 0)
				unlinkat(dirfd(dp), e->d_name, AT_REMOVEDIR);
	closedir(dp);
	rmdir(d.c_str());
}

void PrivateDaemon::stop()
{
	if (pid > 0) {
		kill(pid, SIGTERM);
		int st;
		while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
		}
		pid = -1;
	}
	if (!dir.empty()) {
		// What its clean exit removes, left by one that died (nothing
		// took its place, or the last one we started died too): ours to
		// remove, the files beside its socket and the state it kept for a
		// successor (sessions that end with us), so that the directory
		// goes too.
		remove_files(dir + "/consumerd.sock.state");
		remove_files(dir);
	}
	if (!socket.empty())
		unlink(socket.c_str());
	if (!dir.empty())
		rmdir(dir.c_str());
}

// Step 3: a daemon: the running one, or our own.
bool open_daemon(CtlClient &cl, PrivateDaemon &priv)
{
	std::string err;
	if (cl.open("", err) == 0)
		return true;
	std::string e = priv.start();
	if (!e.empty()) {
		fprintf(stderr, "strata record: %s\n", e.c_str());
		return false;
	}
	if (cl.open(priv.socket, err) < 0) {
		fprintf(stderr, "strata record: %s\n", err.c_str());
		return false;
	}
	return true;
}

// Step 4: create the session, enable the rules, start it.
bool start_session(CtlClient &cl, PrivateDaemon &priv, Record &rec)
{
	proto::Create &create = rec.create;
	std::string err, why = cli::relay_unsupported(create, cl.version());
	if (!why.empty()) {
		fprintf(stderr, "strata record: %s\n", why.c_str());
		return false;
	}
	// The session ends with this connection, however `record` ends
	// (a daemon older than protocol version 5 cannot do that: then only
	// `record`'s own handlers complete it).
	if (cl.version() >= 5)
		create.flags = proto::kCreateOwned;
	// CMD's process tree only: a daemon too old to scope a session so
	// would record every process of ours it serves; ours instead.
	if (!rec.all_processes && cl.version() < proto::kTreeVersion && priv.pid < 0) {
		fprintf(stderr,
			"strata record: the running strata-consumerd speaks protocol %u, too old to limit "
			"a session to %s and its descendants (%u): recording with a private daemon\n",
			cl.version(), rec.command[0], proto::kTreeVersion);
		if (!go_private(cl, priv))
			return false;
	}
	// Where the kernel module answers processes' state queries, it grants
	// the session to the tree alone (TARGET_TREE; with an older module the
	// daemon refuses buffers from outside the tree, and logs so).
	if (!rec.all_processes)
		create.flags |= proto::kCreateTree;
	if (!create.aggregate.empty() && cl.version() < proto::kAggVersion) {
		fprintf(stderr,
			"strata record: the running strata-consumerd speaks protocol %u, --aggregate "
			"needs %u: restart it from this version\n",
			cl.version(), proto::kAggVersion);
		return false;
	}
	int r = cl.command(create, err);
	if ((r == -EACCES || r == -EDQUOT) && priv.pid < 0 && geteuid() != 0) {
		// Root's daemon writes for a user only under a directory the
		// user owns, and within a user's share of its slots
		// (docs/security.md): record alone instead, as with no daemon.
		if (!go_private(cl, priv))
			return false;
		r = cl.command(create, err);
	}
	for (size_t k = 0; r == 0 && k < rec.patterns.size(); k++) {
		proto::Rule rule;
		rule.pattern = rec.patterns[k];
		rule.loglevel_max = rec.loglevel;
		r = cl.command(proto::EnableEvent{create.session, rule}, err);
	}
	if (r == 0)
		r = cl.command(proto::Start{create.session}, err);
	if (r < 0) {
		fprintf(stderr, "strata record: %s\n", err.c_str());
		cl.command(proto::Destroy{create.session}, err);
		return false;
	}
	return true;
}

// The daemon may have died while CMD ran and another taken the session up
// from its state (docs/crash.md, "The daemon dies"): our connection, the
// session's owner, went with the dead one.  Find the session again on the
// same socket, for up to 10 s (the time a supervisor such as systemd's
// Restart= takes to start the next one); the new daemon watches our pid
// meanwhile, as the owner.  Nothing found: the STOP that follows fails and
// the trace is repaired, as before.  A private daemon of ours that died
// has no other successor than the one we started (wait_command): one look,
// it is listening already.
void rejoin_daemon(CtlClient &cl, const std::string &sock, const std::string &session, bool private_daemon,
		   bool private_restarted)
{
	proto::Message m;
	std::string err;
	if (cl.call(proto::Status{session}, m, err) == 0)
		return;
	if (private_daemon && !private_restarted)
		return;
	const int64_t deadline = proto::now_ms() + (private_daemon ? 0 : 10000);
	for (bool first = true; first || proto::now_ms() < deadline; first = false) {
		if (cl.open(sock, err) == 0 && cl.call(proto::Status{session}, m, err) == 0 &&
		    m.type() == proto::Type::StatusReply &&
		    !std::get<proto::StatusReply>(m.body).sessions.empty()) {
			fprintf(stderr,
				"strata record: the daemon was restarted while the command ran; the new one "
				"took the session up\n");
			return;
		}
		poll(nullptr, 0, 50);
	}
}

} // namespace record
} // namespace cli
} // namespace strata
