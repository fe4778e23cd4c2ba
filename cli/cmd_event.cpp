/*
 * cmd_event.cpp - `strata enable-event` and `strata disable-event`: append
 * rules (provider:event glob patterns, optional log level) to a session.
 * Later rules win over earlier ones.
 */
#include <cstdio>
#include <cstring>
#include <vector>

#include "commands.h"
#include "filter.h"

using namespace strata;

namespace {

// What enable-event or disable-event was asked.
struct EventArgs {
	const char *cmd;
	bool enable;
	std::string session;
	std::vector<std::string> patterns;
	int32_t loglevel = -1;
	std::string filter;
	std::vector<uint32_t> pids;
	std::vector<std::string> names;
	uint32_t wait_ms = 0;
};

void help(const char *cmd, bool enable)
{
	printf("Usage: strata %s [SESSION] PATTERN... [--loglevel LEVEL] [--pid PID]...\n"
	       "       [--name COMM]... [--wait[=TIMEOUT]]%s\n\n"
	       "%s the tracepoints matching PATTERN (\"provider:event\", '*' matches\n"
	       "any run of characters; \"*\" matches every event) in SESSION (default:\n"
	       "the only session). Running tp-async processes follow at once; tp-sync\n"
	       "processes see the rules of started sessions when they start.\n\n"
	       "  --kprobe SYMBOL    a dynamic probe on kernel function SYMBOL (event\n"
	       "                     kernel:kprobe_SYMBOL; needs strata.ko and root)\n"
	       "  --kretprobe SYMBOL a probe on the returns of kernel function SYMBOL\n"
	       "                     (event kernel:kretprobe_SYMBOL: ip, parent_ip, ret)\n"
	       "  --loglevel LEVEL   only events at LEVEL or more severe: emerg, alert,\n"
	       "                     crit, err, warning, notice, info, debug, or 0..15\n"
	       "  --pid PID          only in process PID (repeatable)\n"
	       "  --name COMM        only in processes named COMM (repeatable); with\n"
	       "                     neither, every process of your user\n"
	       "  --wait[=TIMEOUT]   return once every running process concerned applied\n"
	       "                     the change (TIMEOUT seconds or <n>ms, default 10);\n"
	       "                     on timeout exit 1 naming the processes that did not\n"
	       "%s"
	       "\nExit status: 0 ok, 1 runtime failure, 2 usage error.\n",
	       cmd, enable ? " [--filter EXPR]" : "", enable ? "Enable" : "Disable",
	       enable ? "  --filter EXPR      record only events whose fields satisfy EXPR, e.g.\n"
			"                     'size > 4096 && path == \"/tmp/*\"' (docs/filters.md);\n"
			"                     an event lacking a named field does not match\n"
		      : "");
}

// --pid PID or --name COMM at argv[i] (i moves to its value).  -1 taken,
// else the exit status.
int parse_target(EventArgs &e, int argc, char **argv, int &i)
{
	const bool pid = argv[i][2] == 'p';
	uint32_t v = 0;
	if (++i >= argc || (pid && (!cli::parse_u32(argv[i], v) || !v)) ||
	    (!pid && (!*argv[i] || strlen(argv[i]) > proto::kMaxName)))
		return cli::usage_error(e.cmd,
					pid ? "--pid needs a process id" : "--name needs a process name");
	if (pid)
		e.pids.push_back(v);
	else
		e.names.push_back(argv[i]);
	if (e.pids.size() > proto::kMaxTargetPids || e.names.size() > proto::kMaxTargetNames)
		return cli::usage_error(e.cmd, "at most 64 --pid and 16 --name");
	return -1;
}

// --kprobe SYMBOL or --kretprobe SYMBOL: a dynamic probe on a kernel
// function's calls or returns, the module's rule pattern kernel:kprobe_SYMBOL
// or kernel:kretprobe_SYMBOL (docs/kernel-module.md).  -1 taken, else the
// exit status.
int parse_kprobe(EventArgs &e, int argc, char **argv, int &i)
{
	const std::string prefix = strcmp(argv[i], "--kretprobe") ? "kernel:kprobe_" : "kernel:kretprobe_";
	const char *opt = argv[i];
	if (++i >= argc || !*argv[i] || strlen(argv[i]) > 127 - prefix.size() ||
	    strspn(argv[i], "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.") !=
		    strlen(argv[i]))
		return cli::usage_error(e.cmd, std::string(opt) + " needs a kernel symbol ([A-Za-z0-9_.])");
	e.patterns.push_back(prefix + argv[i]);
	return -1;
}

// --filter EXPR, checked with the runtime's own parser before it is sent.
// -1 taken, else the exit status.
int parse_filter(EventArgs &e, const char *expr)
{
	e.filter = expr;
	if (e.filter.empty())
		return cli::usage_error(e.cmd, "--filter needs an expression, not \"\"");
	if (e.filter.size() > proto::kMaxFilter)
		return cli::usage_error(e.cmd, "filter longer than 255 bytes");
	strata::FilterProgram prog;
	strata::FilterError fe;
	if (!strata::filter_compile(e.filter.c_str(), &prog, &fe)) {
		fprintf(stderr, "strata %s: bad --filter at column %u: %s\n  %s\n  %*s^\n", e.cmd, fe.column,
			fe.msg, e.filter.c_str(), (int)fe.column - 1, "");
		return cli::kUsage;
	}
	return -1;
}

// The argument at argv[i] (i moves past an option's value).  -1 taken,
// else the exit status.
int parse_arg(EventArgs &e, int argc, char **argv, int &i)
{
	const char *a = argv[i];
	int w = cli::parse_wait_option(e.cmd, a, e.wait_ms);
	if (w != 0)
		return w < 0 ? cli::kUsage : -1;
	if (!strcmp(a, "--pid") || !strcmp(a, "--name"))
		return parse_target(e, argc, argv, i);
	if (cli::is_help(a)) {
		help(e.cmd, e.enable);
		return cli::kOk;
	}
	if (!strcmp(a, "--kprobe") || !strcmp(a, "--kretprobe"))
		return parse_kprobe(e, argc, argv, i);
	if (!strcmp(a, "--loglevel")) {
		if (++i >= argc || !cli::parse_loglevel(argv[i], e.loglevel))
			return cli::usage_error(e.cmd, "--loglevel needs a level (emerg..debug or 0..15)");
		return -1;
	}
	if (e.enable && !strcmp(a, "--filter"))
		return ++i >= argc ? cli::usage_error(e.cmd, "--filter needs an expression")
				   : parse_filter(e, argv[i]);
	if (a[0] == '-' && a[1])
		return cli::usage_error(e.cmd, std::string("unknown option '") + a + "'");
	if (e.session.empty() && proto::valid_session_name(a)) {
		e.session = a;
		return -1;
	}
	const std::string why = cli::bad_pattern(a);
	if (!why.empty())
		return cli::usage_error(e.cmd, why);
	e.patterns.push_back(a);
	return -1;
}

int event_command(int argc, char **argv, bool enable)
{
	EventArgs e;
	e.cmd = enable ? "enable-event" : "disable-event";
	e.enable = enable;
	for (int i = 1; i < argc; i++) {
		const int r = parse_arg(e, argc, argv, i);
		if (r >= 0)
			return r;
	}
	if (e.patterns.empty() && !e.session.empty()) { // "strata enable-event ev": ev is the pattern
		e.patterns.push_back(e.session);
		e.session.clear();
	}
	if (e.patterns.empty())
		return cli::usage_error(e.cmd, "missing event pattern (\"*\" for every event)");
	if (!cli::resolve_session(e.cmd, e.session))
		return cli::kFail;
	if (enable)
		cli::warn_kernel_without_module(e.cmd, e.patterns);
	std::vector<proto::Body> bodies;
	for (const std::string &p : e.patterns) {
		proto::Rule r;
		r.pattern = p;
		r.loglevel_max = e.loglevel;
		r.filter = e.filter;
		r.enable = enable;
		if (!e.pids.empty() || !e.names.empty())
			bodies.push_back(proto::TargetRule{e.session, r, e.pids, e.names});
		else if (enable)
			bodies.push_back(proto::EnableEvent{e.session, r});
		else
			bodies.push_back(proto::DisableEvent{e.session, r});
	}
	return cli::change_command(e.cmd, bodies, e.wait_ms);
}

} // namespace

int strata_cmd_enable_event(int argc, char **argv)
{
	return event_command(argc, argv, true);
}

int strata_cmd_disable_event(int argc, char **argv)
{
	return event_command(argc, argv, false);
}
