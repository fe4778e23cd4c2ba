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

int event_command(int argc, char **argv, bool enable)
{
	const char *cmd = enable ? "enable-event" : "disable-event";
	std::string session;
	std::vector<std::string> patterns;
	int32_t loglevel = -1;
	std::string filter;
	std::vector<uint32_t> pids;
	std::vector<std::string> names;
	uint32_t wait_ms = 0;
	for (int i = 1; i < argc; i++) {
		int w = cli::parse_wait_option(cmd, argv[i], wait_ms);
		if (w < 0)
			return cli::kUsage;
		if (w > 0)
			continue;
		if (!strcmp(argv[i], "--pid") || !strcmp(argv[i], "--name")) {
			const bool pid = argv[i][2] == 'p';
			uint32_t v = 0;
			if (++i >= argc || (pid && (!cli::parse_u32(argv[i], v) || !v)) ||
			    (!pid && (!*argv[i] || strlen(argv[i]) > proto::kMaxName)))
				return cli::usage_error(cmd, pid ? "--pid needs a process id" : "--name needs a process name");
			if (pid)
				pids.push_back(v);
			else
				names.push_back(argv[i]);
			if (pids.size() > proto::kMaxTargetPids || names.size() > proto::kMaxTargetNames)
				return cli::usage_error(cmd, "at most 64 --pid and 16 --name");
			continue;
		}
		if (cli::is_help(argv[i])) {
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
					"                     an event lacking a named field does not match\n" : "");
			return cli::kOk;
		}
		if (!strcmp(argv[i], "--kprobe") || !strcmp(argv[i], "--kretprobe")) {
			// A dynamic kernel probe on a function's calls or returns:
			// the module's rule pattern kernel:kprobe_SYMBOL or
			// kernel:kretprobe_SYMBOL (docs/kernel-module.md).
			const std::string prefix = strcmp(argv[i], "--kretprobe") ? "kernel:kprobe_" : "kernel:kretprobe_";
			const char* opt = argv[i];
			if (++i >= argc || !*argv[i] || strlen(argv[i]) > 127 - prefix.size() ||
			    strspn(argv[i], "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.") !=
				    strlen(argv[i]))
				return cli::usage_error(cmd, std::string(opt) + " needs a kernel symbol ([A-Za-z0-9_.])");
			patterns.push_back(prefix + argv[i]);
			continue;
		}
		if (!strcmp(argv[i], "--loglevel")) {
			if (++i >= argc || !cli::parse_loglevel(argv[i], loglevel))
				return cli::usage_error(cmd, "--loglevel needs a level (emerg..debug or 0..15)");
		} else if (enable && !strcmp(argv[i], "--filter")) {
			if (++i >= argc)
				return cli::usage_error(cmd, "--filter needs an expression");
			filter = argv[i];
			if (filter.empty())
				return cli::usage_error(cmd, "--filter needs an expression, not \"\"");
			if (filter.size() > proto::kMaxFilter)
				return cli::usage_error(cmd, "filter longer than 255 bytes");
			strata::FilterProgram prog;
			strata::FilterError fe;
			if (!strata::filter_compile(filter.c_str(), &prog, &fe)) {
				fprintf(stderr, "strata %s: bad --filter at column %u: %s\n  %s\n  %*s^\n",
					cmd, fe.column, fe.msg, filter.c_str(), (int)fe.column - 1, "");
				return cli::kUsage;
			}
		} else if (argv[i][0] == '-' && argv[i][1]) {
			return cli::usage_error(cmd, std::string("unknown option '") + argv[i] + "'");
		} else if (session.empty() && proto::valid_session_name(argv[i])) {
			session = argv[i];
		} else {
			const std::string why = cli::bad_pattern(argv[i]);
			if (!why.empty())
				return cli::usage_error(cmd, why);
			patterns.push_back(argv[i]);
		}
	}
	if (patterns.empty() && !session.empty()) { // "strata enable-event ev": ev is the pattern
		patterns.push_back(session);
		session.clear();
	}
	if (patterns.empty())
		return cli::usage_error(cmd, "missing event pattern (\"*\" for every event)");
	if (!cli::resolve_session(cmd, session))
		return cli::kFail;
	if (enable)
		cli::warn_kernel_without_module(cmd, patterns);
	std::vector<proto::Body> bodies;
	for (const std::string &p : patterns) {
		proto::Rule r;
		r.pattern = p;
		r.loglevel_max = loglevel;
		r.filter = filter;
		r.enable = enable;
		if (!pids.empty() || !names.empty())
			bodies.push_back(proto::TargetRule{session, r, pids, names});
		else if (enable)
			bodies.push_back(proto::EnableEvent{session, r});
		else
			bodies.push_back(proto::DisableEvent{session, r});
	}
	return cli::change_command(cmd, bodies, wait_ms);
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
