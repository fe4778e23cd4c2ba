/*
 * cmd_common.cpp - helpers shared by the control subcommands (commands.h).
 */
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <fnmatch.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "strata_abi.h"
#include "commands.h"
#include "control/ctl_client.h"

namespace strata {
namespace cli {

int usage_error(const char *cmd, const std::string &msg)
{
	fprintf(stderr, "strata %s: %s\nTry 'strata %s --help'.\n", cmd, msg.c_str(), cmd);
	return kUsage;
}

static const char *const kLevels[] = {"emerg", "alert", "crit", "err", "warning", "notice", "info", "debug"};

bool parse_loglevel(const char *s, int32_t &out)
{
	for (int i = 0; i < 8; i++)
		if (!strcasecmp(s, kLevels[i])) {
			out = i;
			return true;
		}
	uint32_t v;
	if (parse_u32(s, v) && v <= 15) {
		out = static_cast<int32_t>(v);
		return true;
	}
	return false;
}

const char *loglevel_name(uint32_t ll)
{
	return ll < 8 ? kLevels[ll] : "debug+";
}

namespace {

// The channel as changed: "" if the daemon would take it, else why not.
std::string checked(const proto::ChannelConfig &c)
{
	std::string why;
	return proto::valid_channel(c, why) ? std::string() : why;
}

std::string take_blocking(proto::ChannelConfig &c, const char *v)
{
	uint32_t ms = kDefaultBlockMs;
	if (v && (!parse_u32(v, ms) || ms == 0 || ms > STRATA_MODE_BLOCK_MAX_MS))
		return "--blocking=MS needs 1.." + std::to_string(STRATA_MODE_BLOCK_MAX_MS) +
		       " milliseconds, not '" + v + "'";
	c.mode = (c.mode & STRATA_MODE_MASK) | (ms << STRATA_MODE_BLOCK_SHIFT);
	return checked(c);
}

std::string take_mode(proto::ChannelConfig &c, const char *v)
{
	// Keeps a --blocking given before it (the mode word, strata_abi.h).
	if (!strcmp(v, "discard"))
		c.mode = (c.mode & ~STRATA_MODE_MASK) | STRATA_MODE_DISCARD;
	else if (!strcmp(v, "overwrite"))
		c.mode = (c.mode & ~STRATA_MODE_MASK) | STRATA_MODE_OVERWRITE;
	else
		return std::string("--mode must be discard or overwrite, not '") + v + "'";
	return checked(c);
}

} // namespace

std::vector<Option> channel_options(proto::ChannelConfig &c)
{
	proto::ChannelConfig *ch = &c;
	std::vector<Option> v;
	v.push_back(custom("mode", 0, "discard|overwrite", "discard or overwrite",
			   "when the buffer is full: drop new events and count them (discard, default) "
			   "or reuse the oldest sub-buffer (overwrite, flight recorder)",
			   [ch](const char *s) { return take_mode(*ch, s); }));
	v.push_back(custom("subbuf-size", 0, "N", "a size",
			   "bytes per sub-buffer, power of two, 4k..64M "
			   "(default 128k; suffixes k and M)",
			   [ch](const char *s) {
				   uint64_t n = 0;
				   if (!parse_size(s, n) || n == 0) // 0 would mean "the default" on the wire
					   return std::string("bad size '") + s +
						  "' (a power of two, 4k..64M)";
				   ch->subbuf_size = n;
				   return checked(*ch);
			   }));
	v.push_back(custom("subbuf-count", 0, "N", "a count",
			   "sub-buffers per lane, power of two, 2..64 "
			   "(default 8)",
			   [ch](const char *s) {
				   uint32_t u = 0;
				   if (!parse_u32(s, u) || u == 0)
					   return std::string("bad count '") + s +
						  "' (a power of two, 2..64)";
				   ch->n_subbuf = u;
				   return checked(*ch);
			   }));
	v.push_back(custom("lanes", 0, "N", "a count", "lanes per process (default 2 x CPUs, at least 8)",
			   [ch](const char *s) {
				   uint32_t u = 0;
				   if (!parse_u32(s, u) || u == 0)
					   return std::string("bad lane count '") + s + "'";
				   ch->n_lanes = u;
				   return checked(*ch);
			   }));
	Option blocking =
		custom("blocking", 0, "MS", "milliseconds",
		       "discard mode: a writer whose buffer is full waits up to MS ms (default 1000) "
		       "for the consumer instead of dropping; signal handlers interrupting an event "
		       "and a gone consumer still drop and count",
		       [ch](const char *s) { return take_blocking(*ch, s); });
	blocking.optional = true;
	v.push_back(blocking);
	return v;
}

namespace {

std::string take_serial(proto::Create &m, const char *v)
{
	if (!m.relay.empty())
		return "one of --relay and --serial, once";
	// "-": our standard output, which the daemon opens again through
	// /proc while we wait for its answer (a pipe or tty stays open in
	// the daemon after we exit).
	std::string dev = v, baud;
	const size_t comma = dev.rfind(',');
	if (comma != std::string::npos) {
		baud = dev.substr(comma);
		dev.resize(comma);
	}
	if (dev.empty())
		return "--serial needs DEVICE[,BAUD]";
	dev = dev == "-" ? "/proc/" + std::to_string(getpid()) + "/fd/1" : absolute_path(dev);
	m.relay = "serial:" + dev + baud;
	if (m.relay.size() > proto::kMaxRelay)
		return "--serial: device path too long";
	return "";
}

} // namespace

std::vector<Option> relay_options(proto::Create &m)
{
	proto::Create *c = &m;
	std::vector<Option> v;
	v.push_back(custom("relay", 0, "HOST[:CTRL[:DATA]]", "HOST[:CTRL_PORT[:DATA_PORT]]",
			   "stream to a running lttng-relayd instead of writing a directory (ports "
			   "5342:5343 by default; CTRL alone means DATA = CTRL+1); the relay files the "
			   "trace under HOSTNAME/SESSION-DATE",
			   [c](const char *s) {
				   if (!c->relay.empty())
					   return std::string("one of --relay and --serial, once");
				   if (!*s || strlen(s) > proto::kMaxRelay)
					   return std::string("--relay needs HOST[:CTRL_PORT[:DATA_PORT]]");
				   c->relay = s;
				   return std::string();
			   }));
	v.push_back(custom("hostname", 0, "NAME", "a hostname",
			   "the hostname given to the relay (default: this machine's)", [c](const char *s) {
				   if (!proto::valid_session_name(s))
					   return std::string(
						   "a hostname for the relay is 1 to 63 of [A-Za-z0-9._-]");
				   c->hostname = s;
				   return std::string();
			   }));
	v.push_back(custom("serial", 0, "DEVICE[,BAUD]", "DEVICE[,BAUD]",
			   "stream over a byte line instead of writing a directory: a tty (set raw, BAUD "
			   "default 115200), a FIFO, a file, or - (standard output); what the line's "
			   "BAUD/10 bytes/s cannot carry is dropped and counted; `strata receive` rebuilds "
			   "the trace (docs/serial.md)",
			   [c](const char *s) { return take_serial(*c, s); }));
	return v;
}

std::string streamed_to(const proto::Create &m)
{
	if (m.relay.compare(0, 7, "serial:") == 0)
		return "the serial line " + m.relay.substr(7);
	return "lttng-relayd " + m.relay;
}

std::string relay_unsupported(const proto::Create &m, uint16_t daemon_version)
{
	if ((m.relay.empty() && m.hostname.empty()) || daemon_version >= 3)
		return "";
	return "the running strata-consumerd speaks protocol " + std::to_string(daemon_version) +
	       ", streaming to a relay needs 3: restart it from this version";
}

int simple_command(const char *cmd, proto::Body body, bool print_text)
{
	CtlClient cl;
	std::string err;
	if (cl.open("", err) < 0) {
		fprintf(stderr, "strata %s: %s\n", cmd, err.c_str());
		return kFail;
	}
	int r = cl.command(std::move(body), err);
	if (r < 0) {
		fprintf(stderr, "strata %s: %s\n", cmd, err.c_str());
		return kFail;
	}
	if (print_text && !err.empty())
		printf("%s\n", err.c_str());
	return kOk;
}

/*
 * The pthread preload's counting mode (docs/pthread.md, "Counting mode")
 * against a daemon older than protocol version 8 (proto::kStopsVersion):
 * the pairs a process counted since its last pthread:mutex_counts record
 * would miss a stopped session's trace, that daemon finishing the drains
 * before it tells the processes.  So when the session's rules enable
 * pthread:mutex_counts, the stop first switches that event off and waits
 * for the processes to apply it: they flush their counts into the session
 * while it records, and count nothing more.  Once stopped, the event is
 * enabled again, so that a restart counts again.  A version 8 daemon tells
 * the processes and waits for them itself, at every stop: nothing to do.
 */
static const char kCounts[] = "pthread:mutex_counts";

bool counts_enabled(const std::vector<proto::Rule> &rules)
{
	// Counting is the preload's default: only a controller whose
	// environment says STRATA_PTHREAD_COUNT=0 (every pair a record, nothing
	// counted) stops as before, with no rule added.
	const char *mode = getenv("STRATA_PTHREAD_COUNT");
	if (mode && !strcmp(mode, "0"))
		return false;
	bool on = false;
	for (const proto::Rule &r : rules) // later rules win
		if (fnmatch(r.pattern.c_str(), kCounts, 0) == 0)
			on = r.enable != 0;
	return on;
}

// Switch counting off in `session`, acknowledged (bounded: a process that does not
// answer leaves its counts out, and `strata analyze mutex` says so), if the
// daemon is older than version 8.  True if it was switched off.
bool flush_counts(const std::string &socket, const std::string &session)
{
	CtlClient cl;
	std::string err;
	if (cl.open(socket, err) < 0 || cl.version() < 2 || cl.version() >= proto::kStopsVersion)
		return false;
	proto::Rule r;
	r.pattern = kCounts;
	r.enable = 0;
	if (cl.command(proto::DisableEvent{session, r}, err) < 0)
		return false;
	cl.timeout_ms = 2000 + 5000;
	(void)cl.command(proto::Wait{2000}, err);
	return true;
}

void counts_back_on(const std::string &session)
{
	CtlClient cl;
	std::string err;
	proto::Rule r;
	r.pattern = kCounts;
	if (cl.open("", err) == 0)
		(void)cl.command(proto::EnableEvent{session, r}, err);
}

int change_command(const char *cmd, const std::vector<proto::Body> &bodies, uint32_t wait_ms)
{
	CtlClient cl;
	std::string err;
	if (cl.open("", err) < 0) {
		fprintf(stderr, "strata %s: %s\n", cmd, err.c_str());
		return kFail;
	}
	return change_command(cmd, cl, bodies, wait_ms);
}

int change_command(const char *cmd, CtlClient &cl, const std::vector<proto::Body> &bodies, uint32_t wait_ms)
{
	std::string err;
	for (const proto::Body &b : bodies) {
		int r = cl.command(b, err);
		if (r < 0) {
			fprintf(stderr, "strata %s: %s\n", cmd, err.c_str());
			return kFail;
		}
		if (!err.empty())
			printf("%s\n", err.c_str());
	}
	if (!wait_ms)
		return kOk;
	if (cl.version() < 2) { // a version 1 daemon held its answers itself
		fprintf(stderr, "strata %s: the daemon speaks protocol 1: --wait is its 1 s hold\n", cmd);
		return kOk;
	}
	cl.timeout_ms = static_cast<int>(wait_ms) + 5000;
	int r = cl.command(proto::Wait{wait_ms}, err);
	if (r < 0) {
		fprintf(stderr, "strata %s: %s\n", cmd, err.c_str());
		return kFail;
	}
	if (!err.empty())
		printf("%s\n", err.c_str());
	return kOk;
}

Option wait_option(uint32_t &wait_ms, const char *help)
{
	uint32_t *dest = &wait_ms;
	Option o = custom("wait", 0, "TIMEOUT", "a timeout", help, [dest](const char *v) {
		if (!v) {
			*dest = 10000;
			return std::string();
		}
		char *end;
		errno = 0;
		double t = strtod(v, &end);
		if (end == v || errno || !(t > 0))
			return std::string("bad --wait timeout '") + v + "'";
		if (!strcmp(end, "ms"))
			t /= 1000;
		else if (*end && strcmp(end, "s"))
			return std::string("bad --wait timeout '") + v + "' (seconds, or <n>ms)";
		if (t * 1000 < 1 || t * 1000 > proto::kMaxWaitMs)
			return std::string("--wait timeout must be 1 ms .. 600 s");
		*dest = static_cast<uint32_t>(t * 1000);
		return std::string();
	});
	o.optional = true;
	return o;
}

bool resolve_session(const char *cmd, std::string &session)
{
	return !session.empty() || !(session = implicit_session(cmd)).empty();
}

std::string implicit_session(const char *cmd)
{
	CtlClient cl;
	proto::Message ans;
	if (query(cmd, cl, proto::Status{""}, proto::Type::StatusReply, ans) != kOk)
		return "";
	const auto &v = std::get<proto::StatusReply>(ans.body).sessions;
	if (v.size() == 1)
		return v[0].name;
	fprintf(stderr, "strata %s: %s: name the session\n", cmd,
		v.empty() ? "there is no session" : "there are several sessions");
	return "";
}

int query(const char *cmd, CtlClient &cl, proto::Body body, proto::Type expected, proto::Message &ans)
{
	std::string err;
	if (cl.open("", err) < 0 || cl.call(std::move(body), ans, err) < 0) {
		fprintf(stderr, "strata %s: %s\n", cmd, err.c_str());
		return kFail;
	}
	if (ans.type() != expected) {
		fprintf(stderr, "strata %s: %s\n", cmd,
			ans.type() == proto::Type::Reply ? std::get<proto::Reply>(ans.body).text.c_str()
							 : "unexpected answer");
		return kFail;
	}
	return kOk;
}

std::string self_dir()
{
	char buf[4096];
	ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
	if (n <= 0)
		return ".";
	buf[n] = 0;
	std::string s(buf);
	return s.substr(0, s.rfind('/'));
}

std::string find_library(const std::string &file)
{
	const std::string d = self_dir();
	const std::string lib = STRATA_LIBDIR;
	for (const std::string &p :
	     {d + "/" + file, d + "/../lib/" + file, d + "/../lib/strata/" + file, d + "/../preload/" + file,
	      d + "/../jvm/" + file, lib + "/" + file, lib + "/strata/" + file})
		if (access(p.c_str(), R_OK) == 0)
			return p;
	return "";
}

std::string find_consumerd()
{
	const char *env = getenv("STRATA_CONSUMERD");
	if (env && *env)
		return env;
	std::string d = self_dir();
	for (const std::string &p : {d + "/strata-consumerd", d + "/../consumerd/strata-consumerd"})
		if (access(p.c_str(), X_OK) == 0)
			return p;
	const char *path = getenv("PATH");
	std::string ps = path ? path : "/usr/local/bin:/usr/bin:/bin";
	size_t b = 0;
	while (b <= ps.size()) {
		size_t e = ps.find(':', b);
		if (e == std::string::npos)
			e = ps.size();
		std::string p = ps.substr(b, e - b) + "/strata-consumerd";
		if (e > b && access(p.c_str(), X_OK) == 0)
			return p;
		b = e + 1;
	}
	return "";
}

int run_consumerd_repair(const std::string &dir, bool check_only, bool mark_lost)
{
	const std::string exe = find_consumerd();
	if (exe.empty())
		return -1;
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		if (check_only) { // only the list of torn files (stderr) is wanted
			int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
			if (null >= 0)
				dup2(null, 1);
		}
		execl(exe.c_str(), exe.c_str(), check_only ? "--check" : "--repair", dir.c_str(),
		      mark_lost ? "--mark-lost" : (char *)nullptr, (char *)nullptr);
		_exit(127);
	}
	int st = 0;
	while (pid > 0 && waitpid(pid, &st, 0) < 0 && errno == EINTR) {
	}
	return pid > 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

void hint_torn(const char *cmd, const std::string &dir)
{
	// A path that is no directory was already reported ("no such
	// trace"): the check would only repeat it in its own words.
	struct stat st;
	if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
		return;
	if (run_consumerd_repair(dir, true) == 3)
		fprintf(stderr,
			"strata %s: stream files above end inside a packet (a consumer daemon killed while "
			"writing?); "
			"'strata view --repair %s' cuts them back to their last whole packet and shows the "
			"rest\n",
			cmd, dir.c_str());
}

std::string bad_pattern(const std::string &p)
{
	if (p.empty() || p.size() > proto::kMaxPattern)
		return "a pattern is 1 to 127 bytes";
	for (char ch : p)
		if (ch <= ' ' || ch >= 0x7f)
			return "a pattern is printable ASCII with no space (provider:event, '*' for any)";
	return "";
}

std::string escaped(const std::string &s)
{
	std::string o;
	for (unsigned char ch : s) {
		if (ch >= 0x20 && ch != 0x7f) {
			o += static_cast<char>(ch);
		} else {
			char b[8];
			snprintf(b, sizeof b, "\\x%02x", ch);
			o += b;
		}
	}
	return o;
}

bool warn_kernel_without_module(const char *cmd, const std::vector<std::string> &patterns)
{
	for (const std::string &p : patterns) {
		if (p.compare(0, 7, "kernel:") != 0 || access("/dev/strata", F_OK) == 0)
			continue;
		fprintf(stderr,
			"strata %s: warning: %s names kernel events, and the kernel module is not loaded "
			"(no /dev/strata): nothing of it is recorded until `modprobe strata` loads strata.ko "
			"(docs/kernel-module.md)\n",
			cmd, p.c_str());
		return true;
	}
	return false;
}

} // namespace cli
} // namespace strata
