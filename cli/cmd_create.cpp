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

namespace {

const cli::Command kCreate = {"create", "SESSION [-o DIR] [OPTIONS]",
			      "Create a tracing session.  Enable events, then start it."};

// Step 1: the command line into m.  kParsed to go on, else the exit status.
int parse_args(int argc, char **argv, proto::Create &m)
{
	std::vector<cli::Option> opts = {
		cli::path("output", 'o', "DIR", "a directory",
			  "trace directory (default:\n./strata-SESSION-YYYYMMDD-HHMMSS)", m.output_dir),
		cli::text("aggregate", 0, "SPEC", "a spec",
			  "aggregate instead of recording: in every process the session reaches, count "
			  "SPEC's events, and sum, min, max and log2 histogram of a field, per key: "
			  "'PROVIDER:EVENT[:FIELD] [by KEY] [limit N]' (KEY a field, $tid or $event; N keys, "
			  "default 256); see it with strata top -s SESSION",
			  m.aggregate),
		cli::text("filter", 0, "EXPR", "an expression",
			  "with --aggregate: only the events whose fields satisfy EXPR (docs/filters.md)",
			  m.agg_filter),
	};
	cli::append(opts, cli::channel_options(m.channel));
	cli::append(opts, cli::relay_options(m));
	std::vector<char *> operands;
	if (const int r = cli::parse(kCreate, opts, argc, argv, operands); r != cli::kParsed)
		return r;
	if (operands.size() > 1)
		return cli::usage_error(kCreate, "one session name only");
	if (operands.empty())
		return cli::usage_error(kCreate, "missing session name");
	m.session = operands[0];
	return cli::kParsed;
}

// Step 2: what the daemon would refuse, refused here.  kParsed or kUsage.
int check_args(proto::Create &m)
{
	if (!proto::valid_session_name(m.session))
		return cli::usage_error(kCreate, "a session name is 1 to 63 of [A-Za-z0-9._-]");
	if (m.output_dir.empty())
		m.output_dir = cli::absolute_path("strata-" + m.session + "-" + local_timestamp());
	if (m.output_dir.size() > proto::kMaxPath)
		return cli::usage_error(kCreate, "output path too long");
	if (!m.agg_filter.empty() && m.aggregate.empty())
		return cli::usage_error(
			kCreate, "--filter goes with --aggregate (enable-event --filter for recording)");
	if (m.aggregate.empty())
		return cli::kParsed;
	struct strata_agg_spec spec;
	char why[128];
	if (m.aggregate.size() > proto::kMaxAggregate ||
	    agg_spec_parse(m.aggregate.c_str(), &spec, why, sizeof why) != 0)
		return cli::usage_error(
			kCreate, "bad --aggregate '" + m.aggregate + "': " +
					 (m.aggregate.size() > proto::kMaxAggregate ? "too long" : why));
	strata::FilterProgram prog;
	strata::FilterError fe{};
	if (m.agg_filter.size() > proto::kMaxFilter || !filter_compile(m.agg_filter.c_str(), &prog, &fe))
		return cli::usage_error(kCreate, "bad --filter '" + m.agg_filter +
							 "': " + (fe.msg ? fe.msg : "too long"));
	return cli::kParsed;
}

} // namespace

int strata_cmd_create(int argc, char **argv)
{
	const char *cmd = "create";
	proto::Create m;
	if (const int r = parse_args(argc, argv, m); r != cli::kParsed)
		return r;
	if (const int r = check_args(m); r != cli::kParsed)
		return r;
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
