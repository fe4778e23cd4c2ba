/*
 * writer_lane.h - what the writer's two files share (private to
 * libtrace/runtime): a thread's writer state and the lane primitives, each
 * a few instructions inlined where it is used.  writer.cpp is the
 * per-event fast path (strata_reserve, strata_commit, the packet switch);
 * writer_lanes.cpp a thread's lanes (claimed at its first event in a slot,
 * handed back at its exit) and what the consumer's side asks of the
 * writers.  The concurrency contract and the ordering pairs: writer.cpp's
 * head comment and docs/ring-buffer.md.
 */
#ifndef STRATA_WRITER_LANE_H
#define STRATA_WRITER_LANE_H

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/rseq.h>
#include <unistd.h>

#include <cstring>

#include "huge_chunks.h"
#include "rt_internal.h"
#include "writer_hooks.h"

namespace strata {

// What strata_commit needs, one per nesting depth: a nested reservation
// (signal handler) always commits before the one it interrupted resumes,
// so the contexts form a stack indexed by depth.
struct CommitCtx {
	Channel *ch;
	strata_u64 *commit;
	strata_u64 *records; // overwrite mode: the lane's record count, else null
	bool owned;          // the lane is this thread's alone: unlocked add
};

struct ThreadState {
	uint32_t tid;       // 0: not yet read (or reset in a fork child)
	uint32_t depth;     // reservations in progress on this thread
	bool key_set;       // thread-exit destructor registered
	uint16_t exclusive; // bit s: lane[s] is owned (released at thread exit)
	// Records left before this thread claims an owned lane in slot s
	// (64 + 1 at a first event that found no clean free lane:
	// writer_lanes.cpp; 1 once a sharer opened a packet of a shared lane,
	// arm_claim_retry; 0: owned, or in the shared lanes until then; owned
	// with a count left: a stale one, promote_lane).
	uint8_t until_own[STRATA_MAX_SLOTS];
	// Owned: the lane.  Not owned: the shared lane used when the CPU is
	// unknown (no rseq); otherwise shared_lane() picks one per record.
	uint16_t lane[STRATA_MAX_SLOTS];
	// The lane per_slot[s].last_ts belongs to (a thread without an owned lane
	// moves between shared lanes with its CPU).  Stored before last_ts,
	// see strata_reserve.
	uint16_t last_lane[STRATA_MAX_SLOTS];
	Channel *ch[STRATA_MAX_SLOTS]; // channel the lane cache belongs to
	// What the fast path reads of slot s, in one block (PerSlot), so that
	// it reaches all of it from one register.
	struct PerSlot {
		// The channel whose lane[s] this thread owns, when the fast path
		// may take it (FAST_OWNER buffer and a clock page: g_clock_page,
		// once set, is never unset); else null.  One load and compare in
		// strata_reserve stand for "owned, this channel, FAST_OWNER, a
		// page".  Set last by own_lane (after lane, ch, last_lane,
		// exclusive), cleared first wherever those change, so that a
		// signal handler that finds it set finds them set too.  While it
		// is set, last_lane[s] == lane[s], and lc and data are that lane's
		// control and data (set with it, read only through it: the fast
		// path's lane without the multiplications).
		Channel *fast;
		strata_lane_ctl *lc;
		char *data;
		// The timestamp of this thread's last record in lane[s] (0 after
		// a claim): a lower bound of the timestamp of whatever record
		// precedes a new one in the lane, since timestamps follow
		// positions.  Decides whether a record may use the compact header
		// (strata_abi.h).  Written after a reservation, read before one,
		// by this thread and its signal handlers only (relaxed atomics: a
		// handler may run between any two instructions; an older value is
		// still a lower bound).
		uint64_t last_ts;
		// The fast path's bound: a record whose end would reach it goes
		// the general path.  0 at a claim (own_lane); set by the general
		// path after each reservation in this owned lane to the end of
		// that record's packet, P + S, or, in the lane's first sub-buffer
		// of lap 0, to the next fault-around window's start (first_window).
		// Sound whenever loaded: it was P + S (or less) for a packet P
		// holding a record of ours, and head only grows, so head + size <
		// limit puts head strictly inside P, open (a close moves head to
		// P + S); a stale lower value only sends a record the general way.
		// Written by this thread and its signal handlers only (relaxed).
		uint64_t limit;
	} per_slot[STRATA_MAX_SLOTS];
	CommitCtx ctx[kMaxDepth];
};

// initial-exec: one %fs-relative access, no __tls_get_addr call, no lazy
// allocation (which would not be async-signal-safe).  Defined in writer.cpp.
extern __thread ThreadState t_state __attribute__((tls_model("initial-exec")));

// A thread's first event in this open of the slot (writer_lanes.cpp).
bool claim_lane(Channel *ch, unsigned slot, ThreadState &t);
// The calling thread's kernel id, cached in t (writer_lanes.cpp: without a
// system call where glibc's thread descriptor has it).
uint32_t tid_slow(ThreadState &t);
void promote_lane_slow(Channel *ch, unsigned slot, ThreadState &t);

// A sharer's record at depth 0 counts down to its owned lane's claim
// (promote_lane_slow at the count's last record); one load and a branch
// for everyone else.  The count's store is not guarded against a handler
// of this thread that runs between the load and it (no depth raised
// here): a handler's count is then lost (the claim comes a record later),
// or a handler claimed meanwhile and the count stored over its 0 is stale
// (promote_lane_slow, when it runs out, finds the lane owned and clears it).
inline void promote_lane(Channel *ch, unsigned slot, ThreadState &t)
{
	const uint8_t n = t.until_own[slot];
	if (__builtin_expect(n == 0 || t.depth != 0, 1))
		return;
	if (n > 1) { // a short thread's records: counted here, no call
		STRATA_WHOOK(STRATA_W_SHARER_COUNT);
		t.until_own[slot] = (uint8_t)(n - 1);
		return;
	}
	promote_lane_slow(ch, slot, t);
}

// A thread in the shared lanes that opened a packet there (busy enough to
// fill one, a packet switch being where the slow path already is) tries
// to claim an owned lane again at its next record at depth 0, so that a
// lane handed back at an owner's exit goes to a thread that writes, not
// only to threads started after it (docs/ring-buffer.md, "Lanes: per
// thread, not per CPU").  Only a sharer whose count is done: one in its
// first records claims when that count ends.  Any depth may arm it: the
// claim itself waits for depth 0 (promote_lane).  Thread-local state only.
inline void arm_claim_retry(const Channel *ch, unsigned slot, ThreadState &t)
{
	if (t.until_own[slot] == 0 && !(t.exclusive & (1u << slot)) && t.ch[slot] == ch &&
	    ch->first_shared != 0)
		t.until_own[slot] = 1;
}

namespace {

// The CPU the calling thread runs on: cpu_id of glibc's rseq area, kept
// by the kernel (a plain load); negative without rseq (glibc.pthread.rseq=0,
// registration failed).
inline int32_t rseq_cpu()
{
	if (__builtin_expect(__rseq_size == 0, 0))
		return -1;
	const volatile struct rseq *rs =
		(const volatile struct rseq *)((char *)__builtin_thread_pointer() + __rseq_offset);
	return (int32_t)rs->cpu_id;
}

// The shared lane for a record of a thread without an owned lane: the one
// of the CPU it runs on (rseq_cpu), so that two sharers running at the
// same time on two CPUs do not write the same lane: no cache line of head,
// commit[] or data moves between CPUs record by record (docs/ring-buffer.md,
// "Shared lanes by CPU").  A stale CPU (migrated since) only costs that
// once.  Without rseq: `fallback`.
inline uint32_t shared_lane(const Channel *ch, uint32_t fallback)
{
	const int32_t cpu = rseq_cpu();
	if (__builtin_expect(cpu < 0, 0))
		return fallback;
	const uint32_t n_shared = ch->n_lanes - ch->first_shared;
	const uint32_t k = (uint32_t)cpu < n_shared ? (uint32_t)cpu : (uint32_t)cpu % n_shared;
	return ch->first_shared + k;
}

// The CPU the calling thread runs on, plus 1, for a lane's writer_cpu
// (strata_abi.h, ABI 3.6); 0 (unknown) without rseq.  A packet's opener
// stores it so that the consumer's worker can keep off a busy writer's
// CPU (docs/consumerd.md, "The daemon beside its writers").
inline uint32_t own_cpu_plus1()
{
	const int32_t cpu = rseq_cpu();
	return cpu < 0 ? 0 : (uint32_t)cpu + 1;
}

// The calling thread's kernel id, asked once per thread: tid_slow.
inline uint32_t tid_of(ThreadState &t)
{
	if (__builtin_expect(t.tid == 0, 0))
		return tid_slow(t);
	return t.tid;
}

// A lost event of lane `lc`.  `owned`: the lane is this thread's (its
// owner's counter, owner_discarded, without a locked instruction: a locked
// add took a discarded event 15-20 TSC ticks more on the AMD EPYC, a full
// ring's events cost more than recorded ones); else events_discarded,
// which other threads and the consumer's cuts add to as well.
inline void discard(strata_lane_ctl *lc, bool owned = false)
{
#ifdef STRATA_UNLOCKED_COMMIT
	if (owned) {
		// As commit_add's unlocked add (below): one instruction, so a
		// signal handler of ours runs before or after it; only owners
		// add here, one after the other (claim_lane orders them).
		uint64_t one = 1;
		asm volatile("xaddq %0, %1" : "+r"(one), "+m"(lc->owner_discarded) : : "memory");
		return;
	}
#endif
	// Relaxed: a counter; its exact final value is read by the consumer
	// after the producer stopped (flush), per-location coherence suffices.
	__atomic_fetch_add(owned ? &lc->owner_discarded : &lc->events_discarded, 1, __ATOMIC_RELAXED);
}

// The consumer's counter of the same sub-buffer (strata_abi.h): ccommit[]
// follows commit[] in the lane control.
inline strata_u64 *ccommit_of(strata_u64 *commit)
{
	static_assert(offsetof(strata_lane_ctl, ccommit) ==
			      offsetof(strata_lane_ctl, commit) + sizeof(strata_u64) * STRATA_MAX_SUBBUF,
		      "ccommit[i] is commit[i] + STRATA_MAX_SUBBUF");
	return commit + STRATA_MAX_SUBBUF;
}

// The unlocked add of a lane's owner: xadd without the lock prefix, one
// instruction, so that a signal handler of the owner (the only other
// producer of the lane) runs before or after it, never inside.  No other
// thread adds to an owned lane's commit[] (claims and releases order the
// owners one after the other, see claim_lane), the consumer adds to
// ccommit[] only.  x86 stores are release stores, so the bytes written
// before it are visible to whoever reads the count (acquire), as with the
// atomic add; the "memory" clobber keeps the compiler from sinking them.
// TSan and other architectures: the atomic add (TSan does not see asm).
// STRATA_UNLOCKED_COMMIT: rt_internal.h.

// commit_bytes' add alone: whether the sub-buffer is now complete (the
// caller wakes the consumer).
inline bool commit_add(Channel *ch, strata_u64 *commit, uint64_t n, bool owned)
{
	uint64_t v;
#ifdef STRATA_UNLOCKED_COMMIT
	if (owned) {
		v = n;
		asm volatile("xaddq %0, %1" : "+r"(v), "+m"(*commit) : : "memory");
		v += n;
	} else
#endif
	{
		(void)owned;
		// Release: orders the bytes written in the reserved space
		// (record, packet header fields, closing fields) before the
		// count that makes the sub-buffer complete; pairs with the
		// reader's acquire load of commit[idx] (Reader::next_packet)
		// and the overwrite-mode opener's acquire load in
		// subbuf_free().
		v = __atomic_add_fetch(commit, n, __ATOMIC_RELEASE);
	}
	// Complete when both counters reach the lap's end.  Relaxed: a hint
	// to wake the consumer; it re-reads both with acquire loads.
	v += __atomic_load_n(ccommit_of(commit), __ATOMIC_RELAXED);
	return (v & (ch->subbuf_size - 1)) == 0;
}

inline void commit_bytes(Channel *ch, strata_u64 *commit, uint64_t n, bool owned)
{
	if (commit_add(ch, commit, n, owned))
		wake_consumer(ch->hdr);
}

// Overwrite mode: one more record in the lane (strata_abi.h, `records`),
// counted before its commit so that a reader that sees the commit sees the
// count.  Same rule as commit_bytes: the owner's add is one unlocked
// instruction, a shared lane's an atomic add.  Relaxed: the release add of
// the commit that follows orders it for the reader.
inline void count_record(strata_u64 *records, bool owned)
{
#ifdef STRATA_UNLOCKED_COMMIT
	if (owned) {
		asm volatile("incq %0" : "+m"(*records) : : "memory");
		return;
	}
#endif
	(void)owned;
	__atomic_fetch_add(records, 1, __ATOMIC_RELAXED);
}

// One change of a lane's state: the CAS on head.  unlocked (a FAST_OWNER
// lane's owner inside its busy window, no consumer closing): cmpxchg
// without the lock prefix, one instruction, so a signal handler of ours
// (the only other producer that may touch head then) runs before or after
// it and makes it fail like a CAS.  x86 loads and stores are acquire and
// release, as the CAS's orders ask.
inline bool head_cas(strata_lane_ctl *lc, uint64_t *head, uint64_t desired, bool unlocked)
{
#ifdef STRATA_UNLOCKED_COMMIT
	if (unlocked) {
		uint64_t prev = *head;
		asm volatile("cmpxchgq %2, %1" : "+a"(prev), "+m"(lc->head) : "r"(desired) : "memory", "cc");
		if (prev == *head)
			return true;
		*head = prev;
		return false;
	}
#endif
	(void)unlocked;
	return __atomic_compare_exchange_n(&lc->head, head, desired, true, __ATOMIC_ACQ_REL,
					   __ATOMIC_ACQUIRE);
}

// The owner's busy window on a FAST_OWNER lane (strata_abi.h): unlocked
// inc and dec, single instructions, balanced by nested signal handlers.
inline void busy_add(strata_lane_ctl *lc, bool in)
{
#ifdef STRATA_UNLOCKED_COMMIT
	if (in)
		asm volatile("incq %0" : "+m"(lc->owner_busy) : : "memory");
	else
		asm volatile("decq %0" : "+m"(lc->owner_busy) : : "memory");
#else
	(void)lc;
	(void)in;
#endif
}

inline uint64_t ring_off(const Channel *ch, uint64_t pos)
{
	return pos & ch->stride_mask;
}

// Ask for the ring's line kPrefetchAhead bytes past a record being written,
// for writing (PREFETCHW: the line comes exclusive, not shared first).  The
// consumer daemon read that line a lap ago on its own CPU; a store that
// finds it in another core's cache waits for it, and a stream of such
// stores fills the store buffer: on the AMD EPYC PVM guest a 39-byte event
// cost 31-35 ns with the daemon on the other CPU against 25-26 with both on
// one CPU, 25-27 with this (docs/ring-buffer.md, "The ring's lines").  A
// hint: it never faults (past the mapping, an unmapped first-lap page, a
// read-only page: dropped) and changes no byte; near a sub-buffer's end it
// may take a line of the next one from the consumer, which reads it again.
// PREFETCHW only where CPUID says the CPU has it (g_prefetchw, set at load;
// false until then); elsewhere PREFETCHT0, which every x86-64 CPU has (the
// line comes shared: 32.7 -> 34.2 ns a mixed event here, against 35.9
// without).  Never an instruction the CPU might refuse: a tracer must not
// take its host process down.  A load and a branch that always goes one way.
constexpr uint64_t kPrefetchAhead = 1024;
__attribute__((always_inline)) inline void prefetch_ahead(const char *rec)
{
#if defined(__x86_64__) || defined(__i386__)
	if (__builtin_expect(g_prefetchw, 1))
		asm volatile("prefetchw (%0)" : : "r"(rec + kPrefetchAhead));
	else
		asm volatile("prefetcht0 (%0)" : : "r"(rec + kPrefetchAhead));
#else
	__builtin_prefetch(rec + kPrefetchAhead, 1, 3);
#endif
}

inline strata_u64 *commit_of(const Channel *ch, strata_lane_ctl *lc, uint64_t pos)
{
	return &lc->commit[(pos >> ch->subbuf_shift) & ch->nsub_mask];
}

// May the sub-buffer at `head` (a boundary) be opened?  Both modes: only
// when every writer of its previous lap has committed (else a slow writer
// would still be writing into it).  Acquire: pairs with commit_bytes'
// release adds of those writers, so their bytes happen before ours (this
// is also the edge a race detector can see: the consumer's own edge below
// goes through another mapping of the same pages).
inline bool subbuf_free(const Channel *ch, strata_lane_ctl *lc, uint64_t head)
{
	uint64_t lap_bytes = (head >> ch->ring_shift) << ch->subbuf_shift;
	// Acquire on both: the consumer's closing fields (ccommit, its
	// release add in Reader::finish_close) as the writers' bytes.
	strata_u64 *commit = commit_of(ch, lc, head);
	if (__atomic_load_n(commit, __ATOMIC_ACQUIRE) +
		    __atomic_load_n(ccommit_of(commit), __ATOMIC_ACQUIRE) !=
	    lap_bytes)
		return false;
	// Overwrite mode: free, unless the consumer now streams the buffer
	// (STRATA_BUF_STREAMED, an adopted early buffer): then as discard mode.
	// Acquire: pairs with the consumer's seq_cst OR of the flag, made
	// before its store of `consumed` (Reader::stream_overwrite); a writer
	// that sees the flag with an older `consumed` finds the ring full and
	// discards (counted).  One load at a boundary only.
	if (ch->mode == STRATA_MODE_OVERWRITE &&
	    !(__atomic_load_n(&ch->hdr->flags, __ATOMIC_ACQUIRE) & STRATA_BUF_STREAMED))
		return true;
	// Discard mode: and only once the consumer released it.  Acquire:
	// pairs with the reader's release store of `consumed` after it copied
	// the sub-buffer out; we must not overwrite bytes it may still read.
	// Unsigned: a `consumed` ahead of head (a scribbling consumer) reads as
	// "full", never as free.
	uint64_t consumed = __atomic_load_n(&lc->consumed, __ATOMIC_ACQUIRE);
	return head - consumed < ch->lane_stride;
}

// The first lap of a fresh ring: map its pages ahead of the writer, a
// range at a time, instead of a page fault per page.  Each fault costs
// 1-11 us on a VM (docs/benchmarks.md), i.e. 10-85 ns per small event;
// MADV_POPULATE_WRITE (Linux 5.14) does the same work for a whole range at
// a boundary, where a system call is allowed.  Only in lap 0: later laps
// write pages this process already mapped.  Failure (an older kernel)
// only leaves the faults where they were.
//
// An idle process holds what its lanes' first packets took (issue 38:
// "buffer memory per idle process a few pages"), so the first packet gets
// only its first page (claim_lane: its header and about 250 small events;
// past it the writer faults page by page, which costs about what the
// populate would, 1.2-1.7 against 1.0-1.15 us a page here); every later
// open of lap 0 maps its own sub-buffer (prefault_open), not the next one:
// a run that ends in it would never use the next, and the consumer daemon
// makes the pages ahead of a busy writer (Reader::populate_ahead), so that
// the open only maps pages that exist (map_made; docs/ring-buffer.md, "A
// busy writer's first lap").
constexpr uint64_t kFirstPrefault = 4096;

inline void prefault_first(const Channel *ch, char *lane_data)
{
	const uint64_t n = ch->subbuf_size < kFirstPrefault ? ch->subbuf_size : kFirstPrefault;
	madvise(lane_data, n, kMadvPopulateWrite);
}

// A busy lane's next 2 MiB chunks from the writer's side (huge_chunks.h):
// at the lap-0 open of the sub-buffer at `head`, each chunk of the lane
// whose start falls in it (in the first two sub-buffers, at the open of
// the second) is collapsed into one huge page in our own mapping, where
// the kernel then maps it by one PMD.  The consumer makes them ahead
// (Reader::make_huge_chunk), but it looks at a busy lane 0.3-4 ms after
// the writer's first records on the PVM guest, by which time a fast writer
// may be in the first chunk already, writing it a 4 KiB page (and a trap)
// at a time: the collapse then copies what is there, or only maps the
// chunk the consumer made.  One page allocated first, as the consumer's
// (an empty range is refused).  At a boundary, where a system call is
// allowed; a refusal (an older kernel) leaves the populate below to do
// as before.
inline void collapse_ahead(const Channel *ch, char *lane_data, uint64_t head)
{
	const uint64_t S = ch->subbuf_size, stride = ch->lane_stride, lead = huge_lead(S);
	const uintptr_t lane_off = static_cast<uintptr_t>(lane_data - ch->base);
	if (!ch->huge_pages || stride % kHugeChunk != 0 ||
	    reinterpret_cast<uintptr_t>(ch->base) % kHugeChunk != 0 || (lane_off + lead) % kHugeChunk != 0)
		return;
	const uint64_t lo = head == S ? 0 : head, hi = head + S;
	uint64_t first = lead;
	if (lo > lead)
		first += (lo - lead + kHugeChunk - 1) & ~(kHugeChunk - 1);
	uint64_t n = 0;
	for (uint64_t x = first; x < hi && x < stride && lane_off + x + kHugeChunk <= ch->total_size;
	     x += kHugeChunk, n++)
		fallocate(ch->fd, FALLOC_FL_KEEP_SIZE, static_cast<off_t>(lane_off + x), 4096);
	if (n)
		madvise(lane_data + first, n * kHugeChunk, kMadvCollapse);
}

// At the open of the packet at `head` (a boundary in lap 0): its whole
// sub-buffer when its writers filled the previous packet (a busy lane).
// One the consumer closed early (a stop's final drain, a live tick: at
// most half full) says the lane is idle: the new packet gets the pages its
// writer touches, as the first one, so that an idle process that writes
// now and then (a tp-sync process never learns of a stop) keeps a few
// pages instead of a sub-buffer per close.
inline void prefault_open(const Channel *ch, char *lane_data, uint64_t head)
{
	if (head == 0)
		return; // the first packet: claim_lane's prefix
	const auto *prev = reinterpret_cast<const strata_packet_header *>(
		lane_data + ring_off(ch, head - ch->subbuf_size));
	// Relaxed: a hint, written by the previous packet's closer (the
	// consumer's may not have written it yet: 0, no populate).
	if (__atomic_load_n(&prev->content_size, __ATOMIC_RELAXED) / 8 < ch->subbuf_size / 2)
		return;
	collapse_ahead(ch, lane_data, head);
	char *const p = lane_data + ring_off(ch, head);
	const uint64_t S = ch->subbuf_size;
	// Pages the consumer made are in the memfd but not in our page table
	// (map_made); a page nobody made costs more read (allocated by a
	// fault, then written) than by a write populate.  The consumer makes
	// them in order: the sub-buffer's last page says all are; else the
	// made prefix is mapped and the rest made here.  mincore answers for
	// the page cache of a file we may write.
	unsigned char last = 0;
	if (mincore(p + S - 4096, 4096, &last) == 0 && (last & 1)) {
		map_made(p, S);
		return;
	}
	const uint64_t made = made_prefix(p, S);
	map_made(p, made);
	madvise(p + made, S - made, kMadvPopulateWrite);
}

// The lane's cumulative discard count for the packet a closer is about to
// close: read after the load of head that showed the packet open (or the
// failed CAS that reloaded it), before the close CAS.  Relaxed: per-location
// coherence is all it needs, through head.  Our load (k) is sequenced
// before our close CAS (acq_rel); the next packet's closer loaded head with
// acquire from that CAS or a later RMW of head (its release sequence: every
// write of head is a CAS), and its own load (k+1) follows that load, so
// load(k) happens-before load(k+1); read-read coherence on a counter that
// only grows then gives load(k+1) >= load(k): the counts the packets of a
// lane carry never go backwards.  Loaded after the CAS instead, a closer
// delayed between the two (a signal handler, another thread of a shared
// lane that opens, fills and closes the next packet, then discards) could
// store a count above the next packet's.  Discards counted between this
// load and the CAS go to the next packet: the count is cumulative.  The
// consumer's close (Reader::flush) reads it the same way.  One load per
// packet switch, not on the per-event path.  The lane's count is the sum
// of its two counters (events_discarded, owner_discarded), each of which
// only grows: a later closer's loads see each at least as large, so the
// sum too.
inline uint64_t load_discarded(strata_lane_ctl *lc)
{
	return strata_lane_discarded(lc);
}

// The closer of the packet at `start` (its close CAS won), with `discarded`
// the lane's events_discarded as load_discarded() read it before that CAS.
void close_packet(Channel *ch, strata_lane_ctl *lc, char *lane_data, uint64_t start, uint64_t content,
		  uint64_t now, uint64_t discarded, bool owned)
{
	auto *ph = (strata_packet_header *)(lane_data + ring_off(ch, start));
	ph->timestamp_end = now;
	// Relaxed atomic: prefault_open's hint load of the previous packet's
	// content_size, by the next packet's opener (another thread in a shared
	// lane), pairs with nothing; the consumer reads it after commit_bytes.
	__atomic_store_n(&ph->content_size, content * 8, __ATOMIC_RELAXED);
	ph->packet_size = ch->subbuf_size * 8;
	ph->events_discarded = discarded;
	STRATA_WHOOK(STRATA_W_CLOSE_WRITTEN);
	commit_bytes(ch, commit_of(ch, lc, start), ch->subbuf_size - content, owned);
}

} // namespace
} // namespace strata

#endif
