/*
 * cmd_create.cpp - `strata create SESSION [-o DIR] [channel options]
 * [--aggregate SPEC [--filter EXPR]]`.
 */
#include <cstdio>
#include <cstring>

#include "agg_spec.h"
#include "filter.h"

#include "commands.h"
#include "control/ctl_client.h"
#include "control/names.h"

using namespace strata;

int strata_cmd_create(int argc, char **argv)
{
	const char *cmd = "create";
	proto::Create m;
	for (int i = 1; i < argc; i++) {
		if (cli::is_help(argv[i])) {
			printf("Usage: strata create SESSION [-o DIR] [OPTIONS]\n\n"
			       "Create a tracing session.  Enable events, then start it.\n\n"
			       "  -o, --output DIR          trace directory (default:\n"
			       "                            ./strata-SESSION-YYYYMMDD-HHMMSS)\n"
			       "  --aggregate SPEC          aggregate instead of recording: in every process "
			       "the\n"
			       "                            session reaches, count SPEC's events, and sum, "
			       "min,\n"
			       "                            max and log2 histogram of a field, per key:\n"
			       "                            'PROVIDER:EVENT[:FIELD] [by KEY] [limit N]' (KEY "
			       "a\n"
			       "                            field, $tid or $event; N keys, default 256); see "
			       "it\n"
			       "                            with strata top -s SESSION\n"
			       "  --filter EXPR             with --aggregate: only the events whose fields\n"
			       "                            satisfy EXPR (docs/filters.md)\n"
			       "%s%s\nExit status: 0 ok, 1 runtime failure, 2 usage error.\n",
			       cli::kChannelHelp, cli::kRelayHelp);
			return cli::kOk;
		}
		int r = cli::parse_channel_option(cmd, argc, argv, i, m.channel);
		if (r < 0)
			return cli::kUsage;
		if (r > 0)
			continue;
		r = cli::parse_relay_option(cmd, argc, argv, i, m);
		if (r < 0)
			return cli::kUsage;
		if (r > 0)
			continue;
		if (!strcmp(argv[i], "--aggregate") || !strcmp(argv[i], "--filter")) {
			const bool agg = argv[i][2] == 'a';
			if (++i >= argc || !*argv[i])
				return cli::usage_error(cmd, agg ? "--aggregate needs a spec"
								 : "--filter needs an expression");
			(agg ? m.aggregate : m.agg_filter) = argv[i];
		} else if (!strcmp(argv[i], "-o") || !strcmp(argv[i], "--output")) {
			if (++i >= argc || !*argv[i])
				return cli::usage_error(cmd, "-o needs a directory");
			m.output_dir = cli::absolute_path(argv[i]);
		} else if (argv[i][0] == '-') {
			return cli::usage_error(cmd, std::string("unknown option '") + argv[i] + "'");
		} else if (m.session.empty()) {
			m.session = argv[i];
		} else {
			return cli::usage_error(cmd, "one session name only");
		}
	}
	if (m.session.empty())
		return cli::usage_error(cmd, "missing session name");
	if (!proto::valid_session_name(m.session))
		return cli::usage_error(cmd, "a session name is 1 to 63 of [A-Za-z0-9._-]");
	if (m.output_dir.empty())
		m.output_dir = cli::absolute_path("strata-" + m.session + "-" + local_timestamp());
	if (m.output_dir.size() > proto::kMaxPath)
		return cli::usage_error(cmd, "output path too long");
	if (!m.agg_filter.empty() && m.aggregate.empty())
		return cli::usage_error(
			cmd, "--filter goes with --aggregate (enable-event --filter for recording)");
	if (!m.aggregate.empty()) {
		struct strata_agg_spec spec;
		char why[128];
		if (m.aggregate.size() > proto::kMaxAggregate ||
		    agg_spec_parse(m.aggregate.c_str(), &spec, why, sizeof why) != 0)
			return cli::usage_error(
				cmd, "bad --aggregate '" + m.aggregate + "': " +
					     (m.aggregate.size() > proto::kMaxAggregate ? "too long" : why));
		strata::FilterProgram prog;
		strata::FilterError fe{};
		if (m.agg_filter.size() > proto::kMaxFilter ||
		    !filter_compile(m.agg_filter.c_str(), &prog, &fe))
			return cli::usage_error(cmd, "bad --filter '" + m.agg_filter +
							     "': " + (fe.msg ? fe.msg : "too long"));
	}
	CtlClient cl;
	std::string err;
	if (cl.open("", err) < 0) {
		fprintf(stderr, "strata %s: %s\n", cmd, err.c_str());
		return cli::kFail;
	}
	std::string why = cli::relay_unsupported(m, cl.version());
	if (why.empty() && !m.aggregate.empty() && cl.version() < proto::kAggVersion)
		why = "the running strata-consumerd speaks protocol " + std::to_string(cl.version()) +
		      ", aggregation sessions need " + std::to_string(proto::kAggVersion) +
		      ": restart it from this version";
	if (!why.empty()) {
		fprintf(stderr, "strata %s: %s\n", cmd, why.c_str());
		return cli::kFail;
	}
	if (cl.command(m, err) < 0) {
		fprintf(stderr, "strata %s: %s\n", cmd, err.c_str());
		return cli::kFail;
	}
	if (!m.aggregate.empty())
		printf("Session %s created; it aggregates %s%s%s (strata top -s %s)\n", m.session.c_str(),
		       m.aggregate.c_str(), m.agg_filter.empty() ? "" : " where ", m.agg_filter.c_str(),
		       m.session.c_str());
	else if (m.relay.empty())
		printf("Session %s created; trace directory %s\n", m.session.c_str(), m.output_dir.c_str());
	else
		printf("Session %s created; streaming to %s\n", m.session.c_str(), err.c_str());
	return cli::kOk;
}
