/*
 * cmd_list.cpp - `strata list`: tracepoints of the traced processes that
 * registered with the daemon and are still running, and who is on each:
 * the active sessions whose rules record it, and the probes of the process
 * on it (its probe report, abi/strata_probe_report.h, read through
 * /proc/PID/fd; docs/probes.md, "Who is on a tracepoint").  A daemon that
 * speaks version 7 marks each process (proto::ListEntry::probes): only
 * those that have a report, or that it cannot vouch for, are read (10,000
 * live processes: a few hundred microseconds, not 20-30 us each).
 */
#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "commands.h"
#include "control/ctl_client.h"
#include "filter.h"
#include "proc_memfd.h"
#include "strata_probe_report.h"

using namespace strata;

namespace {

struct ProbeOn {
	std::string pattern, what; // what: "probe SYMBOL", "aggregate"
	int loglevel_max = -1;
};

// A copy of the report at a moment no write was under way, or false.
bool copy_report(const Region &r, strata_probe_report *out)
{
	if (r.len < sizeof *out)
		return false;
	auto *live = static_cast<const strata_probe_report *>(r.map);
	for (int tries = 0; tries < 1000; tries++) {
		// Acquire: pairs with the writer's release store of the even seq.
		const uint32_t s1 = __atomic_load_n(&live->seq, __ATOMIC_ACQUIRE);
		if (s1 & 1)
			continue;
		memcpy(out, live, sizeof *out);
		// Acquire fence: the copy before the second load (pairs with the
		// writer's release fence after its odd seq).
		std::atomic_thread_fence(std::memory_order_acquire);
		if (__atomic_load_n(&live->seq, __ATOMIC_RELAXED) == s1)
			return true;
	}
	return false;
}

// The probes of `pid` from its report (the process's to write: checked).
// *readable false when its descriptors cannot be read (another user's).
std::vector<ProbeOn> probes_of(uint32_t pid, bool *readable)
{
	std::vector<ProbeOn> out;
	std::string err;
	std::vector<Region> regions = find_memfds(pid, STRATA_PROBE_REPORT_NAME, &err);
	*readable = err.empty();
	static strata_probe_report rep; // 16 KiB: not on the stack
	for (const Region &r : regions) {
		if (!copy_report(r, &rep) || rep.magic != STRATA_PROBE_REPORT_MAGIC ||
		    rep.version != STRATA_PROBE_REPORT_VERSION ||
		    rep.entry_size != sizeof(strata_probe_report_entry) || rep.pid != pid ||
		    rep.n > STRATA_PROBE_REPORT_MAX)
			continue; // not its own (a forked child's inherited one), or garbage
		for (uint32_t i = 0; i < rep.n; i++) {
			const strata_probe_report_entry &e = rep.entries[i];
			if (!memchr(e.pattern, 0, sizeof e.pattern) || !memchr(e.symbol, 0, sizeof e.symbol))
				continue;
			ProbeOn p;
			p.pattern = e.pattern;
			p.loglevel_max = e.loglevel_max;
			if (e.kind == STRATA_PROBE_AGGREGATE)
				p.what = "aggregate";
			else if (e.symbol[0])
				p.what = "probe " + cli::escaped(e.symbol);
			else { // not an exported symbol: its address
				char a[32];
				snprintf(a, sizeof a, "probe at 0x%llx", (unsigned long long)e.fn);
				p.what = a;
			}
			out.push_back(p);
		}
		if (rep.total > rep.n)
			out.push_back({"*", std::to_string(rep.total - rep.n) + " more probe(s)", -1});
	}
	return out;
}

bool level_ok(int max, uint32_t ll)
{
	return max < 0 || ll <= static_cast<uint32_t>(max);
}

// Whether the session's rules record the event, as the traced process
// decides (libtrace/runtime/registry.cpp rules_enable: the last matching disable
// cancels what came before, enable rules add up), and whether only
// filtered rules do.  Targets (--pid, --name) are not shown.
bool recorded_by(const proto::SessionStatus &s, const std::string &event, uint32_t ll, bool *filtered)
{
	bool on = false, unconditional = false;
	for (const proto::Rule &r : s.rules) {
		if (!level_ok(r.loglevel_max, ll) || !glob_match(r.pattern.c_str(), event.c_str()))
			continue;
		if (!r.enable)
			on = unconditional = false;
		else {
			on = true;
			unconditional = unconditional || r.filter.empty();
		}
	}
	*filtered = on && !unconditional;
	return on;
}

std::string who_is_on(const proto::ListEntry &e, const std::vector<proto::SessionStatus> &sessions,
		      const std::vector<ProbeOn> &probes, bool readable)
{
	std::string on;
	auto add = [&](const std::string &s) { on += (on.empty() ? "" : ", ") + s; };
	for (const proto::SessionStatus &s : sessions) {
		bool filtered = false;
		if (s.state == static_cast<uint32_t>(proto::SessionState::Active) &&
		    recorded_by(s, e.event, e.loglevel, &filtered))
			add("session " + cli::escaped(s.name) + (filtered ? " (filtered)" : ""));
	}
	for (const ProbeOn &p : probes)
		if (level_ok(p.loglevel_max, e.loglevel) && glob_match(p.pattern.c_str(), e.event.c_str()))
			add(p.what);
	if (!readable)
		add("probes: not readable");
	return on.empty() ? "-" : on;
}

} // namespace

int strata_cmd_list(int argc, char **argv)
{
	const char *cmd = "list";
	static const cli::Command kList = {
		"list", "",
		"List the tracepoints of running traced processes that registered with\n"
		"the daemon (yours; every process for root), and who is on each: the\n"
		"active sessions whose rules record it ('(filtered)': only through a\n"
		"field filter) and the process's probes on it (strata_probe_register's\n"
		"callbacks, named by symbol, and 'aggregate' for STRATA_AGGREGATE)."};
	std::vector<char *> operands;
	if (const int r = cli::parse(kList, {}, argc, argv, operands); r != cli::kParsed)
		return r;
	if (!operands.empty())
		return cli::usage_error(kList, std::string("unexpected argument '") + operands[0] + "'");
	CtlClient cl;
	proto::Message ans;
	if (cli::query(cmd, cl, proto::List{}, proto::Type::ListReply, ans) != cli::kOk)
		return cli::kFail;
	const auto entries = std::get<proto::ListReply>(ans.body).entries;
	if (entries.empty()) {
		printf("No traced process is registered.\n");
		return cli::kOk;
	}
	if (cli::query(cmd, cl, proto::Status{}, proto::Type::StatusReply, ans) != cli::kOk)
		return cli::kFail;
	const auto sessions = std::get<proto::StatusReply>(ans.body).sessions;
	std::map<uint32_t, std::pair<std::vector<ProbeOn>, bool>> probes;
	const std::pair<std::vector<ProbeOn>, bool> none({}, true);
	printf("%-8s %-16s %-40s %-9s %s\n", "PID", "PROCESS", "TRACEPOINT", "LOGLEVEL", "ON");
	for (const proto::ListEntry &e : entries) {
		// Read only where the daemon does not vouch for "no report" (a
		// reply below version 7 marks every process unknown).
		const std::pair<std::vector<ProbeOn>, bool> *on = &none;
		if (e.probes != proto::kProbesNone) {
			auto it = probes.find(e.pid);
			if (it == probes.end()) {
				bool readable = true;
				std::vector<ProbeOn> p = probes_of(e.pid, &readable);
				it = probes.emplace(e.pid, std::make_pair(std::move(p), readable)).first;
			}
			on = &it->second;
		}
		printf("%-8u %-16s %-40s %-9s %s\n", e.pid, cli::escaped(e.comm).c_str(),
		       cli::escaped(e.event).c_str(), cli::loglevel_name(e.loglevel),
		       who_is_on(e, sessions, on->first, on->second).c_str());
	}
	return cli::kOk;
}
