/*
 * session.h - a session and what it is made of: a named recording, its
 * rules and the processes they target, its output, its drains and its
 * snapshot trigger.  The session table (session_table.h) owns every
 * Session; the types are here so that the parts that read sessions (the
 * process registry, the acknowledgement tracker, the grant tables) need
 * not see the table.
 *
 * Contract: main thread only, like the session table.
 */
#ifndef STRATA_CONSUMERD_SESSION_H
#define STRATA_CONSUMERD_SESSION_H

#include <map>
#include <memory>
#include <set>
#include <string>
#include <sys/types.h>
#include <vector>

#include "drain.h"
#include "metadata.h"
#include "proto/proto.h"
#include "relay.h"
#include "serial.h"

namespace strata {
namespace daemon_impl {

struct Proc;

// Which processes a rule applies to: everyone of the session's user when
// both lists are empty, else the listed pids and process names (comm).
struct Target {
	std::vector<uint32_t> pids;
	std::vector<std::string> names;
};

// Whom a change concerns: a user's processes, narrowed to a process tree
// (a kCreateTree session) and by rules and their targets (one per rule).
// A session is one; a destroyed session's copy outlives it long enough to
// signal its processes.
struct Audience {
	uid_t uid = 0;
	pid_t tree = 0; // kCreateTree: only this pid and its descendants; 0: any process
	std::vector<proto::Rule> rules;
	std::vector<Target> targets; // one per rule
};

// Is `p` a process of `a` at all: of its user and, for a tree session, in
// its tree?  Does rule `rule` of `a` target `p` (rule >= the rule count:
// any process of `a`)?  And the rules of `a` that target `p`.
bool reaches(const Audience &a, const Proc &p);
bool targets(const Audience &a, size_t rule, const Proc &p);
std::vector<proto::Rule> rules_for(const Audience &a, const Proc &p);

// A session's snapshot trigger (trigger.cpp).
struct Trigger {
	std::string pattern;
	uint32_t holdoff_ms = 0;
	uint64_t companion = 0; // its companion session's id while active, else 0
	uint64_t seen = 0;      // the companion's activity at the last look
	int64_t last_ms = 0;    // when the last trigger snapshot was taken (0: never)
	uint64_t taken = 0;     // trigger snapshots written
	uint64_t held = 0;      // looks that found the trigger fired within the hold-off
	uint64_t failed = 0;    // trigger snapshots that failed or were incomplete
};

// An aggregation region a process handed over (AGG_REGION, protocol
// version 6), kept as a read-only descriptor of its memfd for as long as
// the session's run: after the process exits the region still holds its
// last values (nothing writes it any more), which is what `strata top -s`
// shows for it.  The descriptor is closed with the record.
struct AggRegionRec {
	pid_t pid = 0;
	std::string comm;
	int fd = -1;
	bool alive = true;
	AggRegionRec() = default;
	AggRegionRec(const AggRegionRec &) = delete;
	AggRegionRec &operator=(const AggRegionRec &) = delete;
	~AggRegionRec();
};
constexpr size_t kMaxAggRegions = 4096; // per run: a descriptor each

struct Session : Audience {
	uint64_t id = 0;
	uint64_t run_id = 0; // new at each START: what grants name (SessionGrant.session_id)
	std::string name;
	uint32_t slot = 0;
	std::string out;
	bool made_out = false; // CREATE made `out`: removed with the session if left empty
	proto::ChannelConfig channel;
	proto::SessionState state = proto::SessionState::Created;
	// The first phase of a two-phase stop (SessionTable::begin_stop): still
	// Active (its drains run, STATUS says active), but no process is
	// granted it any more (REGISTER, the grant tables, the module's slot),
	// so that its processes, told, leave it and write what they hold first.
	bool stopping = false;
	ClockInfo clock;
	Owner owner; // set when a root daemon works for another user
	// Streaming to lttng-relayd (relay.h): the link, shared with the relay
	// outputs of the drains; null for a disk session.
	std::shared_ptr<RelayLink> relay;
	uint32_t live_timer_us = 0;
	// The sub-trace paths given to the relay (attach_output): each once.
	std::set<std::string> relay_paths;
	// Streaming over a serial line (serial.h, docs/serial.md): like relay,
	// null for a disk session; the relay_paths above name its sub-traces.
	std::shared_ptr<SerialLink> serial;
	bool streamed() const { return relay || serial; }
	std::vector<std::unique_ptr<Drain>> drains;
	// Snapshots on an event (trigger.cpp): set on the session that
	// snapshots.  companion_of: this session is such a session's hidden
	// companion (its id), never named by a controller.
	std::unique_ptr<Trigger> trigger;
	uint64_t companion_of = 0;
	// CREATE with kCreateOwned: the id of the connection that made it
	// (Conn::id); when that connection closes the session is stopped and
	// destroyed (SessionTable::end_owned).  0: it lives until DESTROY.
	uint64_t owner_conn = 0;
	// Processes that registered while it was active and that its rules
	// target, and the events they declared (STATUS_REPLY version 5).
	uint32_t joined = 0;
	std::set<std::string> declared;
	// Processes granted this run that have not joined it (yet), by pid:
	// "COMM (pid N): why" (STATUS and STOP name them: session_problems).
	// A process enters when its answer went unread (its state query missed
	// its deadline) or when it was signalled at START; it leaves when its
	// buffer for this run is attached (or, an aggregation, it acknowledges
	// a query that granted this run).  Bounded (kMaxUnjoined, the rest
	// counted).
	std::map<pid_t, std::string> unjoined;
	size_t unjoined_more = 0;
	// An aggregation session (CREATE version 6): what its processes
	// aggregate, under which filter ("" none), and the regions of this
	// run, in the order they arrived (AGG_FETCH's indexes).
	std::string aggregate;
	std::string agg_filter;
	std::vector<std::unique_ptr<AggRegionRec>> regions;
	// Taken up from a dead daemon (persistence.h): the buffers it could not
	// take back, one line each (STATUS, STOP: session_problems); bounded.
	std::vector<std::string> restart_losses;
	// Not taken up after a daemon restart (persistence.h), only named: why.
	// Such a session is STOPPED, cannot be started (destroy it, create it
	// again) and has no output.
	std::string lost;
};

// Where a session's trace goes, for answers and logs: its directory, or
// "lttng-relayd HOST:CTRL:DATA, trace HOSTNAME/SESSION-DATE".
std::string trace_place(const Session &s);
// What went wrong with the session's sub-traces, one line each (STATUS,
// STOP): malformed producers, output failures.  "" if nothing.
std::string session_problems(const Session &s);
// `pid` (comm) has not joined run `s` (yet), for `why`; and it has.
constexpr size_t kMaxUnjoined = 64;
void note_unjoined(Session &s, pid_t pid, const std::string &comm, const std::string &why);
void note_rejoined(Session &s, pid_t pid);
// A drain of a streamed session gets its relay or serial output (before
// d.start()); a disk session's drain keeps its own.
void attach_output(Session &s, Drain &d);

} // namespace daemon_impl
} // namespace strata
#endif
