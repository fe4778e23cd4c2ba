/*
 * writer.cpp - strata_reserve / strata_commit, and strata_write (both in
 * one call, for a payload the caller built): the per-event fast path.
 *
 * Concurrency contract.  Roles: writers (application threads, and signal
 * handlers that interrupt them, up to kMaxDepth nested reservations per
 * thread), one consumer per buffer (another process: reads complete
 * sub-buffers, releases them through `consumed`, and may close an open
 * packet itself with the same CAS as a writer), the control plane (opens
 * and closes slots, never touches a lane).  Any writer may be interrupted
 * by any other writer of the same lane (other threads sharing the lane,
 * signal handlers on its own thread) between any two instructions: every
 * state change of a lane is one CAS on `head`, and everything else a writer
 * does happens inside space that CAS gave it alone.  Who touches what:
 *   head              writers and the consumer's flush (CAS only; a
 *                     FAST_OWNER lane's owner an unlocked cmpxchg inside
 *                     its owner_busy window while close_req is 0)
 *   owner_busy        an owned lane's owner and its signal handlers
 *                     (unlocked inc/dec); the consumer reads it
 *   close_req         consumers (atomic add/sub); the owner reads it
 *   commit[i]         writers only: on a shared lane atomic adds; on an
 *                     owned lane its owner's plain (unlocked) add, one
 *                     instruction, so its own signal handlers cannot split
 *                     it, and no other thread or process adds there
 *   ccommit[i]        the consumer's closes only (atomic add)
 *   events_discarded  writers of shared lanes and the consumer (atomic add)
 *   owner_discarded   an owned lane's owner only (plain add, as commit[i])
 *   consumed          the consumer (store); writers load it
 *   packet header     the opener writes magic..timestamp_begin, seq, lane;
 *                     the closer writes timestamp_end, sizes, discarded:
 *                     disjoint fields, so opener and closer never race.
 * The state machine and every ordering pair: docs/ring-buffer.md.  The
 * lane primitives this file shares with writer_lanes.cpp (a thread's lane
 * claims, the consumer's questions): writer_lane.h.
 */
#include <linux/futex.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/rseq.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <time.h>

#include <climits>
#include <cstring>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "rt_internal.h"
#include "writer_hooks.h"
#include "writer_lane.h"
#include "writer_copy.h"

#ifdef STRATA_WRITER_HOOKS
extern "C" {
STRATA_EXPORT void (*strata_test_writer_hook)(enum strata_writer_step) = nullptr;
}
#endif

namespace strata {

std::atomic<Channel *> g_slots[STRATA_MAX_SLOTS];

namespace {
// CPUID 0x80000001 ECX bit 8 (PRFCHW, AMD's 3DNowPrefetch): PREFETCHW.
bool cpu_has_prefetchw()
{
#if defined(__x86_64__) || defined(__i386__)
	unsigned a = 0, b = 0, c = 0, d = 0;
	return __get_cpuid(0x80000001u, &a, &b, &c, &d) && (c & (1u << 8));
#else
	return false;
#endif
}
} // namespace

// Written once at load (static initialisation; zero, i.e. PREFETCHT0, for
// an event before it), read by every record after: prefetch_ahead.
bool g_prefetchw = cpu_has_prefetchw();

// initial-exec: one %fs-relative access, no __tls_get_addr call, no lazy
// allocation (which would not be async-signal-safe).
__thread ThreadState t_state __attribute__((tls_model("initial-exec")));

namespace {

void open_packet(Channel *ch, strata_lane_ctl *lc, uint32_t lane, char *lane_data, uint64_t head,
		 uint64_t now, uint32_t vtid, bool owned)
{
	auto *ph = (strata_packet_header *)(lane_data + ring_off(ch, head));
	ph->magic = STRATA_CTF_MAGIC;
	memcpy(ph->uuid, ch->uuid, sizeof ph->uuid);
	ph->stream_id = lane >= ch->first_shared ? ch->stream_id + 1 : ch->stream_id;
	ph->stream_instance_id = lane;
	ph->timestamp_begin = now;
	ph->packet_seq_num = head >> ch->subbuf_shift;
	ph->lane_id = lane;
	ph->vtid = lane >= ch->first_shared ? -1 : (int32_t)vtid;
	// Relaxed: a placement hint for the consumer (ABI 3.6), pairs with
	// nothing; once per packet, in the line of head our CAS just took.
	__atomic_store_n(&lc->writer_cpu, own_cpu_plus1(), __ATOMIC_RELAXED);
	STRATA_WHOOK(STRATA_W_OPEN_WRITTEN);
	commit_bytes(ch, commit_of(ch, lc, head), STRATA_PACKET_HEADER_SIZE, owned);
}

} // namespace
} // namespace strata

using namespace strata;

namespace strata {
namespace {

// ---- the reservation ------------------------------------------------------
//
// Split as lttng-ust's frontend: strata_reserve is the in-packet fast path
// (one clock read, one CAS on head, the record header); a packet switch
// (close the packet the record does not fit, open the next one) and a
// discard are out of line, reached once per sub-buffer or per lost event.
// The steps named in writer_hooks.h keep their places.

// Leave a reservation that records nothing: count the event as discarded
// in the lane, close the owner's busy window if it was open, and restore
// the nesting depth.  The depth overflow, a record no packet can hold, a
// full ring.
__attribute__((noinline, cold)) int reserve_discard(strata_lane_ctl *lc, ThreadState &t, uint32_t depth,
						    bool fast, bool owned)
{
	discard(lc, owned);
	if (fast)
		busy_add(lc, false);
	t.depth = depth;
	return 0;
}

// The lane a reservation writes, as strata_reserve picked it (for the
// inline helpers; the out-of-line paths take scalars, so that nothing of
// the fast path has to live in memory).
struct LaneRef {
	Channel *ch;
	strata_lane_ctl *lc;
	char *data; // the lane's ring
	uint32_t index;
	bool owned;  // this thread's alone (unlocked commit)
	bool shared; // records carry the thread context
};

// The slot's channel, with this thread's lane in it claimed; null when the
// slot is closed (or its pending buffer could not be made: claim_lane).
inline Channel *slot_channel(unsigned slot, ThreadState &t)
{
	if (__builtin_expect(slot >= STRATA_MAX_SLOTS, 0))
		return nullptr;
	// Acquire: pairs with the release store in strata_rt_slot_open; the
	// Channel and the buffer header are complete before we see the pointer.
	Channel *ch = g_slots[slot].load(std::memory_order_acquire);
	if (__builtin_expect(ch == nullptr, 0))
		return nullptr;
	if (__builtin_expect(t.ch[slot] != ch, 0) && !claim_lane(ch, slot, t))
		return nullptr;
	return ch;
}

// A FAST_OWNER lane's owner (docs/ring-buffer.md, "Unlocked reserve on
// owned lanes") enters its busy window; true when head may then change
// with unlocked cmpxchg: inside the window, and with no consumer closing
// the lane.  The load of close_req may pass our inc in the store buffer;
// the consumer's MEMBARRIER_CMD_GLOBAL_EXPEDITED between its close_req add
// and its load of owner_busy is the other half (asymmetric Dekker): either
// it sees our inc and waits, or we see its request and lock.
inline bool open_busy_window(strata_lane_ctl *lc)
{
	busy_add(lc, true);
	// Relaxed: ordered by the consumer's membarrier, see above.
	return __atomic_load_n(&lc->close_req, __ATOMIC_RELAXED) == 0;
}

// The record's size in the open packet at head offset `off`: the compact
// header when the id fits in 5 bits (narrow != wide) and the timestamp is
// less than 2^27 above the record before ours.  Relaxed: our own (or our
// handler's) last timestamp, a lower bound here only if it was in this
// lane.  A handler that runs between the two loads stores both: if it
// wrote in another lane we see that lane (0: extended header); if in this
// one, head moved and our CAS fails, so we load both again.
inline uint64_t record_size(ThreadState &t, unsigned slot, uint32_t lane, uint64_t now, uint64_t narrow,
			    uint64_t wide)
{
	uint64_t low = __atomic_load_n(&t.per_slot[slot].last_ts, __ATOMIC_RELAXED);
	std::atomic_signal_fence(std::memory_order_seq_cst);
	if (__atomic_load_n(&t.last_lane[slot], __ATOMIC_RELAXED) != lane)
		low = 0;
	return (now - low) >> STRATA_REC_COMPACT_TS_BITS ? wide : narrow;
}

// reserve_slow's flags.
constexpr unsigned kReserveOwned = 1, kReserveUnlocked = 2, kReserveLost = 4;

enum class Switch : uint64_t { kRetry, kOpened, kFull };
struct SwitchResult {
	uint64_t head; // kRetry: retry from it; kOpened: the opened packet's start
	Switch what;
};

// The packet switch: the record does not fit the open packet (head inside
// a packet): close it; or head is at a boundary: open the next packet with
// our record (narrow bytes) right after its header, if the sub-buffer is
// free (the record that opens a packet follows timestamp_begin == its own
// timestamp: the compact header always fits).  `now` is the timestamp the
// caller read for this try.
inline SwitchResult switch_packet(Channel *ch, uint32_t lane, uint64_t head, uint64_t now, uint64_t narrow,
				  bool owned, bool unlocked, ThreadState &t)
{
	strata_lane_ctl *lc = &ch->lanes[lane];
	char *lane_data = ch->data + (uint64_t)lane * ch->lane_stride;
	const uint64_t S = ch->subbuf_size;
	const uint64_t off = head & (S - 1);
	if (off != 0) {
		const uint64_t end = head - off + S;
		// Before the CAS (see load_discarded); an unlocked CAS is a
		// locked one's order here: program order against our own
		// signal handlers, x86 keeps a load before a later store, and
		// its "memory" clobber keeps the compiler from sinking the load.
		const uint64_t disc = load_discarded(lc);
		STRATA_WHOOK(STRATA_W_BEFORE_CLOSE_CAS);
		if (head_cas(lc, &head, end, unlocked)) {
			STRATA_WHOOK(STRATA_W_CLOSE_WON);
			close_packet(ch, lc, lane_data, head - off, off, now, disc, owned);
			STRATA_WHOOK(STRATA_W_CLOSED);
			head = end;
		}
		return {head, Switch::kRetry};
	}
	STRATA_WHOOK(STRATA_W_AT_BOUNDARY);
	if (!subbuf_free(ch, lc, head)) {
		// Our `head` may be stale: a writer that ran since we loaded it
		// (a signal handler that interrupted us, another thread of the
		// lane) may have opened this very sub-buffer, and its open is
		// what fails the check.  Retry from the new head in that case;
		// discard only when head has not moved.  Head only grows, so if
		// it still holds the value we checked with, it held it
		// throughout the check: at that position the sub-buffer really
		// was not free.  Acquire: as the other loads of head
		// (timestamps follow positions).
		const uint64_t now_head = __atomic_load_n(&lc->head, __ATOMIC_ACQUIRE);
		return {now_head, now_head != head ? Switch::kRetry : Switch::kFull};
	}
	STRATA_WHOOK(STRATA_W_FREE_CHECKED);
	if (!head_cas(lc, &head, head + STRATA_PACKET_HEADER_SIZE + narrow, unlocked))
		return {head, Switch::kRetry};
	// Release fence: the head CAS is ordered before every byte we write
	// into the space; pairs with the acquire fence of the overwrite-mode
	// collector, which copies bytes then re-reads head to detect that we
	// lapped its copy (seqlock).
	std::atomic_thread_fence(std::memory_order_release);
	STRATA_WHOOK(STRATA_W_OPEN_WON);
	open_packet(ch, lc, lane, lane_data, head, now, tid_of(t), owned);
	if (__builtin_expect(head < ch->lane_stride, 0)) { // lap 0: the packet's pages
		prefault_open(ch, lane_data, head);
		// The lane's first record: the consumer's first-lap looks
		// (Drain::populate_ahead) start now, not at the buffer's
		// hand-off, which may come long before a first event.  Once a
		// lane; a system call only when the consumer sleeps.
		if (head == 0)
			wake_consumer(ch->hdr);
	}
	return {head, Switch::kOpened};
}

// Blocking mode (docs/ring-buffer.md, "Blocking mode"): the ring is full at
// `head` (a boundary of lane `lc`); wait for the consumer to release the
// sub-buffer there, at most ch->block_ns.  True when it may be free now
// (or head moved: another writer opened it), so the caller retries; false
// when the wait gave up: the timeout passed (the channel is then marked
// stalled, so that the writers after us discard at once instead of each
// waiting the timeout for a consumer that is gone), or the slot was closed
// (session stopped, the process left the daemon).  Each step sleeps on
// the low half of `consumed` (FUTEX_WAIT, shared: the consumer's process
// wakes it, Reader::release, only when writers_waiting says someone
// sleeps), for at most 20 us doubling to 1 ms: a consumer that never
// wakes (older, dead, or the sub-buffer still waits for a writer's
// commit) leaves each step a bounded sleep that sees the deadline by
// itself.  No lock, no allocation; clock_gettime (vDSO) and futex are
// async-signal-safe.
__attribute__((noinline, cold)) bool block_wait(Channel *ch, unsigned slot, strata_lane_ctl *lc,
						uint64_t head)
{
	timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	long step_ns = 20000;
	// The word the consumer's release changes: the low half of `consumed`.
	uint32_t *const word = reinterpret_cast<uint32_t *>(&lc->consumed) +
			       (__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__ ? 1 : 0);
	for (;;) {
		STRATA_WHOOK(STRATA_W_BLOCK_WAIT);
		// Acquire: pairs with the release store in strata_rt_slot_close's
		// path (g_slots); the Channel stays mapped, its slot closed.
		if (g_slots[slot].load(std::memory_order_acquire) != ch)
			return false;
		// Seq_cst RMW, then our last look at `consumed` (subbuf_free),
		// against the consumer's store of `consumed`, seq_cst fence, load
		// of writers_waiting (Dekker): either that look sees the release,
		// or the consumer sees us counted and wakes the word.
		__atomic_add_fetch(&lc->writers_waiting, 1u, __ATOMIC_SEQ_CST);
		__atomic_thread_fence(__ATOMIC_SEQ_CST); // pairs with Reader::release's
		// Relaxed: the futex's expected value; the kernel compares it
		// again under its own lock, and subbuf_free below decides.
		const uint32_t seen = __atomic_load_n(word, __ATOMIC_RELAXED);
		// Acquire: as the loads of head in reserve_fast and reserve_general.
		if (__atomic_load_n(&lc->head, __ATOMIC_ACQUIRE) != head || subbuf_free(ch, lc, head)) {
			__atomic_sub_fetch(&lc->writers_waiting, 1u, __ATOMIC_SEQ_CST);
			return true;
		}
		timespec t;
		clock_gettime(CLOCK_MONOTONIC, &t);
		const uint64_t waited = (uint64_t)(t.tv_sec - t0.tv_sec) * 1000000000u + (uint64_t)t.tv_nsec -
					(uint64_t)t0.tv_nsec;
		if (waited >= ch->block_ns) {
			__atomic_sub_fetch(&lc->writers_waiting, 1u, __ATOMIC_SEQ_CST);
			// Relaxed: a hint (see Channel::block_stalled).
			ch->block_stalled.store(1, std::memory_order_relaxed);
			// Relaxed: a count the consumer reports, ordering nothing.
			__atomic_fetch_add(&ch->hdr->block_timeouts, 1u, __ATOMIC_RELAXED);
			return false;
		}
		const uint64_t left = ch->block_ns - waited;
		const timespec d{0, (long)((uint64_t)step_ns < left ? (uint64_t)step_ns : left)};
		// EAGAIN (released since `seen`), EINTR, a timeout: look again.
		if (syscall(SYS_futex, word, FUTEX_WAIT, seen, &d, nullptr, 0) == 0)
			STRATA_WHOOK(STRATA_W_BLOCK_WOKEN);
		__atomic_sub_fetch(&lc->writers_waiting, 1u, __ATOMIC_SEQ_CST);
		if (step_ns < 1000000)
			step_ns *= 2;
	}
}

// May this writer wait for a full ring?  Only a blocking channel not marked
// stalled, and only a writer that holds no other reservation: a nested one
// (a signal handler that interrupted a reservation of its thread) must not
// wait, since the record it interrupted may be the one the consumer waits
// for (docs/ring-buffer.md, "Blocking mode").  t.depth counts ours already.
inline bool may_block(const Channel *ch, const ThreadState &t)
{
	return ch->block_ns && t.depth == 1 && !ch->block_stalled.load(std::memory_order_relaxed);
}

// A discard mode's full ring at `head`, a boundary of lane `lc` (depth
// taken): the sub-buffer there is not free and head has not moved since
// (switch_packet's kFull test), and nobody may wait.  reserve_general
// asks before its clock read, which a lost event does not need: a full
// ring's events cost a fast path and this, not a second fenced TSC and a
// packet switch's attempt (bench/run.sh's 8-thread row lost a fifth of
// its events at 1.5x the 1-thread cost).
__attribute__((noinline)) bool ring_full_at(Channel *ch, strata_lane_ctl *lc, uint64_t head,
					    const ThreadState &t)
{
	if (may_block(ch, t) || subbuf_free(ch, lc, head))
		return false;
	// Acquire: as switch_packet's re-check (timestamps follow positions).
	return __atomic_load_n(&lc->head, __ATOMIC_ACQUIRE) == head;
}

// The slow path of a reservation: the packet switch, and the retries after
// a lost CAS (another writer of the lane, or a signal handler of ours,
// moved head).  Entered with the fast path's head and timestamp: with
// `lost` set that try's CAS failed (a new clock read first), else the
// record did not fit the open packet or head was at a boundary.  Returns
// the reservation, or taken == 0 when the ring is full (discard).
struct Reserved {
	uint64_t pos, now, taken;
};
__attribute__((noinline)) Reserved reserve_slow(Channel *ch, uint32_t lane, ThreadState &t, unsigned slot,
						uint64_t head, uint64_t now, uint64_t narrow, uint64_t wide,
						unsigned flags)
{
	const bool owned = flags & kReserveOwned;
	bool unlocked = flags & kReserveUnlocked, lost = flags & kReserveLost;
	for (;;) {
		if (!lost) {
			const SwitchResult sw =
				switch_packet(ch, lane, head, now, narrow, owned, unlocked, t);
			head = sw.head;
			// Relaxed: a hint (Channel::handoff_owed); a packet switch
			// is where a system call is allowed.
			if (__builtin_expect(ch->handoff_owed.load(std::memory_order_relaxed), 0))
				retry_handoff(ch, now);
			if (sw.what == Switch::kOpened) {
				// Relaxed: a hint; the consumer released a sub-buffer.
				if (__builtin_expect(ch->block_stalled.load(std::memory_order_relaxed), 0))
					ch->block_stalled.store(0, std::memory_order_relaxed);
				if (!owned)
					arm_claim_retry(ch, slot, t);
				return {head + STRATA_PACKET_HEADER_SIZE, now, narrow};
			}
			if (sw.what == Switch::kFull) {
				if (!may_block(ch, t))
					return {head, now, 0};
				// Out of a FAST_OWNER busy window while we wait: a
				// consumer closing this lane waits for it to end, and
				// the consumer never waits on a writer that waits.
				strata_lane_ctl *lc = &ch->lanes[lane];
				const bool fast = owned && ch->fast_owner;
				if (fast)
					busy_add(lc, false);
				const bool retry = block_wait(ch, slot, lc, head);
				if (fast) // back in (reserve_discard leaves it on a give-up)
					unlocked = open_busy_window(lc);
				if (!retry)
					return {head, now, 0};
				// Acquire: as reserve_general's load of head; the clock
				// read after.
				head = __atomic_load_n(&lc->head, __ATOMIC_ACQUIRE);
				now = clock_now();
				continue;
			}
		}
		now = clock_now();
		STRATA_WHOOK(STRATA_W_CLOCK_READ);
		const uint64_t off = head & (ch->subbuf_size - 1);
		lost = false;
		if (off == 0)
			continue;
		const uint64_t taken = record_size(t, slot, lane, now, narrow, wide);
		if (off + taken >= ch->subbuf_size)
			continue;
		STRATA_WHOOK(STRATA_W_BEFORE_RESERVE_CAS);
		if (head_cas(&ch->lanes[lane], &head, head + taken, unlocked))
			return {head, now, taken};
		lost = true;
	}
}

// After a reservation of `taken` bytes at `pos`: remember our timestamp,
// write the record header (compact, or extended: also every id >= 31,
// where narrow == wide; then a shared lane's thread context).  Returns
// where the payload goes.  The fast path's owned lane: fast_reserved.
inline char *record_header(const LaneRef &l, unsigned slot, ThreadState &t, uint32_t id, uint64_t pos,
			   uint64_t now, bool extended)
{
	// Relaxed: see ThreadState::PerSlot.  The lane first: a handler that
	// runs between the two stores sees our lane with an older timestamp,
	// still a lower bound there, since our record precedes its own; with
	// the timestamp first it could take ours for another lane's.
	__atomic_store_n(&t.last_lane[slot], (uint16_t)l.index, __ATOMIC_RELAXED);
	std::atomic_signal_fence(std::memory_order_seq_cst);
	__atomic_store_n(&t.per_slot[slot].last_ts, now, __ATOMIC_RELAXED);
	char *rec = l.data + ring_off(l.ch, pos);
	// Not in a shared lane: its writers on different CPUs would take the
	// lines ahead from each other.
	if (!l.shared)
		prefetch_ahead(rec);
	uint64_t hdr;
	if (__builtin_expect(extended, 0)) {
		rec[0] = (char)STRATA_REC_EXTENDED_ID;
		memcpy(rec + 1, &id, sizeof id);
		memcpy(rec + 5, &now, sizeof now);
		hdr = STRATA_REC_EXTENDED_SIZE;
	} else {
		const uint32_t w = id | (uint32_t)(now << 5);
		memcpy(rec, &w, sizeof w);
		hdr = STRATA_REC_COMPACT_SIZE;
	}
	if (l.shared) {
		const int32_t tid = (int32_t)tid_of(t);
		memcpy(rec + hdr, &tid, sizeof tid);
		hdr += STRATA_REC_SHARED_CTX_SIZE;
	}
	return rec + hdr;
}

// The general path's record: its header, and the commit context at its
// depth (strata_commit's untagged case).
inline char *record_begin(const LaneRef &l, unsigned slot, ThreadState &t, uint32_t depth, uint32_t id,
			  uint64_t pos, uint64_t now, bool extended)
{
	char *rec = record_header(l, slot, t, id, pos, now, extended);
	CommitCtx &c = t.ctx[depth];
	c.ch = l.ch;
	c.commit = commit_of(l.ch, l.lc, pos);
	c.records = l.ch->mode == STRATA_MODE_OVERWRITE ? &l.lc->records : nullptr;
	c.owned = l.owned;
	return rec;
}

// The fast path's size word: the record's bytes (< 2^32: a sub-buffer is at
// most STRATA_MAX_SUBBUF_SIZE) and, above them, where its sub-buffer's
// commit counter lies past ch->lanes (bytes; its lane is that over the
// size of a lane's control), which strata_commit unpacks.
constexpr unsigned kFastCommitShift = 32;
static_assert(STRATA_MAX_SUBBUF_SIZE <= (1ull << kFastCommitShift) &&
		      STRATA_MAX_LANES * sizeof(strata_lane_ctl) <= (1ull << (64 - kFastCommitShift)),
	      "the fast path's size word holds bytes and commit counter");
inline uint64_t fast_size_word(const Channel *ch, strata_lane_ctl *lc, uint64_t pos, uint64_t bytes)
{
	const uint64_t commit = (uint64_t)((char *)commit_of(ch, lc, pos) - (char *)ch->lanes);
	return bytes | commit << kFastCommitShift;
}

// The fast path's record, reserved at `pos`: its header, and no CommitCtx:
// what strata_commit needs rides in r.  record_header's compact case on an
// owned lane, where last_lane[slot] is the lane already (ThreadState::
// PerSlot), and no thread context: everything through the slot's block.
inline void fast_reserved(struct strata_reservation *r, Channel *ch, strata_lane_ctl *lc,
			  ThreadState::PerSlot &ps, uint32_t id, uint64_t pos, uint64_t now, uint64_t bytes)
{
	std::atomic_signal_fence(std::memory_order_seq_cst);  // as record_header's
	__atomic_store_n(&ps.last_ts, now, __ATOMIC_RELAXED); // see ThreadState::PerSlot
	char *rec = ps.data + ring_off(ch, pos);
	prefetch_ahead(rec);
	const uint32_t w = id | (uint32_t)(now << 5);
	memcpy(rec, &w, sizeof w);
	r->rec = rec + STRATA_REC_COMPACT_SIZE;
	r->lane = (void *)((uintptr_t)ch | ch->fast_commit_tag);
	r->size = fast_size_word(ch, lc, pos, bytes);
}

// strata_write's record, reserved at `pos`: fast_reserved's header, the
// payload, and strata_commit's fast case in place, from the values at hand
// (the lane's control, the position) rather than from a packed
// reservation.  Same order as a reserve, the caller's writes, a commit:
// the same hooks, the same pairs (commit_add's release).  True if the
// sub-buffer is now complete: the caller wakes the consumer, by a tail
// call (wake_done), so that no value here lives across a call.
inline bool fast_write(Channel *ch, strata_lane_ctl *lc, ThreadState::PerSlot &ps, uint32_t id, uint64_t pos,
		       uint64_t now, uint64_t bytes, const char *payload)
{
	std::atomic_signal_fence(std::memory_order_seq_cst);  // as record_header's
	__atomic_store_n(&ps.last_ts, now, __ATOMIC_RELAXED); // see ThreadState::PerSlot
	char *rec = ps.data + ring_off(ch, pos);
	prefetch_ahead(rec);
	const uint32_t w = id | (uint32_t)(now << 5);
	memcpy(rec, &w, sizeof w);
	copy_payload(rec + STRATA_REC_COMPACT_SIZE, payload, bytes - STRATA_REC_COMPACT_SIZE);
	STRATA_WHOOK(STRATA_W_BEFORE_COMMIT);
	if (ch->fast_commit_tag & kFastRecords)
		count_record(&lc->records, true);
	const bool complete = commit_add(ch, commit_of(ch, lc, pos), bytes, true);
	std::atomic_signal_fence(std::memory_order_seq_cst); // compiler-only, as strata_commit's
	t_state.depth--;
	return complete;
}

// strata_write's record completed its sub-buffer: wake the consumer, and
// the record is in (1).
__attribute__((noinline)) int wake_done(strata_buffer_header *hdr)
{
	wake_consumer(hdr);
	return 1;
}

// The owned fast path's bound after our record [head, end) (PerSlot::limit):
// its packet's end; in the lane's first sub-buffer of lap 0, the start of
// the next 64 KiB fault-around window past `end`, after mapping the window
// `end` is in by a read (map_made: the pages the consumer made, 16 a
// fault, where the writer would write-fault each).  A lane's first packet
// may take only a page (the idle-process rule, prefault_first) and the
// later ones are mapped at their opens (prefault_open): this is the first
// sub-buffer's part.  A general record every 64 KiB there, none after.
inline void set_limit(ThreadState::PerSlot &ps, char *lane_data, uint64_t head, uint64_t end, uint64_t S)
{
	const uint64_t packet_end = (head & ~(S - 1)) + S;
	uint64_t limit = packet_end;
	if (__builtin_expect(head < S && end < S, 0)) {
		const uintptr_t va = reinterpret_cast<uintptr_t>(lane_data) + end;
		map_made(lane_data + end, 1);
		const uint64_t next =
			((va | (kFaultAround - 1)) + 1) - reinterpret_cast<uintptr_t>(lane_data);
		limit = next < packet_end ? next : packet_end;
	}
	__atomic_store_n(&ps.limit, limit, __ATOMIC_RELAXED);
}

// Every reservation the fast path below does not take: the general path
// (any lane, any record, packet switches, retries, discards).
__attribute__((noinline)) int reserve_general(struct strata_reservation *r, uint32_t id, unsigned slot,
					      size_t size);

// The common case: an owned FAST_OWNER lane already claimed, a compact
// record that fits the open packet, the clock page readable, the unlocked
// CAS won.  It makes no call but tail calls to reserve_general (and the
// hooks of the test build); anything else leaves for reserve_general
// before touching the lane, or after undoing only its own busy window and
// depth (a lost CAS changed nothing): reserve_general then starts the
// reservation over, as a retry would (a new head, a new clock read).  Same
// steps as reserve_general, in the same order but the TSC read (below):
// docs/ring-buffer.md, "The fast path".
//
// Hold (strata_rt_reserve_hold, the pthread preload's mutex_held): the
// same steps, but every exit to reserve_general returns 0 instead, and so
// does a record whose TSC is more than max_ticks after t0; both leave
// before the CAS, so 0 always means nothing of the lane changed.  On
// success *ticks is the record's TSC - t0 (skew: 0).
//
// The ordered TSC is read as soon as the lane is known to be ours: after
// the one check that sends the usual exits to the general path, before the
// read it could not use (it reads the clock after its load of head):
// `fast` (no clock page, no owned lane in this slot: a thread beyond the
// owned lanes or one yet to claim, no FAST_OWNER buffers in this process:
// no membarrier), a load at the slot's %fs-relative address beside the
// page's.  The arguments' parking, the compact id (tp's load), the checks
// that rarely fail (the slot still holding that channel, a depth left),
// the nesting level, the clock page's seq, the busy window and head come
// after it (1.1-1.6 ns an event on the AMD EPYC with kvm-clock, where the
// id and the slot's block's linear address stood before it: docs/
// ring-buffer.md, "The TSC first"): the fence waits for
// every load before it, so what stands before it lengthens every event,
// and what follows it runs beside the read (docs/ring-buffer.md, "The TSC
// first").  seq after the TSC: the page's fields are still one snapshot
// (loaded between the two seq loads), and a snapshot newer than the TSC
// has a cycle_last past it, whose negative delta the conversion refuses.
// The TSC before the load of head, unlike the general path: on an owned
// lane the only other writers of head are this thread's signal handlers,
// whose records the last_ts check sees (record_size: a record that would
// stamp a time before theirs leaves for the general path; a handler
// before our nesting level too), and consumers' closes, which take no
// clock and leave head at a packet boundary, where this path does not go
// (docs/ring-buffer.md, "The fast path").
//
// Few values live across the TSC read (RDTSCP takes three registers): the
// caller's arguments parked in r (reserve_general_parked), the slot's
// block (ThreadState::PerSlot) as one value, the page; `depth` is taken
// after the read, through t_state (%fs-relative; an exit after it undoes
// it out of line: leave_window).  Each value fewer is a callee-saved
// register fewer to push and pop: on the Intel Xeon measured, an event's
// instructions around the fence did not overlap it, so each one counted
// (docs/benchmarks.md); on the AMD EPYC what follows the read overlaps it,
// and the loads before it count more than instructions (above).  The
// thread's state is reached at its linear address, taken once (the empty
// asm only hides where the pointer came from; it is the same object):
// through t_state the compiler mixes %fs-relative accesses with a linear
// address rebuilt (a load of %fs:0 and adds) for each atomic one.
__attribute__((always_inline)) inline ThreadState &thread_state_linear()
{
	ThreadState *p = &t_state;
	asm("" : "+r"(p));
	return *p;
}

// The general path for a fast path that left: the caller's arguments,
// parked in r's own fields at entry (an out-parameter, read by the caller
// only after a 1), so that the fast path need not keep them in registers.
inline void park_args(struct strata_reservation *r, struct strata_tracepoint *tp, unsigned slot, size_t size)
{
	r->rec = (char *)tp;
	r->lane = (void *)(uintptr_t)slot;
	r->size = size;
}
__attribute__((noinline)) int reserve_general_parked(struct strata_reservation *r)
{
	const auto *tp = (const struct strata_tracepoint *)r->rec;
	return reserve_general(r, tp->id, (unsigned)(uintptr_t)r->lane, r->size);
}

// strata_write's arguments, parked as strata_reserve's (park_args) but
// that r->rec is the caller's payload already, and tp is not kept: its id
// rides above the slot (the general path takes the id, not tp).
inline void park_write(struct strata_reservation *r, const struct strata_tracepoint *tp, unsigned slot,
		       size_t size)
{
	r->lane = (void *)((uintptr_t)slot | (uintptr_t)tp->id << 32);
	r->size = size;
}
inline uint32_t parked_write_id(const struct strata_reservation *r)
{
	return (uint32_t)((uintptr_t)r->lane >> 32);
}

// strata_commit's case for a reservation of the general path (untagged:
// the CommitCtx it left at its depth); strata_write's general path takes it
// inline, not through the exported function.
inline void commit_general(struct strata_reservation *r)
{
	const CommitCtx *c = (const CommitCtx *)r->lane;
	STRATA_WHOOK(STRATA_W_BEFORE_COMMIT);
	if (c->records)
		count_record(c->records, c->owned);
	commit_bytes(c->ch, c->commit, r->size, c->owned);
	std::atomic_signal_fence(std::memory_order_seq_cst); // compiler-only, see reserve
	t_state.depth--;
}

// strata_write's general path: a reservation of the general path, the
// copy, a commit.
__attribute__((noinline)) int write_general_parked(struct strata_reservation *r)
{
	const char *payload = r->rec;
	const size_t size = r->size;
	struct strata_reservation out;
	if (!reserve_general(&out, parked_write_id(r), (unsigned)(uintptr_t)r->lane & 0xffffffffu, size))
		return 0;
	memcpy(out.rec, payload, size);
	commit_general(&out);
	return 1;
}

// The general path of a fast path that left, for each kind of caller:
// strata_reserve's, strata_write's, strata_rt_reserve_hold's (none: 0).
enum FastKind { kFastReserve, kFastHold, kFastWrite };
template <int Kind> inline int fast_leave(struct strata_reservation *r)
{
	if (Kind == kFastHold)
		return 0;
	return Kind == kFastWrite ? write_general_parked(r) : reserve_general_parked(r);
}
// The caller's arguments parked in r for the general path, as each kind
// of caller leaves them (park_args, park_write; the hold's: none).
template <int Kind>
__attribute__((always_inline)) inline void park(struct strata_reservation *r, struct strata_tracepoint *tp,
						unsigned slot, size_t size)
{
	if (Kind == kFastReserve)
		park_args(r, tp, slot, size);
	else if (Kind == kFastWrite)
		park_write(r, tp, slot, size);
}
template <int Kind>
inline int park_leave(struct strata_reservation *r, struct strata_tracepoint *tp, unsigned slot, size_t size)
{
	park<Kind>(r, tp, slot, size);
	return fast_leave<Kind>(r);
}

// A fast path that left after opening its busy window (nothing of the lane
// changed): close the window, undo the depth, then the general path with
// the parked arguments (r null: strata_rt_reserve_hold's 0).  Out of line,
// so that the fast path keeps no value for it across the TSC read.
template <int Kind>
__attribute__((noinline)) int leave_window(strata_lane_ctl *lc, struct strata_reservation *r)
{
	busy_add(lc, false);
	std::atomic_signal_fence(std::memory_order_seq_cst);
	t_state.depth--;
	return fast_leave<Kind>(r);
}

// The fast path's record, reserved at `head` (the CAS won, the window
// closed): for strata_write the whole record and its commit; else the
// header, and the reservation handed back (with the hold's ticks).
template <int Kind>
__attribute__((always_inline)) inline int
fast_won(struct strata_reservation *r, struct strata_tracepoint *tp, Channel *ch, strata_lane_ctl *lc,
	 ThreadState::PerSlot &ps, uint64_t head, uint64_t now, uint64_t narrow, uint64_t d, uint64_t *ticks)
{
	if (Kind == kFastWrite) {
		if (__builtin_expect(fast_write(ch, lc, ps, parked_write_id(r), head, now, narrow, r->rec),
				     0))
			return wake_done(ch->hdr);
		return 1;
	}
	const uint32_t id = Kind == kFastHold ? tp->id : ((const struct strata_tracepoint *)r->rec)->id;
	fast_reserved(r, ch, lc, ps, id, head, now, narrow);
	if (Kind == kFastHold)
		*ticks = d;
	return 1;
}

// Kind: kFastReserve (strata_reserve: the arguments parked in r),
// kFastWrite (strata_write: parked in r beside the payload; the record is
// written and committed here) or kFastHold (below).
template <int Kind>
__attribute__((always_inline)) inline int
reserve_fast(struct strata_reservation *r, struct strata_tracepoint *tp, unsigned slot, size_t size,
	     uint64_t t0, uint64_t max_ticks, uint64_t *ticks)
{
	constexpr bool Hold = Kind == kFastHold;
	if (__builtin_expect(slot >= STRATA_MAX_SLOTS, 0))
		return 0;
	// Not owned here, not FAST_OWNER, or no page: general (see above).
	// The slot's `fast` from its %fs-relative address and the page's
	// word: the only loads the fence waits for.  Acquire: as clock_now's
	// (the page's mapping before the pointer).  Not null when `fast` is
	// not: `fast` is set only once a page is (ThreadState::PerSlot).
	Channel *const fast = t_state.per_slot[slot].fast;
	const ClockPageRef page = clock_page_ref();
	if (__builtin_expect(fast == nullptr, 0))
		return park_leave<Kind>(r, tp, slot, size);
	uint32_t tsc_lo; // The TSC now (see above), its low half converted
	const uint64_t tsc = strata_kclock_ordered_lo(&tsc_lo, page.rdtscp);
	const strata_kclock *k = page.k;
	if (__builtin_expect(tp->id >= STRATA_REC_EXTENDED_ID, 0))
		return park_leave<Kind>(r, tp, slot, size);
	park<Kind>(r, tp, slot, size);
	// The slot's block as a value of its own (the empty asm, as in
	// thread_state_linear): kept in one register, not rebuilt from the
	// state and the slot where the TSC read took the register it was in.
	ThreadState &t = thread_state_linear();
	ThreadState::PerSlot *psp = &t.per_slot[slot];
	asm("" : "+r"(psp));
	ThreadState::PerSlot &ps = *psp;
	// Acquire: as slot_channel's.  The slot still holds the channel whose
	// lane we own (a close or reopen since: general).  No size check here:
	// a record that does not fit the open packet (head + narrow < limit below)
	// goes to the general path, which refuses one too large for any.
	// From here on `fast` is that channel.
	if (__builtin_expect(
		    g_slots[slot].load(std::memory_order_acquire) != fast || t_state.depth >= kMaxDepth, 0))
		return fast_leave<Kind>(r);
	Channel *const ch = fast;
	strata_lane_ctl *lc = ps.lc; // &ch->lanes[lane] (ThreadState::PerSlot)
	t_state.depth++;             // undone by a decrement on every way out but the record's
	std::atomic_signal_fence(std::memory_order_seq_cst); // as reserve_general's
	// Acquire: the page's fields after it (as strata_kclock_begin_how's).
	const uint32_t seq = __atomic_load_n(&k->seq, __ATOMIC_ACQUIRE);
	STRATA_WHOOK(STRATA_W_TSC_READ);
	if (__builtin_expect(!open_busy_window(lc), 0)) // a consumer closes the lane: locked path
		return leave_window<Kind>(lc, r);
	// Acquire: as reserve_general's (timestamps follow positions).
	uint64_t head = __atomic_load_n(&lc->head, __ATOMIC_ACQUIRE);
	STRATA_WHOOK(STRATA_W_HEAD_LOADED);
	uint64_t now;
	// The common case's conversion only: the rest (rare) takes the general
	// path, whose clock read converts in full.
	const int clk = strata_kclock_end_common(k, seq, tsc, tsc_lo, &now);
	if (__builtin_expect(clk == 0, 1)) {
		STRATA_WHOOK(STRATA_W_CLOCK_READ);
		const uint64_t narrow = STRATA_REC_COMPACT_SIZE + (Hold ? size : r->size);
		const uint64_t d = (int64_t)(tsc - t0) > 0 ? tsc - t0 : 0; // Hold only
		// Compact header: our last record in this lane (last_lane[slot] ==
		// lane while owned: ThreadState::PerSlot) within 2^27 ns.
		const uint64_t low = __atomic_load_n(&ps.last_ts, __ATOMIC_RELAXED);
		// Inside an open packet with room to spare (PerSlot::limit).
		const uint64_t limit = __atomic_load_n(&ps.limit, __ATOMIC_RELAXED);
		if (__builtin_expect(head + narrow < limit &&
					     ((now - low) >> STRATA_REC_COMPACT_TS_BITS) == 0 &&
					     (!Hold || d <= max_ticks),
				     1)) {
			STRATA_WHOOK(STRATA_W_BEFORE_RESERVE_CAS);
			if (__builtin_expect(head_cas(lc, &head, head + narrow, true), 1)) {
				busy_add(lc, false);
				std::atomic_thread_fence(std::memory_order_release); // as reserve_general's
				STRATA_WHOOK(STRATA_W_RESERVED);
				return fast_won<Kind>(r, tp, ch, lc, ps, head, now, narrow, d, ticks);
			}
		}
	}
	// Nothing of the lane changed: leave the window, start over in full.
	return leave_window<Kind>(lc, r);
}

} // namespace
} // namespace strata

extern "C" STRATA_EXPORT int strata_reserve(struct strata_reservation *r, struct strata_tracepoint *tp,
					    unsigned slot, size_t size)
{
	return reserve_fast<kFastReserve>(r, tp, slot, size, 0, 0, nullptr);
}

extern "C" STRATA_EXPORT int strata_write(struct strata_reservation *r, struct strata_tracepoint *tp,
					  unsigned slot, size_t size)
{
	return reserve_fast<kFastWrite>(r, tp, slot, size, 0, 0, nullptr);
}

extern "C" STRATA_EXPORT int strata_rt_reserve_hold(struct strata_reservation *r,
						    struct strata_tracepoint *tp, unsigned slot, size_t size,
						    uint64_t t0, uint64_t max_ticks, uint64_t *ticks)
{
	return reserve_fast<kFastHold>(r, tp, slot, size, t0, max_ticks, ticks);
}

namespace strata {
namespace {
int reserve_general(struct strata_reservation *r, uint32_t id, unsigned slot, size_t size)
{
	ThreadState &t = t_state;
	Channel *ch = slot_channel(slot, t);
	if (__builtin_expect(ch == nullptr, 0))
		return 0;
	promote_lane(ch, slot, t);
	const bool owned = t.exclusive & (1u << slot);
	const uint32_t lane = owned ? t.lane[slot] : shared_lane(ch, t.lane[slot]);
	strata_lane_ctl *lc = &ch->lanes[lane];
	if (__builtin_expect(t.depth >= kMaxDepth, 0))
		return reserve_discard(lc, t, t.depth, false, owned);
	const uint32_t depth = t.depth++;
	// Compiler-only: a signal handler on this thread sees depth+1 before we
	// touch the lane.
	std::atomic_signal_fence(std::memory_order_seq_cst);
	// The fast path's step (its TSC read, after its nesting level), so that
	// every writer that takes a level passes it.
	STRATA_WHOOK(STRATA_W_TSC_READ);
	// `size` is the payload; the record adds a header of 4 (compact) or 13
	// (extended) bytes and, in a shared lane, the 4-byte thread context.
	// A record must fit in an empty packet with room to spare: a packet is
	// only ever finished by a close, never filled to its last byte.
	const LaneRef l{ch,   lc,    ch->data + (uint64_t)lane * ch->lane_stride,
			lane, owned, lane >= ch->first_shared};
	const uint64_t S = ch->subbuf_size;
	const uint64_t ctx = l.shared ? STRATA_REC_SHARED_CTX_SIZE : 0;
	const uint64_t wide = STRATA_REC_EXTENDED_SIZE + ctx + size;
	if (__builtin_expect(size > S - STRATA_PACKET_HEADER_SIZE - 1 - STRATA_REC_EXTENDED_SIZE -
					     STRATA_REC_SHARED_CTX_SIZE,
			     0))
		return reserve_discard(lc, t, depth, false, owned);
	const uint64_t narrow = id < STRATA_REC_EXTENDED_ID ? STRATA_REC_COMPACT_SIZE + ctx + size : wide;
	const bool fast = owned && ch->fast_owner;
	const bool unlocked = fast && open_busy_window(lc);
	// `head` is the exact end of the last record: records are byte-packed
	// and content_size is where the last one ends.  Acquire (here and on
	// CAS failure): the clock read below then comes after every clock read
	// of writers whose reservation we observed, so timestamps follow
	// positions within the lane.  Pairs with the acq_rel CAS of those
	// writers.
	uint64_t head = __atomic_load_n(&lc->head, __ATOMIC_ACQUIRE);
	STRATA_WHOOK(STRATA_W_HEAD_LOADED);
	if (__builtin_expect((head & (S - 1)) == 0, 0) && ring_full_at(ch, lc, head, t))
		return reserve_discard(lc, t, depth, fast, owned);
	uint64_t now = clock_now(), taken = 0;
	STRATA_WHOOK(STRATA_W_CLOCK_READ);
	const uint64_t off = head & (S - 1);
	bool done = false;
	if (__builtin_expect(off != 0, 1)) {
		taken = record_size(t, slot, lane, now, narrow, wide);
		if (__builtin_expect(off + taken < S, 1)) {
			STRATA_WHOOK(STRATA_W_BEFORE_RESERVE_CAS);
			done = head_cas(lc, &head, head + taken, unlocked);
		}
	}
	if (__builtin_expect(!done, 0)) {
		const unsigned flags = (owned ? kReserveOwned : 0) | (unlocked ? kReserveUnlocked : 0) |
				       (taken && off + taken < S ? kReserveLost : 0);
		const Reserved res = reserve_slow(ch, lane, t, slot, head, now, narrow, wide, flags);
		if (res.taken == 0)
			return reserve_discard(lc, t, depth, fast, owned);
		head = res.pos;
		now = res.now;
		taken = res.taken;
	}
	if (fast) { // head is ours up to head + taken: a consumer may close from here
		busy_add(lc, false);
		set_limit(t.per_slot[slot], l.data, head, head + taken, S);
	}
	std::atomic_thread_fence(std::memory_order_release); // same pairing as switch_packet's
	STRATA_WHOOK(STRATA_W_RESERVED);
	r->rec = record_begin(l, slot, t, depth, (uint32_t)id, head, now, taken == wide);
	r->lane = &t.ctx[depth];
	r->size = taken; // the record's bytes: what commit adds
	return 1;
}
} // namespace
} // namespace strata

// A fast-path reservation (lane tagged, kFastCommit): an owned lane's
// commit, from the channel and the packed size word alone; else the
// CommitCtx the general path left at its depth.
extern "C" STRATA_EXPORT void strata_commit(struct strata_reservation *r)
{
	const uintptr_t lane = (uintptr_t)r->lane;
	if (__builtin_expect(lane & kFastCommit, 1)) {
		Channel *ch = (Channel *)(lane & ~kFastTagMask);
		const uint64_t w = r->size, at = w >> kFastCommitShift;
		STRATA_WHOOK(STRATA_W_BEFORE_COMMIT);
		if (lane & kFastRecords)
			count_record(&ch->lanes[at / sizeof(strata_lane_ctl)].records, true);
		const bool complete =
			commit_add(ch, (strata_u64 *)((char *)ch->lanes + at), (uint32_t)w, true);
		std::atomic_signal_fence(std::memory_order_seq_cst); // compiler-only, see reserve
		t_state.depth--; // the record is in: the wake below is no part of it
		if (__builtin_expect(complete, 0))
			wake_consumer(ch->hdr);
		return;
	}
	strata::commit_general(r);
}

namespace strata {
// An event dropped before it reached strata_reserve (strata_filter_pass
// kept losing the race with a rule rewrite): counted as discarded in this
// thread's lane of the slot, so that recorded + discarded == emitted still
// holds.  Same context and the same slot-pointer contract as strata_reserve.
void writer_count_discarded(unsigned slot)
{
	if (slot >= STRATA_MAX_SLOTS)
		return;
	// Acquire: pairs with the release store in strata_rt_slot_open (as in
	// strata_reserve).
	Channel *ch = g_slots[slot].load(std::memory_order_acquire);
	if (ch == nullptr)
		return;
	ThreadState &t = t_state;
	if (t.ch[slot] != ch && !claim_lane(ch, slot, t))
		return;
	discard(&ch->lanes[t.lane[slot]]);
}
} // namespace strata

// strata_filter_pass (field filters) lives in registry.cpp, next to the
// programs and masks it reads.
