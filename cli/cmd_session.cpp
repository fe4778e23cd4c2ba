/*
 * cmd_session.cpp - `strata start|stop|destroy SESSION`.
 */
#include <cstdio>
#include <type_traits>

#include "commands.h"
#include "control/ctl_client.h"

using namespace strata;

namespace {

// The session named by the operands ("" none: the implicit one) and, for
// start and stop, --wait.  kParsed to go on, else the exit status.
int parse_session_args(const cli::Command &c, bool waits, int argc, char **argv, std::string &session,
		       uint32_t &wait_ms)
{
	std::vector<cli::Option> opts;
	if (waits)
		opts.push_back(cli::wait_option(wait_ms,
						"return once every running tp-async process "
						"concerned applied it (TIMEOUT seconds or <n>ms, "
						"default 10); on timeout exit 1 naming those that did "
						"not"));
	std::vector<char *> operands;
	if (const int r = cli::parse(c, opts, argc, argv, operands); r != cli::kParsed)
		return r;
	if (operands.size() > 1)
		return cli::usage_error(c, "one session name only");
	if (!operands.empty())
		session = operands[0];
	return cli::kParsed;
}

// A session started with no enabled event (and no aggregation) records
// nothing: say so, with the command that adds one.  Quiet when the status
// cannot be read (the start itself said what went wrong).
void warn_without_rules(const std::string &session)
{
	CtlClient cl;
	std::string err;
	proto::Message ans;
	if (cl.open("", err) != 0 || cl.call(proto::Status{session}, ans, err) != 0 ||
	    ans.type() != proto::Type::StatusReply)
		return;
	for (const proto::SessionStatus &s : std::get<proto::StatusReply>(ans.body).sessions) {
		if (s.name != session || !s.aggregate.empty())
			continue;
		bool enabled = false;
		for (const proto::Rule &r : s.rules)
			enabled = enabled || r.enable;
		if (!enabled)
			fprintf(stderr,
				"strata start: session '%s' has no enabled event: it records nothing until "
				"one is enabled:\n"
				"  strata enable-event %s 'PROVIDER:EVENT'   (globs: 'PROVIDER:*'; "
				"strata list shows the tracepoints)\n",
				session.c_str(), session.c_str());
	}
}

template <class Msg> int session_command(int argc, char **argv, const char *what)
{
	const char *cmd = argv[0];
	std::string session;
	uint32_t wait_ms = 0;
	const bool waits = std::is_same<Msg, proto::Start>::value || std::is_same<Msg, proto::Stop>::value;
	const cli::Command c = {cmd, waits ? "[SESSION] [--wait[=TIMEOUT]]" : "[SESSION]", what};
	if (const int r = parse_session_args(c, waits, argc, argv, session, wait_ms); r != cli::kParsed)
		return r;
	if (!cli::resolve_session(cmd, session))
		return cli::kFail;
	Msg m;
	m.session = session;
	// What a STOP or DESTROY ends: the session's trace, whose loss is told
	// once it is complete (on disk; a streamed one is the relay's).
	// One connection for both (a stop among busy writers pays for each
	// connection in CPU it waits for: docs/consumerd.md).
	std::string out;
	bool counts = false, open = false;
	CtlClient cl;
	if (!std::is_same<Msg, proto::Start>::value) {
		std::string err;
		proto::Message ans;
		// Kept only if STATUS went through (an error answer leaves it usable).
		open = cl.open("", err) == 0 && cl.call(proto::Status{session}, ans, err) == 0;
		if (open && ans.type() == proto::Type::StatusReply) {
			for (const proto::SessionStatus &s :
			     std::get<proto::StatusReply>(ans.body).sessions) {
				if (s.name != session ||
				    s.state != static_cast<uint32_t>(proto::SessionState::Active))
					continue;
				if (s.relay.empty())
					out = s.output_dir;
				counts = cli::counts_enabled(s.rules);
			}
		}
	}
	counts = counts && cli::flush_counts("", session); // an older daemon's stop
	const int r =
		open ? cli::change_command(cmd, cl, {m}, wait_ms) : cli::change_command(cmd, {m}, wait_ms);
	if (counts && std::is_same<Msg, proto::Stop>::value)
		cli::counts_back_on(session);
	if (r == cli::kOk && !out.empty())
		printf("%s\n", cli::loss_summary(cli::trace_loss(out)).c_str());
	if (r == cli::kOk && std::is_same<Msg, proto::Start>::value)
		warn_without_rules(session);
	return r;
}

} // namespace

int strata_cmd_start(int argc, char **argv)
{
	return session_command<proto::Start>(
		argc, argv,
		"Start recording: processes that start from now on join the session (they\n"
		"link tp-sync or tp-async), and running processes that link tp-async join\n"
		"it (at once; --wait returns when they all have).");
}

int strata_cmd_stop(int argc, char **argv)
{
	return session_command<proto::Stop>(
		argc, argv,
		"Stop recording: flush every buffer of the session and complete its trace.\n"
		"Returns once the trace on disk is complete (with --wait, also once the\n"
		"running tp-async processes have left the session).  The answer names what\n"
		"the trace lacks (\"problems\"), such as a process that did not join.");
}

int strata_cmd_destroy(int argc, char **argv)
{
	return session_command<proto::Destroy>(
		argc, argv, "Stop the session if needed and forget it.  The trace stays on disk.");
}
