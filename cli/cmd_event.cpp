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

// --pid PID or --name COMM: only in those processes.
std::vector<cli::Option> target_options(EventArgs &e)
{
	EventArgs *ep = &e;
	const auto limit = [ep]() {
		return ep->pids.size() > proto::kMaxTargetPids || ep->names.size() > proto::kMaxTargetNames
			       ? "at most " + std::to_string(proto::kMaxTargetPids) + " --pid and " +
					 std::to_string(proto::kMaxTargetNames) + " --name"
			       : std::string();
	};
	return {
		cli::custom("pid", 0, "PID", "a process id", "only in process PID (repeatable)",
			    [ep, limit](const char *v) {
				    uint32_t pid = 0;
				    if (!cli::parse_u32(v, pid) || !pid)
					    return std::string("--pid needs a process id");
				    ep->pids.push_back(pid);
				    return limit();
			    }),
		cli::custom("name", 0, "COMM", "a process name",
			    "only in processes named COMM (repeatable); with neither, every process of "
			    "your user",
			    [ep, limit](const char *v) {
				    if (!*v || strlen(v) > proto::kMaxName)
					    return std::string("--name needs a process name");
				    ep->names.push_back(v);
				    return limit();
			    }),
	};
}

// --kprobe SYMBOL or --kretprobe SYMBOL: a dynamic probe on a kernel
// function's calls or returns, the module's rule pattern kernel:kprobe_SYMBOL
// or kernel:kretprobe_SYMBOL (docs/kernel-module.md).
cli::Option kprobe_option(EventArgs &e, bool ret)
{
	EventArgs *ep = &e;
	const std::string prefix = ret ? "kernel:kretprobe_" : "kernel:kprobe_";
	const std::string opt = ret ? "--kretprobe" : "--kprobe";
	return cli::custom(
		ret ? "kretprobe" : "kprobe", 0, "SYMBOL", "a kernel symbol",
		ret ? "a probe on the returns of kernel function SYMBOL (event "
		      "kernel:kretprobe_SYMBOL: ip, parent_ip, ret)"
		    : "a dynamic probe on kernel function SYMBOL (event kernel:kprobe_SYMBOL; "
		      "needs strata.ko and root)",
		[ep, prefix, opt](const char *v) {
			const size_t n = strlen(v);
			if (!n || n > 127 - prefix.size() ||
			    strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.") !=
				    n)
				return opt + " needs a kernel symbol ([A-Za-z0-9_.])";
			ep->patterns.push_back(prefix + v);
			return std::string();
		});
}

// --filter EXPR, checked with the runtime's own parser before it is sent.
std::string take_filter(EventArgs &e, const char *expr)
{
	e.filter = expr;
	if (e.filter.empty())
		return "--filter needs an expression, not \"\"";
	if (e.filter.size() > proto::kMaxFilter)
		return "filter longer than 255 bytes";
	strata::FilterProgram prog;
	strata::FilterError fe;
	if (!strata::filter_compile(e.filter.c_str(), &prog, &fe)) {
		char caret[300];
		snprintf(caret, sizeof caret, "bad --filter at column %u: %s\n  %s\n  %*s^", fe.column,
			 fe.msg, e.filter.c_str(), (int)fe.column - 1, "");
		return caret;
	}
	return "";
}

std::vector<cli::Option> event_options(EventArgs &e)
{
	EventArgs *ep = &e;
	std::vector<cli::Option> opts = {kprobe_option(e, false), kprobe_option(e, true)};
	opts.push_back(cli::custom(
		"loglevel", 0, "LEVEL", "a level",
		"only events at LEVEL or more severe: emerg, alert, crit, err, warning, "
		"notice, info, debug, or 0..15",
		[ep](const char *v) {
			return cli::parse_loglevel(v, ep->loglevel)
				       ? std::string()
				       : std::string("--loglevel needs a level (emerg..debug or 0..15)");
		}));
	cli::append(opts, target_options(e));
	opts.push_back(cli::wait_option(e.wait_ms, "return once every running process concerned applied "
						   "the change (TIMEOUT seconds or <n>ms, default 10); on "
						   "timeout exit 1 naming the processes that did not"));
	if (e.enable)
		opts.push_back(
			cli::custom("filter", 0, "EXPR", "an expression",
				    "record only events whose fields satisfy EXPR, e.g. 'size > 4096 && "
				    "path == \"/tmp/*\"' (docs/filters.md); an event lacking a named field "
				    "does not match",
				    [ep](const char *v) { return take_filter(*ep, v); }));
	return opts;
}

// The command line into e: kParsed to go on, else the exit status.
int parse_args(EventArgs &e, int argc, char **argv)
{
	const std::string usage = std::string("[SESSION] PATTERN... [--loglevel LEVEL] [--pid PID]... ") +
				  "[--name COMM]... [--wait[=TIMEOUT]]" +
				  (e.enable ? " [--filter EXPR]" : "");
	const std::string about =
		std::string(e.enable ? "Enable" : "Disable") +
		" the tracepoints matching PATTERN (\"provider:event\", '*' matches\nany run of "
		"characters; \"*\" matches every event) in SESSION (default:\nthe only session). Running "
		"tp-async processes follow at once; tp-sync\nprocesses see the rules of started sessions "
		"when they start.";
	const cli::Command c = {e.cmd, usage.c_str(), about.c_str()};
	std::vector<char *> operands;
	if (const int r = cli::parse(c, event_options(e), argc, argv, operands); r != cli::kParsed)
		return r;
	for (const char *a : operands) {
		if (e.session.empty() && proto::valid_session_name(a)) {
			e.session = a;
			continue;
		}
		const std::string why = cli::bad_pattern(a);
		if (!why.empty())
			return cli::usage_error(c, why);
		e.patterns.push_back(a);
	}
	return cli::kParsed;
}

int event_command(int argc, char **argv, bool enable)
{
	EventArgs e;
	e.cmd = enable ? "enable-event" : "disable-event";
	e.enable = enable;
	if (const int r = parse_args(e, argc, argv); r != cli::kParsed)
		return r;
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
