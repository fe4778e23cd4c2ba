/*
 * attacher.h - the attacher thread: a process's BUFFER validated, mapped
 * and given its drain thread off the main thread.
 *
 * Why: a Unix socket's wake-up is synchronous, so the scheduler runs the
 * woken main thread on the sending process's CPU.  A process does not wait
 * for BUFFER's answer (docs/control-protocol.md), but the main thread's
 * work on it (validate and map the buffer, start a thread) would preempt
 * the process while its start-up is still running, with another CPU idle.
 * The main thread only reads BUFFER and queues it; the attacher, woken by
 * a futex (not a synchronous wake-up: the scheduler prefers its idle
 * previous CPU), does the rest.
 *
 * Contract:
 *   - owns its thread, its eventfd and the jobs between queue() and
 *     take()/settle(); the results (drains) it hands to the main thread,
 *     which integrates them into sessions, processes and answers;
 *   - roles: the main thread queues jobs, takes results and stops it; the
 *     attacher thread only runs Drain::create and Drain::start on the job
 *     it took, touching nothing but the job and the fields below;
 *   - q_, done_, busy_ and quit_ are guarded by mu_; a job moves queue ->
 *     attacher -> done under it, so the Drain the attacher made is complete
 *     before the main thread sees it (the mutex orders both);
 *   - settle() waits until no job is queued or running and returns them
 *     all: the main thread calls it before anything that looks at or ends
 *     a session's or a process's drains (a stop, an exit, a controller's
 *     command, a snapshot, shutdown), so an attach in flight is never
 *     missed.  Between those, take() returns what is done at every turn of
 *     the event loop;
 *   - the attacher wakes the event loop (efd) only while the job's
 *     connection is open (AttachJob::awaited), because someone may wait for
 *     BUFFER's answer.  A process that closed has not waited: waking the
 *     main thread then would only preempt it again on its CPU, so its drain
 *     joins the books at the next turn of the loop, at the latest at its
 *     exit (pidfd);
 *   - a streamed session's BUFFER stays on the main thread (its output is
 *     the session's, made before the drain starts).
 */
#ifndef STRATA_CONSUMERD_ATTACHER_H
#define STRATA_CONSUMERD_ATTACHER_H

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <sys/types.h>
#include <thread>
#include <vector>

#include "drain.h"
#include "metadata.h"

namespace strata {
namespace daemon_impl {

// A BUFFER handed to the attacher thread: what Drain::create needs, made
// on the main thread, and its result.
struct AttachJob {
	uint64_t conn_id = 0; // the connection to answer, if still open
	uint32_t seq = 0;
	pid_t pid = 0;
	uint64_t run_id = 0; // the session's
	int fd = -1;         // the memfd; Drain::create closes it
	uint8_t uuid[16] = {};
	std::string dir;
	ClockInfo clock;
	TraceEnv env;
	Owner owner;
	std::unique_ptr<Drain> drain; // the result, or null with err
	std::string err;
	std::shared_ptr<std::atomic<bool>> awaited; // true while its connection is open
};

class Attacher {
public:
	Attacher() = default;
	~Attacher() { stop(); }
	Attacher(const Attacher &) = delete;
	Attacher &operator=(const Attacher &) = delete;

	// The thread and its eventfd; false: BUFFERs are attached on the main
	// thread.
	bool start();
	// Every job settled (the caller integrates settle()'s results first),
	// then the thread joined.
	void stop();
	bool running() const { return thread_.joinable(); }
	int efd() const { return efd_; }
	void queue(AttachJob j);
	// Results so far, no waiting; woken: efd() fired (it is cleared).
	std::vector<AttachJob> take(bool woken = false);
	// Every job queued or running finished, and all the results.
	std::vector<AttachJob> settle();

private:
	void loop();

	std::thread thread_;
	int efd_ = -1;
	std::mutex mu_;
	std::condition_variable cv_;      // a job queued, or quit
	std::condition_variable idle_cv_; // a job finished
	std::deque<AttachJob> q_;         // guarded by mu_
	std::vector<AttachJob> done_;     // guarded by mu_
	unsigned busy_ = 0;               // guarded: jobs being run
	bool quit_ = false;               // guarded
};

} // namespace daemon_impl
} // namespace strata
#endif
