/*
 * drain.cpp - see drain.h for the contract.  This file: a drain's life and
 * policy (creation, opening its sub-trace, resuming, scheduling, the first
 * lap's pages, finishing, the step the drivers run); drain_write.cpp: what
 * it writes (packets out of the ring, the last flush, live ticks).
 *
 * One sub-trace per drain (dir = <out>/ust/pid/<comm>-<pid>-<date>), written
 * through its Output (output.h; the disk layout is output_disk.cpp's):
 * metadata whole at attach, then one event block per new descriptor batch;
 * packets whole, several per write (each copied out of the ring, validated
 * header first, and its sub-buffer released before the write).
 * Events are described before any packet that may use them: every round
 * reads new descriptors first, then packets.
 */
#include "drain.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <iterator>
#include <mutex>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>
#include <linux/futex.h>

#include "clock_page.h"
#include "drain_internal.h"
#include "drain_pool.h"
#include "sched_policy.h"
#include "control/names.h"
#include "reader.h"
#include "reattach.h"

namespace strata {

using namespace drain_detail;

namespace {
// The drain's wait for a packet: a safety net (a writer's wake-up is
// what ends it, and finish() wakes it through stop_word_).
// STRATA_CONSUMERD_WAIT_MS overrides the 50 ms (tests stretch it to show
// that nothing waits for it).
int wait_ms()
{
	static const int ms = [] {
		const char *v = getenv("STRATA_CONSUMERD_WAIT_MS");
		const long n = v ? strtol(v, nullptr, 10) : 0;
		return n > 0 && n <= 3600000 ? (int)n : 50;
	}();
	return ms;
}
// populate_ahead: at most this many bytes of pages made per turn (about
// 0.2-0.5 ms on the 2-CPU VM), so that the other drains sharing the
// worker wait at most that long for theirs.
constexpr uint64_t kAheadPerTurn = 1u << 20;
// The first lap's short waits (populate_ahead): a drain's first turn comes
// right after the buffer's hand-off, before its writer did much, and a
// writer wakes it only when a packet is complete (1 MiB: 2 ms of a fast
// writer, its second sub-buffer already opened).  So it looks again after
// 100 us, and again while the writers moved since the last look, each
// wait twice the one before (0.1, 0.2, 0.4 ... 25.6 ms), until a lane is
// busy or at most kFirstPolls times; then it waits as usual.  A fast
// writer is busy (Reader::kBusyBytes) 0.2-0.3 ms after its first event:
// looked at after 1 ms, it had faulted half of its first sub-buffer's
// pages itself (2.3 us a fresh page here; mapping one the daemon made,
// 0.3-0.8); looked at after 100 us, the daemon makes most of them (30
// paired short runs of 200,000 events: the median pair 0.9 ns an event
// less).  An idle process's drain costs one more turn (the pool's timer
// thread, a few us).  A buffer handed over long before its first event
// (its first look saw nothing move, so no more looks) is woken by its
// writer's first packet open (writer.cpp), and the looks start again
// there (before that, the drain's next turn was the first packet's
// completion: its writer had faulted that whole sub-buffer in itself and
// write-populated the next, 3 of 3 short runs under strace).
constexpr int kFirstPollUs = 100;
constexpr uint8_t kFirstPolls = 9;
// A buffer this young (since its drain's first turn) with no record yet
// waits for its writer's first lap: that wait, and the first looks after
// it, are StepWait::first_lap, and the pool's threads take the quick
// scheduling while one is armed (sched_policy.h, between_turns): the
// wake-up that ends it should preempt the writer's CPU for the worker's
// move, not wait there for the writer's slice.  An older buffer still
// idle (a service that traces later, or not at all) leaves the workers
// batch.
constexpr uint64_t kFirstLapWaitNs = 100000000; // 100 ms

} // namespace

std::unique_ptr<Drain> Drain::create(int memfd, const uint8_t uuid[16], const std::string &dir,
				     const ClockInfo &clock, const TraceEnv &env, const Owner &owner,
				     std::string &err, bool from_kernel)
{
	if (!from_kernel) {
		const int seals = fcntl(memfd, F_GET_SEALS);
		if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
			close(memfd);
			err = "the buffer is not sealed against shrinking (F_SEAL_SHRINK): refused, "
			      "a truncation under our mapping would crash the consumer";
			return nullptr;
		}
	}
	std::unique_ptr<Drain> d(new Drain());
	struct stat st;
	if (fstat(memfd, &st) == 0) {
		d->buf_dev_ = st.st_dev;
		d->buf_ino_ = st.st_ino;
	}
	d->reader_ = Reader::attach(memfd, &err);
	if (d->reader_ && d->reader_->info().mode == STRATA_MODE_OVERWRITE)
		d->snap_fd_ = fcntl(memfd, F_DUPFD_CLOEXEC, 0); // -1: no snapshots of it
	close(memfd);
	if (!d->reader_)
		return nullptr;
	const BufferInfo &info = d->reader_->info();
	if (memcmp(info.uuid, uuid, 16) != 0) {
		err = "the buffer's trace uuid is not the one granted to it";
		return nullptr;
	}
	d->dir_ = dir;
	d->from_kernel_ = from_kernel;
	memcpy(d->uuid_, uuid, 16);
	d->channel_ = file_safe(info.channel.empty() ? "channel0" : info.channel);
	d->comm_ = info.comm;
	d->pid_ = info.pid;
	d->stream_id_ = info.stream_id;
	d->overwrite_ = info.mode == STRATA_MODE_OVERWRITE;
	d->n_lanes_ = info.n_lanes;
	d->clock_ = clock;
	d->env_ = env;
	d->env_.record_format = info.record_format;
	// Which clock the producer stamped with (all give CLOCK_MONOTONIC ns).
	d->env_.clock_source = info.clock_id == STRATA_CLOCK_PAGE            ? "kclock-page"
			       : info.clock_id == STRATA_CLOCK_MONOTONIC     ? "monotonic"
			       : info.clock_id == STRATA_CLOCK_CONSUMER_PAGE ? "consumer-page"
									     : "unknown";
	// Packets this side closes are stamped on the producer's clock.
	if (info.clock_id == STRATA_CLOCK_CONSUMER_PAGE) {
		d->reader_->set_clock(consumer_page_now);
		d->producer_now_ = consumer_page_now; // beacons too (live_tick)
	}
	d->owner_ = owner;
	return d;
}

// On the drain thread, so that the process waiting for its BUFFER answer
// does not wait for the file system.
bool Drain::open_trace(std::string &err)
{
	if (!out_)
		out_ = disk_output(dir_, channel_, n_lanes_, owner_, resumed_);
	std::vector<EventInfo> events;
	std::vector<std::string> errors;
	reader_->read_new_events(&events, &errors);
	for (const std::string &e : errors)
		warn(dir_, "descriptor rejected: " + e);
	std::string text = ctf_metadata(reader_->info().uuid, clock_, env_, stream_id_, events);
	out_->set_reader(reader_.get());
	if (!out_->live_period_ns())
		return out_->open(text, err);
	// Live: the producers' clock before the output shows the lanes'
	// streams (what an empty lane's first packet is stamped with, relay.cpp),
	// and the first tick one live period later, not at once: an empty
	// lane's packet then waits for a writer stalled between its clock read
	// and its reservation for a whole period, not for a few milliseconds.
	const uint64_t opened_ns = producer_now_ ? producer_now_() : mono_ns();
	last_live_ns_ = mono_ns();
	std::vector<strata_packet_header> empty(n_lanes_);
	for (uint32_t lane = 0; lane < n_lanes_; lane++)
		empty[lane] = reader_->empty_header(lane, 0);
	out_->set_empty_packets(std::move(empty), opened_ns);
	return out_->open(text, err);
}

bool Drain::resume(std::string &err)
{
	if (stage() != Stage::Made || !reader_ || out_)
		return false;
	std::vector<PacketTail> tails(n_lanes_);
	for (uint32_t lane = 0; lane < n_lanes_; lane++) {
		const std::string path = dir_ + "/" + channel_ + "_" + std::to_string(lane);
		if (!stream_tail(path, reader_->info().uuid, tails[lane], err))
			return false;
	}
	for (uint32_t lane = 0; lane < n_lanes_; lane++) {
		const PacketTail &t = tails[lane];
		if (t.packets && !reader_->resume(lane, t.seq, t.discarded, t.ts_end)) {
			err = "lane " + std::to_string(lane) +
			      ": its stream file goes beyond the buffer's writers";
			return false;
		}
	}
	resumed_ = true;
	return true;
}

Drain::~Drain()
{
	if (stage() != Stage::Made) {
		finish(false);
		join();
	}
	close_files();
	if (snap_fd_ >= 0)
		close(snap_fd_);
}

bool Drain::stream_overwrite(bool producer_dead)
{
	if (!overwrite_ || stage() != Stage::Made || !reader_ || !reader_->stream_overwrite(producer_dead))
		return false;
	overwrite_ = false;
	if (snap_fd_ >= 0) { // a streamed buffer is on disk as it fills: no snapshots
		close(snap_fd_);
		snap_fd_ = -1;
	}
	return true;
}

uint64_t Drain::activity() const
{
	// Once finish() was called the drain thread may unmap the buffer at any
	// moment: the value taken by finish() stands (main thread only, like
	// finish(), so the relaxed load sees our own store).
	if (finish_.load(std::memory_order_relaxed) || !reader_)
		return final_activity_;
	uint64_t a = 0;
	for (uint32_t l = 0; l < reader_->info().n_lanes; l++)
		a += reader_->lane_position(l) + reader_->lane_discarded(l);
	return a;
}

int Drain::snapshot(const std::string &dir, uint64_t &packets, std::string &err)
{
	packets = 0;
	if (snap_fd_ < 0 || finish_.load(std::memory_order_relaxed))
		return 0;
	int fd = fcntl(snap_fd_, F_DUPFD_CLOEXEC, 0);
	if (fd < 0) {
		err = std::string("cannot duplicate the buffer's fd: ") + strerror(errno);
		return -1;
	}
	// A Drain of its own, never started: its Reader, files and counters
	// are this function's; create() validates the buffer again.
	std::unique_ptr<Drain> d = create(fd, uuid_, dir, clock_, env_, owner_, err, from_kernel_);
	if (!d)
		return -1;
	d->reader_->set_snapshot();
	if (!d->open_trace(err))
		return -1;
	d->final_drain(); // overwrite mode: close, collect, trailing loss
	d->close_files();
	packets = d->counters_.packets.load(std::memory_order_relaxed);
	if (d->counters_.errors.load(std::memory_order_relaxed)) {
		err = "some packets could not be written (see the log)";
		return -1;
	}
	return 1;
}

void Drain::start()
{
	if (stage() != Stage::Made)
		return;
	// Before the pool sees it: its mutex orders this store before the
	// worker's first look.
	set_stage(Stage::Queued);
	if (DrainPool::get().run(this))
		return;
	// The process was told "ok" already: it keeps its bounded buffer.
	counters_.errors.fetch_add(1, std::memory_order_relaxed);
	warn(dir_, "cannot start a drain thread; this buffer is not recorded");
	reader_.reset();
	set_stage(Stage::Released); // never run: finished, nothing to join
}

void Drain::set_stage(Stage s)
{
	// Release: what the drain thread did before (files closed, for Done)
	// is visible to whoever sees the stage (finished(), join()).
	stage_.store(s, std::memory_order_release);
}

bool Drain::opened() const
{
	const Stage s = stage_.load(std::memory_order_relaxed); // drain thread: its own stores
	return s == Stage::Open || s == Stage::Finishing;
}

void Drain::release()
{
	set_stage(Stage::Released);
}

void Drain::finish(bool producer_dead)
{
	// Only the main thread calls this; the first reason wins.
	if (finish_.load(std::memory_order_relaxed))
		return;
	final_activity_ = activity();
	if (snap_fd_ >= 0) { // no snapshot once the drain thread collects
		close(snap_fd_);
		snap_fd_ = -1;
	}
	producer_dead_.store(producer_dead, std::memory_order_relaxed);
	// Release: orders producer_dead_ before finish_; pairs with the
	// acquire load in run().
	finish_.store(true, std::memory_order_release);
	// Then end the drain's wait now rather than at its timeout: a process
	// does not wake its drain at exit (slots.cpp, mark_exited), and a
	// drain of an exited process would hold a pooled thread and the
	// buffer's mapping until the timeout (50 ms: many threads in the
	// daemon during a spawn loop).  Release: after finish_; the word is private to the Drain,
	// which outlives join().
	stop_word_.store(1, std::memory_order_release);
	syscall(SYS_futex, &stop_word_, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
	// A multiplexed drain waits in the pool, not on the stop word.
	if (stage() != Stage::Made)
		DrainPool::get().wake(this);
}

void Drain::join()
{
	if (stage() != Stage::Made)
		DrainPool::get().join(this);
}

void Drain::share_events()
{
	std::vector<EventInfo> fresh;
	reader_->peek_events(shared_n_, &fresh); // one load when nothing is new
	if (fresh.empty())
		return;
	shared_n_ += fresh.size();
	std::lock_guard<std::mutex> lk(known_mu_);
	known_.insert(known_.end(), std::make_move_iterator(fresh.begin()),
		      std::make_move_iterator(fresh.end()));
}

std::vector<EventInfo> Drain::known_events() const
{
	std::lock_guard<std::mutex> lk(known_mu_);
	return known_;
}

void Drain::update_metadata()
{
	std::vector<EventInfo> events;
	std::vector<std::string> errors;
	reader_->read_new_events(&events, &errors);
	for (const std::string &e : errors)
		warn(dir_, "descriptor rejected: " + e);
	if (!events.empty())
		pending_meta_ += ctf_metadata_events(stream_id_, events, env_);
	if (pending_meta_.empty())
		return;
	// An event block that cannot be stored (a full disk) is kept and
	// tried again each round; meanwhile no packet is written (it could
	// use the events, and a packet of an undeclared event makes the whole
	// session unreadable): write_packets counts them lost.
	std::string err;
	if (out_->append_metadata(pending_meta_, err)) {
		pending_meta_.clear();
		return;
	}
	if (err != meta_err_) {
		meta_err_ = err;
		counters_.errors.fetch_add(1, std::memory_order_relaxed);
		warn(dir_, err + "; packets are held back until it can be written");
		set_problem(err);
	}
}

void Drain::set_problem(const std::string &what)
{
	std::lock_guard<std::mutex> g(problem_mu_);
	problem_ = what;
}

std::string Drain::problem() const
{
	std::lock_guard<std::mutex> g(problem_mu_);
	return problem_;
}

// The scheduling weight and short slice (sched_policy.h), once, when
// latency starts to matter: a lane's writers in their second lap (each
// packet now needs a sub-buffer we gave back) or half a ring ahead of us,
// not at the first packet.  In a first lap nothing can be lost, and a
// woken drain with a 100 us slice preempts the traced program on its CPU
// at each packet: on the 2-CPU VM a short run's program lost about 1 ms of
// its wall to it (docs/benchmarks.md, "A short run's fresh pages").
// Sets sched_taken_ only: the driver running the drain applies it (run():
// this thread, from now to the drain's end; the multiplexer: the worker of
// each later turn, drain_pool.h).
void Drain::take_scheduling()
{
	if (sched_taken_)
		return;
	const uint64_t stride = reader_->info().lane_stride;
	for (uint32_t lane = 0; lane < n_lanes_; lane++)
		if (reader_->lane_position(lane) >= stride || reader_->lane_backlog(lane) >= stride / 2) {
			sched_taken_ = true;
			return;
		}
}

// A busy writer's first lap: its next pages made by us, on our CPU, before
// it reaches them (Reader::populate_ahead; docs/ring-buffer.md, "A busy
// writer's first lap").  Bounded per turn; true if more is to be done now.
// Not for a kernel buffer (its pages are the module's).
bool Drain::populate_ahead()
{
	if (ahead_done_)
		return false;
	if (from_kernel_) {
		ahead_done_ = true;
		return false;
	}
	uint64_t budget = kAheadPerTurn, left = 0, pos = 0;
	bool in_lap0 = false;
	for (uint32_t lane = 0; lane < n_lanes_; lane++) {
		bool busy = false;
		left += reader_->populate_ahead(lane, &budget, &busy);
		busy_seen_ = busy_seen_ || busy;
		const uint64_t head = reader_->lane_position(lane);
		in_lap0 = in_lap0 || head < reader_->info().lane_stride;
		pos += head;
	}
	first_moved_ = pos != first_pos_;
	if (first_pos_ == 0 && pos != 0)
		first_polls_ = 0; // the writers' first records: the short waits start here
	first_pos_ = pos;
	if (!in_lap0)
		ahead_done_ = true; // every lane's first lap is over
	return left != 0;
}

// The CPUs of the writers with bytes we have not read yet, as their
// packets' opens said (hostile words: only where our worker runs depends
// on them).  Not a kernel buffer's: its writers are the module's.
bool Drain::writer_cpus(cpu_set_t *busy) const
{
	CPU_ZERO(busy);
	if (from_kernel_ || !reader_)
		return false;
	bool any = false;
	for (uint32_t lane = 0; lane < n_lanes_; lane++) {
		const int cpu = reader_->lane_writer_cpu(lane);
		if (cpu >= 0 && reader_->lane_backlog(lane) != 0) {
			CPU_SET(cpu, busy);
			any = true;
		}
	}
	return any;
}

// Nothing in any lane, ever: every write position still 0 (a lane's head
// leaves 0 at its first reservation and never returns to it) and nothing
// discarded.  Shared words, read after the producer exited or the session
// stopped; a producer that lies only loses its own sub-trace.
bool Drain::nothing_recorded() const
{
	for (uint32_t l = 0; l < n_lanes_; l++)
		if (reader_->lane_position(l) != 0 || reader_->lane_discarded(l) != 0)
			return false;
	return true;
}

bool Drain::open_once()
{
	std::string err;
	if (open_trace(err)) {
		set_stage(Stage::Open);
		return true;
	}
	// Nothing can be written: leave the buffer to its writers (they
	// count what they cannot store) and say so.
	counters_.errors.fetch_add(1, std::memory_order_relaxed);
	warn(dir_, err + "; this buffer is not recorded");
	set_problem(err + "; this buffer is not recorded");
	close_files();
	// reader_ stays mapped until the Drain goes: the main thread may
	// still read the lanes' positions (activity()).
	set_stage(Stage::Done);
	return false;
}

// Queued -> Waiting, and the sub-trace opened at once when it must be.
// False: Done (it cannot be written).
bool Drain::begin_run()
{
	set_stage(Stage::Waiting);
	// A disk sub-trace (directory, metadata) is made once its first
	// packets are copied out and their sub-buffers given back (drain_once),
	// or at the end for a buffer that got none: not while the process is
	// starting, whose CPU that work would take, and not while the
	// producer's first lap waits for sub-buffer 0.  A relay output (live
	// viewers) and the kernel's buffers open at once.
	return !((out_ || from_kernel_) && !open_once());
}

// One turn of the drain: whatever the buffer has now copied out, a live
// tick when one is due, or what to wait for (w).  The thread driver (run)
// and the multiplexing one (drain_pool.cpp) both call it, one thread at a
// time: the Reader, the files and batch_ are the calling thread's for the
// turn.
StepResult Drain::step(StepWait *w)
{
	if (stage() == Stage::Queued && !begin_run())
		return StepResult::kDone;
	if (born_ns_ == 0)
		born_ns_ = mono_ns();
	// Every turn copies into the copy buffer of the thread running it,
	// the final one too: batch_ of an earlier turn is another worker's,
	// which may be copying another drain's packets into it right now.
	if (stream_start_ns_)
		prepare_batch(true);
	// Acquire: pairs with the release store in finish().
	if (finish_.load(std::memory_order_acquire)) {
		reader_->end_wait();
		finish_run();
		return StepResult::kDone;
	}
	const uint32_t seq = reader_->prepare_wait();
	share_events();
	counters_.block_timeouts.store(reader_->block_timeouts(), std::memory_order_relaxed);
	if (stream_start_ns_)
		take_scheduling();
	// A busy writer's next pages before its packets: in its first lap
	// nothing can be lost yet, while each page it must make itself costs
	// it a microsecond or two.
	const bool more_ahead = populate_ahead();
	// The first packet begins the stream and opens the sub-trace
	// (drain_once: after its copy, so that the ring has it back first).
	// Not before it: drain_once maps the open sub-buffer's pages
	// (Reader::map_ahead), work a short process that never fills a
	// packet should not pay for at its start.
	if ((opened() || reader_->has_packet()) && drain_once())
		return StepResult::kAgain;
	if (stage() == Stage::Done) // the sub-trace could not be opened
		return StepResult::kDone;
	if (more_ahead)
		return StepResult::kAgain;
	w->timeout_ms = wait_ms();
	w->first_poll_us = 0;
	if (!busy_seen_ && !ahead_done_ && first_polls_ < kFirstPolls &&
	    (first_polls_ == 0 || first_moved_)) {
		w->first_poll_us = kFirstPollUs << first_polls_; // is a lane busy? (kFirstPollUs)
		w->timeout_ms = std::max(1, w->first_poll_us / 1000);
		first_polls_++;
	}
	w->first_lap = w->first_poll_us != 0 || (!busy_seen_ && !ahead_done_ && first_pos_ == 0 &&
						 mono_ns() - born_ns_ < kFirstLapWaitNs);
	if (const uint64_t period = out_ ? out_->live_period_ns() : 0) {
		const uint64_t now = mono_ns();
		if (now - last_live_ns_ >= period) {
			last_live_ns_ = now;
			live_tick(producer_now_ ? producer_now_() : now);
			return StepResult::kAgain;
		}
	}
	w->word = reader_->wake_word();
	w->val = seq;
	return StepResult::kWait;
}

// A disk output's writes go to the page cache and a process's buffer is
// woken through its futex: such drains share the multiplexer's workers.  A
// streamed output (relay, serial) may wait on a network or a line in its
// write, and a kernel buffer's wait is an fd: those keep a thread each
// (a handful per session, not one per process).
bool Drain::multiplexable() const
{
	return !out_ && !from_kernel_ && reader_ && !reader_->has_wait_fd();
}

// The thread driver: the drain's turns on this worker until it is done,
// sleeping on the buffer's futex (or its wait fd) between them.
SchedChange Drain::run()
{
	StepWait w;
	bool applied = false;
	RecentWriters recent; // as a multiplexing worker's (drain_pool.cpp)
	for (;;) {
		// Off the CPUs of this buffer's busy writers before the turn: a
		// streamed drain's thread is woken onto them as a worker is
		// (docs/consumerd.md, "The daemon beside its writers").
		cpu_set_t busy;
		if (writer_cpus(&busy))
			(void)recent.before_turn(busy, mono_ns());
		const StepResult r = step(&w);
		if (sched_taken_ && !applied) {
			applied = true;
			sched_ = stream_scheduling();
		}
		if (r == StepResult::kDone)
			return sched_;
		if (r == StepResult::kWait)
			reader_->wait(w.val, w.timeout_ms, &stop_word_);
	}
}

// finish() seen: the last packets written, the files closed, the buffer
// unmapped (Done).
void Drain::finish_run()
{
	share_events();
	if (!opened() && nothing_recorded()) {
		// No event was ever reserved or discarded in this buffer: no
		// sub-trace for it (docs/control-protocol.md, "Lazy
		// sub-traces").  Most processes of a traced build or test
		// suite are such: their directory, metadata and inodes were
		// most of the daemon's file-system work per process start.
		reader_.reset();
		set_stage(Stage::Done); // pairs with finished()
		return;
	}
	if (!opened() && !open_once())
		return;
	set_stage(Stage::Finishing);
	final_drain();
	report_loss();
	// Live: nothing more will come from this buffer (its process exited or
	// the session stopped): say so up to now, so that live readers can
	// show the other streams' events up to here.  After close: the relay
	// output's close waits until the relay stored every packet, and the
	// relay ignores a beacon while a packet of the stream is in flight.
	const uint64_t end_ns = producer_now_ ? producer_now_() : mono_ns();
	close_files();
	if (out_ && out_->live_period_ns())
		for (uint32_t lane = 0; lane < n_lanes_; lane++)
			out_->beacon(lane, end_ns - lane); // distinct: see live_tick
	// Unmap now: a session that outlives many short processes must not
	// keep their (memfd-backed, resident) buffers alive.
	reader_.reset();
	// Release: every file is closed before finished() reports it.
	set_stage(Stage::Done);
}

// A streamed buffer whose writers discarded events (discard mode: the
// ring was full) says so at its end, with what its output cost: the
// bytes written, the time spent inside the output's writes against the
// time the drain streamed, and the longest write.  Writes that took most
// of that time mean the output did not keep up; short ones, that the drain did not get the
// CPU in time or the writers outran its copying.  The count is the
// writers' shared word: a message, not the accounting (the trace's
// packets carry that).
void Drain::report_loss()
{
	if (overwrite_ || !reader_ || stream_start_ns_ == 0)
		return;
	uint64_t disc = 0;
	for (uint32_t lane = 0; lane < n_lanes_; lane++)
		disc += reader_->lane_discarded(lane);
	if (disc == 0)
		return;
	const double span_ms = (double)(mono_ns() - stream_start_ns_) / 1e6;
	const double write_ms = (double)write_ns_ / 1e6;
	char msg[400];
	snprintf(
		msg, sizeof msg,
		"the writers discarded %llu event(s), their ring full; this drain wrote %.1f MiB in %.1f ms, "
		"%.1f ms of it in writes (%.2f GB/s, longest %.1f ms): %s",
		(unsigned long long)disc, (double)written_bytes_ / (1 << 20), span_ms, write_ms,
		write_ns_ ? (double)written_bytes_ / (double)write_ns_ : 0.0, (double)write_max_ns_ / 1e6,
		write_ms > span_ms / 2
			? "the output did not keep up (a faster file system, or more or larger sub-buffers)"
			: "more or larger sub-buffers, or more CPU for the daemon");
	warn(dir_, msg);
}

void Drain::from_dump()
{
	reader_->skip_future_check();
}

void Drain::set_wait_fd(int fd)
{
	reader_->set_wait_fd(fd);
}

void Drain::close_files()
{
	if (out_)
		out_->close();
	if (quiet_losses_) {
		warn(dir_, std::to_string(quiet_losses_) + " more packet(s) lost, " + last_loss_);
		quiet_losses_ = 0;
	}
	if (malformed_ > 1) {
		warn(dir_, "process " + comm_ + " (pid " + std::to_string(pid_) +
				   "): " + std::to_string(malformed_) +
				   " malformed packet(s) in all, cut or skipped");
		malformed_ = 1;
	}
}

} // namespace strata
