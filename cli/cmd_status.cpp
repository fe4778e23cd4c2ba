/*
 * cmd_status.cpp - `strata status [SESSION]`.
 */
#include <cstdio>
#include <dirent.h>
#include <string>

#include "strata_abi.h"
#include "commands.h"
#include "control/ctl_client.h"
#include "proto/sock.h"

using namespace strata;

namespace {

// No daemon answers: the sessions a daemon that did not exit cleanly kept
// beside a socket (<socket>.state/, docs/crash.md), which the next daemon
// started on that socket takes up; said, with where.  A clean exit leaves
// no such directory.
void tell_kept_state()
{
	for (const std::string &sock : proto::client_socket_paths()) {
		const std::string dir = sock + ".state";
		DIR *d = opendir(dir.c_str());
		if (!d)
			continue;
		std::string names;
		unsigned n = 0, other = 0;
		while (struct dirent *e = readdir(d)) {
			const std::string f = e->d_name;
			if (f == "." || f == "..")
				continue;
			const size_t k = f.size() > 8 ? f.size() - 8 : 0;
			if (f.compare(k, std::string::npos, ".session") == 0 && k) {
				names += (n++ ? ", " : "") + f.substr(0, k);
			} else {
				other++;
			}
		}
		closedir(d);
		if (n)
			printf("%s holds %u session(s) a daemon kept when it did not exit cleanly (%s): a "
			       "strata-consumerd started on %s takes them up\n",
			       dir.c_str(), n, names.c_str(), sock.c_str());
		if (other)
			printf("%s holds %u file(s) a daemon could not read (its log named them)\n",
			       dir.c_str(), other);
	}
}

const char *state_name(uint32_t s)
{
	switch (static_cast<proto::SessionState>(s)) {
	case proto::SessionState::Created:
		return "created";
	case proto::SessionState::Active:
		return "active";
	case proto::SessionState::Stopped:
		return "stopped";
	}
	return "?";
}

// Lines of text, each indented.
void print_lines(const std::string &text, const char *indent)
{
	for (size_t b = 0, e; b < text.size(); b = e + 1) {
		e = text.find('\n', b);
		if (e == std::string::npos)
			e = text.size();
		printf("%s%s\n", indent, cli::escaped(text.substr(b, e - b)).c_str());
	}
}

// links: whether to show the session's copy of the daemon's clock links
// (a daemon before protocol version 10 sends them only there).
void print_session(const proto::SessionStatus &s, bool links)
{
	const proto::ChannelConfig &c = s.channel;
	printf("Session %s [%s], slot %u, owner uid %u\n", cli::escaped(s.name).c_str(), state_name(s.state),
	       s.slot, s.uid);
	printf("  output:   %s\n", cli::escaped(s.output_dir).c_str());
	const uint32_t block_ms = STRATA_MODE_BLOCK_MS(c.mode);
	printf("  channel:  %s, %s mode%s, %s x %s sub-buffers, %s lanes\n", cli::escaped(c.name).c_str(),
	       c.mode == STRATA_MODE_OVERWRITE ? "overwrite" : "discard",
	       block_ms ? (" (blocking up to " + std::to_string(block_ms) + " ms)").c_str() : "",
	       c.n_subbuf ? std::to_string(c.n_subbuf).c_str() : "8",
	       c.subbuf_size ? cli::human_bytes(c.subbuf_size).c_str() : "128.0 KiB",
	       c.n_lanes ? std::to_string(c.n_lanes).c_str() : "default");
	printf("  rules:   ");
	if (s.rules.empty())
		printf(" (none: nothing is recorded)");
	for (const proto::Rule &r : s.rules) {
		printf(" %s %s", r.enable ? "+" : "-", cli::escaped(r.pattern).c_str());
		if (r.loglevel_max >= 0)
			printf("(<=%s)", cli::loglevel_name(static_cast<uint32_t>(r.loglevel_max)));
	}
	if (!s.aggregate.empty())
		printf("\n  aggregate: %s%s%s, %u region(s) (strata top -s %s)",
		       cli::escaped(s.aggregate).c_str(), s.agg_filter.empty() ? "" : " where ",
		       cli::escaped(s.agg_filter).c_str(), s.agg_regions, cli::escaped(s.name).c_str());
	printf("\n  recorded: %u buffer(s), %llu packet(s), %s, %llu rejected packet(s)\n", s.n_buffers,
	       static_cast<unsigned long long>(s.packets), cli::human_bytes(s.bytes).c_str(),
	       static_cast<unsigned long long>(s.errors));
	if (s.relay.compare(0, 7, "serial ") == 0)
		printf("  line:     %s\n", cli::escaped(s.relay.c_str() + 7).c_str());
	else if (!s.relay.empty())
		printf("  relay:    %s\n", cli::escaped(s.relay).c_str());
	else if (s.state != static_cast<uint32_t>(proto::SessionState::Created))
		printf("  loss:     %s\n", cli::loss_summary(cli::trace_loss(s.output_dir)).c_str());
	if (!s.problems.empty()) { // lines, each ending in \n
		printf("  problems:\n");
		print_lines(s.problems, "    ");
	}
	if (links && !s.clocks.empty()) { // the daemon's clock links (docs/clocks.md), lines
		printf("  clocks:\n");
		print_lines(s.clocks, "    ");
	}
}

} // namespace

int strata_cmd_status(int argc, char **argv)
{
	const char *cmd = "status";
	static const cli::Command kStatus = {
		"status", "[SESSION]",
		"Show your sessions (every session for root), or one.  Under\n"
		"\"problems\": what the trace lacks, such as a process that did not\n"
		"join (its state query missed its deadline)."};
	proto::Status m;
	std::vector<char *> operands;
	if (const int r = cli::parse(kStatus, {}, argc, argv, operands); r != cli::kParsed)
		return r;
	if (operands.size() > 1)
		return cli::usage_error(kStatus, std::string("unexpected argument '") + operands[1] + "'");
	if (!operands.empty())
		m.session = operands[0];
	CtlClient cl;
	proto::Message ans;
	if (cli::query(cmd, cl, m, proto::Type::StatusReply, ans) != cli::kOk) {
		tell_kept_state();
		return cli::kFail;
	}
	const proto::StatusReply &sr = std::get<proto::StatusReply>(ans.body);
	printf("strata-consumerd at %s: %zu session(s)\n", cl.path().c_str(), sr.sessions.size());
	if (!sr.clocks.empty()) { // the daemon's clock links (docs/clocks.md), with or without sessions
		printf("clocks:\n");
		print_lines(sr.clocks, "  ");
	}
	for (const proto::SessionStatus &s : sr.sessions)
		print_session(s, sr.clocks.empty());
	return cli::kOk;
}
