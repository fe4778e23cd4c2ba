/*
 * trace_reader.h - Strata's reader of its own trace files: every sub-trace
 * under a directory (CTF 1.8 as consumerd writes it), its streams merged by
 * time, read past any damage.
 *
 * Glossary (docs/reading.md has the design):
 *   sub-trace  a directory holding a `metadata` file and stream files (one
 *              per process and channel, the kernel's); TraceMeta.
 *   stream     one stream file: the packets of one lane.
 *   packet     an 88-byte header (strata_abi.h) and records; the unit of
 *              damage: a packet that fails its checks is skipped whole, a
 *              packet whose records stop decoding is cut after its last good
 *              record.
 *   index      a stream's packets, found by reading their headers only,
 *              checked against the packet index the consumer wrote
 *              (index/<stream>.idx, ctf_index.h) when the sub-trace has one;
 *              or taken from that packet index when it can stand for them
 *              (StreamInfo::from_index), each header then checked when its
 *              packet is read.
 *   damage     a span of a stream file that is not a valid packet (or the
 *              records cut off one), named by file, offset and reason.
 *
 * The files are hostile (a flipped bit, a torn write, spliced bytes): every
 * header is checked (magic, uuid, stream class, sizes inside the file,
 * timestamps in order) before the packet is used, every record by the
 * consumer's own walk (record_walk.h) before it is decoded, and after a bad
 * header the reader looks for the next valid packet header byte by byte.
 * The work is linear in the bytes read; nothing here allocates more than a
 * packet (64 MiB at most, strata_abi.h) per stream, plus the index.
 *
 * Threading: one TraceReader per thread; callbacks run on the calling
 * thread.  Memory: one packet per stream in flight (read with pread, so a
 * file truncated meanwhile cannot fault) and its records as the walk that
 * checked it decoded them (at most 65,536 of 24 bytes per stream).
 */
#ifndef STRATA_LIBTRACE_TRACE_READER_H
#define STRATA_LIBTRACE_TRACE_READER_H

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "record_walk.h"
#include "strata_abi.h"
#include "trace_meta.h"

namespace strata {

// A sub-trace under the reader's root.
struct SubTrace {
	std::string dir;
	TraceMeta meta;
	bool readable = false; // its metadata parsed (else `why`)
	std::string why;
	// From the env: the process (empty and 0 for the kernel's).
	std::string procname;
	int64_t vpid = 0;
	std::string hostname;
	bool kernel = false;
	// A follower's sub-trace split by clock piece (docs/clocks.md,
	// "babeltrace2 across a step"): the raw values its packets begin in
	// (env sync_piece_from / sync_piece_to); a packet outside belongs to a
	// sibling piece directory and is skipped (a split cut short by a kill
	// shows no packet twice).
	uint64_t piece_from = 0, piece_to = UINT64_MAX;
	// A piece directory's (`<dir>~seg<k>`) sub-trace: the base `<dir>`'s,
	// when the reader opened it too; null otherwise.  One process, one
	// kernel: what groups by sub-trace (analyze's processes, the query
	// tables' processes and threads) groups a piece with its base.
	const SubTrace *whole = nullptr;
};

// Whether `dir` names a piece directory (`<base>~seg<k>`, docs/clocks.md);
// *base (may be null) gets <base>.
bool piece_dir_base(const std::string &dir, std::string *base);

// The sub-trace `t` is a piece of, or t itself.
inline const SubTrace &whole_of(const SubTrace &t)
{
	return t.whole ? *t.whole : t;
}

struct PacketEntry {
	uint64_t offset = 0;  // in the file
	uint64_t size = 0;    // bytes (packet_size / 8)
	uint64_t content = 0; // bytes (content_size / 8)
	uint64_t ts_begin = 0, ts_end = 0;
	uint64_t seq = 0, discarded = 0;
	uint32_t lane = 0;
	int32_t vtid = -1;
};

struct TraceDamage {
	std::string file;
	uint64_t offset = 0; // where the damage starts
	uint64_t bytes = 0;  // how many bytes were skipped (0: records cut, see why)
	std::string why;
	// Packets the stream's index (index/<file>.idx, ctf_index.h) names
	// that the file lacks (emptied, cut or removed after recording): how
	// many, and their bytes from `offset` (the file's end).  0: none.
	uint64_t missing_packets = 0, missing_bytes = 0;
	uint64_t missing_seq_end = 0; // the last missing packet's sequence number + 1
	bool index = false;           // the index itself is bad (file: the index's path)
};

struct StreamInfo {
	const SubTrace *trace = nullptr;
	std::string path;
	uint32_t stream_class = 0;
	uint64_t instance = 0;
	bool shared = false;              // COMPACT shared lane: the thread in each record
	uint32_t index = 0;               // its place in TraceReader::streams()
	uint64_t size = 0;                // the file's bytes when opened
	std::vector<PacketEntry> packets; // the index (valid headers only)
	// The packets are the packet index's (index/<file>.idx, whole, adding
	// up to the file, each entry with its thread): no header was read at
	// open; each is checked against its entry when its packet is read.
	bool from_index = false;
};

// A decoded field value; pointers into the packet being read.
struct FieldValue {
	const FieldInfo *info = nullptr;
	uint64_t u = 0;            // INTEGER / ENUM: the raw bits, zero-extended
	int64_t i = 0;             // INTEGER / ENUM: sign-extended when signed
	double d = 0;              // FLOAT
	const char *str = nullptr; // STRING (NUL-terminated in the packet), len without the NUL
	size_t len = 0;
	const uint8_t *elems = nullptr; // ARRAY / SEQUENCE: count elements of elem_bits, little-endian
	uint32_t count = 0;
	uint64_t elem_u(uint32_t k) const;
	int64_t elem_i(uint32_t k) const;
};

// Readable bytes past the content of the packet a TraceEvent's pkt points
// into (their values unspecified): a fixed-offset integer near a record's
// end is read with one 8-byte load (processor/events/read_event.h FixedInt).
constexpr size_t kTraceEventSlack = 8;

struct TraceEvent {
	const StreamInfo *stream = nullptr;
	const MetaEvent *cls = nullptr;
	const PacketEntry *packet = nullptr;
	uint64_t ts = 0;  // clock value
	int64_t ns = 0;   // ns from the clock's origin (absolute: the Unix epoch)
	int32_t tid = -1; // the record's thread (shared lanes, the kernel's), else the packet's
	int32_t cpu = -1; // WIDE (kernel) records
	const uint8_t *pkt = nullptr;
	uint64_t payload = 0, end = 0;
	const SubTrace &trace() const { return *stream->trace; }
	// Every field, in order (out is resized); the record was walked, so
	// every field lies inside the packet.
	void decode(std::vector<FieldValue> *out) const;
	// The same, one field at a time: fn(const FieldValue &) for each; an
	// fn that returns bool stops the walk by returning false.
	template <class Fn> void for_each_field(Fn &&fn) const;
};

// An integer of 1, 2, 4 or 8 bytes, little-endian (strata_abi.h), sign-
// extended when signed.  Loads of the integer's own width: a memcpy of a
// variable size into a uint64_t, read back whole, stalls on the store.
inline int64_t load_int(const uint8_t *p, unsigned bytes, bool is_signed)
{
	switch (bytes) {
	case 1:
		return is_signed ? (int64_t)(int8_t)p[0] : (int64_t)p[0];
	case 2: {
		uint16_t v;
		memcpy(&v, p, 2);
		return is_signed ? (int64_t)(int16_t)v : (int64_t)v;
	}
	case 4: {
		uint32_t v;
		memcpy(&v, p, 4);
		return is_signed ? (int64_t)(int32_t)v : (int64_t)v;
	}
	default: {
		uint64_t v;
		memcpy(&v, p, 8);
		return (int64_t)v;
	}
	}
}

// An INTEGER, ENUM or FLOAT field's value at p (fixed-size loads,
// little-endian: strata_abi.h); v->info is set by the caller.
inline void read_scalar(const FieldInfo &f, const uint8_t *p, FieldValue *v)
{
	const unsigned b = f.elem_bits / 8 < 8 ? f.elem_bits / 8 : 8;
	if (f.type == STRATA_FT_FLOAT) {
		if (b == 4) {
			float x;
			memcpy(&x, p, 4);
			v->d = x;
		} else {
			memcpy(&v->d, p, 8);
		}
		return;
	}
	switch (b) {
	case 1:
		v->u = *p;
		break;
	case 2: {
		uint16_t x;
		memcpy(&x, p, 2);
		v->u = x;
		break;
	}
	case 4: {
		uint32_t x;
		memcpy(&x, p, 4);
		v->u = x;
		break;
	}
	default:
		memcpy(&v->u, p, 8);
	}
	v->i = (int64_t)v->u;
	if (f.is_signed && b < 8) {
		const uint64_t sign = 1ull << (b * 8 - 1);
		v->i = (int64_t)((v->u ^ sign) - sign);
	}
}

template <class Fn> void TraceEvent::for_each_field(Fn &&fn) const
{
	const bool wide = stream->trace->meta.record_format != STRATA_REC_COMPACT;
	uint64_t o = payload;
	auto align = [&](uint64_t a) {
		if (wide && a > 1)
			o = (o + a - 1) & ~(a - 1);
	};
	for (const FieldInfo &f : cls->info.fields) {
		FieldValue v;
		v.info = &f;
		const unsigned b = f.elem_bits / 8 < 8 ? f.elem_bits / 8 : 8;
		switch (f.type) {
		case STRATA_FT_INTEGER:
		case STRATA_FT_ENUM:
		case STRATA_FT_FLOAT:
			align(b);
			read_scalar(f, pkt + o, &v);
			o += b;
			break;
		case STRATA_FT_STRING:
			v.str = (const char *)pkt + o;
			v.len = strnlen(v.str, end - o);
			o += v.len + 1;
			break;
		case STRATA_FT_ARRAY:
			align(b);
			v.count = f.length;
			v.elems = pkt + o;
			o += (uint64_t)f.length * b;
			break;
		case STRATA_FT_SEQUENCE:
			align(4);
			memcpy(&v.count, pkt + o, 4);
			o += 4;
			align(b);
			v.elems = pkt + o;
			o += (uint64_t)v.count * b;
			break;
		default:
			break;
		}
		if constexpr (std::is_same_v<decltype(fn(v)), bool>) {
			if (!fn(v))
				return;
		} else {
			fn(v);
		}
	}
}

enum class TraceMsgKind { Event, DiscardedEvents, DiscardedPackets, Damage };

struct TraceMsg {
	TraceMsgKind kind = TraceMsgKind::Event;
	const TraceEvent *event = nullptr;   // Event
	const StreamInfo *stream = nullptr;  // every kind
	uint64_t count = 0;                  // Discarded*: how many
	int64_t begin_ns = 0, end_ns = 0;    // Discarded*, Damage: the span (ns from origin)
	const TraceDamage *damage = nullptr; // Damage
};

struct TraceReadStats {
	uint64_t events = 0, packets = 0;
	uint64_t bytes = 0; // of packets read (their content)
	uint64_t discarded_events = 0, discarded_packets = 0;
	uint64_t damaged = 0;       // damages named (skipped spans, cut packets)
	uint64_t damaged_bytes = 0; // bytes of stream files skipped
	// Packets the stream files lack of what their indexes name, and bytes.
	uint64_t missing_packets = 0, missing_bytes = 0;
	uint64_t unreadable_traces = 0;
};

struct HeaderContext; // packet_file.h: what one header tells the next

// One good record as the walk decoded it: what next() delivers of it.
// Offsets fit 32 bits (a packet is at most 64 MiB, strata_abi.h), ids 16
// (a described id is at most 0xfffe: the metadata rules).
struct DecodedRecord {
	uint64_t ts;
	uint32_t payload, end;
	int32_t tid;
	uint16_t id, cpu;
};
static_assert(sizeof(DecodedRecord) == 24, "a decoded record is 24 bytes");
// load_packet() writes one as three 8-byte words: ts; payload, end; tid, id, cpu.
static_assert(offsetof(DecodedRecord, payload) == 8 && offsetof(DecodedRecord, end) == 12 &&
		      offsetof(DecodedRecord, tid) == 16 && offsetof(DecodedRecord, id) == 20 &&
		      offsetof(DecodedRecord, cpu) == 22,
	      "DecodedRecord's layout");

class TraceReader {
public:
	TraceReader();
	~TraceReader();
	TraceReader(const TraceReader &) = delete;
	TraceReader &operator=(const TraceReader &) = delete;

	// Every sub-trace at or under `root` (a directory holding `metadata`
	// is one; its sub-directories are not searched, as in babeltrace2).
	// A follower's sub-trace (its metadata says sync_state = "correlated")
	// is placed by the clocks.json above it, segment by segment
	// (clock_map.h); one that cannot be used is named as damage and the
	// metadata's clock places its sub-traces.
	// False with *why when root is not a readable directory or holds no
	// sub-trace.  Sub-traces whose metadata is unreadable are kept with
	// their reason (readable false) and counted.
	bool open(const std::string &root, std::string *why);
	// Walk every stream file's headers at open even where its packet
	// index could stand for them (`strata check`: the index is checked
	// against the headers, not trusted).  Before open().
	void walk_headers(bool always) { walk_headers_ = always; }
	bool open_dirs(const std::vector<std::string> &dirs, std::string *why);

	const std::vector<std::shared_ptr<SubTrace>> &traces() const { return traces_; }
	const std::vector<std::unique_ptr<StreamInfo>> &streams() const { return streams_; }
	// Damage found so far (the index's at open; the records' as they are read).
	const std::vector<TraceDamage> &damages() const { return damages_; }
	const TraceReadStats &stats() const { return stats_; }

	// Read only packets that may hold events in [begin_ns, end_ns] (the
	// index's timestamps; events outside are still delivered from packets
	// that straddle the bounds: the caller filters).  Before read().
	void set_window(int64_t begin_ns, int64_t end_ns);
	// Read only the streams for which keep(stream) is true.  Before read().
	void set_stream_filter(std::function<bool(const StreamInfo &)> keep);

	// Every message in time order (ties: sub-trace, then stream order).
	// Return false from `on` to stop.  True when the end (or a stop) was
	// reached.
	bool read(const std::function<bool(const TraceMsg &)> &on);
	// The same with any callable (called directly, not through a
	// std::function: a few ns an event).
	// A run of one stream's events (see run_take) is delivered in a loop
	// of its own: the message is the same Event message each time (its
	// event changed in place), not written again.
	template <class F> bool read_each(F &&on)
	{
		start();
		TraceMsg msg;
		for (;;) {
			// One call of on (a second one stops it being inlined).
			if (__builtin_expect(run_p_ == run_end_, 0)) {
				if (!next_slow(&msg))
					return true;
			} else if (__builtin_expect(!run_take(), 0) && !switch_run(&msg) &&
				   !next_slow(&msg)) {
				return true;
			}
			if (!on(msg))
				return true;
		}
	}

	// The same, pulled: start(), then next() until it returns false (the
	// end).  *out and what it points to stay valid until the next call.
	// One pass per reader: a second start() gives nothing new.
	void start();
	bool next(TraceMsg *out)
	{
		if (__builtin_expect(run_p_ != run_end_, 1) && run_take()) {
			*out = TraceMsg();
			out->kind = TraceMsgKind::Event;
			out->stream = run_.ev->stream;
			out->event = run_.ev;
			return true;
		}
		return next_slow(out);
	}

	// A reader over the sub-traces and packet index `from` has already
	// read (nothing indexed again), with no window, filter or read state
	// of its own: several passes over one opened trace, at once or one
	// after another (the SQL tables' cursors, processor/query).  Before
	// anything else on this reader; `from` need not outlive it.
	void share_index(const TraceReader &from);

	// For `strata check`: every packet of every stream, walked, in file
	// order: on(stream, entry, good_end, why) with good_end the end of the
	// last good record (== content when whole) and why null when whole.
	void
	check_packets(const std::function<void(const StreamInfo &, const PacketEntry &, uint64_t good_end,
					       const char *why, const std::vector<uint8_t> &bytes)> &on);

	struct Cursor; // reader.cpp: a stream being read

private:
	bool add_trace(const std::string &dir);
	void load_clock_map(SubTrace *t);
	void index_stream(StreamInfo *s);
	bool packets_from_index(StreamInfo *s);
	bool indexed_header_ok(Cursor &c, PacketEntry &e);
	void check_index(StreamInfo *s);
	void check_gone_streams(const std::string &dir);
	void index_damage(const std::string &idx, std::string why);
	void accept_packet(StreamInfo *s, uint64_t off, const strata_packet_header &h, HeaderContext *ctx);
	std::unique_ptr<Cursor> make_cursor(StreamInfo *s, size_t i);
	bool load_packet(Cursor &c);
	bool read_packet(Cursor &c, PacketEntry &e);
	void begin_packet(Cursor &c, const PacketEntry &e);
	uint64_t decode_packet(Cursor &c, const PacketEntry &e, uint64_t *ts, const char **why);
	uint64_t skip_stale(Cursor &c);
	void packet_damage(Cursor &c, const PacketEntry &e, uint64_t good, uint64_t ts, bool first,
			   const char *why);
	void queue_loss(Cursor &c, const PacketEntry &e);
	bool next_record(Cursor &c);
	void damage(const StreamInfo &s, uint64_t offset, uint64_t bytes, std::string why);

	std::vector<std::shared_ptr<SubTrace>> traces_;
	std::vector<std::unique_ptr<StreamInfo>> streams_;
	std::vector<std::shared_ptr<RecordWalk>>
		walks_; // per sub-trace (a walk keeps no state between packets)
	// The pass (start/next): the streams' cursors, a min-heap of them by
	// time, the cursor to move on before the next message.
	std::vector<std::unique_ptr<Cursor>> cursors_;
	std::vector<Cursor *> heap_;
	bool walk_headers_ = false;
	size_t index_damages_ = 0; // damages_ found by open (the index's)
	size_t index_damage_next_ = 0, index_damage_end_ = 0;
	bool started_ = false;
	Cursor *advance_ = nullptr;
	Cursor *rival_ = nullptr; // next_slow(): the first cursor after advance_
	// Few cursors (kSortedMax at most): heap_ is kept sorted, not only a
	// heap (a sorted array is one): the rival is always heap_[1], and a
	// cursor moved on goes down past the few that now come before it,
	// most often one or two (streams that take turns), where a heap
	// compares both children at each level and the rival's place is
	// searched.
	static constexpr size_t kSortedMax = 8;
	bool sorted_ = false;
	void heap_down(size_t i);
	bool next_slow(TraceMsg *out);
	bool take_stopped_run(TraceMsg *out);
	void move_on();
	void give_event(Cursor &t, TraceMsg *out);
	// read_each()'s step when its run stopped at a record of a class
	// because another stream's comes first (most stops on a trace of
	// threads that take turns): the record taken, the rival made the
	// first and its event given in *out, which must hold the Event
	// message given last (only its stream and event are written).
	// False for any other stop of run_take(), or when the rival has a
	// message pending or no class: next_slow() goes on from there.
	bool switch_run(TraceMsg *out);
	void promote_rival(Cursor &c, Cursor *o);

	// The run: after next_slow() gave an event of advance_, the records
	// of its packet decoded and not yet given, [run_p_, run_end_) (empty
	// when anything else must come first: a pending message, a refill),
	// each given by run_take() while it is still the earliest of all
	// (its time at most run_bound_, the rival's key, or one below it
	// when the rival's stream comes first in a tie) and its id has a
	// class.  The first record that is not is left for next_slow(),
	// which brings the cursor up to date (sync_run) and goes on as for
	// any other record.  Most events of a trace are taken here: a
	// record's load, a compare, a look-up, the event's fields.
	const DecodedRecord *run_p_ = nullptr, *run_end_ = nullptr;
	int64_t run_bound_ = 0; // the latest time still earliest
public:
	// What the run needs of a cursor (kept by each, copied whole).
	struct RunParams {
		TraceEvent *ev = nullptr;              // the cursor's
		int64_t base = 0;                      // ns = base + ts when fast
		const MetaEvent *const *cls = nullptr; // by id, ncls of them
		uint32_t ncls = 0;
		bool fast = false; // the clock counts ns and no map places it
		bool tid = false;  // the records name their thread
		bool cpu = false;  // and their CPU (WIDE; only with tid)
	};

private:
	RunParams run_;
	int64_t run_ns(uint64_t ts) const; // advance_'s time of ts when not run_.fast
	void start_run(Cursor &c);
	void sync_run();
	__attribute__((always_inline)) bool run_take()
	{
		const DecodedRecord &r = *run_p_;
		const int64_t ns = __builtin_expect(run_.fast, 1) ? run_.base + (int64_t)r.ts : run_ns(r.ts);
		if (__builtin_expect(ns > run_bound_, 0))
			return false;
		const MetaEvent *cls = r.id < run_.ncls ? run_.cls[r.id] : nullptr;
		if (__builtin_expect(!cls, 0))
			return false;
		TraceEvent &ev = *run_.ev;
		ev.ts = r.ts;
		ev.ns = ns;
		ev.cls = cls;
		if (run_.tid) { // else the packet's, set with it
			ev.tid = r.tid;
			if (run_.cpu)
				ev.cpu = r.cpu;
		}
		ev.payload = r.payload;
		ev.end = r.end;
		run_p_++;
		stats_.events++;
		return true;
	}
	// By sub-trace (traces_' order): its classes by id (null: none), made
	// by the first cursor on it.
	std::vector<std::vector<const MetaEvent *>> cls_tabs_;
	std::vector<TraceDamage> damages_;
	// clocks.json read so far, by path and link: the map (null: unusable, named once).
	std::map<std::string, std::shared_ptr<const ClockMap>> clock_maps_;
	TraceReadStats stats_;
	int64_t win_begin_ = INT64_MIN, win_end_ = INT64_MAX;
	std::function<bool(const StreamInfo &)> keep_;
};

// A stream being read: its next packet, the current packet's records.
struct TraceReader::Cursor {
	StreamInfo *s = nullptr;
	RecordWalk *walk = nullptr;
	const std::map<uint32_t, MetaEvent> *classes = nullptr;
	size_t next = 0; // next index entry to load
	// The packet read last (its content, then kTraceEventSlack zeros),
	// buf_cap bytes: grown to the largest packet's, never cleared (its
	// content is read over it).
	std::unique_ptr<uint8_t[]> buf;
	size_t buf_cap = 0;
	// The packet's records, decoded by the walk that checks the packet
	// when it is loaded (the first kMaxDecoded of them; memory: the packet
	// and at most kMaxDecoded * 24 bytes), served from [rp, rq) one at a
	// time (pointers, not indexes: a run's stop sets rp without a
	// division by 24).  Past them, ro is the next record's offset, rend the end
	// of the good ones, rprev the previous one's timestamp (a compact
	// header's base): refill() steps through the next kMaxDecoded
	// (RecordWalk::step, no check made again).
	std::unique_ptr<DecodedRecord[]> recs; // recs_cap of them, uninitialised
	size_t recs_cap = 0;
	const DecodedRecord *rp = nullptr, *rq = nullptr;
	uint64_t ro = 0, rend = 0, rprev = 0;
	const PacketEntry *pe = nullptr;
	const PacketEntry *prev = nullptr; // the last packet loaded (for loss)
	// The last record's timestamp given (0 before the first: no
	// timestamp is below it, so none is dropped for it).
	uint64_t last_ts = 0;
	TraceEvent ev;
	// Messages due before the next record, oldest first.
	std::vector<TraceMsg> pending;
	size_t pi = 0;
	std::vector<TraceDamage> own; // damage found while reading (stable storage: deque-like use)
	int64_t key = 0;              // time of what is next
	size_t order = 0;             // tie-break: stream order
	int64_t base_ns = 0;          // freq 1e9: ns = base_ns + ts
	bool fast_ns = false;
	// A clock map (a follower's): the current packet's piece, found once
	// a packet; SIZE_MAX when the packet straddles a step (each record's).
	const ClockMap *map = nullptr;
	size_t piece = SIZE_MAX;
	bool compact = false; // COMPACT records (user); else WIDE (kernel)
	// The packet's thread when its records do not name theirs (an owned
	// lane: its vtid), else INT32_MIN.
	int32_t packet_tid = INT32_MIN;
	// The classes by id (the sub-trace's table, TraceReader::cls_tabs_;
	// the map's look-up was a sixth of the reader's time).
	const MetaEvent *const *cls = nullptr;
	uint32_t ncls = 0;
	TraceReader::RunParams run; // the same, for the run (trace_reader.h)
};

__attribute__((always_inline)) inline void TraceReader::heap_down(size_t i)
{
	// A binary min-heap of the cursors by (key, order): the cursor at i
	// moves down, the earlier child up into its place, until neither
	// child comes before it.
	Cursor *const x = heap_[i];
	const int64_t key = x->key;
	const size_t order = x->order;
	Cursor **h = heap_.data();
	const size_t n = heap_.size();
	if (sorted_) {
		// Sorted: the others from i + 1 on are in order (the cursor at
		// i only ever moves later), each that comes before it up one.
		for (; i + 1 < n; i++) {
			const Cursor *y = h[i + 1];
			if (!(y->key < key || (y->key == key && y->order < order)))
				break;
			h[i] = h[i + 1];
		}
		h[i] = x;
		return;
	}
	auto less = [](const Cursor *a, const Cursor *b) {
		return a->key < b->key || (a->key == b->key && a->order < b->order);
	};
	for (;;) {
		size_t k = 2 * i + 1;
		if (k >= n)
			break;
		if (k + 1 < n && less(h[k + 1], h[k]))
			k++;
		const Cursor *y = h[k];
		if (!(y->key < key || (y->key == key && y->order < order)))
			break;
		h[i] = h[k];
		i = k;
	}
	h[i] = x;
}

// The run after c's event (c is advance_ and heap_[0], rival_ set).
__attribute__((always_inline)) inline void TraceReader::start_run(Cursor &c)
{
	run_p_ = run_end_ = c.rp;
	if (!c.pending.empty())
		return;
	if (rival_) {
		if (c.order < rival_->order)
			run_bound_ = rival_->key;
		else if (rival_->key != INT64_MIN)
			run_bound_ = rival_->key - 1;
		else
			return; // nothing is earlier
	} else {
		run_bound_ = INT64_MAX;
	}
	run_end_ = c.rq;
	run_ = c.run;
}

// The rival o (heap_[1] or heap_[2], a child of c's place, c first) up to
// the first place, c (its key just set) down from the rival's.
__attribute__((always_inline)) inline void TraceReader::promote_rival(Cursor &c, Cursor *o)
{
	Cursor **h = heap_.data();
	const size_t n = heap_.size();
	const int64_t ns = c.key;
	if (sorted_) {
		// o is heap_[1]: up to the first place, c down past those now
		// before it (the rival being the first of them, one compare).
		h[0] = o;
		size_t i = 1;
		for (; i + 1 < n; i++) {
			const Cursor *y = h[i + 1];
			if (!(y->key < ns || (y->key == ns && y->order < c.order)))
				break;
			h[i] = h[i + 1];
		}
		h[i] = &c;
	} else {
		const size_t j = h[1] == o ? 1 : 2;
		h[0] = o;
		h[j] = &c;
		heap_down(j);
	}
}

__attribute__((always_inline)) inline bool TraceReader::switch_run(TraceMsg *out)
{
	if (!run_.fast)
		return false;
	const DecodedRecord &r = *run_p_; // run_take() stopped at it
	const MetaEvent *cls = r.id < run_.ncls ? run_.cls[r.id] : nullptr;
	// (A rival: without one, run_bound_ is INT64_MAX, above any time.)
	Cursor *const o = rival_;
	if (!cls)
		return false;
	// The run stopped at r for its time: the rival comes first (its key
	// is below r's, or equal and its stream comes first; run_bound_).
	// r taken as take_record() would take it, with the run's values.
	Cursor &c = *advance_;
	const int64_t ns = run_.base + (int64_t)r.ts;
	TraceEvent &ev = c.ev;
	ev.ts = r.ts;
	ev.ns = ns;
	ev.cls = cls;
	if (run_.tid) {
		ev.tid = r.tid;
		if (run_.cpu)
			ev.cpu = r.cpu;
	}
	ev.payload = r.payload;
	ev.end = r.end;
	c.rp = run_p_ + 1;
	c.last_ts = r.ts;
	c.key = ns;
	promote_rival(c, o);
	Cursor **h = heap_.data();
	const size_t n = heap_.size();
	if (__builtin_expect(!o->pending.empty() || !o->ev.cls, 0)) {
		advance_ = nullptr;
		run_p_ = run_end_ = nullptr;
		return false;
	}
	advance_ = o;
	// Its rival (there are two cursors at least: o and c); o's run, as
	// start_run() makes it (nothing is pending).
	Cursor *const rv = sorted_ || n < 3 || h[1]->key < h[2]->key ||
					   (h[1]->key == h[2]->key && h[1]->order < h[2]->order)
				   ? h[1]
				   : h[2];
	rival_ = rv;
	stats_.events++;
	out->stream = o->s;
	out->event = &o->ev;
	run_p_ = o->rp;
	const int64_t rk = rv->key;
	if (o->order < rv->order) {
		run_bound_ = rk;
	} else if (rk != INT64_MIN) {
		run_bound_ = rk - 1;
	} else {
		run_end_ = run_p_; // nothing is earlier
		return true;
	}
	run_end_ = o->rq;
	run_ = o->run;
	return true;
}

// Every directory at or under `root` holding a regular file `metadata`,
// sorted (a trace directory's own sub-directories are not searched).
bool find_trace_dirs(const std::string &root, std::vector<std::string> *out, std::string *why);
// The same for several roots read as one trace (a host's and its guests'
// traces, as babeltrace2 takes several): every root must hold a trace; a
// directory found under two roots is listed once.
bool find_trace_dirs(const std::vector<std::string> &roots, std::vector<std::string> *out, std::string *why);
// How messages name the roots: the root alone, or the roots separated by
// spaces (each quoted for a shell when it needs it), so that a command
// such as 'strata check LABEL' runs as printed.
std::string roots_label(const std::vector<std::string> &roots);

// Whether every sub-trace under `root` is Strata's (its metadata says so):
// such a tree is read by TraceReader, any other by babeltrace2.
bool strata_wrote(const std::vector<std::string> &dirs);

} // namespace strata
#endif
