/*
 * session_table.h - the session table: every session, its slot, its
 * rules, its state, its outputs and its snapshot trigger; the commands
 * that change them (CREATE, ENABLE/DISABLE, START, STOP, DESTROY,
 * SNAPSHOT, SNAPSHOT_ON) and the answers that read them (STATUS).
 *
 * Contract:
 *   - owns the sessions (and through them their drains, relay and serial
 *     links, triggers and companions), the session and run ids, the
 *     module generation of the change being made (take_kgen) and the
 *     "<socket>.active" file (the output directories of active sessions,
 *     repaired by the next daemon after a crash);
 *   - main thread only; no socket: a command is given the caller's
 *     credentials and connection id and returns an Answer (status, text,
 *     and whom the change concerns), which the Daemon sends and notifies;
 *   - what it needs of the rest of the daemon it asks its Host: settle
 *     (buffers already handed over join before a stop or a snapshot),
 *     the process registry's view of a session's drains, the grant
 *     tables' dirty mark, early adoption at START and the trigger timer.
 *     Tests drive it in-process with a Host of their own.
 */
#ifndef STRATA_CONSUMERD_SESSION_TABLE_H
#define STRATA_CONSUMERD_SESSION_TABLE_H

#include <cstdint>
#include <memory>
#include <string>
#include <sys/types.h>
#include <vector>

#include "kernel_source.h"
#include "session.h"

namespace strata {
namespace daemon_impl {

struct Proc;

// Who sends a command: the peer's credentials (SO_PEERCRED) and its
// connection (Conn::id, owner of the sessions it creates with
// kCreateOwned); its pid roots the process tree of a kCreateTree session.
struct Caller {
	uid_t uid = 0;
	gid_t gid = 0;
	uint64_t conn_id = 0;
	pid_t pid = 0; // as the daemon sees it; 0: unknown (a kCreateTree CREATE is refused)
};

// A command's outcome: the answer, and when the change reaches running
// processes, whom it concerns (rule >= 0: that rule's processes only).
struct Answer {
	int status = 0;
	std::string text;
	bool notify = false;
	Audience who;
	int rule = -1;
	uint64_t kgen = 0; // the module generation of the change (0: the module took none)
	// A START: the run id, whose processes signalled have not joined it
	// until they do (Session::unjoined).
	uint64_t started_run = 0;
	// Told with it, each with its module generation: a stopping session's
	// trigger companion (SessionTable::begin_stop).
	std::vector<std::pair<Audience, uint64_t>> also;
};

// An answer that reaches no process: status (0, or -errno) and its text.
inline Answer answer(int status, std::string text)
{
	Answer a;
	a.status = status;
	a.text = std::move(text);
	return a;
}

class SessionTable {
public:
	// What the table asks of the rest of the daemon (see the contract).
	class Host {
	public:
		virtual ~Host() = default;
		// Buffers already handed over (or being attached) join their
		// sessions now: before a stop or a snapshot looks at the drains.
		virtual void settle() = 0;
		// Attaches finished so far join (a trigger's look), no waiting.
		virtual void collect() = 0;
		// The session's drains leave the process records (it goes).
		virtual void forget_drains(const Session &s) = 0;
		// What a REGISTER would grant may have changed.
		virtual void changed() = 0;
		// START: the early buffers the session may adopt (if enabled).
		virtual void adopt_early(Session &s) = 0;
		// A trigger is watched (on) or none is left (off): the trigger
		// timer, which calls check_triggers.  False: no timer.
		virtual bool watch_triggers(bool on) = 0;
		// A session streaming to lttng-relayd was made (CREATE) / is going
		// (DESTROY, its owner's end, the daemon's exit) with its relay
		// link, its drains ended: what the clock links add to a relayed
		// trace (docs/clocks.md, "Relayed followers").
		virtual void relay_opened(Session &s) { (void)s; }
		virtual void relay_ending(Session &s) { (void)s; }
		// A session streaming over a serial line was made (CREATE) /
		// stopped, its drains ended (docs/clocks.md, "Serial followers").
		virtual void serial_opened(Session &s) { (void)s; }
		virtual void serial_stopped(Session &s) { (void)s; }
	};
	struct Config {
		std::string socket_path; // "<socket>.active"; the module's grants name it
		std::string hostname;
		uint64_t first_run_id = 1;
	};

	SessionTable(Host &host, Config cfg)
	    : host_(host), cfg_(std::move(cfg)), next_run_id_(cfg_.first_run_id)
	{
	}

	// A session `name` visible to `c` (not a companion); null with the
	// answer (ENOENT, EPERM) in `err`.
	Session *find(const Caller &c, const std::string &name, Answer &err);
	static bool visible(const Caller &c, const Session &s) { return c.uid == 0 || c.uid == s.uid; }

	Answer create(const Caller &c, const proto::Create &m);
	// Every session made from now on takes `c` as its clock (its boot id
	// and REALTIME - MONOTONIC) instead of measuring its own: a daemon
	// with clock links gives its traces the offset its links tell their
	// peers (docs/clocks.md, "One offset per daemon").
	void use_clock(const ClockInfo &c)
	{
		clock_ = c;
		have_clock_ = true;
	}
	Answer rule(const Caller &c, const std::string &name, proto::Rule r, Target t = {});
	Answer start(const Caller &c, const std::string &name);
	Answer stop(const Caller &c, const std::string &name);
	Answer destroy(const Caller &c, const std::string &name);
	// A stop in two phases (docs/consumerd.md, "Stopping a session"):
	// begin_stop makes the active session `s` look stopped to processes
	// (Session::stopping; its trigger and the module's slot stop), its
	// drains still running, and returns whom to tell (notify false: it was
	// not active, or is stopping already); once they applied it (or did not
	// in time), finish_stop finishes the drains and answers as STOP does,
	// or as DESTROY (destroy: the session goes).
	Answer begin_stop(Session &s);
	Answer finish_stop(uint64_t id, bool destroy);
	Session *by_id(uint64_t id);
	// The sessions the owner `owner` (a connection id, or kPidOwner|pid)
	// made with kCreateOwned, no longer owned: their ids, to end.
	std::vector<uint64_t> disown(uint64_t owner);
	Answer snapshot(const Caller &c, const proto::Snapshot &m);
	Answer snapshot_on(const Caller &c, const proto::SnapshotOn &m);
	// STATUS: the sessions `c` may see (one, if named); false with `err`
	// if the named one is not.
	bool status(const Caller &c, const std::string &name, proto::StatusReply &out, Answer &err) const;

	// The sessions the connection `conn_id` owns are destroyed (it
	// closed): DESTROY's answers, nobody to send them to.
	std::vector<Answer> end_owned(uint64_t conn_id, pid_t peer);
	// Shutdown: every session stopped, then forgotten.
	void stop_all();

	// The trigger timer's period, and its tick (trigger.cpp).
	static constexpr int kTriggerLookMs = 50;
	void check_triggers();
	// The module generation of the change being made (kernel_apply,
	// kernel_stop), taken (0: none); a command's Answer carries its own.
	uint64_t take_kgen()
	{
		const uint64_t g = kgen_;
		kgen_ = 0;
		return g;
	}

	// Lookups for the process side.
	Session *by_run(uint64_t run_id);
	// The active session in `slot` open to `uid`, or null.
	Session *active_in_slot(uint32_t slot, uid_t uid);
	const std::vector<std::unique_ptr<Session>> &all() const { return sessions_; }
	// A process joined (REGISTER): Session::joined, declared.
	void note_joined(const Proc &p);
	// A crashed daemon's active outputs repaired (at start).
	void repair_after_crash();
	// A session taken up from a dead daemon's state (persistence.h): ACTIVE,
	// keeping its run id (what grants name), with a fresh id.  False (not
	// taken) if its name or its slot is taken already.
	// active = false: a session only named (Session::lost), STOPPED.
	bool adopt(std::unique_ptr<Session> s, bool active = true);

private:
	Answer open_links(const Caller &c, const proto::Create &m, std::shared_ptr<RelayLink> &link,
			  std::shared_ptr<SerialLink> &line);
	Answer check_output(const Caller &c, const proto::Create &m, bool streamed, Owner &owner, bool &made);
	uint32_t free_slot(uint32_t from, const Session *except = nullptr) const;
	int share(uid_t uid, std::string &why) const; // the slot share (access.h)
	void stop_session(Session &s);
	const Session *quiesce(Session &s, uint64_t &comp_kgen);
	void finish_drains(Session &s);
	std::string stopped_text(const Session &s) const;
	Answer destroy_session(Session &s);
	Answer changed(const Session &s, std::string text, int rule = -1);
	int take_snapshot(Session &s, std::string root, std::string &text);
	void apply_kernel(Session &s);
	KmodGrant grant_of(const Session &s) const;
	void move_off_busy_slot(Session &s);
	void save_active();
	void erase(Session &s);
	// Triggers (trigger.cpp).
	Session *start_trigger(Session &s, std::string &err);
	void stop_trigger(Session &s);
	std::string trigger_summary(const Session &s) const;

	Host &host_;
	Config cfg_;
	std::vector<std::unique_ptr<Session>> sessions_;
	uint64_t next_session_id_ = 1;
	uint64_t next_run_id_ = 1;
	uint64_t kgen_ = 0;     // the module generation of the change being made (0: none)
	bool watching_ = false; // the trigger timer runs
	ClockInfo clock_;       // use_clock's, if have_clock_
	bool have_clock_ = false;
};

} // namespace daemon_impl
} // namespace strata
#endif
