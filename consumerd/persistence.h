/*
 * persistence.h - the sessions kept across a crash of the daemon: "a
 * daemon that comes back loses nothing its processes still hold"
 * (docs/crash.md, "The daemon dies").  The glue between the session table
 * and the state store (state_store.h), and the taking up of a dead
 * predecessor's sessions (reattach.h).
 *
 * What is kept: every ACTIVE disk session (its definition, its clock, its
 * run id, its owner's pid) and, per buffer being drained of a live
 * process, the process (pid and start time), the memfd (dev, ino), the
 * trace uuid and the sub-trace directory, and the kernel buffer's uuid and
 * sub-trace.  Named, not taken up: sessions streamed to a relay or a
 * serial line (a STOPPED stand-in, Session::lost), a session's snapshot
 * trigger (Session::restart_losses).  Not kept: trigger companions,
 * created or stopped sessions.
 *
 * Contract:
 *   - main thread only (no locking);
 *   - it owns the state store (`<socket>.state/`), the changed mark, the
 *     one-shot timer of save_later's delay and the start times of the
 *     processes the store names;
 *   - it reads the sessions (SessionTable::all), the process records
 *     (ProcessRegistry) and, through its Host, the pid of a connection
 *     that owns a session; it writes them only in restore() (sessions
 *     through SessionTable::adopt, process records for the buffers it
 *     takes back) and owner_exited() (a stand-in record erased);
 *   - who marks what changed (changed()): Commands, for a controller's
 *     command its route table says Changes (commands.h); the Daemon, for
 *     a buffer integrated, a stop's end; owner_exited itself;
 *   - when it saves: save_later() at the end of every event-loop turn (20
 *     ms later, one write for a burst of hand-overs, off the moment a
 *     process starts: a save costs the main thread ~0.14 ms, docs/crash.md),
 *     save_if_changed() before any answer leaves for a controller (what a
 *     controller was told, a session started, N buffers, is kept before it
 *     hears it), save() at the daemon's exit (no session left: the files
 *     go);
 *   - restore() once at start, after SessionTable::repair_after_crash and
 *     before the first connection is served; the owner of a restored
 *     session that exited meanwhile ends it at once (Host::end_owned).
 */
#ifndef STRATA_CONSUMERD_PERSISTENCE_H
#define STRATA_CONSUMERD_PERSISTENCE_H

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <sys/types.h>
#include <vector>

#include "event_loop.h"
#include "process_registry.h"
#include "session_table.h"
#include "state_store.h"

namespace strata {
namespace daemon_impl {

class Persistence {
public:
	// What persistence asks of the Daemon.
	class Host {
	public:
		virtual ~Host() = default;
		// The peer pid of connection `conn_id`, 0 when it is closed.
		virtual pid_t conn_pid(uint64_t conn_id) = 0;
		// The sessions `owner` made with kCreateOwned end (stopping.h).
		virtual void end_owned(uint64_t owner, pid_t peer) = 0;
	};
	struct Config {
		std::string socket_path; // the store is `<socket>.state/`
		std::string hostname;    // a re-attached buffer's env.hostname
	};

	Persistence(Host &host, EventLoop &loop, SessionTable &sessions, ProcessRegistry &procs, Config cfg)
	    : host_(host), loop_(loop), sessions_(sessions), procs_(procs), cfg_(std::move(cfg))
	{
	}
	~Persistence();
	Persistence(const Persistence &) = delete;
	Persistence &operator=(const Persistence &) = delete;

	// The store opened and read: what restore() takes up.  Before the
	// clock links start, which announce kept_clock's offset.  restore()
	// loads it itself if this was not called.
	void load();
	// The REALTIME - MONOTONIC offset of the first session restore() will
	// take up, where it was measured on this boot (`boot_id`): true and *c
	// set.  A daemon restarted over a crashed one's sessions keeps their
	// offsets (their traces began with them); its clock links must tell
	// the guests the same one, not a new measurement, which a wall clock
	// stepped since the crash would set apart (docs/crash.md, "The daemon
	// dies").  Sessions of a daemon with links share one offset
	// (SessionTable::use_clock); without links each measured its own, and
	// the first stands for all.
	bool kept_clock(const std::string &boot_id, ClockInfo *c) const;
	// The save timer watched (else every save is at once), a dead
	// predecessor's sessions taken up.
	void restore();
	// What the store keeps may have changed.
	void changed() { changed_ = true; }
	// Saved now (nothing before restore(): no store yet).
	void save();
	void save_if_changed()
	{
		if (changed_)
			save();
	}
	// End of an event-loop turn: saved after the delay, if changed.
	void save_later();
	// A restored session's owner (`strata record`, by pid) exited: its
	// session ends; the books changed.
	void owner_exited(pid_t pid);
	// The daemon's clean exit, after the last save(): the store's
	// directory goes unless it holds something (a file it could not read,
	// kept as `<file>.ignored`), which the log names.
	void remove_store();

private:
	bool restore_buffer(Session &s, const BufferRecord &b);
	void lost_buffer(Session &s, const BufferRecord &b, const std::string &why);
	void keep_buffers(const Session &s, const std::map<const Drain *, const Proc *> &holder,
			  SessionRecord &r);

	Host &host_;
	EventLoop &loop_;
	SessionTable &sessions_;
	ProcessRegistry &procs_;
	const Config cfg_;
	std::unique_ptr<StateStore> store_;
	std::vector<SessionRecord> loaded_; // load()'s, until restore() takes them
	bool changed_ = false;
	int timer_fd_ = -1;  // one-shot: save_later's delay
	bool armed_ = false; // it runs
	std::map<pid_t, uint64_t> start_times_;
};

} // namespace daemon_impl
} // namespace strata
#endif
