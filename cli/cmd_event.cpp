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
	for (int i = 1; i < argc; i++) {
		if (cli::is_help(argv[i])) {
			printf("Usage: strata %s SESSION PATTERN... [--loglevel LEVEL]%s\n\n"
			       "%s the tracepoints matching PATTERN (\"provider:event\", '*' matches\n"
			       "any run of characters; \"*\" matches every event) in SESSION.\n"
			       "Rules apply to processes that start after the session is started.\n\n"
			       "  --loglevel LEVEL   only events at LEVEL or more severe: emerg, alert,\n"
			       "                     crit, err, warning, notice, info, debug, or 0..15\n"
			       "%s"
			       "\nExit status: 0 ok, 1 runtime failure, 2 usage error.\n",
			       cmd, enable ? " [--filter EXPR]" : "", enable ? "Enable" : "Disable",
			       enable ? "  --filter EXPR      record only events whose fields satisfy EXPR, e.g.\n"
					"                     'size > 4096 && path == \"/tmp/*\"' (docs/filters.md);\n"
					"                     an event lacking a named field does not match\n" : "");
			return cli::kOk;
		}
		if (!strcmp(argv[i], "--loglevel")) {
			if (++i >= argc || !cli::parse_loglevel(argv[i], loglevel))
				return cli::usage_error(cmd, "--loglevel needs a level (emerg..debug or 0..15)");
		} else if (enable && !strcmp(argv[i], "--filter")) {
			if (++i >= argc)
				return cli::usage_error(cmd, "--filter needs an expression");
			filter = argv[i];
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
		} else if (session.empty()) {
			session = argv[i];
		} else {
			if (!*argv[i] || strlen(argv[i]) > proto::kMaxPattern)
				return cli::usage_error(cmd, "a pattern is 1 to 127 bytes");
			patterns.push_back(argv[i]);
		}
	}
	if (session.empty())
		return cli::usage_error(cmd, "missing session name");
	if (patterns.empty())
		return cli::usage_error(cmd, "missing event pattern (\"*\" for every event)");
	for (const std::string &p : patterns) {
		proto::Rule r;
		r.pattern = p;
		r.loglevel_max = loglevel;
		r.filter = filter;
		r.enable = enable;
		int st;
		if (enable)
			st = cli::simple_command(cmd, proto::EnableEvent{session, r});
		else
			st = cli::simple_command(cmd, proto::DisableEvent{session, r});
		if (st != cli::kOk)
			return st;
	}
	return cli::kOk;
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
