/*
 * writer_lanes.cpp - a thread's lanes: the lane it claims at its first
 * event in a slot (an owned one while any is free, else a shared one) and
 * hands back at its exit; and what the consumer's side asks of the
 * writers (whether every reservation is committed, the wake-up).  The
 * per-event path: writer.cpp; the contract: its head comment.
 */
#include <linux/futex.h>
#include <pthread.h>

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

// A thread's first event in this open of the slot.  False when the slot's
// buffer is pending and could not be made now (channel_materialize): the
// event is not recorded.
bool claim_lane(Channel *ch, unsigned slot, ThreadState &t)
{
	if (__builtin_expect(channel_materialize(ch) != 0, 0))
		return false;
	uint32_t lane = UINT32_MAX;
	// Relaxed on the counters: they only hand out indexes.  The bitmap
	// orders owners (acquire here, release in thread_exit): an owner's
	// unlocked commits need its predecessor's to be done.
	const uint32_t n_owned = ch->first_shared;
	const uint32_t start = n_owned ? ch->claim_next.fetch_add(1, std::memory_order_relaxed) % n_owned : 0;
	for (uint32_t k = 0; k < n_owned && lane == UINT32_MAX; k++) {
		const uint32_t i = (start + k) % n_owned;
		const uint64_t bit = 1ull << (i % 64);
		uint64_t v = ch->lane_bits[i / 64].load(std::memory_order_relaxed);
		while (!(v & bit)) {
			// Acquire: pairs with the release in thread_exit, so that
			// the previous owner's last unlocked commit happens
			// before our first (commit_bytes).
			if (ch->lane_bits[i / 64].compare_exchange_weak(v, v | bit, std::memory_order_acquire,
									std::memory_order_relaxed)) {
				lane = i;
				break;
			}
		}
	}
	bool exclusive = lane != UINT32_MAX;
	if (!exclusive) // every owned lane taken: share one of the shared lanes
		lane = n_owned +
		       ch->shared_rr.fetch_add(1, std::memory_order_relaxed) % (ch->n_lanes - n_owned);
	t.lane[slot] = (uint16_t)lane;
	t.ch[slot] = ch;
	__atomic_store_n(&t.last_ts[slot], 0, __ATOMIC_RELAXED); // no record of ours there yet
	if (exclusive) {
		close_foreign_packet(ch, &ch->lanes[lane], ch->data + (uint64_t)lane * ch->lane_stride,
				     tid_of(t));
		t.exclusive = (uint16_t)(t.exclusive | (1u << slot));
	} else {
		t.exclusive = (uint16_t)(t.exclusive & ~(1u << slot));
	}
	// Relaxed: informational fields for the consumer, no ordering implied.
	__atomic_store_n(&ch->lanes[lane].owner_tid, tid_of(t), __ATOMIC_RELAXED);
	__atomic_fetch_add(&ch->hdr->lanes_claimed, 1, __ATOMIC_RELAXED);
	// A lane nobody wrote yet: the start of its first sub-buffer now, the
	// rest as packets are opened (prefault_open).  Relaxed: a hint; a
	// stale 0 costs one redundant populate of mapped pages.
	const auto prefault_fresh = [ch](uint32_t i) {
		if (__atomic_load_n(&ch->lanes[i].head, __ATOMIC_RELAXED) == 0)
			prefault_first(ch, ch->data + (uint64_t)i * ch->lane_stride);
	};
	prefault_fresh(lane);
	// A sharer writes every shared lane sooner or later (shared_lane).
	for (uint32_t i = ch->first_shared; !exclusive && i < ch->n_lanes; i++)
		if (i != lane)
			prefault_fresh(i);
	if (!t.key_set && g_exit_key_ok) {
		t.key_set = true;
		pthread_setspecific(g_exit_key, &t);
	}
	// Events that could not wait for the buffer to be made (a signal
	// handler of its maker): they join this lane's discarded count, so that
	// recorded + discarded == emitted.  Relaxed: counters, as discard().
	if (__builtin_expect(ch->pending_discards.load(std::memory_order_relaxed) != 0, 0))
		__atomic_fetch_add(&ch->lanes[lane].events_discarded,
				   ch->pending_discards.exchange(0, std::memory_order_relaxed),
				   __ATOMIC_RELAXED);
	return true;
}

namespace {

// Thread exit: hand our exclusive lanes back.  Channels are never freed,
// so a stale pointer (slot closed since) is still safe to touch.
void thread_exit(void *)
{
	ThreadState &t = t_state;
	for (unsigned s = 0; s < STRATA_MAX_SLOTS; s++) {
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
}

} // namespace

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
	t.exclusive = 0;
	for (unsigned s = 0; s < STRATA_MAX_SLOTS; s++)
		t.ch[s] = nullptr;
}

} // namespace strata
