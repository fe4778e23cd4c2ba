/*
 * rt_internal.h - what the runtime's own files share (writer.cpp, slots.cpp,
 * registry.cpp, clock.cpp).  Not installed, not seen by the control plane.
 *
 * Contract of the runtime (docs/ring-buffer.md has the long form):
 *   - application threads (and signal handlers interrupting them, nested up
 *     to kMaxDepth) run strata_reserve/strata_commit: lock-free, no
 *     allocation, a system call only when a sub-buffer completes (futex
 *     wake) or, where glibc does not describe its thread descriptor, on
 *     a thread's first event (gettid: tid_slow);
 *   - the control plane (slot open/close, rules, registration) is serialised
 *     by ControlLock, a try-lock that reports re-entry from a signal handler
 *     as STRATA_RT_EBUSY instead of deadlocking;
 *   - the fast path never reads the registry: it gets its tracepoint from
 *     the call site and its buffer from g_slots (one acquire load).
 * Everything the writer uses to compute addresses lives in a private
 * Channel, never in shared memory, so a hostile consumer cannot steer the
 * writer out of its mapping.
 */
#ifndef STRATA_LIBTRACE_RT_INTERNAL_H
#define STRATA_LIBTRACE_RT_INTERNAL_H

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <sys/mman.h>

#include <strata/tracepoint.h>

#include "strata_abi.h"
#include "strata_kclock.h"
#include "runtime.h"
#include "madv_populate.h"
#include "tsan.h"

#define STRATA_EXPORT __attribute__((visibility("default")))

namespace strata {

// Map pages ahead in one system call (madvise, kMadvPopulateWrite and
// kMadvPopulateRead of madv_populate.h) instead of a fault each: a fault
// costs 12 us on the VM of docs/benchmarks.md, a populated page 1 us.
//
// The pages of [p, p + len) mapped now in one call: for data a starting
// process writes for the first time, spread over a few pages of .bss.
inline void prefault(const void *p, size_t len)
{
	if (!len)
		return;
	const uintptr_t a = reinterpret_cast<uintptr_t>(p) & ~static_cast<uintptr_t>(4095);
	const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + len + 4095) & ~static_cast<uintptr_t>(4095);
	madvise(reinterpret_cast<void *>(a), e - a, kMadvPopulateWrite);
}

constexpr unsigned kMaxDepth = 4;                       // nested reservations per thread
constexpr uint32_t kMaxEventId = STRATA_LIMIT_EVENT_ID; // strata_limits.h

/*
 * One open slot buffer, as the writer sees it.  Lives in its own private
 * anonymous mapping which is never unmapped: a thread that loaded the
 * pointer just before strata_rt_slot_close keeps reading valid geometry,
 * and a pointer identifies one open of a slot for the thread's lane cache.
 */
// x86-64 without ThreadSanitizer (which cannot see inside asm): a lane's
// owner commits, and in a FAST_OWNER buffer reserves, with unlocked
// instructions (writer.cpp; docs/ring-buffer.md).
#if defined(__x86_64__) && !defined(STRATA_TSAN)
#define STRATA_UNLOCKED_COMMIT 1
#endif

struct Channel {
	unsigned slot;
	int fd;
	char *base; // the shared mapping
	uint64_t total_size;
	strata_buffer_header *hdr;
	strata_lane_ctl *lanes;
	char *data;
	uint64_t subbuf_size;  // S, power of two
	uint64_t n_subbuf;     // N, power of two
	uint64_t lane_stride;  // N * S
	uint64_t stride_mask;  // N * S - 1: a position's offset in its lane
	uint64_t nsub_mask;    // N - 1: a position's sub-buffer, after subbuf_shift
	unsigned subbuf_shift; // log2(S)
	unsigned ring_shift;   // log2(N * S)
	uint32_t n_lanes;      // owned lanes, then shared ones
	uint32_t first_shared; // lanes [first_shared, n_lanes) are shared (strata_abi.h)
	uint32_t mode;
	uint32_t stream_id;
	bool fast_owner; // STRATA_BUF_FAST_OWNER: owners update head unlocked (writer.cpp)
	bool huge_pages; // lap 0 collapses whole 2 MiB chunks (collapse_ahead; STRATA_HUGE_PAGES=0: no)
	// What a fast-path reservation tags its channel pointer with in
	// strata_reservation::lane (writer.cpp, kFastCommit | kFastRecords in
	// overwrite mode); set with mode.
	uint32_t fast_commit_tag;
	// Blocking mode (strata_abi.h): how long a writer waits for a full ring
	// to drain before it discards; 0: never waits.
	uint64_t block_ns;
	// Set when a wait timed out (the consumer is gone or stuck): writers
	// then discard at once until a writer opens a packet again (the
	// consumer released one).  Relaxed: a hint, the timeout is the bound.
	std::atomic<uint32_t> block_stalled;
	uint8_t uuid[16];
	char *desc; // descriptor table in the mapping
	uint64_t desc_capacity;
	uint64_t desc_used; // private copy: the shared one is only published
	// Exclusive lane claims: bit i set = lane i owned by one thread.
	std::atomic<uint64_t> lane_bits[STRATA_MAX_LANES / 64];
	std::atomic<uint32_t> shared_rr; // next lane handed out when all are owned
	// Where the next exclusive claim starts looking: claims rotate, so the
	// lane a thread released at exit is reused last and, in overwrite mode,
	// keeps that thread's newest events as long as possible.
	std::atomic<uint32_t> claim_next;
	// 1 + the claim_next ticket of the last scan for a clean free lane
	// that found none (0: none yet): the clean claims among the next
	// kCleanSkip - 1 share at once (a hint, beside claim_next: its line is ours at the claim;
	// writer_lanes.cpp, take_owned_lane).  Relaxed.
	std::atomic<uint32_t> clean_miss;

	// A buffer made at the slot's first event (strata_rt_slot_open_lazy,
	// docs/ring-buffer.md "A buffer at the first event"): until `state` is
	// kChReady, base/hdr/lanes/data/desc are null and every field below is
	// the control lock holder's.  Release store of kChReady after the
	// buffer is complete, acquire load in claim_lane (writer.cpp) before a
	// thread's first use: pairs the two.
	std::atomic<uint32_t> state;
	strata_channel_config cfg; // pending: the geometry asked for
	strata_rt_handoff handoff; // pending: who gets the memfd
	uint8_t handoff_ctx[STRATA_RT_HANDOFF_CTX];
	// Events a signal handler fired while its own thread held the control
	// lock with the slot pending (the buffer could not be made there):
	// counted as discarded in the lane of the next claim.  Relaxed: a count.
	std::atomic<uint64_t> pending_discards;
	// The buffer was made but its hand-over failed (daemon unreachable,
	// socket gone, deadline passed): writers record into it as usual (a
	// full ring discards, counted in the buffer) and the hand-over is
	// retried (retry_handoff) until it succeeds, at the latest when the
	// slot closes or the process exits, so that the daemon reads every
	// event or its count (docs/ring-buffer.md, "A hand-over that fails").
	// Set and cleared under the control lock; writers read it relaxed (a
	// hint: the retry re-checks under the lock).
	std::atomic<uint32_t> handoff_owed;
	// CLOCK_MONOTONIC ns before which a writer does not retry (the control
	// lock holder's; read relaxed by writers as a hint).
	std::atomic<uint64_t> handoff_next_ns;
	uint32_t handoff_tries; // failed tries: the wait doubles (lock holder's)
};

// A fast-path reservation's strata_reservation::lane: its Channel's address
// (page-aligned: slots.cpp maps each Channel on its own pages) with these
// bits set, and its size word packs the record's bytes, lane and
// sub-buffer (writer.cpp, "strata_commit").  The general path's lane is a
// CommitCtx (no bit set).
constexpr uintptr_t kFastCommit = 1, kFastRecords = 2, kFastTagMask = 3;
inline uint32_t fast_commit_tag(uint32_t mode)
{
	return (uint32_t)(kFastCommit | (mode == STRATA_MODE_OVERWRITE ? kFastRecords : 0));
}
constexpr uint32_t kChReady = 0, kChPending = 1, kChDead = 2;

// A pending Channel's buffer made and handed off (slots.cpp), from a
// thread's first event in the slot (claim_lane).  0 when the Channel is
// ready (acquire on its state), else -1: the event is not recorded
// (counted in pending_discards when the caller's own thread holds the
// control lock, i.e. a signal handler interrupted a control call).
int channel_materialize(Channel *ch);

// A buffer whose hand-over failed (Channel::handoff_owed): try again now if
// `now` (the event's timestamp) passed the retry time.  From a writer's
// packet switch (a system call is allowed there) and the slot's close.
// Async-signal-safe: the control lock is tried, never waited for from a
// handler of its holder.
void retry_handoff(Channel *ch, uint64_t now);

// Current channel of each slot; nullptr when closed.  Stored with release
// by slots.cpp after the Channel and the buffer header are complete; loaded
// with acquire by the writer (pairs with that store).
extern std::atomic<Channel *> g_slots[STRATA_MAX_SLOTS];
extern bool g_prefetchw; // the CPU has PREFETCHW (writer.cpp; writer_lane.h, prefetch_ahead)
// Registered for MEMBARRIER_CMD_GLOBAL_EXPEDITED: the process's new
// buffers are FAST_OWNER (slots.cpp).  Written by the constructor and in a
// fork child only; the writer's fast path reads it as a hint before its TSC
// read (each channel's fast_owner decides).
extern bool g_membarrier_global;

// Serialises the control plane.  lock() returns 0, or STRATA_RT_EBUSY when
// the calling thread already holds it (a signal handler interrupted a
// control-plane call); another holder is waited for with sched_yield.
// While a pending slot exists, or with mask_signals, the holder's
// asynchronous signals are held back until unlock (slots.cpp).
int control_lock(bool mask_signals = false);
void control_unlock();
void control_lock_reset_in_child();

// Registry (registry.cpp), all under the control lock.
void registry_describe_all(Channel *ch);  // append every descriptor to a new slot
void registry_arm_slot(unsigned slot);    // re-evaluate the slot's rules
void registry_disarm_slot(unsigned slot); // slot closing: clear its bits
void registry_forget_slot(unsigned slot); // descriptors of the slot forgotten
void registry_disarm_all_in_child();
int registry_store_rules(unsigned slot, const strata_rule *rules, size_t n);
bool registry_valid_description(const strata_event_desc *d); // as registration checks it
// Registers [start, stop) (strata_register_tracepoints): the number of
// tracepoints accepted, or -EBUSY (inside a control call) / -ENOMEM.
int registry_register(strata_tracepoint *const *start, strata_tracepoint *const *stop);
uint64_t registry_encoded_size();           // bytes of all current descriptors
void registry_prefault_slot(unsigned slot); // a slot's first open: its rule tables mapped ahead
// Encode one descriptor record; returns its size (multiple of 8) or 0 if
// it does not fit in cap or the description is invalid.
size_t encode_descriptor(const strata_event_desc *d, uint32_t id, char *out, size_t cap);
bool glob_match(const char *pattern, const char *text); // filter.cpp

// Writer (writer.cpp).
void writer_forget_thread_state_in_child();
void wake_consumer(strata_buffer_header *hdr);
void writer_count_discarded(unsigned slot); // a filtered event dropped unseen
uint32_t current_tid();
uint32_t writer_depth(); // reservations in progress on this thread
// Whether every reservation the lanes of ch show (their heads) is committed:
// no owner inside its busy window, and the packet at each head has all its
// bytes in, or, at a boundary, the packet before it is complete.  A
// consumer's close still waiting for commits reads as unsettled too.
bool writer_lanes_settled(Channel *ch);

// Clock (clock.cpp).  clock_now() is the event's timestamp: one inline
// try of the chosen page (no call, no switch: the hot path), else
// clock_now_slow(), which retries, waits for a busy consumer page, or falls
// back to clock_gettime exactly as the clock's contract says.
uint64_t clock_now_slow();
// The chosen page, its low bit set (kClockRdtscp) where RDTSCP may be
// used: page-aligned, so the bit is free, and the readers learn which
// instruction takes the TSC from the value they load anyway (no second
// load on the event's path).  Null or untagged reads with lfence; rdtsc,
// which every x86-64 CPU has.  Read it through clock_page_ref.
extern std::atomic<const strata_kclock *> g_clock_page;
constexpr uintptr_t kClockRdtscp = 1;
struct ClockPageRef {
	const strata_kclock *k; // null: no page chosen (yet)
	bool rdtscp;            // read its TSC with RDTSCP, else lfence; rdtsc
};
__attribute__((always_inline)) inline ClockPageRef clock_page_ref()
{
	// Acquire: pairs with the release store in strata_rt_clock_id.
	const uintptr_t v = reinterpret_cast<uintptr_t>(g_clock_page.load(std::memory_order_acquire));
	return {reinterpret_cast<const strata_kclock *>(v & ~kClockRdtscp), (v & kClockRdtscp) != 0};
}
__attribute__((always_inline)) inline uint64_t clock_now()
{
	uint64_t ns;
	const ClockPageRef p = clock_page_ref();
	if (__builtin_expect(p.k != nullptr, 1) &&
	    __builtin_expect(strata_kclock_try_how(p.k, &ns, p.rdtscp) == 0, 1))
		return ns;
	return clock_now_slow();
}

// Health counters and a rate-limited stderr warning (AS-safe: write(2)).
void warn(const char *msg);
void count_invariant_error(const char *msg);
extern std::atomic<uint64_t> g_rejected_tracepoints;
extern std::atomic<uint64_t> g_descriptor_table_full;

} // namespace strata
#endif
