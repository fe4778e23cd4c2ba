// trace_reader.cpp - reading the packets of an opened trace (trace_index.cpp
// opens it and indexes them); contract in trace_reader.h.
#include "trace_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "ctf_index.h"
#include "packet_file.h"
#include "strata_abi.h"

namespace strata {
using packet_file::base_name;
using packet_file::check_header;
using packet_file::kHdr;
using packet_file::read_at;

uint64_t FieldValue::elem_u(uint32_t k) const
{
	const unsigned b = info->elem_bits / 8;
	uint64_t v = 0;
	memcpy(&v, elems + (size_t)k * b, b); // little-endian host (strata_abi.h)
	return v;
}

int64_t FieldValue::elem_i(uint32_t k) const
{
	const unsigned bits = info->elem_bits;
	const uint64_t v = elem_u(k);
	if (!info->is_signed || bits == 64)
		return (int64_t)v;
	const uint64_t sign = 1ull << (bits - 1);
	return (int64_t)((v ^ sign) - sign);
}

void TraceEvent::decode(std::vector<FieldValue> *out) const
{
	out->clear();
	for_each_field([out](const FieldValue &v) { out->push_back(v); });
}

// Records decoded per refill of a cursor (1.5 MiB): a 1 MiB packet of
// records of 16 bytes or more is walked once.
constexpr size_t kMaxDecoded = 65536;

TraceReader::TraceReader() = default;
TraceReader::~TraceReader() = default;

void TraceReader::set_window(int64_t begin_ns, int64_t end_ns)
{
	win_begin_ = begin_ns;
	win_end_ = end_ns;
}

void TraceReader::set_stream_filter(std::function<bool(const StreamInfo &)> keep)
{
	keep_ = std::move(keep);
}

// The loss packet `e` reveals against the cursor's previous packet: a gap
// in the sequence numbers (packets), a rise of the cumulative count (events),
// as babeltrace2 reports them.
void TraceReader::queue_loss(Cursor &c, const PacketEntry &e)
{
	const TraceMeta &m = c.s->trace->meta;
	const int64_t at = m.ns_from_origin(c.prev ? c.prev->ts_end : e.ts_begin);
	TraceMsg msg;
	msg.stream = c.s;
	msg.begin_ns = at;
	if (c.prev && e.seq > c.prev->seq + 1) {
		msg.kind = TraceMsgKind::DiscardedPackets;
		msg.count = e.seq - c.prev->seq - 1;
		msg.end_ns = m.ns_from_origin(e.ts_begin);
		stats_.discarded_packets += msg.count;
		c.pending.push_back(msg);
	}
	const uint64_t prev_disc = c.prev ? c.prev->discarded : 0;
	if (e.discarded > prev_disc) {
		msg.kind = TraceMsgKind::DiscardedEvents;
		msg.count = e.discarded - prev_disc;
		msg.end_ns = m.ns_from_origin(e.ts_end);
		stats_.discarded_events += msg.count;
		c.pending.push_back(msg);
	}
}

// The next kMaxDecoded records past those decoded (c.ro < c.rend), into
// c.recs: stepped through, the walk that loaded the packet having checked
// them.
template <class C> __attribute__((noinline)) void refill(C &c)
{
	const size_t cap = c.recs_cap;
	size_t n = 0;
	while (n < cap && c.ro < c.rend) {
		WalkedRecord r;
		c.walk->step(c.buf.get(), c.rend, c.s->shared, c.rprev, &c.ro, &r);
		c.rprev = r.ts;
		c.recs[n++] = DecodedRecord{r.ts,  (uint32_t)r.payload, (uint32_t)r.end,
					    r.tid, (uint16_t)r.id,      r.cpu};
	}
	c.rp = c.recs.get();
	c.rq = c.rp + n;
}

// Whether the cursor's packet has a record left to deliver.
template <class C> __attribute__((always_inline)) inline bool has_record(const C &c)
{
	return c.rp < c.rq || c.ro < c.rend;
}

namespace {

// The walk's visitor of load_packet(): each good record into the
// cursor's recs, up to their room.
struct DecodeInto : RecordWalk::NoVisit {
	DecodedRecord *p, *full; // the next place, the end of recs
	// The walk's runs hand take() at most room() records;
	// record() gets the others.
	uint64_t room() const { return (uint64_t)(full - p); }
	void record(const WalkedRecord &r)
	{
		if (__builtin_expect(p != full, 1))
			take(r);
	}
	void take(const WalkedRecord &r)
	{
		// Three 8-byte stores (DecodedRecord's layout, little-
		// endian; offsets below 2^32: a packet is at most
		// 64 MiB): in a run of one id the last word is the
		// same for every record of an owned lane; the middle
		// one is a sum, not an or (the same bits), which the
		// compiler keeps across a run, one add a record.
		const uint64_t at = r.payload + (r.end << 32);
		const uint64_t who = (uint32_t)r.tid | (uint64_t)(uint16_t)r.id << 32 | (uint64_t)r.cpu << 48;
		char *d = reinterpret_cast<char *>(p);
		memcpy(d, &r.ts, 8);
		memcpy(d + offsetof(DecodedRecord, payload), &at, 8);
		memcpy(d + offsetof(DecodedRecord, tid), &who, 8);
		p++;
	}
};

} // namespace

// The header of packet e, read from the packet index (the stream's
// from_index): checked as the walk at open checks one, and against the
// entry.  A header that is not a packet of the stream, or whose sizes are
// not the entry's: the packet is skipped, named as damage in place.  One
// whose other values (times, counts, thread) differ: the index is named
// and the header's values are used, as a walk would have found them.
bool TraceReader::indexed_header_ok(Cursor &c, PacketEntry &e)
{
	const TraceMeta &m = c.s->trace->meta;
	strata_packet_header h;
	memcpy(&h, c.buf.get(), sizeof h); // content >= 84 bytes, then the zeroed slack
	HeaderContext ctx;
	ctx.have = true;
	ctx.stream_id = c.s->stream_class;
	ctx.instance = c.s->instance;
	const char *why = check_header(h, m, ctx, e.offset, c.s->size);
	if (!why && (h.packet_size / 8 != e.size || h.content_size / 8 != e.content))
		why = "sizes not those of its packet index entry";
	// The damage named last, as a message in place (resolved in
	// next_slow()), spanning [begin, end].
	auto in_place = [&](uint64_t begin, uint64_t end) {
		TraceMsg msg;
		msg.kind = TraceMsgKind::Damage;
		msg.stream = c.s;
		msg.begin_ns = m.ns_from_origin(begin);
		msg.end_ns = m.ns_from_origin(end);
		msg.count = damages_.size() - 1;
		c.pending.push_back(msg);
	};
	if (why) {
		damage(*c.s, e.offset, e.size,
		       std::string(why) + " (a header its packet index placed; the packet skipped)");
		// As a span the walk skips: from the packet before's end to the
		// one after's beginning.
		const size_t k = (size_t)(&e - c.s->packets.data());
		in_place(c.prev ? c.prev->ts_end : e.ts_begin,
			 k + 1 < c.s->packets.size() ? c.s->packets[k + 1].ts_begin : e.ts_end);
		return false;
	}
	const int32_t vtid = m.record_format == STRATA_REC_COMPACT ? h.vtid : -1;
	if (h.timestamp_begin != e.ts_begin || h.timestamp_end != e.ts_end || h.packet_seq_num != e.seq ||
	    h.events_discarded != e.discarded || h.lane_id != e.lane || vtid != e.vtid) {
		index_damage(ctf_index_path(c.s->path),
			     "the entry of the packet at byte " + std::to_string(e.offset) + " of " +
				     base_name(c.s->path) +
				     " differs from its header; the header's values used");
		in_place(h.timestamp_begin, h.timestamp_begin);
		e.ts_begin = h.timestamp_begin;
		e.ts_end = h.timestamp_end;
		e.seq = h.packet_seq_num;
		e.discarded = h.events_discarded;
		e.lane = h.lane_id;
		e.vtid = vtid;
	}
	return true;
}

// Packet e's content into the cursor's buffer (kTraceEventSlack zero
// bytes after it); false, named as damage, when it cannot be read.
bool TraceReader::read_packet(Cursor &c, PacketEntry &e)
{
	const int fd = ::open(c.s->path.c_str(), O_RDONLY | O_CLOEXEC);
	if (c.buf_cap < e.content + kTraceEventSlack) {
		c.buf_cap = e.content + kTraceEventSlack;
		c.buf.reset(new uint8_t[c.buf_cap]);
	}
	memset(c.buf.get() + e.content, 0, kTraceEventSlack);
	const bool ok = fd >= 0 && read_at(fd, c.buf.get(), e.content, e.offset);
	if (fd >= 0)
		close(fd);
	if (!ok)
		damage(*c.s, e.offset, e.size, "cannot read the packet (file changed?)");
	return ok && (!c.s->from_index || indexed_header_ok(c, e));
}

// What every record of packet e shares, set once (take_record() sets the
// rest): the event given before is done with by now.
void TraceReader::begin_packet(Cursor &c, const PacketEntry &e)
{
	c.prev = &e;
	c.pe = &e;
	c.packet_tid = c.compact && !c.s->shared ? e.vtid : INT32_MIN;
	c.run.tid = c.packet_tid == INT32_MIN;
	c.run.cpu = c.run.tid && !c.compact;
	c.ev.pkt = c.buf.get();
	c.ev.packet = &e;
	c.ev.cpu = -1;
	if (c.packet_tid != INT32_MIN)
		c.ev.tid = c.packet_tid;
	if (c.map) {
		c.piece = c.map->piece_at(e.ts_begin);
		if (c.map->piece_end(c.piece) <= e.ts_end)
			c.piece = SIZE_MAX;
	}
	stats_.packets++;
	stats_.bytes += e.content;
}

// The records, by the consumer's walk: checked and decoded in one pass
// (the first kMaxDecoded kept, the rest stepped through later by
// refill()).  *ts the walk's last time, *why what stopped it (null at the
// content's end); the end of the last good record.
uint64_t TraceReader::decode_packet(Cursor &c, const PacketEntry &e, uint64_t *ts, const char **why)
{
	// Room for every record the content can hold (each takes 4 bytes
	// or more), up to kMaxDecoded: grown to the largest packet's, left
	// uninitialised (pages touched as records fill them).
	const size_t cap = std::min<size_t>(kMaxDecoded, e.content > kHdr ? (e.content - kHdr) / 4 : 0);
	if (c.recs_cap < cap) {
		c.recs.reset(new DecodedRecord[cap]);
		c.recs_cap = cap;
	}
	DecodeInto v;
	v.p = c.recs.get();
	v.full = v.p + cap;
	*ts = e.ts_begin;
	const uint64_t good = c.walk->walk(c.buf.get(), e.content, c.s->shared, e.ts_end, ts, why, v);
	c.rp = c.recs.get();
	c.rq = v.p;
	c.rend = good;
	// Past the records kept (all of them unless recs is full): where
	// refill() goes on from.
	const bool any = c.rq != c.rp;
	c.ro = any ? c.rq[-1].end : good;
	c.rprev = any ? c.rq[-1].ts : e.ts_begin;
	return good;
}

// Across packets, a stream's records never go back in time: the leading
// run of records before the last one delivered (timestamps never go back
// within a walk), skipped; how many.
uint64_t TraceReader::skip_stale(Cursor &c)
{
	uint64_t first = 0;
	if (c.rq != c.rp && c.rp->ts < c.last_ts)
		while (has_record(c)) {
			if (c.rp == c.rq)
				refill(c);
			if (c.rp->ts >= c.last_ts)
				break;
			c.rp++;
			first++;
		}
	return first;
}

// Damage in packet e (records skipped at its start, or the walk stopped
// at byte good): named, and queued as a message at time ts.
void TraceReader::packet_damage(Cursor &c, const PacketEntry &e, uint64_t good, uint64_t ts, bool first,
				const char *why)
{
	damage(*c.s, e.offset + (first ? 0 : good), 0,
	       std::string(why) + (first ? "" : " (packet cut there; the rest of it skipped)"));
	TraceMsg msg;
	msg.kind = TraceMsgKind::Damage;
	msg.stream = c.s;
	msg.begin_ns = msg.end_ns = c.s->trace->meta.ns_from_origin(has_record(c) ? ts : e.ts_begin);
	msg.damage = nullptr; // resolved in read(): damages_ may grow meanwhile
	msg.count = damages_.size() - 1;
	c.pending.push_back(msg);
}

// Loads the cursor's next packet in the window and walks its records;
// queues the loss the packet reveals.  False at the stream's end.
bool TraceReader::load_packet(Cursor &c)
{
	const TraceMeta &m = c.s->trace->meta;
	while (c.next < c.s->packets.size()) {
		PacketEntry &e = c.s->packets[c.next++];
		if (m.ns_from_origin(e.ts_end) < win_begin_ || m.ns_from_origin(e.ts_begin) > win_end_) {
			c.prev = &e;
			continue;
		}
		if (!read_packet(c, e)) {
			if (c.pi < c.pending.size())
				return true; // its damage first (no record of it)
			continue;
		}
		queue_loss(c, e);
		begin_packet(c, e);
		uint64_t ts;
		const char *why = nullptr;
		const uint64_t good = decode_packet(c, e, &ts, &why);
		const uint64_t first = skip_stale(c);
		if (first)
			why = "records before the previous packet's last";
		if (why)
			packet_damage(c, e, good, ts, first != 0, why);
		return true;
	}
	return false;
}

// The packet's next record (c.ro < c.rend) into c.ev: the path of most
// calls of next(), inlined there (C: TraceReader::Cursor, private).
// The rarer parts of take_record, out of line: a time through a clock
// map or another clock's frequency, and the class of a new id.
template <class C> __attribute__((noinline)) int64_t slow_ns(const C &c, uint64_t ts)
{
	if (c.map)
		return c.piece != SIZE_MAX ? c.map->ns_with(c.piece, ts) : c.map->ns(ts);
	return c.s->trace->meta.ns_from_origin(ts);
}

template <class C> __attribute__((always_inline)) inline void take_record(C &c)
{
	if (__builtin_expect(c.rp == c.rq, 0))
		refill(c);
	const DecodedRecord &r = *c.rp++;
	TraceEvent &ev = c.ev;
	ev.ts = r.ts;
	ev.ns = __builtin_expect(!c.map && c.fast_ns, 1) ? c.base_ns + (int64_t)r.ts : slow_ns(c, r.ts);
	ev.cls = r.id < c.ncls ? c.cls[r.id] : nullptr;
	if (c.packet_tid == INT32_MIN) { // else set by load_packet(), with pkt and packet
		ev.tid = r.tid;
		if (!c.compact)
			ev.cpu = r.cpu;
	}
	ev.payload = r.payload;
	ev.end = r.end;
	c.last_ts = r.ts;
	c.key = ev.ns;
}

// Moves the cursor to what comes next; false at the stream's end.
bool TraceReader::next_record(Cursor &c)
{
	for (;;) {
		if (c.pi < c.pending.size()) {
			c.key = c.pending[c.pi].begin_ns;
			return true;
		}
		if (!c.pending.empty()) {
			c.pending.clear();
			c.pi = 0;
		}
		if (has_record(c)) {
			take_record(c);
			return true;
		}
		if (!load_packet(c))
			return false;
	}
}

// A cursor on stream `s` (the i-th), before its first packet.
std::unique_ptr<TraceReader::Cursor> TraceReader::make_cursor(StreamInfo *s, size_t i)
{
	auto c = std::make_unique<Cursor>();
	c->s = s;
	const size_t ti = (size_t)(std::find_if(traces_.begin(), traces_.end(),
						[&](const auto &t) { return t.get() == s->trace; }) -
				   traces_.begin());
	c->walk = walks_[ti].get();
	static const std::map<uint32_t, MetaEvent> kNone;
	const auto &ev = s->trace->meta.events;
	auto it = ev.find(s->trace->meta.stream_id);
	c->classes = it == ev.end() ? &kNone : &it->second;
	// The sub-trace's classes by id, made once: ids of 16 bits (what a
	// DecodedRecord holds; a described id is at most STRATA_LIMIT_EVENT_ID).
	if (cls_tabs_.size() < traces_.size())
		cls_tabs_.resize(traces_.size());
	std::vector<const MetaEvent *> &tab = cls_tabs_[ti];
	if (tab.empty() && !c->classes->empty()) {
		uint32_t top = 0;
		for (const auto &kv : *c->classes)
			if (kv.first <= UINT16_MAX)
				top = std::max(top, kv.first);
		tab.assign((size_t)top + 1, nullptr);
		for (const auto &kv : *c->classes)
			if (kv.first <= UINT16_MAX)
				tab[kv.first] = &kv.second;
	}
	c->cls = tab.data();
	c->ncls = (uint32_t)tab.size();
	c->order = i;
	c->ev.stream = s;
	c->compact = s->trace->meta.record_format == STRATA_REC_COMPACT;
	// ns = offset_s * 1e9 + offset + value where the clock counts ns.
	const MetaClock &clk = s->trace->meta.clock;
	c->map = s->trace->meta.map.get();
	c->fast_ns = !c->map && clk.freq == 1000000000u && clk.offset >= 0 && clk.offset_s >= 0 &&
		     clk.offset_s < INT64_MAX / 4000000000;
	c->base_ns = c->fast_ns ? clk.offset_s * 1000000000 + clk.offset : 0;
	c->run.ev = &c->ev;
	c->run.fast = !c->map && c->fast_ns;
	c->run.base = c->base_ns;
	c->run.cls = c->cls;
	c->run.ncls = c->ncls;
	return c;
}

bool TraceReader::read(const std::function<bool(const TraceMsg &)> &on)
{
	return read_each(on);
}

void TraceReader::share_index(const TraceReader &from)
{
	traces_ = from.traces_;
	walks_ = from.walks_;
	streams_.clear();
	for (const auto &s : from.streams_)
		streams_.push_back(std::make_unique<StreamInfo>(*s));
	// The index's damage (that found while reading is each pass's own).
	index_damages_ = from.index_damages_;
	damages_.assign(from.damages_.begin(), from.damages_.begin() + (ptrdiff_t)index_damages_);
	stats_ = TraceReadStats();
	stats_.unreadable_traces = from.stats_.unreadable_traces;
	stats_.damaged = damages_.size();
	for (const TraceDamage &d : damages_)
		stats_.damaged_bytes += d.bytes;
}

void TraceReader::start()
{
	if (started_)
		return;
	started_ = true;
	// Index damage first: named in the order found, at the start (their
	// time is not known: the bytes that would say it are the damaged ones).
	index_damage_end_ = damages_.size();
	for (size_t i = 0; i < streams_.size(); i++) {
		StreamInfo *s = streams_[i].get();
		if (s->packets.empty() || (keep_ && !keep_(*s)))
			continue;
		auto c = make_cursor(s, i);
		if (next_record(*c))
			cursors_.push_back(std::move(c));
	}
	for (auto &c : cursors_)
		heap_.push_back(c.get());
	// Sorted when few (heap_down from the last place up: each cursor
	// into the sorted ones after it).
	sorted_ = heap_.size() <= kSortedMax;
	for (size_t i = heap_.size(); i-- > 0;)
		heap_down(i);
}

// The time of a record of advance_'s packet (its clock not in ns from
// the origin, or a map's): as take_record() finds it.
int64_t TraceReader::run_ns(uint64_t ts) const
{
	return slow_ns(*advance_, ts);
}

// advance_ brought up to date with the records the run took: as if each
// went through take_record() (the event's fields already set).
__attribute__((always_inline)) inline void TraceReader::sync_run()
{
	Cursor &c = *advance_;
	if (run_p_ != c.rp) {
		c.rp = run_p_;
		c.last_ts = run_p_[-1].ts;
		c.key = c.ev.ns;
	}
	run_p_ = run_end_ = nullptr;
}

// Event message of cursor t, its run started: t is advance_ and first.
__attribute__((always_inline)) inline void TraceReader::give_event(Cursor &t, TraceMsg *out)
{
	stats_.events++;
	*out = TraceMsg();
	out->kind = TraceMsgKind::Event;
	out->stream = t.s;
	out->event = &t.ev;
	start_run(t);
}

// The run stopped at a record of advance_'s packet: one past the rival's
// time (most often: another stream's event comes next), or of an id no
// class describes.  Taken, and advance_ moved down the heap when the
// rival (the first of the others: they did not move meanwhile) now comes
// first.  (What sync_run() would set of the records given before is set
// again by take_record().)  True with the new first's event in *out;
// false with advance_ cleared: next_slow() goes on.
__attribute__((always_inline)) inline bool TraceReader::take_stopped_run(TraceMsg *out)
{
	Cursor &c = *advance_;
	c.rp = run_p_;
	run_p_ = run_end_ = nullptr;
	take_record(c);
	const Cursor *o = rival_;
	if (o && (o->key < c.key || (o->key == c.key && o->order < c.order))) {
		heap_down(0);
		// Most often the new first has its record taken and nothing
		// pending: given at once (as next_slow()'s loop would give it).
		Cursor &t = *heap_[0];
		if (__builtin_expect(t.pi >= t.pending.size() && t.ev.cls, 1)) {
			advance_ = &t;
			const size_t n = heap_.size();
			rival_ = n < 3 || heap_[1]->key < heap_[2]->key ||
						 (heap_[1]->key == heap_[2]->key &&
						  heap_[1]->order < heap_[2]->order)
					 ? heap_[1]
					 : heap_[2];
			give_event(t, out);
			return true;
		}
	}
	advance_ = nullptr;
	return false;
}

// Moves on from what the previous call gave (advance_, then cleared).
__attribute__((always_inline)) inline void TraceReader::move_on()
{
	Cursor &c = *advance_;
	advance_ = nullptr;
	// Most often the packet's next record (inlined); else what is
	// pending, the next packet, or the stream's end.
	if (__builtin_expect(c.pending.empty() && has_record(c), 1))
		take_record(c);
	else if (!next_record(c)) {
		heap_[0] = heap_.back();
		heap_.pop_back();
	}
	// Most often the cursor moved on stays the first (a run of one
	// stream's events): two compares, no sift.
	const size_t n = heap_.size();
	if (n > 1) {
		const Cursor *t = heap_[0];
		auto before = [t](const Cursor *o) {
			return o->key < t->key || (o->key == t->key && o->order < t->order);
		};
		if (before(heap_[1]) || (n > 2 && before(heap_[2])))
			heap_down(0);
	}
}

bool TraceReader::next_slow(TraceMsg *out)
{
	if (run_p_ != run_end_) {
		if (take_stopped_run(out))
			return true;
	} else if (run_p_) {
		sync_run();
	}
	if (!started_)
		start();
	if (index_damage_next_ < index_damage_end_) {
		*out = TraceMsg();
		out->kind = TraceMsgKind::Damage;
		out->damage = &damages_[index_damage_next_++];
		return true;
	}
	for (;;) {
		if (advance_)
			move_on();
		if (heap_.empty())
			return false;
		Cursor &c = *heap_[0];
		advance_ = &c;
		const size_t n = heap_.size();
		rival_ = n < 2 ? nullptr
			 : n < 3 || heap_[1]->key < heap_[2]->key ||
					 (heap_[1]->key == heap_[2]->key && heap_[1]->order < heap_[2]->order)
				 ? heap_[1]
				 : heap_[2];
		if (c.pi < c.pending.size()) {
			TraceMsg &p = c.pending[c.pi++];
			if (p.kind == TraceMsgKind::Damage)
				p.damage = &damages_[p.count];
			*out = p;
			return true;
		}
		if (!c.ev.cls)
			continue; // an id no class describes (the walk let it through)
		give_event(c, out);
		return true;
	}
}

void TraceReader::check_packets(const std::function<void(const StreamInfo &, const PacketEntry &, uint64_t,
							 const char *, const std::vector<uint8_t> &)> &on)
{
	std::vector<uint8_t> buf;
	for (size_t i = 0; i < streams_.size(); i++) {
		const StreamInfo &s = *streams_[i];
		const size_t ti = (size_t)(std::find_if(traces_.begin(), traces_.end(),
							[&](const auto &t) { return t.get() == s.trace; }) -
					   traces_.begin());
		RecordWalk *walk = walks_[ti].get();
		const int fd = ::open(s.path.c_str(), O_RDONLY | O_CLOEXEC);
		uint64_t last_ts = 0;
		for (const PacketEntry &e : s.packets) {
			buf.resize(e.size);
			if (fd < 0 || !read_at(fd, buf.data(), e.size, e.offset)) {
				on(s, e, 88, "cannot read the packet", buf);
				continue;
			}
			RecordWalk::NoVisit v;
			uint64_t ts = std::max(e.ts_begin, last_ts);
			const char *why = nullptr;
			const uint64_t good =
				walk->walk(buf.data(), e.content, s.shared, e.ts_end, &ts, &why, v);
			if (e.ts_begin < last_ts && !why && good > kHdr)
				why = "records before the previous packet's last";
			last_ts = std::max(last_ts, ts);
			on(s, e, good, why, buf);
		}
		if (fd >= 0)
			close(fd);
	}
}

} // namespace strata
