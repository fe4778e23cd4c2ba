/*
 * record_walk.h - the one walk over the records of a Strata packet, shared
 * by the consumer's buffer reader (reader.h: every record copied out of a
 * producer is checked before it reaches a trace) and the trace file reader
 * (trace_reader.h: every record read back from a trace file is checked
 * before it is decoded).  Both hold the bytes they walk as hostile.
 *
 * A RecordWalk knows one stream's record format and event descriptions
 * (EventInfo, from a buffer's descriptor table or from a trace's CTF
 * metadata) and walks the records of a packet's content [88, end) exactly
 * as a CTF 1.8 reader decodes them:
 *   WIDE (kernel): each record 8-byte aligned, a 16-byte header, fields at
 *   natural alignment from the packet start (at most 8).
 *   COMPACT (user): byte-packed; a 4-byte compact or 13-byte extended header
 *   (the compact timestamp rebuilt from the previous one, as a CTF reader
 *   does), the 4-byte thread context in a shared lane, no padding.
 * A record is good when it lies whole inside the content, has a described
 * id, and a timestamp neither before the previous record's nor after the
 * packet's end; the walk stops at the first record that is not.  Its work
 * is bounded by the bytes walked: every step advances at least 4 bytes or
 * stops.
 *
 * Cost: an event whose fields all have a fixed size (most) costs a compare
 * with the previous record's id and an add per record, a table look-up
 * where the id changes; an event with strings or sequences is walked by its
 * plan (COMPACT: consecutive fixed-size fields one skip), or where it is
 * one string between fixed fields by its shape (two skips and the NUL).
 *
 * Not thread-safe: one walk per reader, used by one thread at a time.
 */
#ifndef STRATA_LIBTRACE_RECORD_WALK_H
#define STRATA_LIBTRACE_RECORD_WALK_H

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "event_info.h"
#include "strata_abi.h"

namespace strata {

// Whether a walk's visitor keeps a bounded number of records (room(),
// take(): RecordWalk::NoVisit).
template <class V, class = void> constexpr bool kHasRoom = false;
template <class V> constexpr bool kHasRoom<V, std::void_t<decltype(std::declval<V &>().room())>> = true;

// One good record, as the walk hands it to its visitor: offsets from the
// packet start.
struct WalkedRecord {
	uint32_t id = 0;
	uint64_t ts = 0;      // full clock value
	uint64_t start = 0;   // the record header
	uint64_t payload = 0; // the first payload field
	uint64_t end = 0;     // one past the record
	int32_t tid = -1;     // shared COMPACT lanes and WIDE: the record's thread context
	uint16_t cpu = 0;     // WIDE: the record's CPU
};

// The offset of the first NUL in pkt[o, end), or `end` if there is none.
// Sixteen bytes a step while they lie inside the range (no byte past `end`
// is read), for the first kWalkNulSteps steps; a longer string's rest by
// memchr (wider steps, worth its call past 128 bytes); the last bytes one
// by one.  A string field is most of a string event's walk: scanned a
// byte at a time for 16 bytes, then by memchr, bench:str's 64 bytes took a
// fifth of the daemon's samples (docs/ring-buffer.md, "The validation's
// cost").
constexpr int kWalkNulSteps = 8;

__attribute__((always_inline)) inline uint64_t walk_find_nul(const uint8_t *pkt, uint64_t o, uint64_t end)
{
#ifdef __SSE2__
	const __m128i zero = _mm_setzero_si128();
	for (int k = 0; k < kWalkNulSteps && end - o >= 16; k++, o += 16) {
		const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i *>(pkt + o));
		const unsigned m = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, zero));
		if (m != 0)
			return o + (unsigned)__builtin_ctz(m);
	}
	if (end - o >= 16) {
		const void *nul = memchr(pkt + o, 0, end - o);
		return nul ? (uint64_t)((const uint8_t *)nul - pkt) : end;
	}
#endif
	while (o < end && pkt[o] != 0)
		o++;
	return o;
}

class RecordWalk {
public:
	static constexpr uint32_t kVariablePayload = UINT32_MAX, kUndescribed = UINT32_MAX - 1;
	static constexpr uint64_t kHdr = STRATA_PACKET_HEADER_SIZE;

	explicit RecordWalk(uint32_t record_format = STRATA_REC_WIDE) : format_(record_format) {}
	uint32_t format() const { return format_; }
	// Learn an event (validated by the caller: desc_rules.h), or replace an
	// id's description.
	void add(const EventInfo &ev);
	bool described(uint32_t id) const { return id < layout_.size() && layout_[id] != kUndescribed; }

	// Visitor: `void record(const WalkedRecord &)` for each good record, and
	// `bool undescribed()` when an id is not described: true if the caller
	// learnt new events meanwhile (the walk looks once more).  A visitor
	// that keeps only the first records may also have `uint64_t room()`,
	// how many more it keeps (at most 2^30), and `void take(const
	// WalkedRecord &)`, which keeps one without a check of its own: in a
	// run of one id the walk then hands take() at most room() records and
	// the run's records past them to nobody (record() is called for every
	// other good record).  The check per record leaves the runs.
	struct NoVisit {
		void record(const WalkedRecord &) {}
		bool undescribed() { return false; }
	};

	// Walks [kHdr, end) of `pkt`.  Returns the end of the last good record;
	// *ts: the packet's timestamp_begin on entry, the last good record's
	// timestamp on return; *why: null, or why the walk stopped before end.
	template <class Visit>
	uint64_t walk(const uint8_t *pkt, uint64_t end, bool shared, uint64_t ts_max, uint64_t *ts,
		      const char **why, Visit &v)
	{
		*why = nullptr;
		if (format_ != STRATA_REC_COMPACT)
			return walk_as<false, false>(pkt, end, ts_max, ts, why, v);
		return shared ? walk_as<true, true>(pkt, end, ts_max, ts, why, v)
			      : walk_as<true, false>(pkt, end, ts_max, ts, why, v);
	}

	// One record of a packet walk() has passed: the record at *o, which
	// ends at or before the good end walk() returned; prev is the
	// previous record's timestamp (the packet's timestamp_begin for the
	// first).  Fills *r as walk() handed it and moves *o past it.  None
	// of walk()'s checks is made again: a reader whose walk of a packet
	// kept only the first records it decoded steps through the rest as
	// they are asked for (trace_reader.cpp).
	__attribute__((always_inline)) void step(const uint8_t *pkt, uint64_t end, bool shared, uint64_t prev,
						 uint64_t *o, WalkedRecord *r) const
	{
		if (format_ != STRATA_REC_COMPACT)
			read_header<false, false>(pkt, end, prev, o, r);
		else if (shared)
			read_header<true, true>(pkt, end, prev, o, r);
		else
			read_header<true, false>(pkt, end, prev, o, r);
		r->payload = *o;
		const uint32_t size = layout_[r->id]; // described: walk() checked it
		if (__builtin_expect(size != kVariablePayload, 1)) {
			*o += size;
		} else {
			uint64_t fo = *o;
			walk_var(var_of_[r->id], pkt, end, fo);
			*o = fo;
		}
		r->end = *o;
	}

private:
	enum : uint32_t {
		kStepFixed = 0,    // skip the step's bytes
		kStepString = 1,   // up to and past a NUL
		kStepSequence = 2, // a 4-byte length, then that many elements of the step's bytes
		kStepWideSeq = 3,  // the same, the elements aligned to their size (WIDE)
		kStepAlign = 4,    // to a multiple of the step's bytes (WIDE)
		kStepEnd = 5,
	};
	// How a record of an event of variable size is walked: by its plan
	// (make_plan), or where the plan is one string between two runs of
	// fixed fields (most such events) by the two skips and a look for the
	// NUL, inline, rather than the plan's steps one by one.
	struct VarShape {
		uint64_t pre = 0, post = 0; // one_string: the fixed bytes before and after it
		uint32_t plan = UINT32_MAX; // the event's first step in plans_
		bool one_string = false;
	};
	uint32_t fixed_payload(const EventInfo &ev) const;
	void make_plan(const EventInfo &ev);
	static VarShape shape_of(const std::vector<uint32_t> &steps, uint32_t plan);
	bool walk_plan(const uint32_t *step, const uint8_t *pkt, uint64_t end, uint64_t *o) const;
	// A variable-size payload from o, by its shape or else its plan: false
	// if a field runs past end (as walk_plan); o moved to its end.
	__attribute__((always_inline)) bool walk_var(const VarShape &v, const uint8_t *pkt, uint64_t end,
						     uint64_t &o) const
	{
		if (__builtin_expect(v.one_string, 1)) {
			if (end - o < v.pre)
				return false;
			const uint64_t nul = walk_find_nul(pkt, o + v.pre, end);
			if (nul == end || end - (nul + 1) < v.post)
				return false;
			o = nul + 1 + v.post;
			return true;
		}
		uint64_t fo = o; // a copy: o's address is not taken in the caller's loop
		if (!walk_plan(plans_.data() + v.plan, pkt, end, &fo))
			return false;
		o = fo;
		return true;
	}

	template <bool kCompact, bool kShared>
	static const char *read_header(const uint8_t *pkt, uint64_t end, uint64_t prev, uint64_t *o,
				       WalkedRecord *r);
	template <bool kCompact, bool kShared, class Visit>
	uint64_t walk_as(const uint8_t *pkt, uint64_t end, uint64_t ts_max, uint64_t *ts, const char **why,
			 Visit &v);
	template <bool kShared, class Visit>
	static void compact_run(const uint8_t *pkt, uint64_t end, uint64_t ts_max, uint64_t last_id,
				uint32_t last_size, uint64_t &o, uint64_t &prev, uint64_t &good, Visit &v);
	template <class Visit>
	uint32_t size_of(uint32_t id, bool &asked, const uint32_t *&lay, uint64_t &n_lay, Visit &v);

	uint32_t format_;
	// By event id: fixed_payload() of its event, kVariablePayload, or
	// kUndescribed (the walk's one look-up per record).
	std::vector<uint32_t> layout_;
	// By event id: how an event with a string or a sequence is walked
	// (make_plan).  A step is a kind (low 3 bits) and a byte count (the rest).
	std::vector<VarShape> var_of_;
	std::vector<uint32_t> plans_;
};

// One record's header at *o (and, in a shared lane, its thread context):
// *r filled and *o moved past them, or why they do not fit.  COMPACT's
// 27-bit timestamps are rebuilt from the previous record's, as a CTF
// reader does.
template <bool kCompact, bool kShared>
__attribute__((always_inline)) inline const char *
RecordWalk::read_header(const uint8_t *pkt, uint64_t end, uint64_t prev, uint64_t *op, WalkedRecord *r)
{
	uint64_t o = *op;
	r->start = o;
	if (kCompact) {
		if (end - o < STRATA_REC_COMPACT_SIZE)
			return "truncated record header";
		uint32_t w;
		memcpy(&w, pkt + o, sizeof w);
		r->id = w & 31u;
		if (__builtin_expect(r->id == STRATA_REC_EXTENDED_ID, 0)) {
			if (end - o < STRATA_REC_EXTENDED_SIZE)
				return "truncated record header";
			if (pkt[o] != STRATA_REC_EXTENDED_ID) // bits 5..7: padding a writer leaves 0
				return "extended record header with bits 5..7 set";
			memcpy(&r->id, pkt + o + 1, sizeof r->id);
			memcpy(&r->ts, pkt + o + 5, sizeof r->ts);
			o += STRATA_REC_EXTENDED_SIZE;
		} else {
			const uint64_t mask = (1ull << STRATA_REC_COMPACT_TS_BITS) - 1;
			r->ts = (prev & ~mask) | (w >> 5);
			if (r->ts < prev)
				r->ts += mask + 1; // may wrap: then below prev, refused
			o += STRATA_REC_COMPACT_SIZE;
		}
		if (kShared) {
			if (end - o < STRATA_REC_SHARED_CTX_SIZE)
				return "truncated record header";
			memcpy(&r->tid, pkt + o, sizeof r->tid);
			o += STRATA_REC_SHARED_CTX_SIZE;
		}
	} else {
		o = (o + STRATA_EVENT_ALIGN - 1) & ~(uint64_t)(STRATA_EVENT_ALIGN - 1);
		if (o > end || end - o < STRATA_EVENT_HEADER_SIZE)
			return "truncated record header";
		r->start = o;
		uint16_t id16;
		memcpy(&id16, pkt + o + STRATA_EVENT_ID_OFF, sizeof id16);
		memcpy(&r->ts, pkt + o + STRATA_EVENT_TS_OFF, sizeof r->ts);
		memcpy(&r->tid, pkt + o + STRATA_EVENT_TID_OFF, sizeof r->tid);
		memcpy(&r->cpu, pkt + o + STRATA_EVENT_CPU_OFF, sizeof r->cpu);
		r->id = id16;
		o += STRATA_EVENT_HEADER_SIZE;
	}
	*op = o;
	return nullptr;
}

// A run of compact records of the last one's id (last_id, fixed size
// last_size, a compact header): each whole inside the content (one
// compare), in time; they pass every check of walk_as, made here in fewer
// steps.  The first that may not is left to the general walk, which checks
// it as any other.  o, prev and good as walk_as keeps them.
template <bool kShared, class Visit>
__attribute__((always_inline)) inline void
RecordWalk::compact_run(const uint8_t *pkt, uint64_t end, uint64_t ts_max, uint64_t last_id,
			uint32_t last_size, uint64_t &o, uint64_t &prev, uint64_t &good, Visit &v)
{
	const uint64_t mask = (1ull << STRATA_REC_COMPACT_TS_BITS) - 1;
	const uint64_t head = STRATA_REC_COMPACT_SIZE + (kShared ? STRATA_REC_SHARED_CTX_SIZE : 0);
	const uint64_t step = head + last_size;
	// o <= last: a whole record of step bytes fits (o <= end).
	const uint64_t last = end >= step ? end - step : 0;
	// The timestamp's high bits, the same until its low bits wrap: a
	// record that wraps is left to the general walk.
	const uint64_t hi = prev & ~mask;
	// The run's records up to `stop`, each handed to `hand`.
	auto run = [&](uint64_t stop, auto hand) {
		while (end >= step && o <= stop) {
			uint32_t w;
			memcpy(&w, pkt + o, sizeof w);
			if ((w & 31u) != last_id)
				break;
			const uint64_t t = hi | (w >> 5);
			if (t < prev || t > ts_max)
				break;
			WalkedRecord r;
			r.id = (uint32_t)last_id;
			r.ts = t;
			r.start = o;
			if (kShared)
				memcpy(&r.tid, pkt + o + STRATA_REC_COMPACT_SIZE, sizeof r.tid);
			r.payload = o + head;
			r.end = o + step;
			o += step;
			prev = t;
			good = o;
			hand(r);
		}
	};
	if constexpr (kHasRoom<Visit>) {
		// The records the visitor keeps, then (room used up) those it
		// does not want, still checked.  No overflow: room() <= 2^30,
		// step < 2^33, o < 2^62.
		const uint64_t n = v.room();
		if (__builtin_expect(n != 0, 1)) {
			const uint64_t to = o + (n - 1) * step; // the last record start kept
			run(to < last ? to : last, [&](const WalkedRecord &r) { v.take(r); });
			if (__builtin_expect(o > to, 0))
				run(last, [](const WalkedRecord &) {});
		} else {
			run(last, [](const WalkedRecord &) {});
		}
	} else {
		run(last, [&](const WalkedRecord &r) { v.record(r); });
	}
}

// The payload size of a record of an id other than the last one's, from
// layout_ (lay, n_lay): described after the caller's last look (a producer
// publishes a descriptor before any record of it), the visitor is asked
// once (asked) and the table looked at again.
template <class Visit>
__attribute__((always_inline)) inline uint32_t
RecordWalk::size_of(uint32_t id, bool &asked, const uint32_t *&lay, uint64_t &n_lay, Visit &v)
{
	uint32_t size = id < n_lay ? lay[id] : kUndescribed;
	if (__builtin_expect(size == kUndescribed, 0) && !asked) {
		asked = true;
		if (v.undescribed()) {
			lay = layout_.data();
			n_lay = layout_.size();
			size = id < n_lay ? lay[id] : kUndescribed;
		}
	}
	return size;
}

// The per-record work is a few loads, compares and one table look-up
// (layout_) for events of fixed size.
template <bool kCompact, bool kShared, class Visit>
uint64_t RecordWalk::walk_as(const uint8_t *pkt, uint64_t end, uint64_t ts_max, uint64_t *ts,
			     const char **why, Visit &v)
{
	uint64_t o = kHdr, good = kHdr, prev = *ts;
	bool asked = false;
	// The last record's id when its event has a fixed size (last_size),
	// else none: 64 bits, so that no id (an extended header may claim
	// UINT32_MAX) matches before the first look-up.
	uint64_t last_id = UINT64_MAX;
	uint32_t last_size = 0;
	// The same for the last record of variable size: a run of one string
	// event costs no look-up, its next record's loads wait only for the NUL.
	uint64_t last_var = UINT64_MAX;
	VarShape var;
	const uint32_t *lay = layout_.data();
	uint64_t n_lay = layout_.size();
	auto stop = [&](const char *w) {
		*why = w;
		*ts = prev;
		return good;
	};
	while (o < end) { // each round advances by >= 4 bytes or returns
		if (kCompact && last_id < STRATA_REC_EXTENDED_ID) {
			compact_run<kShared>(pkt, end, ts_max, last_id, last_size, o, prev, good, v);
			if (o >= end)
				break;
		}
		WalkedRecord r;
		if (const char *w = read_header<kCompact, kShared>(pkt, end, prev, &o, &r))
			return stop(w);
		if (r.ts < prev)
			return stop("timestamp before the previous record's");
		if (r.ts > ts_max)
			return stop("timestamp after the packet's end");
		r.payload = o;
		// The previous record's id first: a stream is mostly runs of
		// one event, and a predicted compare lets the next record's
		// load start before this one's table look-up completes (the
		// look-up otherwise sits on the chain record -> id -> size ->
		// next record, about 4 ns a record); its size is known to be
		// described and fixed.
		if (__builtin_expect(r.id == last_id, 1)) {
			if (end - o < last_size)
				return stop("record beyond the packet's content");
			o += last_size;
		} else if (r.id == last_var) {
			if (!walk_var(var, pkt, end, o))
				return stop("a field beyond the packet's content (string or sequence)");
		} else {
			const uint32_t size = size_of(r.id, asked, lay, n_lay, v);
			if (asked) // the tables may have changed since last_var's look-up
				last_var = UINT64_MAX;
			if (size == kUndescribed)
				return stop("undescribed event id");
			if (__builtin_expect(size != kVariablePayload, 1)) {
				if (end - o < size)
					return stop("record beyond the packet's content");
				o += size;
				last_id = r.id;
				last_size = size;
			} else {
				// Every event of variable size has one (make_plan).
				last_var = r.id;
				var = var_of_[r.id];
				if (!walk_var(var, pkt, end, o))
					return stop(
						"a field beyond the packet's content (string or sequence)");
				last_id = UINT64_MAX;
			}
		}
		r.end = o;
		prev = r.ts;
		good = o;
		v.record(r);
	}
	*ts = prev;
	return good;
}

} // namespace strata
#endif
