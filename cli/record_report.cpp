/*
 * record_report.cpp - `strata record`'s step 6 (record.h): the trace
 * completed (the aggregates printed, counted pairs flushed, STOP,
 * DESTROY, the private daemon ended; a daemon that did not answer STOP
 * leaves a trace repaired), then the report on stderr: where the trace
 * went and what was discarded, or why nothing was recorded.
 */
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fnmatch.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <string>
#include <vector>

#include "commands.h"
#include "record.h"

namespace strata {
namespace cli {
namespace record {

namespace {

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

// Step 6a, once the session stopped: it recorded nothing although CMD ran
// (a disk trace with no sub-trace; a streamed one that got no buffer): say
// why.  A process-tree session's processes join by a round trip, which
// hands their buffers over at once, fired or not (a grant table's join
// hands a buffer over at its first event): the trace tells.
void tell_nothing_joined(CtlClient &cl, const Record &rec, const Child &c, bool unjoined)
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
	else if (unjoined)
		fprintf(stderr,
			"strata record: nothing recorded: the process(es) named above did not join the "
			"session\n");
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

// The problems the daemon's STOP answer names ("...; problems: A; B (generation
// G, ...)"), one line each: a process that did not join the session (its
// events are not in the trace), a producer's malformed data, a file that
// could not be written.  Never silent: the trace lacks what they name.
// True if one of them is a process that did not join.
bool tell_problems(const std::string &stopped)
{
	const std::string lead = "; problems: ";
	size_t b = stopped.find(lead);
	if (b == std::string::npos)
		return false;
	b += lead.size();
	const size_t first = b;
	size_t end = stopped.rfind(" (generation ");
	if (end == std::string::npos || end < b)
		end = stopped.size();
	while (b < end) {
		size_t e = stopped.find("; ", b);
		if (e == std::string::npos || e > end)
			e = end;
		fprintf(stderr, "strata record: %s\n", stopped.substr(b, e - b).c_str());
		b = e + 2;
	}
	return stopped.find(") did not join: ", first) != std::string::npos;
}

// Step 6b: where the trace went.  A buffer that never held an event leaves
// no sub-trace (docs/control-protocol.md, "Lazy sub-traces"): a directory
// this record made that holds none (nothing recorded, or only aggregated)
// is removed rather than left behind (rmdir: only an empty one), so that a
// working directory does not fill with empty strata-record-*; one that was
// there before is the user's, and stays.
void tell_where(const Record &rec, const std::string &stopped, bool complete)
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
	if (has_subtrace(create.output_dir) && !complete) {
		// The daemon ended before the stop: what the processes recorded
		// after its last write was neither written nor counted, so the
		// trace's own counts are not the run's.
		fprintf(stderr,
			"strata record: trace written to %s, cut short: its daemon ended before the stop, "
			"and "
			"what was recorded after its last write is neither in the trace nor counted\n"
			"strata record: in what the trace holds: %s\n",
			dir,
			cli::loss_summary(cli::trace_loss(create.output_dir),
					  "full rings, and each lane's end where the daemon died")
				.c_str());
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

} // namespace

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
	const bool unjoined = r == 0 && tell_problems(stopped);
	if (r == 0 && !child.early_signal)
		tell_nothing_joined(cl, rec, child, unjoined);
	if (cl.command(proto::Destroy{create.session}, err) < 0)
		fprintf(stderr, "strata record: destroy: %s\n", err.c_str());
	priv.stop();
	if (r < 0) {
		// The daemon is gone (killed?): a write it was in may have left a
		// stream file ending inside a packet, which babeltrace2 refuses
		// whole.  Cut every stream file back to its last whole packet.
		// Our own daemon has no successor that could continue the trace
		// (its socket is gone): each lane then ends with a
		// discarded-packets mark, so that the trace itself says what
		// record says below (what was recorded after is lost, uncounted).
		fprintf(stderr, "strata record: the daemon did not answer STOP; %s\n",
			cli::run_consumerd_repair(create.output_dir, false, !priv.dir.empty()) == 0
				? "trace repaired (torn packets cut)"
				: "could not repair the trace");
		if (exit_code == 0)
			exit_code = cli::kFail;
	}
	tell_where(rec, stopped, r >= 0);
	return exit_code;
}

} // namespace record
} // namespace cli
} // namespace strata
