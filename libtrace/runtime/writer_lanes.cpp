/*
 * writer_lanes.cpp - a thread's lanes: the lane it claims at its first
 * event in a slot (an owned one with no packet open while any is free,
 * else a shared one, and an owned one after its first records) and hands
 * back at its exit; and what the consumer's side asks of the
 * writers (whether every reservation is committed, the wake-up).  The
 * per-event path: writer.cpp; the contract: its head comment.
 */
#include <dlfcn.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>

#include "writer_lane.h"

namespace strata {
namespace {

pthread_key_t g_exit_key;
bool g_exit_key_ok;

// A thread that claims an owned lane: the packet open there (if any) was
// opened by the lane's previous owner and names it in its `vtid`; close it
// so that every packet of an owned lane has one writer.  The previous owner
// exited (it released the lane at thread exit, after its last commit), so
// only the consumer may race us: same CAS as a writer's close, one winner.
// A system call-free path, once per claim.
void close_foreign_packet(Channel *ch, strata_lane_ctl *lc, char *lane_data, uint32_t tid)
{
	const uint64_t S = ch->subbuf_size;
	// Acquire: as the loads of head in reserve_fast, reserve_general and
	// switch_packet (timestamps follow positions).
	uint64_t head = __atomic_load_n(&lc->head, __ATOMIC_ACQUIRE);
	while (head & (S - 1)) {
		const uint64_t off = head & (S - 1);
		auto *ph = (const strata_packet_header *)(lane_data + ring_off(ch, head - off));
		// Relaxed read of a field the opener wrote before committing the
		// header: an old value only costs one packet closed early.
		if (__atomic_load_n(&ph->vtid, __ATOMIC_RELAXED) == (int32_t)tid)
			return;
		const uint64_t now = clock_now();
		const uint64_t end = head - off + S;
		const uint64_t disc = load_discarded(lc); // before the CAS: see load_discarded
		// Acq_rel: as the close in switch_packet (head_cas).
		if (__atomic_compare_exchange_n(&lc->head, &head, end, false, __ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE)) {
			close_packet(ch, lc, lane_data, head - off, off, now, disc, true); // we own the lane
			return;
		}
	}
}

} // namespace

namespace {

// Events that could not wait for the buffer to be made (a signal handler
// of its maker): they join the lane's discarded count, so that recorded +
// discarded == emitted.  Relaxed: counters, as discard().
void take_pending_discards(Channel *ch, uint32_t lane)
{
	if (__builtin_expect(ch->pending_discards.load(std::memory_order_relaxed) != 0, 0))
		__atomic_fetch_add(&ch->lanes[lane].events_discarded,
				   ch->pending_discards.exchange(0, std::memory_order_relaxed),
				   __ATOMIC_RELAXED);
}

// An owned lane costs a packet per owner: a claim closes the previous
// owner's open packet (owned-lane records carry no thread, so a packet has
// one writer) and opens one of its own, which takes a sub-buffer of the
// ring and a drain of the consumer's however few records it holds.  So a
// thread's first event claims a free owned lane only where no packet is
// open (a lane never written, or one whose last packet was closed);
// where every free lane holds an exited owner's open packet, the thread
// writes its first kOwnAfter records to the shared lanes and claims after
// (docs/ring-buffer.md, "Lanes: per thread, not per CPU").  Threads that
// emit a few events each and exit thus take no sub-buffer apiece, which
// filled the ring at a low event rate; a shared-lane record costs a locked
// CAS and add and 4 bytes of context: kOwnAfter of them cost less than
// one such packet.
constexpr uint8_t kOwnAfter = 64;
// kOwnAfter unless strata_rt_set_own_after changed it (relaxed: set before
// the threads it concerns start, read at their claims).
std::atomic<uint8_t> g_own_after{kOwnAfter};

// The shared lane a thread without an owned lane keeps when its CPU is
// unknown (shared_lane's fallback).
uint32_t pick_shared(Channel *ch)
{
	return ch->first_shared +
	       ch->shared_rr.fetch_add(1, std::memory_order_relaxed) % (ch->n_lanes - ch->first_shared);
}

// Lane i's first page, if nobody wrote the lane yet: the page its first
// record takes (prefault_first).  Only the lane about to be written: a
// sharer's other lanes, a page each, are made by whoever writes them
// first.  Every unwritten shared lane's at each claim would cost each
// short-lived thread a system call for good per shared lane no CPU maps
// to (more shared lanes than CPUs: `--lanes`), never written.  Relaxed: a
// hint; a stale 0 costs one redundant populate of mapped pages.
void prefault_fresh(Channel *ch, uint32_t i)
{
	if (__atomic_load_n(&ch->lanes[i].head, __ATOMIC_RELAXED) == 0)
		prefault_first(ch, ch->data + (uint64_t)i * ch->lane_stride);
}

// Lane i's head at a sub-buffer boundary: no packet open there.
inline bool lane_at_boundary(const Channel *ch, uint32_t i)
{
	return (__atomic_load_n(&ch->lanes[i].head, __ATOMIC_RELAXED) & (ch->subbuf_size - 1)) == 0;
}

// Claims for a clean lane that skip the scan after one found none.
constexpr uint32_t kCleanSkip = 16;

// Takes a free owned lane (clean: only one with no packet open), or
// returns UINT32_MAX.  Claims start at a rotating cursor.  Relaxed on the
// counters: they only hand out indexes.  The bitmap orders owners
// (acquire here, release in thread_exit): an owner's unlocked commits need
// its predecessor's to be done.  A free lane's head moves only by a
// consumer's close, to a boundary: one seen clean stays clean.
//
// A clean claim is a new thread's first event (claim_lane); where threads
// come and go, every free lane holds an exited owner's open packet and the
// scan finds none: `burst 2000 5 2` looked at all 8 lanes for each thread,
// 228 instructions of its 2,156.  So after a scan that found none, the
// clean ones among the next kCleanSkip - 1 claims (claim_next's tickets,
// which every claim takes) share at once.  A lane a consumer's close
// made clean meanwhile is missed by them: they write their first records
// to the shared lanes and then claim (promote_lane_slow), as where none is
// clean; none is taken that a scan would not take.
uint32_t take_owned_lane(Channel *ch, bool clean)
{
	const uint32_t n_owned = ch->first_shared;
	if (n_owned == 0)
		return UINT32_MAX;
	const uint32_t ticket = ch->claim_next.fetch_add(1, std::memory_order_relaxed);
	if (clean) {
		const uint32_t miss = ch->clean_miss.load(std::memory_order_relaxed);
		if (miss != 0 && ticket - (miss - 1) < kCleanSkip)
			return UINT32_MAX;
	}
	// One division, at the cursor; the scan wraps by a compare.
	uint32_t i = ticket % n_owned;
	for (uint32_t k = 0; k < n_owned; k++, i = i + 1 == n_owned ? 0 : i + 1) {
		std::atomic<uint64_t> &word = ch->lane_bits[i / 64];
		const uint64_t bit = 1ull << (i % 64);
		uint64_t v = word.load(std::memory_order_relaxed);
		if ((v & bit) != 0)
			continue;
		if (clean && !lane_at_boundary(ch, i))
			continue;
		while (!(v & bit)) {
			// Acquire: pairs with the release in thread_exit, so that
			// the previous owner's last unlocked commit happens
			// before our first (commit_bytes).
			if (word.compare_exchange_weak(v, v | bit, std::memory_order_acquire,
						       std::memory_order_relaxed))
				return i;
		}
	}
	if (clean)
		ch->clean_miss.store(ticket + 1, std::memory_order_relaxed);
	return UINT32_MAX;
}

// Sets the thread up in owned lane `lane` (taken by take_owned_lane), or
// in the shared lanes when there is none (UINT32_MAX: every owned lane
// taken), for good.
bool own_lane(Channel *ch, unsigned slot, ThreadState &t, uint32_t lane)
{
	bool exclusive = lane != UINT32_MAX;
	if (!exclusive) // every owned lane taken: share one of the shared lanes
		lane = pick_shared(ch);
	t.per_slot[slot].fast = nullptr; // first: see ThreadState::PerSlot
	std::atomic_signal_fence(std::memory_order_seq_cst);
	__atomic_store_n(&t.per_slot[slot].limit, 0, __ATOMIC_RELAXED); // another lane's bound
	t.until_own[slot] = 0;
	t.lane[slot] = (uint16_t)lane;
	t.ch[slot] = ch;
	// Relaxed: see ThreadState::PerSlot; the lane first, as record_begin.
	__atomic_store_n(&t.last_lane[slot], (uint16_t)lane, __ATOMIC_RELAXED);
	std::atomic_signal_fence(std::memory_order_seq_cst);
	__atomic_store_n(&t.per_slot[slot].last_ts, 0, __ATOMIC_RELAXED); // no record of ours there yet
	if (exclusive) {
		close_foreign_packet(ch, &ch->lanes[lane], ch->data + (uint64_t)lane * ch->lane_stride,
				     tid_of(t));
		t.exclusive = (uint16_t)(t.exclusive | (1u << slot));
		// Acquire: as clock_now's.  Last: see ThreadState::PerSlot.
		std::atomic_signal_fence(std::memory_order_seq_cst);
		if (ch->fast_owner && g_clock_page.load(std::memory_order_acquire) != nullptr) {
			t.per_slot[slot].lc = &ch->lanes[lane];
			t.per_slot[slot].data = ch->data + (uint64_t)lane * ch->lane_stride;
			std::atomic_signal_fence(std::memory_order_seq_cst); // before fast: as above
			t.per_slot[slot].fast = ch;
		}
	} else {
		t.exclusive = (uint16_t)(t.exclusive & ~(1u << slot));
	}
	// Relaxed: informational fields for the consumer, no ordering implied.
	__atomic_store_n(&ch->lanes[lane].owner_tid, tid_of(t), __ATOMIC_RELAXED);
	__atomic_fetch_add(&ch->hdr->lanes_claimed, 1, __ATOMIC_RELAXED);
	// A lane nobody wrote yet: the start of its first sub-buffer now, the
	// rest as packets are opened (prefault_open); a sharer's, the lane of
	// its CPU, which its first record takes.
	prefault_fresh(ch, exclusive ? lane : shared_lane(ch, lane));
	if (exclusive && !t.key_set && g_exit_key_ok) {
		t.key_set = true;
		pthread_setspecific(g_exit_key, &t);
	}
	take_pending_discards(ch, lane);
	return true;
}

} // namespace

// A thread's first event in this open of the slot.  False when the slot's
// buffer is pending and could not be made now (channel_materialize): the
// event is not recorded.
bool claim_lane(Channel *ch, unsigned slot, ThreadState &t)
{
	if (__builtin_expect(channel_materialize(ch) != 0, 0))
		return false;
	const uint8_t own_after = g_own_after.load(std::memory_order_relaxed);
	const bool sharing = ch->n_lanes > ch->first_shared && own_after != 0;
	const uint32_t lane = take_owned_lane(ch, sharing);
	if (lane != UINT32_MAX || !sharing)
		return own_lane(ch, slot, t, lane);
	// Every free owned lane holds an open packet: the shared lanes first.
	const uint32_t shared = pick_shared(ch);
	t.per_slot[slot].fast = nullptr; // first: see ThreadState::PerSlot
	std::atomic_signal_fence(std::memory_order_seq_cst);
	t.lane[slot] = (uint16_t)shared;
	t.ch[slot] = ch;
	t.exclusive = (uint16_t)(t.exclusive & ~(1u << slot));
	// +1: this record counts down too (promote_lane), and is one of them.
	t.until_own[slot] = (uint8_t)(own_after + 1);
	__atomic_store_n(&t.per_slot[slot].last_ts, 0, __ATOMIC_RELAXED); // no record of ours there yet
	// The lane of its CPU, which its first record takes (as own_lane).
	prefault_fresh(ch, shared_lane(ch, shared));
	take_pending_discards(ch, shared);
	return true;
}

// A sharer's record at depth 0 counts down to its owned lane's claim, which
// takes any free owned lane (an exited owner's open packet is closed).
// Signal handlers: one that runs before the depth is raised promotes (or
// counts) in full before we resume, and we then see its count; one that
// runs while it is raised leaves the count alone.  A reservation in
// progress keeps the lane it took (its CommitCtx); the thread's next
// record in the new lane takes the wide header (last_lane differs).
void promote_lane_slow(Channel *ch, unsigned slot, ThreadState &t)
{
	t.depth++;
	std::atomic_signal_fence(std::memory_order_seq_cst);
	if (t.exclusive & (1u << slot)) // a stale count (promote_lane): owned already
		t.until_own[slot] = 0;
	else if (t.until_own[slot] != 0 && --t.until_own[slot] == 0) {
		const uint32_t lane = take_owned_lane(ch, false);
		// None free: the thread stays where it writes, in the shared
		// lanes, until a packet it opens there arms another try
		// (arm_claim_retry).
		if (lane != UINT32_MAX)
			own_lane(ch, slot, t, lane);
	}
	std::atomic_signal_fence(std::memory_order_seq_cst);
	t.depth--;
}

namespace {

// Where the calling thread's kernel id sits in glibc's thread descriptor
// (pthread_self()), so that a thread's first event costs no gettid: one
// system call, 1.0 us of CPU in a PVM guest, where a short-lived thread's
// whole share of Strata is 3.7 us (docs/benchmarks.md, short threads).
// glibc describes the field to debuggers as `_thread_db_pthread_tid`
// (libthread_db's descriptor of struct pthread's `tid`: its size in bits,
// its count, its offset), read from the running libc, so never a guess at
// its layout; the kernel writes it before the thread runs
// (CLONE_PARENT_SETTID) and glibc again in a fork's child.  Without it (an
// other libc, a static build) or when it disagrees once with gettid, the
// system call.
//   kTidProbe: not yet checked against gettid (the first tid_slow checks);
//   >= 0: the offset, checked; kTidSyscall: gettid for good.
// Acquire loads of g_tid_state pair with the constructor's release store
// of kTidProbe (g_tid_off before it); a checked state is the offset itself.
// Every thread that checks computes the same verdict; two at once both
// store it (relaxed: the value carries what a reader needs).
constexpr int32_t kTidProbe = -2, kTidSyscall = -1;
std::atomic<int32_t> g_tid_state{kTidSyscall};
int32_t g_tid_off = -1; // written once, by the constructor, before kTidProbe

void tid_offset_init()
{
	// RTLD_DEFAULT: the libc this process runs, whatever its version.
	const auto *d = (const uint32_t *)dlsym(RTLD_DEFAULT, "_thread_db_pthread_tid");
	if (d == nullptr || d[0] != 32 || d[1] != 1 || d[2] > 4096 - sizeof(uint32_t) || d[2] % 4 != 0)
		return;
	g_tid_off = (int32_t)d[2];
	g_tid_state.store(kTidProbe, std::memory_order_release);
}

inline uint32_t descriptor_tid(int32_t off)
{
	return *(const volatile uint32_t *)((const char *)pthread_self() + off);
}

// Thread exit: hand our exclusive lanes back.  Channels are never freed,
// so a stale pointer (slot closed since) is still safe to touch.
void thread_exit(void *)
{
	ThreadState &t = t_state;
	for (unsigned s = 0; s < STRATA_MAX_SLOTS; s++) {
		t.per_slot[s].fast = nullptr; // first: see ThreadState::PerSlot
		std::atomic_signal_fence(std::memory_order_seq_cst);
		if (!(t.exclusive & (1u << s)) || !t.ch[s])
			continue;
		uint32_t lane = t.lane[s];
		// Release: our commits (unlocked on an owned lane) before the
		// next owner's; pairs with the acquire CAS in claim_lane().
		t.ch[s]->lane_bits[lane / 64].fetch_and(~(1ull << (lane % 64)), std::memory_order_release);
		t.ch[s] = nullptr;
	}
	t.exclusive = 0;
	t.key_set = false;
}

__attribute__((constructor)) void writer_init()
{
	g_exit_key_ok = pthread_key_create(&g_exit_key, thread_exit) == 0;
	tid_offset_init();
}

} // namespace

uint32_t tid_slow(ThreadState &t)
{
	const int32_t state = g_tid_state.load(std::memory_order_acquire);
	uint32_t tid;
	if (state >= 0) {
		tid = descriptor_tid(state);
	} else {
		tid = (uint32_t)syscall(SYS_gettid);
		if (state == kTidProbe)
			g_tid_state.store(descriptor_tid(g_tid_off) == tid ? g_tid_off : kTidSyscall,
					  std::memory_order_relaxed);
	}
	if (__builtin_expect(tid == 0, 0)) // never from either source; not cached
		return (uint32_t)syscall(SYS_gettid);
	t.tid = tid;
	return tid;
}

uint32_t current_tid()
{
	return tid_of(t_state);
}

uint32_t writer_depth()
{
	return t_state.depth;
}

bool writer_lanes_settled(Channel *ch)
{
	const uint64_t S = ch->subbuf_size;
	for (uint32_t l = 0; l < ch->n_lanes; l++) {
		strata_lane_ctl *lc = &ch->lanes[l];
		// An owner inside its busy window (FAST_OWNER): its decrement
		// must reach the shared word, or a consumer's close would wait
		// for the window for ever.  Acquire: its head update before.
		if (__atomic_load_n(&lc->owner_busy, __ATOMIC_ACQUIRE) != 0)
			return false;
		// Acquire: as a writer's load of head; the counts below are
		// then at least those of every reservation this head shows.
		const uint64_t head = __atomic_load_n(&lc->head, __ATOMIC_ACQUIRE);
		if (head == 0)
			continue;
		const uint64_t off = head & (S - 1);
		const uint64_t p = off ? head : head - S; // inside the lane's last packet
		const uint64_t want = ((p >> ch->ring_shift) << ch->subbuf_shift) + (off ? off : S);
		strata_u64 *commit = commit_of(ch, lc, p);
		// Acquire: pairs with the writers' release adds (commit_bytes)
		// and the consumer's (Reader::finish_close).
		if (__atomic_load_n(commit, __ATOMIC_ACQUIRE) +
			    __atomic_load_n(ccommit_of(commit), __ATOMIC_ACQUIRE) <
		    want)
			return false;
	}
	return true;
}

void wake_consumer(strata_buffer_header *hdr)
{
	// Seq_cst RMW then seq_cst load, against the consumer's seq_cst store
	// of consumer_waiting then seq_cst re-check of wake_seq (Dekker): either
	// the consumer sees our new wake_seq, or we see it waiting and wake it.
	__atomic_add_fetch(&hdr->wake_seq, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&hdr->consumer_waiting, __ATOMIC_SEQ_CST))
		syscall(SYS_futex, &hdr->wake_seq, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void writer_forget_thread_state_in_child()
{
	ThreadState &t = t_state;
	t.tid = 0;
	for (unsigned s = 0; s < STRATA_MAX_SLOTS; s++)
		t.per_slot[s].fast = nullptr; // first: see ThreadState::PerSlot
	std::atomic_signal_fence(std::memory_order_seq_cst);
	t.exclusive = 0;
	for (unsigned s = 0; s < STRATA_MAX_SLOTS; s++)
		t.ch[s] = nullptr;
}

} // namespace strata

extern "C" STRATA_EXPORT void strata_rt_set_own_after(unsigned n)
{
	strata::g_own_after.store((uint8_t)(n > 254 ? 254 : n), std::memory_order_relaxed);
}
