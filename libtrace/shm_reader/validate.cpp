/*
 * validate.cpp - the reader's checks of the records of a packet: every
 * record copied out of a producer's buffer is decoded with the stream's
 * descriptors, exactly as a CTF reader (babeltrace2) will decode it, before
 * it reaches a trace.  Contract in reader.h (check_records); why a bad
 * packet is cut and the stream resumed at the next packet, in
 * docs/ring-buffer.md, "Records are never trusted".
 *
 * Cost: the drain calls this once per packet on its private copy, right
 * after the copy (the bytes are in the cache).  An event whose fields all
 * have a fixed size (most) costs a compare with the previous record's id
 * and an add per record, a table look-up where the id changes
 * (fixed_payload); an event with strings or sequences is walked by its
 * plan (make_plan: in COMPACT buffers consecutive fixed-size fields one
 * skip), one that is a string between fixed fields by its shape
 * (shape_of).
 */
#include "reader.h"
#include "record_walk.h"

#include <algorithm>
#include <cstring>

namespace strata {
namespace {

constexpr uint64_t kHdr = STRATA_PACKET_HEADER_SIZE;

} // namespace

// The payload size of an event whose fields all have a fixed size (no
// string, no sequence), else kVariablePayload.  COMPACT records are
// byte-packed.  A WIDE record starts 8-byte aligned and its payload 16
// bytes later, and fields are aligned (at most 8) from the packet start:
// the same as from the payload start, so the size holds wherever the
// record lies.
uint32_t RecordWalk::fixed_payload(const EventInfo &ev) const
{
	const bool compact = format_ == STRATA_REC_COMPACT;
	uint64_t o = 0;
	for (const FieldInfo &f : ev.fields) {
		if (f.type == STRATA_FT_STRING || f.type == STRATA_FT_SEQUENCE)
			return kVariablePayload;
		const uint64_t b = std::min<uint64_t>(f.elem_bits / 8, 8); // >= 1 (validated)
		if (!compact)
			o = (o + b - 1) & ~(b - 1);
		o += (f.type == STRATA_FT_ARRAY ? f.length : 1) * b; // bounded by the descriptor rules
	}
	return o < kVariablePayload ? (uint32_t)o : kVariablePayload;
}

// The steps of an event with a string or a sequence, which walk_plan
// follows as a CTF reader decodes the fields, each inside the content.
// COMPACT records are byte-packed: the fixed-size fields between two
// variable ones are one skip (bench:mixed's eight fields are a skip of
// 25 bytes, a string and a skip of 4).  In WIDE (kernel) ones each field
// is aligned to its size (at most 8) from the packet start, which after
// a string is known only at run time: an align step before each.  Walked
// through the descriptor's field list instead, such an event was half of
// the daemon's CPU (docs/ring-buffer.md, "The validation's cost").
void RecordWalk::make_plan(const EventInfo &ev)
{
	const bool compact = format_ == STRATA_REC_COMPACT;
	constexpr uint64_t kMaxStep = 1u << 28; // a step's bytes fit its 29 bits
	std::vector<uint32_t> steps;
	uint64_t fixed = 0;
	auto step = [&steps](uint32_t kind, uint64_t bytes) {
		steps.push_back((uint32_t)(bytes << 3) | kind);
	};
	auto flush = [&]() {
		for (; fixed > 0; fixed -= std::min(fixed, kMaxStep))
			step(kStepFixed, std::min(fixed, kMaxStep));
	};
	for (const FieldInfo &f : ev.fields) {
		const uint64_t b = std::min<uint64_t>(f.elem_bits / 8, 8); // >= 1 (validated)
		if (f.type == STRATA_FT_STRING) {
			flush();
			step(kStepString, 1);
			continue;
		}
		const uint64_t a = f.type == STRATA_FT_SEQUENCE ? 4 : b;
		if (!compact && a > 1) {
			flush();
			step(kStepAlign, a);
		}
		if (f.type == STRATA_FT_SEQUENCE) {
			flush();
			step(compact ? kStepSequence : kStepWideSeq, b);
			continue;
		}
		fixed += (f.type == STRATA_FT_ARRAY ? f.length : 1) * b; // bounded by the descriptor rules
	}
	flush();
	step(kStepEnd, 0);
	if (var_of_.size() <= ev.id)
		var_of_.resize(ev.id + 1);
	var_of_[ev.id] = shape_of(steps, (uint32_t)plans_.size());
	plans_.insert(plans_.end(), steps.begin(), steps.end());
}

// How the plan `steps`, at `plan` in plans_, is walked: where it is one
// string between fixed fields, [fixed] string [fixed] (COMPACT's only:
// WIDE plans align), as the two skips around it; else by its steps.
RecordWalk::VarShape RecordWalk::shape_of(const std::vector<uint32_t> &steps, uint32_t plan)
{
	VarShape v, by_plan;
	v.plan = by_plan.plan = plan;
	size_t i = 0;
	if (i < steps.size() && (steps[i] & 7u) == kStepFixed)
		v.pre = steps[i++] >> 3;
	if (i >= steps.size() || (steps[i++] & 7u) != kStepString)
		return by_plan;
	if (i < steps.size() && (steps[i] & 7u) == kStepFixed)
		v.post = steps[i++] >> 3;
	if (i >= steps.size() || (steps[i] & 7u) != kStepEnd)
		return by_plan;
	v.one_string = true;
	return v;
}

// The fields of one record by its plan from *o, each inside [.., end):
// false if one runs past it.  Moves *o to the record's end.
bool RecordWalk::walk_plan(const uint32_t *step, const uint8_t *pkt, uint64_t end, uint64_t *op) const
{
	uint64_t o = *op; // <= end throughout
	for (;; step++) {
		const uint32_t kind = *step & 7u;
		const uint64_t n = *step >> 3;
		if (kind == kStepFixed) {
			if (end - o < n)
				return false;
			o += n;
		} else if (kind == kStepString) {
			const uint64_t nul = walk_find_nul(pkt, o, end);
			if (nul == end)
				return false;
			o = nul + 1;
		} else if (kind == kStepSequence || kind == kStepWideSeq) {
			uint32_t len;
			if (end - o < 4)
				return false;
			memcpy(&len, pkt + o, 4);
			o += 4;
			if (kind == kStepWideSeq) {
				o = (o + n - 1) & ~(n - 1);
				if (o > end)
					return false;
			}
			if (len > (end - o) / n)
				return false;
			o += len * n;
		} else if (kind == kStepAlign) {
			o = (o + n - 1) & ~(n - 1);
			if (o > end)
				return false;
		} else {
			*op = o;
			return true;
		}
	}
}

void RecordWalk::add(const EventInfo &ev)
{
	if (layout_.size() <= ev.id) // ids are <= 0xfffe (the descriptor and metadata rules)
		layout_.resize(ev.id + 1, kUndescribed);
	layout_[ev.id] = fixed_payload(ev);
	if (layout_[ev.id] == kVariablePayload)
		make_plan(ev);
}

// The consumer's walk (record_walk.h): an undescribed id makes it read the
// descriptors appended since (once per packet).
struct Reader::Absorb : RecordWalk::NoVisit {
	Reader *r;
	bool undescribed()
	{
		const size_t before = r->known_.size();
		r->absorb_descriptors();
		return r->known_.size() != before;
	}
};

uint64_t Reader::walk_records(const uint8_t *pkt, uint64_t end, bool shared, uint64_t ts_max, uint64_t *ts,
			      const char **why)
{
	Absorb v;
	v.r = this;
	return walk_.walk(pkt, end, shared, ts_max, ts, why, v);
}

uint64_t Reader::header_only_content() const
{
	// The content ends after the last field the CTF metadata declares:
	// the whole header in COMPACT buffers (vtid at 84); in WIDE (kernel)
	// ones lane_id, since consumerd/metadata.cpp leaves the word at 84
	// unnamed there: a content_size of 88 bytes would make babeltrace2
	// look for an event header in the 4 padding bytes and fail the whole
	// trace.
	return info_.record_format == STRATA_REC_COMPACT ? kHdr * 8
							 : offsetof(strata_packet_header, vtid) * 8;
}

size_t Reader::check_records(uint32_t lane, uint8_t *pkt, size_t len, std::string *err)
{
	err->clear();
	if (lane >= info_.n_lanes || len < kHdr)
		return len; // not a packet of ours: nothing the caller could have
	LaneState &ls = lanes_[lane];
	strata_packet_header ph;
	memcpy(&ph, pkt, sizeof ph);
	const uint64_t end = std::min<uint64_t>(len, ph.content_size / 8);
	uint64_t ts = ph.timestamp_begin;
	const char *why = nullptr;
	const uint64_t good = walk_records(pkt, end, lane >= info_.first_shared, ph.timestamp_end, &ts, &why);
	if (why) {
		// At least the bad record is lost: counted as one discarded
		// event, in this packet and (cumulative) every later one.
		ls.cut_events++;
		stats_.cut_packets++;
		ph.content_size = good == kHdr ? header_only_content() : good * 8;
		ph.packet_size = std::max<uint64_t>(ph.content_size, kHdr * 8);
		*err = "lane " + std::to_string(lane) + " packet " + std::to_string(ph.packet_seq_num) +
		       ": record at byte " + std::to_string(good) + ": " + why + "; packet cut there (" +
		       std::to_string(end - good) + " byte(s) dropped)";
	}
	ph.events_discarded += ls.cut_events;
	memcpy(pkt, &ph, sizeof ph);
	return ph.packet_size / 8;
}

// The good records of a checked packet (check_records passed it): one
// walk that counts them, for collect_overwrite's accounting.
uint64_t Reader::count_records(uint32_t lane, const uint8_t *pkt, size_t len)
{
	if (len < kHdr || lane >= info_.n_lanes)
		return 0;
	strata_packet_header ph;
	memcpy(&ph, pkt, sizeof ph);
	struct Count : Absorb {
		uint64_t n = 0;
		void record(const WalkedRecord &) { n++; }
	} v;
	v.r = this;
	uint64_t ts = ph.timestamp_begin;
	const char *why = nullptr;
	walk_.walk(pkt, std::min<uint64_t>(len, ph.content_size / 8), lane >= info_.first_shared,
		   ph.timestamp_end, &ts, &why, v);
	return v.n;
}

// The walk of walk_records, each good record's start appended to *at
// (close_hole's candidates).
uint64_t Reader::walk_starts(const uint8_t *pkt, uint64_t end, bool shared, uint64_t *ts,
			     std::vector<uint64_t> *at)
{
	struct Starts : Absorb {
		std::vector<uint64_t> *at;
		void record(const WalkedRecord &w) { at->push_back(w.start); }
	} v;
	v.r = this;
	v.at = at;
	const char *why = nullptr;
	return walk_.walk(pkt, end, shared, UINT64_MAX, ts, &why, v);
}

// One walk of the packet (record_walk.h), its visitor closing a piece
// before the record that would take it past max_bytes.  A piece starts at
// its first record's header (WIDE: 8-byte aligned, as kHdr is, so that
// the records keep their alignment at kHdr in a packet of their own).
void Reader::cut_packet(uint32_t lane, const uint8_t *pkt, size_t len, size_t max_bytes,
			std::vector<Piece> *out)
{
	strata_packet_header ph;
	if (len < kHdr || lane >= info_.n_lanes) {
		out->push_back({kHdr, kHdr, 0, 0, 0});
		return;
	}
	memcpy(&ph, pkt, sizeof ph);
	struct Cut : Absorb {
		std::vector<Piece> *out;
		uint64_t max;
		Piece p; // the piece being filled
		void record(const WalkedRecord &w)
		{
			if (p.records && w.end - p.begin > max) {
				out->push_back(p);
				p = {w.start, w.start, p.ts_end, p.ts_end, 0};
			}
			if (!p.records)
				p.begin = w.start;
			p.records++;
			p.end = w.end;
			p.ts_end = w.ts;
		}
	} v;
	v.r = this;
	v.out = out;
	v.max = max_bytes;
	v.p = {kHdr, kHdr, ph.timestamp_begin, ph.timestamp_begin, 0};
	uint64_t ts = ph.timestamp_begin;
	const char *why = nullptr;
	walk_.walk(pkt, std::min<uint64_t>(len, ph.content_size / 8), lane >= info_.first_shared,
		   ph.timestamp_end, &ts, &why, v);
	// What follows a record that does not decode is not sent
	// (check_records cut the packet there already).
	v.p.ts_end = ph.timestamp_end;
	out->push_back(v.p);
}

} // namespace strata
