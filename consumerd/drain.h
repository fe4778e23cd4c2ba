/*
 * drain.h - one traced buffer (one process in one session) and the drain
 * that copies its packets to its output (output.h: disk or relay).
 *
 * Contract:
 *   - roles: the producer process writes the buffer (shared memory, hostile
 *     to us); the pooled worker running the drain's turn (drain_pool.h:
 *     one thread from start() to the end of run(), or one multiplexing
 *     worker at a time, turn by turn, step()) is its only consumer-side
 *     reader and the only writer of its sub-trace; the daemon's main
 *     thread only calls start/finish/join/snapshot/activity and reads the
 *     counters.  "Drain thread" below means whichever thread runs the turn.
 *   - the drain never blocks a producer: it waits on the buffer's wake_seq
 *     futex (a thread's FUTEX_WAIT, or an io_uring futex wait the pool
 *     queues), with a timeout as safety net, never the other way.
 *   - finish() may be called any number of times from the main thread (stop,
 *     process exit, shutdown); the drain then flushes open packets
 *     (reader's consumer-side close), drains, appends the trailing-loss
 *     packet, closes the files and ends.  join() waits for that.
 *   - its life is one state, Stage (below): each transition has one
 *     author, and finished() and join() read it.
 */
#ifndef STRATA_CONSUMERD_DRAIN_H
#define STRATA_CONSUMERD_DRAIN_H

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

struct iovec;

#include "drain_pool.h"
#include "fs.h"
#include "sched_policy.h"
#include "metadata.h"
#include "output.h"

namespace strata {

class Reader;

struct DrainCounters {
	// Relaxed: statistics only, read by the main thread for STATUS.
	std::atomic<uint64_t> packets{0};
	std::atomic<uint64_t> bytes{0};
	std::atomic<uint64_t> errors{0};
	std::atomic<uint64_t> malformed{0}; // packets cut or skipped as malformed (Drain::malformed)
	// The producers' blocking waits that ran to their timeout (strata_abi.h,
	// block_timeouts), as the drain last read them.
	std::atomic<uint64_t> block_timeouts{0};
};

class Drain : private PoolJob {
public:
	// Attach to `memfd` (ownership taken, closed on failure too) and check
	// the buffer's trace uuid against the one granted.  nullptr with `err`
	// on failure.  The drain thread creates `dir` and its metadata.
	// A process's buffer must be sealed against shrinking (F_SEAL_SHRINK):
	// a producer that truncated it under our mapping would SIGBUS the
	// daemon.  The kernel module's buffers (from_kernel) cannot be resized
	// by anyone but us.
	static std::unique_ptr<Drain> create(int memfd, const uint8_t uuid[16], const std::string &dir,
					     const ClockInfo &clock, const TraceEnv &env, const Owner &owner,
					     std::string &err, bool from_kernel = false);
	~Drain();

	// Before start(): wait on this fd (poll) instead of the futex; see
	// Reader::set_wait_fd.  Takes ownership.
	void set_wait_fd(int fd);
	// Before start(): where the packets go (output.h); without it, the
	// disk output in dir() (today's layout).
	// A streamed output (relay, serial) is not continued by a restarted
	// daemon: its sub-buffers go back to the writers as soon as they are
	// copied, not after the write (drain_once), which can wait on a network.
	void set_output(std::unique_ptr<Output> out)
	{
		out_ = std::move(out);
		release_early_ = true;
	}
	// Before start(): the buffer comes out of a crash image (recover.cpp):
	// the reader's clock says nothing of when its packets were written
	// (a kdump capture kernel's clock starts again from boot), so no
	// packet is refused for a timestamp ahead of it.
	void from_dump();
	const std::string &channel() const { return channel_; }
	uint32_t n_lanes() const { return n_lanes_; }
	// The drain's life.  Transitions, and who makes them:
	//   Made -> Queued       start(): handed to the pool (main thread or
	//                        the attacher)
	//   Made -> Released     start() found no worker: never run
	//   Queued -> Waiting    a worker runs it (run); no sub-trace yet
	//   Waiting -> Open      its sub-trace opened: at once for a live output
	//                        or a kernel buffer, else after its first packet
	//                        is copied, or at the end (drain thread)
	//   Waiting -> Done      finished with nothing ever recorded: no
	//                        sub-trace (drain thread)
	//   Waiting/Open -> Done the sub-trace cannot be written: the buffer is
	//                        left to its writers (drain thread)
	//   Open -> Finishing    finish() seen: the final drain (drain thread)
	//   Finishing -> Done    files closed, buffer unmapped (drain thread)
	//   Done -> Released     its worker is done with the Drain: join()
	//                        returns, the Drain may go (the pool, under its
	//                        mutex)
	// Stores are release and loads acquire (stage()): what a stage's
	// author did before it is visible to whoever sees the stage.
	enum class Stage : uint8_t { Made, Queued, Waiting, Open, Finishing, Done, Released };
	Stage stage() const { return stage_.load(std::memory_order_acquire); }

	// Runs the drain on a pooled worker (drain_pool.h).
	void start();
	// producer_dead: the process exited (its in-flight commits will never
	// complete); otherwise a stop while it keeps running.
	void finish(bool producer_dead);
	// Waits until the drain's thread is done with it (no-op if never
	// started).
	void join();
	bool finished() const { return stage() >= Stage::Done; }

	// Flight-recorder snapshot (main thread only; docs/ring-buffer.md,
	// "Snapshots"): while the buffer is in overwrite mode and finish() was
	// not called, attach a second Reader to the same buffer, close its open
	// packets (consumer-side close, as at stop) and write its newest
	// complete sub-buffers plus the trailing-loss packets as a new
	// sub-trace in `dir`.  The drain thread is not disturbed: in overwrite
	// mode it only reads descriptors until finish().  Returns 1 written,
	// 0 nothing to snapshot (discard mode, finished), -1 with `err`.
	int snapshot(const std::string &dir, uint64_t &packets, std::string &err);
	bool overwrite() const { return overwrite_; }
	// The events the buffer's process described so far (any thread; the
	// drain thread shares them as it reads its descriptors, before the
	// first packet): what the daemon checks a filter against
	// (filter_check.cpp).
	std::vector<EventInfo> known_events() const;
	bool from_kernel() const { return from_kernel_; } // the module's buffer (its events ignore filters)
	// Before start(), on an overwrite-mode buffer: drain it as it fills
	// from now on, its history first (Reader::stream_overwrite).  False
	// when the buffer is not overwrite mode or its producer too old.
	// producer_dead: it exited (the whole ring is history).
	bool stream_overwrite(bool producer_dead);
	// How much the writers have done so far: the sum over lanes of the
	// write position and of the events discarded (shared, unvalidated
	// words).  It changes whenever a writer reserves or discards: a
	// snapshot trigger's buffer is watched through it.  Main thread only;
	// after finish(), the value at finish().
	uint64_t activity() const;

	const std::string &dir() const { return dir_; }
	const uint8_t *uuid() const { return uuid_; }
	// The buffer's memfd as attached (st_dev, st_ino): what a restarted
	// daemon looks for among its process's descriptors (docs/crash.md).
	uint64_t buffer_dev() const { return buf_dev_; }
	uint64_t buffer_ino() const { return buf_ino_; }
	// Before start(): dir() is a previous daemon's sub-trace of this very
	// buffer (the daemon restarted, docs/crash.md).  Each lane's stream
	// file is cut back to its last whole packet and continued after it
	// (Reader::resume: what is on disk is not written again, counters
	// follow on); the metadata is written again whole at the first packet.
	// False with `err` when a stream file cannot be read or belongs to
	// another buffer: then nothing was changed.
	bool resume(std::string &err);
	const DrainCounters &counters() const { return counters_; }
	// The last failure of this sub-trace's output ("cannot write PATH: No
	// space left on device"), "" if none; any thread.
	std::string problem() const;
	// The producer process, as its buffer header named it (attach).
	const std::string &comm() const { return comm_; }
	uint32_t pid() const { return pid_; }

private:
	Drain() = default;
	// PoolJob: the drain on its worker (what it changed in the worker's
	// scheduling); Done -> Released, and whether it is (the pool, under
	// its mutex).
	SchedChange run_job() override { return run(); }
	StepResult step(StepWait *w) override;
	bool multiplexable() const override;
	bool streaming() const override { return sched_taken_; }
	bool writer_cpus(cpu_set_t *busy) const override;
	void release() override;
	bool released() const override { return stage() == Stage::Released; }
	SchedChange run();
	bool begin_run();
	void finish_run();
	void set_stage(Stage s);
	bool opened() const; // Open or Finishing (drain thread)
	bool open_trace(std::string &err);
	// open_trace once, with the failure said and counted; false if the
	// sub-trace cannot be written (run() then leaves the buffer).
	bool open_once();
	bool drain_once();
	void final_drain();
	void flush_lanes(bool dead); // final_drain's, discard mode
	void write_packets(uint32_t lane, const struct iovec *iov, int n_iov, const size_t *ends,
			   size_t n_pkts);
	void write_packet(uint32_t lane, const std::vector<uint8_t> &pkt);
	void malformed(const std::string &what);
	void set_problem(const std::string &what);
	mutable std::mutex problem_mu_;
	std::string problem_;      // under problem_mu_
	std::string pending_meta_; // event blocks not stored yet (drain thread)
	std::string meta_err_;     // why (drain thread)
	uint64_t malformed_ = 0;   // packets cut or skipped as malformed (drain thread)
	void update_metadata();
	void close_files();

	void live_tick(uint64_t now_ns);
	uint64_t last_live_ns_ = 0;
	uint64_t (*producer_now_)() = nullptr; // the producers' clock when not CLOCK_MONOTONIC
	std::string last_loss_;                // why the last packets were lost (drain thread)
	uint64_t quiet_losses_ = 0;            // lost since, for the same reason, not logged yet
	std::vector<uint64_t> lane_sent_;      // packets handed to the output, per lane (drain thread)
	std::unique_ptr<Reader> reader_;
	std::string dir_;
	ClockInfo clock_;
	TraceEnv env_;
	Owner owner_;
	std::unique_ptr<Output> out_;
	std::string channel_;
	std::string comm_;
	uint32_t pid_ = 0;
	uint32_t n_lanes_ = 0;
	uint8_t *batch_ = nullptr; // packets copied out of the ring, one write's worth: the
				   // drain thread's buffer (prepare_batch)
	size_t batch_cap_ = 0;
	size_t align_ = 0; // out_->packet_align() once opened (0: not yet; drain thread)
	void learn_align();
	bool behind() const;
	void skipped(uint32_t lane, const std::string &err, bool died);
	bool write_batch(uint32_t lane, size_t *ends, size_t n, size_t len);
	size_t pad_packet(uint8_t *pkt, size_t len) const;
	size_t repad(size_t *ends, size_t n);
	SchedChange sched_; // run(): what it took for sched_taken_ (undone by the pool)
	bool nothing_recorded() const;
	// known_: appended by the drain thread (share_events), copied out by
	// known_events(), both under known_mu_; shared_n_: drain thread only.
	mutable std::mutex known_mu_;
	std::vector<EventInfo> known_;
	size_t shared_n_ = 0;
	void share_events();
	// What the output cost, for the loss report (report_loss): drain
	// thread only.
	uint64_t stream_start_ns_ = 0; // the first packet seen (begin_stream); 0: not yet
	uint64_t write_ns_ = 0, write_max_ns_ = 0, written_bytes_ = 0;
	void report_loss();
	void prepare_batch(bool refresh);
	void begin_stream();
	void take_scheduling();
	bool sched_taken_ = false; // the streaming scheduling wanted (take_scheduling; drain thread)
	// A busy writer's first lap (populate_ahead): drain thread only.
	bool populate_ahead();
	bool ahead_done_ = false;  // every lane past lap 0 or the buffer not ours to populate
	bool busy_seen_ = false;   // some lane proved busy (Reader::populate_ahead)
	uint8_t first_polls_ = 0;  // short waits taken to see whether a lane is busy
	bool first_moved_ = false; // the writers moved since the last turn
	uint64_t first_pos_ = 0;   // the lanes' positions summed, at the last turn
	uint64_t born_ns_ = 0;     // mono_ns at the first turn (kFirstLapWaitNs)
	uint32_t stream_id_ = 0;
	bool overwrite_ = false;
	// Overwrite mode: a duplicate of the buffer's fd for snapshot(); main
	// thread only (made in create, closed by finish() and the destructor).
	int snap_fd_ = -1;
	uint64_t final_activity_ = 0; // activity() at finish(); main thread only
	bool from_kernel_ = false;
	bool resumed_ = false;       // resume(): the disk output replaces the metadata
	bool release_early_ = false; // set_output(): release after the copy (drain_once)
	uint64_t buf_dev_ = 0, buf_ino_ = 0;
	uint8_t uuid_[16] = {};
	std::atomic<Stage> stage_{Stage::Made};
	// The main thread's request to end (finish()), not a stage: finish_ is
	// set (release) and read by the drain thread (acquire), which then
	// moves to Finishing.
	std::atomic<bool> finish_{false};
	std::atomic<bool> producer_dead_{false}; // written before finish_ (release)
	// Set to 1 by finish() after finish_, and woken: the drain thread's
	// wait (Reader::wait's stop word) ends at once, without a lost
	// wake-up between its check of finish_ and its sleep.
	std::atomic<uint32_t> stop_word_{0};
	DrainCounters counters_;
};

} // namespace strata
#endif
