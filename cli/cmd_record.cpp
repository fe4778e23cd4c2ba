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
 */
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <iterator>
#include <vector>

#include "strata_kabi.h"
#include "agg_spec.h"
#include "commands.h"
#include "control/names.h"
#include "control/ctl_client.h"
#include "proto/sock.h"
#include "pthread_count_env.h"

using namespace strata;

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

constexpr int kCaught[] = {SIGINT, SIGTERM, SIGQUIT, SIGHUP};

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

// libstrata-NAME.so where cli::find_library looks; a NAME with a '/' is
// the library's path itself.
std::string find_preload(const std::string &name)
{
	if (name.find('/') != std::string::npos)
		return access(name.c_str(), R_OK) == 0 ? cli::absolute_path(name) : "";
	return cli::find_library("libstrata-" + name + ".so");
}

// strata.jar beside libstrata-jvm.so: the build tree keeps both in jvm/, an
// install puts the jar in share/java (lib/ or lib/<multiarch>/ beside it).
std::string find_java_api(const std::string &agent)
{
	std::string d = agent.substr(0, agent.rfind('/'));
	for (const std::string &p :
	     {d + "/strata.jar", d + "/../share/java/strata.jar", d + "/../../share/java/strata.jar",
	      cli::self_dir() + "/../share/java/strata.jar"})
		if (access(p.c_str(), R_OK) == 0)
			return p;
	return "";
}

// Whether the dynamic loader accepts `lib` (and every library it needs): a
// throwaway child dlopens it.  "" if it loads, else the loader's message.
// Its constructors run only in that child, pointed at no daemon.
std::string loader_refuses(const std::string &lib)
{
	int fds[2];
	if (pipe2(fds, O_CLOEXEC) != 0)
		return "";
	pid_t pid = fork();
	if (pid == 0) {
		close(fds[0]);
		setenv("STRATA_CONSUMERD_SOCKET", "/nonexistent/strata-probe.sock", 1);
		unsetenv("STRATA_EARLY");
		if (dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL))
			_exit(0);
		const char *e = dlerror();
		ssize_t n = write(fds[1], e ? e : "dlopen failed", e ? strlen(e) : 13);
		(void)n;
		_exit(1);
	}
	close(fds[1]);
	std::string msg;
	char buf[512];
	ssize_t n;
	while (pid > 0 && (n = read(fds[0], buf, sizeof buf)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			break;
		msg.append(buf, (size_t)n);
	}
	close(fds[0]);
	int st = 0;
	if (pid > 0)
		while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
		}
	if (pid > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return "";
	return msg.empty() ? "the loader refused it" : msg;
}

struct PrivateDaemon {
	pid_t pid = -1;
	std::string dir, socket;

	// Start it and wait (bounded) until it listens.  "" or an error text.
	std::string start()
	{
		std::string exe = cli::find_consumerd();
		if (exe.empty())
			return "no strata-consumerd running, and none found next to strata or in PATH";
		std::string e = make_dir();
		if (!e.empty())
			return e;
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
	// $TMPDIR, else /tmp; removed, empty, by stop().
	std::string make_dir()
	{
		const char *rt = getenv("XDG_RUNTIME_DIR"), *tmp = getenv("TMPDIR");
		const char *base = rt && *rt == '/' ? rt : tmp && *tmp == '/' ? tmp : "/tmp";
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
	[[noreturn]] void exec_daemon(const std::string &exe, pid_t parent, const int p[2])
	{
		close(p[0]);
		int w = fcntl(p[1], F_DUPFD, 3); // without close-on-exec
		std::string fd = std::to_string(w);
		setpgid(0, 0); // the terminal's ^C is for CMD, not the daemon
		// ... but `record`'s end is its end, even by SIGKILL: it
		// flushes every session and exits (a SIGTERM, sent when the
		// thread that forked it, record's only one, exits).
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != parent)
			_exit(0);       // record is gone already
		for (int sig : kCaught) // ignored or caught in record
			signal(sig, SIG_DFL);
		signal(SIGPIPE, SIG_DFL);
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, nullptr);
		execl(exe.c_str(), exe.c_str(), "--socket", socket.c_str(), "--ready-fd", fd.c_str(),
		      "--quiet", static_cast<char *>(nullptr));
		fprintf(stderr, "strata record: cannot run %s: %s\n", exe.c_str(), strerror(errno));
		_exit(127);
	}

	// The daemon writes "ready\n" on `fd` once listening; EOF means it
	// died.  Closes fd.
	static std::string wait_ready(int fd)
	{
		char buf[16];
		size_t got = 0;
		int64_t deadline = proto::now_ms() + 10000;
		while (got < 6) {
			struct pollfd pf = {fd, POLLIN, 0};
			int64_t left = deadline - proto::now_ms();
			const int pr = left <= 0 ? 0 : poll(&pf, 1, static_cast<int>(left));
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

	void stop()
	{
		if (pid > 0) {
			kill(pid, SIGTERM);
			int st;
			while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
			}
			pid = -1;
		}
		if (!socket.empty())
			unlink(socket.c_str());
		if (!dir.empty())
			rmdir(dir.c_str());
	}
	~PrivateDaemon() { stop(); }
};

// Whether `dir` is absent or an empty directory.
bool dir_empty(const std::string &dir)
{
	DIR *d = opendir(dir.c_str());
	if (!d)
		return errno == ENOENT;
	bool empty = true;
	while (struct dirent *e = readdir(d))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			empty = false;
	closedir(d);
	return empty;
}

// record's sub-buffer size when the user chose none (docs/ring-buffer.md,
// "record's default buffers"): a process's rings together get at most
// 1/256 of the machine's memory, spread over its lanes (2 x CPUs, at
// least 4, plus half as many shared: the runtime's default) and n_subbuf
// sub-buffers each; a power of two between the runtime's default
// (128 KiB) and 1 MiB.
uint64_t default_subbuf_size(const proto::ChannelConfig &c)
{
	const long cpus = sysconf(_SC_NPROCESSORS_ONLN), pages = sysconf(_SC_PHYS_PAGES),
		   page = sysconf(_SC_PAGESIZE);
	uint64_t owned =
		c.n_lanes ? c.n_lanes : std::max<uint64_t>(4, 2 * static_cast<uint64_t>(std::max(1L, cpus)));
	const uint64_t lanes = owned + std::max<uint64_t>(1, owned / 2);
	const uint64_t subbufs = c.n_subbuf ? c.n_subbuf : proto::kDefaultSubbufs;
	const uint64_t mem =
		pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
	const uint64_t want = mem / 256 / lanes / subbufs;
	uint64_t size = proto::kDefaultSubbufSize;
	while (size * 2 <= want && size * 2 <= (1u << 20))
		size *= 2;
	return size;
}

// The file execvp(3) would run for `name`: itself if it holds a '/', else
// the first executable regular file of that name in PATH; "" if none.
std::string resolve_command(const char *name)
{
	if (strchr(name, '/'))
		return name;
	const char *path = getenv("PATH");
	std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
	for (size_t b = 0;;) {
		size_t e = dirs.find(':', b);
		std::string d = dirs.substr(b, e == std::string::npos ? std::string::npos : e - b);
		std::string f = (d.empty() ? "." : d) + "/" + name;
		struct stat st;
		if (stat(f.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(f.c_str(), X_OK) == 0)
			return f;
		if (e == std::string::npos)
			return "";
		b = e + 1;
	}
}

// Whether `path` is an ELF executable of this machine with no program
// interpreter (PT_INTERP): statically linked, so the dynamic loader never
// runs in it and neither LD_PRELOAD nor libstrata can be loaded into it.
bool static_executable(const std::string &path)
{
	int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	Elf64_Ehdr eh;
	bool is_static = false;
	if (pread(fd, &eh, sizeof eh, 0) == (ssize_t)sizeof eh && !memcmp(eh.e_ident, ELFMAG, SELFMAG) &&
	    eh.e_ident[EI_CLASS] == ELFCLASS64 && (eh.e_type == ET_EXEC || eh.e_type == ET_DYN) &&
	    eh.e_phentsize == sizeof(Elf64_Phdr) && eh.e_phnum > 0 && eh.e_phnum < 4096) {
		is_static = true;
		for (unsigned k = 0; k < eh.e_phnum && is_static; k++) {
			Elf64_Phdr ph;
			if (pread(fd, &ph, sizeof ph, static_cast<off_t>(eh.e_phoff + k * sizeof ph)) !=
			    (ssize_t)sizeof ph)
				is_static = false; // unreadable: say nothing
			else if (ph.p_type == PT_INTERP)
				is_static = false;
		}
	}
	close(fd);
	return is_static;
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

// After CMD exited: the processes it started that outlived it (daemons
// that called setsid or forked twice) were reparented to record, the
// subreaper; record keeps recording until they all exit.  A signal caught
// meanwhile (^C) is forwarded to each of them.  The caught signals are
// blocked but inside ppoll, so none is missed between a look and the wait.
void follow_descendants(pid_t daemon, const char *cmd)
{
	sigset_t caught, before;
	sigemptyset(&caught);
	for (int sig : kCaught)
		sigaddset(&caught, sig);
	sigprocmask(SIG_BLOCK, &caught, &before);
	sig_atomic_t seen = 0; // a signal CMD got is for them too
	bool said = false;
	for (;;) {
		std::vector<pid_t> kids = children(daemon), live;
		for (pid_t k : kids) {
			int st;
			if (waitpid(k, &st, WNOHANG) != k)
				live.push_back(k);
		}
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
		ppoll(fds.data(), fds.size(), nullptr, &before);
		for (const struct pollfd &p : fds)
			close(p.fd);
	}
	sigprocmask(SIG_SETMASK, &before, nullptr);
}

// Nothing was recorded although CMD ran: say which case it is, from what
// the daemon saw (STATUS_REPLY version 5: who joined, what they declared).
void why_nothing(const proto::SessionStatus &st, const char *cmd, bool preloaded)
{
	const char *pre = "strata record: nothing recorded: ";
	if (st.joined == 0 && preloaded) {
		fprintf(stderr,
			"%s%s did not join the session although it was given a --preload library: the "
			"library was not loaded into it (a set-user-ID program ignores LD_PRELOAD; a "
			"refusal by the loader is its \"cannot be preloaded\" message above) or it started "
			"no dynamically linked program\n",
			pre, cmd);
		return;
	}
	if (st.joined == 0) {
		fprintf(stderr,
			"%s%s did not join the session: no process of it asked the daemon for its "
			"state (a program must link libstrata and Strata::tp_sync or tp_async, or be "
			"given a library with --preload)\n",
			pre, cmd);
		return;
	}
	std::vector<std::string> matched, providers;
	std::string patterns;
	for (const proto::Rule &r : st.rules) {
		if (!r.enable)
			continue;
		patterns += (patterns.empty() ? "" : " ") + r.pattern;
		for (const std::string &e : st.declared)
			if (fnmatch(r.pattern.c_str(), e.c_str(), 0) == 0 &&
			    std::find(matched.begin(), matched.end(), e) == matched.end())
				matched.push_back(e);
	}
	for (const std::string &e : st.declared) {
		const std::string p = e.substr(0, e.find(':'));
		if (std::find(providers.begin(), providers.end(), p) == providers.end())
			providers.push_back(p);
	}
	if (st.declared.empty()) {
		fprintf(stderr, "%s%u process(es) of %s joined the session but declare no tracepoint\n", pre,
			st.joined, cmd);
	} else if (matched.empty()) {
		std::string list;
		for (const std::string &p : providers)
			list += (list.empty() ? "" : ", ") + p;
		fprintf(stderr,
			"%sno event matched the patterns (%s); the %u process(es) of %s that joined declare "
			"the providers %s (e.g. -e '%s:*'; `strata list` while it runs shows the events)\n",
			pre, patterns.c_str(), st.joined, cmd, list.c_str(), providers[0].c_str());
	} else {
		std::string list;
		for (size_t k = 0; k < matched.size() && k < 4; k++)
			list += (k ? ", " : "") + matched[k];
		if (matched.size() > 4)
			list += ", ...";
		fprintf(stderr, "%s%zu event(s) matched the patterns (%s) but none fired while %s ran%s\n",
			pre, matched.size(), list.c_str(), cmd,
			preloaded ? ": a preloaded library records only the calls it wraps, and the program "
				    "made none "
				    "(with --preload pthread: it took no pthread lock)"
				  : "");
	}
}

// A session directory with at least one sub-trace (user or kernel) in it.
bool has_subtrace(const std::string &out)
{
	struct stat st;
	return stat((out + "/ust").c_str(), &st) == 0 || stat((out + "/kernel").c_str(), &st) == 0;
}

// The daemon may have died while CMD ran and another taken the session up
// from its state (docs/crash.md, "The daemon dies"): our connection, the
// session's owner, went with the dead one.  Find the session again on the
// same socket, for up to 10 s (the time a supervisor such as systemd's
// Restart= takes to start the next one); the new daemon watches our pid
// meanwhile, as the owner.  Nothing found: the STOP that follows fails and
// the trace is repaired, as before.  A private daemon of ours that died
// has no successor: no wait.
void rejoin_daemon(CtlClient &cl, const std::string &sock, const std::string &session, bool private_daemon)
{
	proto::Message m;
	std::string err;
	if (cl.call(proto::Status{session}, m, err) == 0)
		return;
	if (private_daemon)
		return;
	const int64_t deadline = proto::now_ms() + 10000;
	while (proto::now_ms() < deadline) {
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

// What `record` was asked (its options) and what it found before starting
// anything (the libraries to load, CMD's file).
struct Record {
	proto::Create create;
	std::vector<std::string> patterns, preloads;
	bool jvm = false, add = false, agg_json = false;
	bool all_processes = false; // not only CMD's process tree
	int32_t loglevel = -1;
	char **command = nullptr;        // CMD and its arguments, null-terminated
	std::string preload_env;         // LD_PRELOAD's prefix: the --preload libraries
	std::string jvm_agent, java_api; // with --jvm
	bool is_static = false;          // CMD cannot load libstrata
	bool out_existed = false;        // the output directory was there before: not ours to remove
};

const char *const kCmd = "record";

// record's own options (the channel and relay options are cli's): one row
// an option, its help beside it.
std::vector<cli::Option> record_options(Record &r)
{
	Record *rp = &r;
	return {
		cli::path("output", 'o', "DIR", "a directory",
			  "trace directory (default ./strata-record-YYYYMMDD-HHMMSS)", r.create.output_dir),
		cli::custom(
			"aggregate", 0, "SPEC", "a spec",
			"aggregate instead of recording (strata create --aggregate): 'PROVIDER:EVENT[:FIELD] "
			"[by KEY] [limit N]'; once CMD ended, the aggregates are printed as strata top -s "
			"--once shows them (--json: as JSON); with -e, both",
			[rp](const char *v) {
				struct strata_agg_spec spec;
				char why[128] = "too long";
				if (strlen(v) > proto::kMaxAggregate ||
				    agg_spec_parse(v, &spec, why, sizeof why) != 0)
					return std::string(
						       "--aggregate needs 'PROVIDER:EVENT[:FIELD] [by KEY] "
						       "[limit N]': ") +
					       why;
				rp->create.aggregate = v;
				return std::string();
			}),
		cli::flag("json", 0, "with --aggregate: print the aggregates as JSON", r.agg_json),
		cli::custom("event", 'e', "PATTERN", "a pattern",
			    "enable \"provider:event\" globs (default: \"*\"); repeatable",
			    [rp](const char *v) {
				    const std::string why = cli::bad_pattern(v);
				    if (why.empty())
					    rp->patterns.push_back(v);
				    return why;
			    }),
		cli::flag("add", 0,
			  "record into DIR although it is not empty (else refused: two recordings in one "
			  "directory mix)",
			  r.add),
		cli::custom("loglevel", 0, "LEVEL", "a level", "with -e: only LEVEL or more severe",
			    [rp](const char *v) {
				    return cli::parse_loglevel(v, rp->loglevel)
						   ? std::string()
						   : std::string("bad log level '") + v + "'";
			    }),
		cli::texts("preload", 0, "NAME", "a library",
			   "LD_PRELOAD libstrata-NAME.so (e.g. pthread), or the library at NAME if it has a "
			   "/; refused up front if the loader refuses it",
			   r.preloads),
		cli::flag("jvm", 0,
			  "load libstrata-jvm.so into Java (JAVA_TOOL_OPTIONS -agentpath, strata.jar on the "
			  "boot class path): jvm:* events and the Java API",
			  r.jvm),
		cli::flag("all-processes", 0,
			  "record every process of yours the daemon serves (as strata create does), not "
			  "only CMD and its descendants; where the kernel module answers which "
			  "tracepoints are on (/dev/strata), always so (said)",
			  r.all_processes),
	};
}

// Step 1: the command line into `r`.  -1 to go on, else the exit status.
int parse_args(int argc, char **argv, Record &r)
{
	const std::string more =
		"Without --subbuf-size, record's sub-buffers are sized from the memory and the\nCPUs (here " +
		cli::human_bytes(default_subbuf_size(proto::ChannelConfig{})) +
		"; docs/ring-buffer.md, \"record's default buffers\").\n\n"
		"When CMD ends, the last lines (stderr) give the trace directory and what was\n"
		"discarded: \"N event(s) and M packet(s) discarded\" with the processes that lost\n"
		"most, or \"nothing discarded\".";
	cli::Command c = {kCmd,
			  "[-o DIR] [-e PATTERN]... [OPTIONS] -- CMD [ARGS]",
			  "Run CMD and record its tracepoints: CMD's and those of every process it starts\n"
			  "(its process tree), not those of other programs the daemon serves, unless\n"
			  "--all-processes.  Kernel events (-e 'kernel:...') are the whole machine's.\n"
			  "Uses the running strata-consumerd if one answers, else starts a private one\n"
			  "for the duration of CMD.  CMD must link libstrata and tp-sync or tp-async\n"
			  "(Strata::tp_sync, Strata::tp_async), or be given a library with --preload.",
			  more.c_str(),
			  "Exit status: CMD's (128+N if killed by signal N), whatever was discarded (the\n"
			  "loss is told, not an error); 1 if recording failed before CMD ran or the\n"
			  "daemon did not complete the trace; 2 usage error.",
			  true};
	std::vector<cli::Option> opts = record_options(r);
	cli::append(opts, cli::channel_options(r.create.channel));
	cli::append(opts, cli::relay_options(r.create));
	std::vector<char *> operands;
	if (const int p = cli::parse(c, opts, argc, argv, operands); p != cli::kParsed)
		return p;
	if (operands.empty())
		return cli::usage_error(c, "missing command to run (strata record -- CMD [ARGS])");
	if (r.patterns.size() > proto::kMaxRules)
		return cli::usage_error(c, "at most 32 patterns");
	if (r.patterns.empty() && r.create.aggregate.empty())
		r.patterns.push_back("*");
	if (r.agg_json && r.create.aggregate.empty())
		return cli::usage_error(c, "--json goes with --aggregate");
	r.command = argv + (argc - static_cast<int>(operands.size()));
	return -1;
}

// A library to load into CMD that the loader refuses would stop it before
// main (exit 127) with only the loader's line to say why: say it here.
bool loader_accepts(const std::string &lib)
{
	const std::string why = loader_refuses(lib);
	if (why.empty())
		return true;
	fprintf(stderr, "strata record: the dynamic loader refuses %s: %s\n", lib.c_str(), why.c_str());
	return false;
}

// STRATA_PTHREAD_COUNT as the pthread preload reads it (pthread_count_env.h):
// said here, before the program runs, rather than by the library in each
// process it enters.
bool pthread_count_ok()
{
	const char *c = getenv("STRATA_PTHREAD_COUNT");
	if (strata_pthread_count_parse(c) >= 0)
		return true;
	fprintf(stderr,
		"strata record: STRATA_PTHREAD_COUNT=%s: give 0 (a record per lock pair), 1 (count "
		"uncontended pairs, every hold timed) or N up to 65536 (one hold in N timed), or leave it "
		"unset (the default, one in 16)\n",
		c);
	return false;
}

// Step 2a: the --preload libraries and the JVM agent, found and loadable.
bool find_libraries(Record &r)
{
	for (const std::string &p : r.preloads) {
		if (p == "pthread" && !pthread_count_ok())
			return false;
		std::string lib = find_preload(p);
		if (lib.empty()) {
			fprintf(stderr,
				"strata record: libstrata-%s.so not found next to strata, in ../lib or "
				"in " STRATA_LIBDIR "\n",
				p.c_str());
			return false;
		}
		if (!loader_accepts(lib))
			return false;
		r.preload_env += (r.preload_env.empty() ? "" : ":") + lib;
	}
	r.jvm_agent = r.jvm ? find_preload("jvm") : "";
	r.java_api = r.jvm_agent.empty() ? "" : find_java_api(r.jvm_agent);
	if (r.jvm && r.jvm_agent.empty()) {
		fprintf(stderr, "strata record: libstrata-jvm.so not found next to strata, in ../lib or "
				"in " STRATA_LIBDIR "\n");
		return false;
	}
	return r.jvm_agent.empty() || loader_accepts(r.jvm_agent);
}

// Step 2: everything decided before a daemon is asked anything: the
// libraries, the output directory, the buffers, the session's name.  -1 to
// go on, else the exit status.
int prepare(Record &r)
{
	proto::Create &create = r.create;
	if (!find_libraries(r))
		return cli::kFail;
	if (create.output_dir.empty()) { // a new one: two records in one second get -1, -2...
		const std::string base = cli::absolute_path("strata-record-" + local_timestamp());
		create.output_dir = base;
		for (int k = 1; !dir_empty(create.output_dir) && k < 1000; k++)
			create.output_dir = base + "-" + std::to_string(k);
	}
	if (create.output_dir.size() > proto::kMaxPath)
		return cli::usage_error(kCmd, "output path longer than 4095 bytes");
	struct stat st;
	r.out_existed = stat(create.output_dir.c_str(), &st) == 0;
	if (!r.add && create.relay.empty() && !dir_empty(create.output_dir)) {
		fprintf(stderr,
			"strata record: %s exists and is not empty: a recording there would mix with what "
			"it holds; choose another -o, or give --add to add this recording to it\n",
			create.output_dir.c_str());
		return cli::kFail;
	}
	if (!create.channel.subbuf_size)
		create.channel.subbuf_size = default_subbuf_size(create.channel);
	create.session = "record-" + std::to_string(getpid());

	cli::warn_kernel_without_module(kCmd, r.patterns);
	for (const std::string &p : r.patterns)
		if (p.compare(0, 7, "kernel:") == 0) {
			fprintf(stderr,
				"strata record: note: kernel events (%s) are recorded for the whole "
				"machine, every process's, not only the command's\n",
				p.c_str());
			break;
		}
	const std::string cmd_path = resolve_command(r.command[0]);
	r.is_static = !cmd_path.empty() && static_executable(cmd_path);
	if (r.is_static)
		fprintf(stderr,
			"strata record: warning: %s is statically linked (no ELF interpreter): the dynamic "
			"loader never runs in it, so neither libstrata nor a --preload library can be loaded "
			"into it and none of its own events can be recorded (only those of dynamically "
			"linked "
			"programs it runs)\n",
			cmd_path.c_str());
	return -1;
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
	// Where the kernel module answers processes' state queries, a process
	// joins from the module's answer, which names users, not process trees:
	// a tree session would record nothing, so the session records every
	// process of ours, as --all-processes does, and says so.
	const bool kmod = access(STRATA_KABI_DEVICE, F_OK) == 0;
	if (!rec.all_processes && kmod)
		fprintf(stderr,
			"strata record: the kernel module (%s) answers which tracepoints are on here, by "
			"user, not by process tree: recording every process of yours, not only %s and its "
			"descendants (as --all-processes)\n",
			STRATA_KABI_DEVICE, rec.command[0]);
	if (!rec.all_processes && !kmod)
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

// How CMD went.
struct Child {
	pid_t pid = -1;
	int early_signal = 0; // caught before CMD started: it was not run
	int fork_errno = 0, exec_errno = 0;
	int status = 0; // waitpid's
};

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

// Step 5b: wait for CMD and for what it left running.  record's exit status
// so far: CMD's.
int wait_command(Child &c, pid_t daemon, const char *name)
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
	while (waitpid(c.pid, &c.status, 0) < 0 && errno == EINTR) {
	}
	g_child = 0;
	follow_descendants(daemon, name);
	return WIFEXITED(c.status) ? WEXITSTATUS(c.status) : 128 + WTERMSIG(c.status);
}

// Step 6a, once the session stopped: it recorded nothing although CMD ran
// (a disk trace with no sub-trace; a streamed one that got no buffer): say
// why.  A process-tree session's processes join by a round trip, which
// hands their buffers over at once, fired or not (a grant table's join
// hands a buffer over at its first event): the trace tells.
void tell_nothing_joined(CtlClient &cl, const Record &rec, const Child &c)
{
	proto::Message st;
	std::string err;
	const char *name = rec.command[0];
	if (rec.patterns.empty()) // aggregated only: no buffer expected
		return;
	if (cl.call(proto::Status{rec.create.session}, st, err) != 0 || st.type() != proto::Type::StatusReply)
		return;
	const auto &sessions = std::get<proto::StatusReply>(st.body).sessions;
	if (sessions.empty() ||
	    (rec.create.relay.empty() ? has_subtrace(rec.create.output_dir) : sessions[0].n_buffers != 0))
		return;
	if (c.exec_errno)
		; // said above: it never ran
	else if (WIFEXITED(c.status) && WEXITSTATUS(c.status) == 127)
		fprintf(stderr,
			"strata record: %s exited with status 127 before it joined the session: "
			"nothing recorded (the dynamic loader or a shell could not start it: see "
			"its message above)\n",
			name);
	else if (rec.is_static)
		fprintf(stderr,
			"strata record: nothing recorded: %s is statically linked (see the warning "
			"above)\n",
			name);
	else if (cl.version() >= 5)
		why_nothing(sessions[0], name, !rec.preload_env.empty());
	else
		fprintf(stderr,
			"strata record: %s did not join the session: nothing recorded "
			"(does it link libstrata and Strata::tp_sync?)\n",
			name);
}

// Step 6b: where the trace went.  A buffer that never held an event leaves
// no sub-trace (docs/control-protocol.md, "Lazy sub-traces"): a directory
// this record made that holds none (nothing recorded, or only aggregated)
// is removed rather than left behind (rmdir: only an empty one), so that a
// working directory does not fill with empty strata-record-*; one that was
// there before is the user's, and stays.
void tell_where(const Record &rec, const std::string &stopped)
{
	const proto::Create &create = rec.create;
	const char *dir = create.output_dir.c_str();
	if (!create.relay.empty()) {
		fprintf(stderr, "strata record: trace streamed to %s\n", cli::streamed_to(create).c_str());
		// The daemon's STOP answer counts what its relay link sent:
		// "...; nothing discarded" or "...; N event(s) and M packet(s) discarded".
		const size_t d = stopped.find(" discarded");
		const size_t b = d == std::string::npos ? d : stopped.rfind("; ", d);
		if (b != std::string::npos)
			fprintf(stderr, "strata record: %s\n", stopped.substr(b + 2, d + 10 - b - 2).c_str());
		return;
	}
	if (has_subtrace(create.output_dir)) {
		fprintf(stderr, "strata record: trace written to %s\nstrata record: %s\n", dir,
			cli::loss_summary(cli::trace_loss(create.output_dir)).c_str());
		return;
	}
	// The daemon removes an empty directory it made with the session.
	const bool removed = !rec.out_existed && (rmdir(dir) == 0 || errno == ENOENT);
	if (rec.patterns.empty())
		return; // aggregated only: printed above, no trace asked for
	if (removed)
		fprintf(stderr,
			"strata record: no event was recorded (no enabled tracepoint fired): no trace "
			"written\n");
	else
		fprintf(stderr,
			"strata record: no event was recorded (no enabled tracepoint fired): %s holds no "
			"trace\n",
			dir);
}

// Step 6: complete the trace (stop, destroy, the private daemon's end) and
// say where it is and what was lost.  The exit status.
int finish(CtlClient &cl, PrivateDaemon &priv, const Record &rec, const Child &child, int exit_code)
{
	const proto::Create &create = rec.create;
	std::string err;
	if (!create.aggregate.empty()) // before STOP: the regions of this run
		cli::top_session_once(cl.path(), create.session, rec.agg_json);
	// --preload against a daemon older than version 8: processes still
	// running (a server it detached) flush the pairs they counted
	// (cli::flush_counts) before the stop; a newer daemon's stop does it.
	proto::Message ans;
	if (!rec.preload_env.empty() && cl.call(proto::Status{create.session}, ans, err) == 0 &&
	    ans.type() == proto::Type::StatusReply)
		for (const proto::SessionStatus &s : std::get<proto::StatusReply>(ans.body).sessions)
			if (s.name == create.session && cli::counts_enabled(s.rules))
				cli::flush_counts(cl.path(), create.session);
	int r = cl.command(proto::Stop{create.session}, err);
	const std::string stopped = r < 0 ? "" : err;
	if (r < 0)
		fprintf(stderr, "strata record: stop: %s\n", err.c_str());
	else if (create.relay.compare(0, 7, "serial:") == 0)
		fprintf(stderr, "strata record: %s\n",
			err.c_str()); // the line's load against the session's rate
	if (r == 0 && !child.early_signal)
		tell_nothing_joined(cl, rec, child);
	if (cl.command(proto::Destroy{create.session}, err) < 0)
		fprintf(stderr, "strata record: destroy: %s\n", err.c_str());
	priv.stop();
	if (r < 0) {
		// The daemon is gone (killed?): a write it was in may have left a
		// stream file ending inside a packet, which babeltrace2 refuses
		// whole.  Cut every stream file back to its last whole packet.
		fprintf(stderr, "strata record: the daemon did not answer STOP; %s\n",
			cli::run_consumerd_repair(create.output_dir, false) == 0
				? "trace repaired (torn packets cut)"
				: "could not repair the trace");
		if (exit_code == 0)
			exit_code = cli::kFail;
	}
	tell_where(rec, stopped);
	return exit_code;
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
	const int exit_code = wait_command(child, priv.pid, rec.command[0]);

	// The signals stay caught (see on_signal) while the trace is completed.
	if (!child.early_signal)
		rejoin_daemon(cl, sock, rec.create.session, priv.pid > 0);
	return finish(cl, priv, rec, child, exit_code);
}
