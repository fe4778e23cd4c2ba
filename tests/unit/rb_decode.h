/*
 * rb_decode.h - an independent decoder of the records of a packet, with
 * the event descriptions the reader parsed (the writer's layout:
 * strata_abi.h STRATA_REC_COMPACT, byte-packed).  No test framework: the
 * unit tests (rb_test_util.h) and the reader's fuzz target
 * (tests/fuzz/reader_fuzz.cpp) use it as their oracle.
 */
#ifndef STRATA_TESTS_RB_DECODE_H
#define STRATA_TESTS_RB_DECODE_H

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "strata_abi.h"
#include "event_info.h"

namespace rbtest {

struct Value {
	uint64_t u = 0;
	double f = 0;
	std::string s;
	std::vector<uint64_t> elems;
};

struct Record {
	uint32_t id;
	uint64_t ts;
	uint32_t tid;     // the packet's vtid (owned lane) or the record's context (shared lane)
	bool extended;    // the 13-byte header
	std::string name; // provider:event
	std::vector<Value> fields;
};

inline uint64_t load_le(const uint8_t *p, unsigned bytes)
{
	uint64_t v = 0;
	memcpy(&v, p, bytes);
	return v;
}

// One field's value at *o (before `end`) into *v, *o past it; false when
// it runs past `end`.
inline bool decode_field(const std::vector<uint8_t> &pkt, size_t end, size_t *o, const strata::FieldInfo &f,
			 Value *v)
{
	const unsigned b = f.elem_bits / 8;
	switch (f.type) {
	case STRATA_FT_INTEGER:
	case STRATA_FT_ENUM:
	case STRATA_FT_FLOAT:
		if (*o + b > end)
			return false;
		v->u = load_le(&pkt[*o], b);
		if (f.type == STRATA_FT_FLOAT) {
			if (b == 4) {
				float x;
				memcpy(&x, &pkt[*o], 4);
				v->f = x;
			} else {
				memcpy(&v->f, &pkt[*o], 8);
			}
		}
		*o += b;
		return true;
	case STRATA_FT_STRING: {
		const void *nul = memchr(&pkt[*o], 0, end - *o);
		if (!nul)
			return false;
		v->s = std::string((const char *)&pkt[*o]);
		*o += v->s.size() + 1;
		return true;
	}
	case STRATA_FT_ARRAY:
	case STRATA_FT_SEQUENCE: {
		uint64_t n = f.length;
		if (f.type == STRATA_FT_SEQUENCE) {
			if (*o + 4 > end)
				return false;
			n = load_le(&pkt[*o], 4);
			*o += 4;
		}
		if (*o + n * b > end)
			return false;
		for (uint64_t k = 0; k < n; k++, *o += b)
			v->elems.push_back(load_le(&pkt[*o], b));
		return true;
	}
	}
	return true;
}

// Decodes every record of a validated packet (strata_abi.h,
// STRATA_REC_COMPACT: byte-packed, compact or extended header, the thread
// context in shared lanes); false (with *err) on any inconsistency: unknown
// id, a field running past content_size.  Compact timestamps are rebuilt as
// a CTF reader does, from the previous timestamp (timestamp_begin first).
// shared: whether records carry the thread context (a shared lane's
// stream class); -1: as the packet's vtid says (-1 in shared lanes), which
// a writer keeps true but a hostile buffer need not (the CTF reader goes by
// the stream class).
inline bool decode_packet(const std::vector<uint8_t> &pkt,
			  const std::map<uint32_t, strata::EventInfo> &events, std::vector<Record> *out,
			  std::string *err, int shared_lane = -1)
{
	strata_packet_header ph;
	memcpy(&ph, pkt.data(), sizeof ph);
	size_t end = ph.content_size / 8, o = STRATA_PACKET_HEADER_SIZE;
	if (ph.packet_size == STRATA_PACKET_HEADER_SIZE * 8 && end == STRATA_PACKET_HEADER_SIZE)
		return true; // a trailing-loss packet: the header alone, no records
	if (end > pkt.size()) {
		*err = "content beyond the packet";
		return false;
	}
	const bool shared = shared_lane < 0 ? ph.vtid < 0 : shared_lane != 0;
	uint64_t cur = ph.timestamp_begin;
	// As a CTF reader does: the packet ends exactly after its last record
	// (no trailing padding); nothing is aligned.
	while (o < end) {
		Record r;
		if (o + STRATA_REC_COMPACT_SIZE > end) {
			*err = "a partial record header at the end of the content";
			return false;
		}
		const uint32_t w = (uint32_t)load_le(&pkt[o], 4);
		r.id = w & 31u;
		r.extended = r.id == STRATA_REC_EXTENDED_ID;
		if (r.extended) {
			if (o + STRATA_REC_EXTENDED_SIZE > end) {
				*err = "a partial extended header at the end of the content";
				return false;
			}
			if (pkt[o] != STRATA_REC_EXTENDED_ID) {
				*err = "extended header with bits 5..7 set";
				return false;
			}
			r.id = (uint32_t)load_le(&pkt[o + 1], 4);
			r.ts = load_le(&pkt[o + 5], 8);
			o += STRATA_REC_EXTENDED_SIZE;
		} else {
			const uint64_t mask = (1ull << STRATA_REC_COMPACT_TS_BITS) - 1;
			r.ts = (cur & ~mask) | (w >> 5);
			if (r.ts < cur)
				r.ts += mask + 1;
			o += STRATA_REC_COMPACT_SIZE;
		}
		cur = r.ts;
		r.tid = (uint32_t)ph.vtid;
		if (shared) {
			if (o + STRATA_REC_SHARED_CTX_SIZE > end) {
				*err = "a partial thread context at the end of the content";
				return false;
			}
			r.tid = (uint32_t)load_le(&pkt[o], 4);
			o += STRATA_REC_SHARED_CTX_SIZE;
		}
		auto it = events.find(r.id);
		if (it == events.end()) {
			*err = "unknown event id " + std::to_string(r.id) + " at " + std::to_string(o);
			return false;
		}
		r.name = it->second.provider + ":" + it->second.name;
		for (const auto &f : it->second.fields) {
			Value v;
			if (!decode_field(pkt, end, &o, f, &v)) {
				*err = "field runs past content_size";
				return false;
			}
			r.fields.push_back(v);
		}
		out->push_back(std::move(r));
	}
	if (o != end) {
		*err = "records do not end at content_size";
		return false;
	}
	return true;
}

} // namespace rbtest
#endif
