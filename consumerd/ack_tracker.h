/*
 * ack_tracker.h - acknowledged changes (docs/control-protocol.md,
 * "Acknowledged changes"): generations, the processes signalled about a
 * change, the controllers' answers held until those processes applied it,
 * and the kernel module's WAITs.
 *
 * Generations: every change that reaches running processes bumps the
 * generation; a process's state query stamps its connection with the
 * generation current at REGISTER, and that connection's close acknowledges
 * every generation up to the stamp (acknowledge).
 *
 * With the kernel module answering (kabi 2, kernel_source.h): a process
 * that registered with it (Proc::kmod) is signalled by the module, not by
 * us, and acknowledges to the module.  A WAIT or a version-1 answer that
 * waits for such processes runs the module's WAIT on a thread of its own.
 *
 * A signal can be lost on its way (ThreadSanitizer's runtime drops one that
 * lands on a thread that is exiting; a handler's query may miss it): while
 * an answer waits for a process we signalled, a process that has not
 * acknowledged kResignalMs after its last signal, and that has no signal of
 * that number pending (a stopped process keeps it pending: it gets none
 * more), is signalled again (resignal).  An extra signal costs the process
 * one more state query.
 *
 * Contract:
 *   - owns the generation counter, the held answers (pending), each
 *     version-2 controller's unacknowledged processes and module
 *     generations (by connection id), and the module WAIT threads;
 *   - main thread: everything but the WAIT threads.  A WAIT thread only
 *     calls kernel_wait and hands its result over through done_ (mu_) and
 *     efd() (the event loop then calls on_wait_done); quit_ is set once at
 *     stop() (relaxed: polled between WAIT slices, the join that follows
 *     is the synchronisation);
 *   - it reads and marks process records (the registry's: Proc::kmod,
 *     acked) and sends signals; it never writes to a socket: answers due
 *     are handed to the Daemon (due) by connection id.
 */
#ifndef STRATA_CONSUMERD_ACK_TRACKER_H
#define STRATA_CONSUMERD_ACK_TRACKER_H

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <sys/types.h>
#include <thread>
#include <utility>
#include <vector>

#include "session.h"

namespace strata {
namespace daemon_impl {

class ProcessRegistry;

// A controller's answer held back until the processes signalled about a
// change have re-queried (or exited), or until its deadline.  Version 1:
// the answer to the change itself (1 s hold); version 2: the answer to WAIT.
struct PendingReply {
	uint64_t conn_id = 0;
	uint32_t seq = 0;
	std::string text;
	bool wait = false; // a WAIT: -ETIMEDOUT at the deadline
	// (pid, generation it must acknowledge): acknowledgements must come
	// from queries that registered at or after that generation
	std::vector<std::pair<pid_t, uint64_t>> waiting;
	size_t signalled = 0;
	int64_t deadline = 0;
	// Module generations to WAIT for (the changes' kernel_apply/kernel_stop)
	// and whether that WAIT still runs (kwait_id != 0: answer after it).
	std::vector<uint64_t> kgens;
	uint64_t kwait_id = 0;
	// A gate (a two-phase stop, Stopping::stop): nobody is answered;
	// when due, the Daemon goes on with the stop whose id this is.
	uint64_t gate = 0;
	// When the processes still waited for are signalled again (hold()
	// sets it; kResignalMs apart).
	int64_t resignal_at = 0;
};

// An answer due now, for the connection `conn_id` if it is still open.
struct DueReply {
	uint64_t conn_id = 0;
	uint32_t seq = 0;
	int status = 0;
	std::string text;
	uint64_t gate = 0;  // PendingReply::gate: status and text say who did not answer
	size_t unacked = 0; // the processes that did not acknowledge (yet)
};

// Does `pid` catch `signo` right now?
bool catches(pid_t pid, int signo);
// Is a `signo` sent to the process `pid` still pending, not yet taken by
// one of its threads (its shared pending set)?
bool pending(pid_t pid, int signo);

// How long an answer waits for a process we signalled before it is
// signalled again (see above): the default state query deadline
// (STRATA_REGISTER_TIMEOUT_MS) has passed by then.
constexpr int64_t kResignalMs = 1000;

class AckTracker {
public:
	explicit AckTracker(ProcessRegistry &procs) : procs_(procs) {}
	~AckTracker() { stop(); }
	AckTracker(const AckTracker &) = delete;
	AckTracker &operator=(const AckTracker &) = delete;

	// The eventfd of module WAIT results (-1: no module WAITs).
	bool start();
	int efd() const { return efd_; }
	// Ends the module WAITs (their next slice) and joins them.
	void stop();

	uint64_t generation() const { return change_; }
	// A change of `a` (rule >= 0: only that rule's processes): a new
	// generation; every concerned process we signal is signalled.  `kgen`:
	// the module generation of the change (0: the module took none).
	PendingReply signal(const Audience &a, int rule, uint64_t kgen);
	// The controller `conn_id` (version 1) is answered once `p` is
	// acknowledged or its deadline passes.
	void hold(PendingReply p);
	// A version-2 controller was answered at once: its WAIT asks for `p`.
	void owe(uint64_t conn_id, const PendingReply &p);
	// WAIT from `conn_id`: held until what it owes is acknowledged.  A WAIT
	// that times out leaves its laggards owed to the next WAIT.
	void wait(uint64_t conn_id, uint32_t seq, int64_t timeout_ms);
	// The gate `id` opens once `p`'s processes acknowledged, or after
	// timeout_ms (due() hands it back with DueReply::gate set).
	void gate(uint64_t id, PendingReply p, int64_t timeout_ms);
	// The controller `conn_id` closed: it owes nothing any more, and its
	// held WAIT is dropped.
	void forget(uint64_t conn_id);
	// `pid` applied every change up to `registered_at`.
	void acknowledge(pid_t pid, uint64_t registered_at);
	// The answers due now (all: every held one, at exit); the processes
	// an answer has waited for kResignalMs signalled again.
	std::vector<DueReply> due(bool all);
	// Until the next deadline or signal again, for epoll_wait (-1: none).
	int timeout_ms() const;
	// Main thread, after efd() fired: finished module WAITs.
	void on_wait_done();

private:
	void start_kwait(PendingReply &p);
	void carry_over(const PendingReply &p);
	void resignal(int64_t now);

	struct Owed { // a version-2 controller's changes since its last WAIT
		std::map<pid_t, uint64_t> unacked;
		std::vector<uint64_t> kgens;
	};
	struct KWaitDone { // a module WAIT's result, from its thread
		uint64_t id = 0;
		int status = 0;                // 0 or -errno of the last WAIT
		std::vector<uint32_t> missing; // with -ETIMEDOUT
	};

	ProcessRegistry &procs_;
	uint64_t change_ = 0; // counts notified changes
	std::vector<PendingReply> pending_;
	std::map<uint64_t, Owed> owed_; // by connection id
	int efd_ = -1;
	uint64_t next_kwait_ = 1;
	std::map<uint64_t, std::thread> kwaiters_; // by KWaitDone::id
	std::mutex mu_;
	std::vector<KWaitDone> done_; // guarded by mu_
	std::atomic<bool> quit_{false};
};

} // namespace daemon_impl
} // namespace strata
#endif
