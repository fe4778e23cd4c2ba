/*
 * process_registry.h - the process registry: every traced process the
 * daemon knows, by pidfd (exit detection) and by pid.
 *
 * Contract:
 *   - owns the Proc records and their pidfds (closed by erase and at
 *     destruction); the drains a Proc lists are its sessions' (the session
 *     table owns them), so a session's drains are forgotten here before the
 *     session goes (forget_drains);
 *   - main thread only: the Daemon makes records at REGISTER, at a BUFFER
 *     hand-over and at early adoption, and erases them at the process's
 *     exit; the acknowledgement tracker and the grant tables read them;
 *   - a new pidfd is handed to `watch` (the event loop: its readiness is
 *     the process's exit), and erase() calls `unwatch` before closing it.
 */
#ifndef STRATA_CONSUMERD_PROCESS_REGISTRY_H
#define STRATA_CONSUMERD_PROCESS_REGISTRY_H

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <sys/types.h>
#include <vector>

#include "proto/proto.h"

namespace strata {
class Drain;
namespace daemon_impl {

struct Session;

constexpr unsigned kMaxRetries = 5;

struct Proc {
	pid_t pid = 0;  // as the daemon sees it (SO_PEERCRED): the trace names it by this
	pid_t vpid = 0; // as the process sees it (REGISTER's pid; differs in a container), 0: unknown
	uid_t uid = 0;
	std::string comm;
	std::string date;
	std::vector<proto::EventName> events;
	int pidfd = -1;
	int signo = 0;      // asynchronous enablement: signal it on changes
	bool kmod = false;  // signalled by the module, acknowledges to it
	uint64_t acked = 0; // highest generation it acknowledged
	// Its state queries in a row whose answer went unread, each followed by
	// a signal to ask again (Processes::missed_answer), up to kMaxRetries.
	unsigned retries = 0;
	// It exited before its REGISTER was read (pidfd_open: ESRCH; it waits
	// for no answer): its drains end when its connection does (drop).
	bool gone = false;
	// Probe marks (docs/probes.md, "Who is on a tracepoint"): it said it
	// has a probe report (kRegisterProbes; only ever set: its REGISTERs
	// may be read out of order), and its REGISTER that listed its events
	// came over a version 7 connection, so it would have said so.  LIST
	// says which (proto::kProbes*).
	bool probes = false;
	bool tells_probes = false;
	std::vector<Drain *> drains;
	// The process trees (kCreateTree sessions' roots) it was found in or
	// out of, each looked up once (reaches(), session.h): a process never
	// leaves a tree while its root lives (an orphan is reparented to a
	// subreaper within it, `strata record`) and never enters one later.
	mutable std::vector<std::pair<pid_t, bool>> trees;
};

class ProcessRegistry {
public:
	// watch: false when the pidfd cannot be watched (the process is then
	// kept without exit detection, as without a pidfd; said in the log).
	using Watch = std::function<bool(int pidfd)>;
	using Unwatch = std::function<void(int pidfd)>;
	ProcessRegistry(Watch watch, Unwatch unwatch) : watch_(std::move(watch)), unwatch_(std::move(unwatch))
	{
	}
	~ProcessRegistry();
	ProcessRegistry(const ProcessRegistry &) = delete;
	ProcessRegistry &operator=(const ProcessRegistry &) = delete;

	// The record of `pid`, made (with a pidfd for exit detection) on first
	// sight; `made` says whether it was.
	Proc &get(pid_t pid, uid_t uid, bool *made = nullptr);
	Proc *find(pid_t pid);
	const Proc *find(pid_t pid) const;
	Proc *by_pidfd(int pidfd);
	bool watches(int pidfd) const { return procs_.count(pidfd) != 0; }
	// The record goes (its pidfd unwatched and closed).
	void erase(int pidfd);
	// The session's drains, and the answers about its process tree (whose
	// root's pid may be reused), leave every record (before the session goes).
	void forget_drains(const Session &s);
	// Every record, by pidfd (stand-ins for processes gone before their
	// REGISTER was read have negative keys).
	std::map<int, Proc> &all() { return procs_; }
	const std::map<int, Proc> &all() const { return procs_; }

private:
	Watch watch_;
	Unwatch unwatch_;
	std::map<int, Proc> procs_; // by pidfd
	std::map<pid_t, int> pid_to_pidfd_;
	int next_fake_ = -2; // stand-in keys for processes without a pidfd
};

} // namespace daemon_impl
} // namespace strata
#endif
