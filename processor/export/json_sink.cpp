// json_sink.cpp - the Chrome JSON trace events sink of export_sink.h.
#include <algorithm>
#include <cassert>
#include <charconv>
#include <cinttypes>
#include <cmath>
#include <cstring>
#include <string_view>
#include <unordered_map>

#include "export_proto.h"
#include "export_sink.h"
#include "json_line.h"
#include "json_writer.h"
#include "sink_bytes.h"

namespace strata {
namespace exp {
namespace {

// {"traceEvents":[...]} with one event per line; ts and dur in microseconds
// (three decimals: nanoseconds) after the trace's first time.  Thread tracks
// take B/E slices (an E named as its B) and X for slices known whole (lock
// waits); child tracks (lock holds, which need not nest with the thread's
// slices nor with each other) take async b/e events of category "lock" whose
// id is the track; counters are C events named after their track; sched_switch
// becomes one B/E slice per time a thread ran (those running at the end end
// at the trace's last time), on a thread "CPU n" of a
// process "CPUs" (pid 0); wakeups are instants there.  With several
// machines each is a process machine_pid(m) named by its host name, with
// its CPUs and its kernel's events, and every process's sort index is its
// machine's, so that a machine's processes are listed together.

// The per-event path writes an event's line straight into the output
// buffer from pieces a JsonWriter wrote once (JsonPieces: a track's head up
// to the time, an event class's argument names, the closing braces) and
// values written as the JsonWriter writes them (json_line.h): byte for byte
// what a JsonWriter writes.  A string argument with anything to escape
// sends its event to a JsonWriter.

// The pieces of the document that no track nor name changes, cut once
// from a JsonWriter's text.  Each short one is kept in a fixed array
// (copied whole, then its length counted).
struct JsonSyntax {
	struct Short {
		char text[8] = {};
		uint8_t len = 0;
		void set(const std::string &s)
		{
			assert(s.size() <= sizeof text);
			len = static_cast<uint8_t>(std::min(s.size(), sizeof text));
			std::memcpy(text, s.data(), len);
		}
		__attribute__((always_inline)) char *put(char *p) const
		{
			std::memcpy(p, text, sizeof text);
			return p + len;
		}
	};
	std::string open, end; // {"displayTimeUnit":"ns","traceEvents":[ and ]}
	Short sep[2];          // before the first line (\n), before another (,\n)
	Short close[2];        // a line's end: without arguments (}), with them (}})
	Short dur;             // ,"dur": after an X's time
	std::string flow[2];   // a flow's start (s) and end (f) up to its id
	JsonSyntax()
	{
		JsonPieces d;
		d.w().begin_object().key("displayTimeUnit").str("ns").key("traceEvents").begin_array();
		open = d.rest();
		d.w().newline();
		sep[0].set(d.cut());
		d.w().newline();
		sep[1].set(d.cut());
		d.w().end_array().end_object();
		end = d.rest();
		JsonPieces l;
		l.w().begin_object().key("ts");
		l.cut();
		l.w().key("dur");
		dur.set(l.cut());
		l.w().end_object();
		close[0].set(l.rest());
		JsonPieces a;
		a.w().begin_object().key("args").begin_object().key("n");
		a.cut();
		a.w().end_object().end_object();
		close[1].set(a.rest());
		for (int k = 0; k < 2; k++) {
			JsonPieces f;
			f.w().begin_object().key("ph").str(k ? "f" : "s");
			if (k)
				f.w().key("bp").str("e");
			f.w().key("cat").str("lock").key("name").str("handover").key("id");
			flow[k] = f.cut();
		}
	}
};
class JsonSink final : public Sink {
public:
	JsonSink(FILE *out, int64_t t0) : out_(out), t0_(t0)
	{
		text_.reserve(kFlushAt + sizeof(PairSlot::text)); // pair()'s room below kFlushAt
		text_.append(syntax_.open.data(), syntax_.open.size());
	}

	void machine(uint32_t m, uint64_t uuid, const std::string &name) override
	{
		machines_[uuid] = m;
		multi_ = true;
		process_name(machine_pid(m), name);
	}
	void process(uint64_t uuid, int64_t pid, const std::string &name) override
	{
		tracks_[uuid] = Track{pid, 0, std::string(), false, 'p', {}, {}, {}, 0};
		forget_pair(uuid);
		process_name(pid, name);
	}
	void thread(uint64_t uuid, uint64_t, int64_t pid, int64_t tid, const std::string &name) override
	{
		tracks_[uuid] = Track{pid, tid, std::string(), false, 't', {}, {}, {}, 0};
		forget_pair(uuid);
		thread_name(pid, tid, name);
	}
	void child_track(uint64_t uuid, uint64_t parent, int64_t pid, int64_t tid, const std::string &name,
			 bool counter) override
	{
		// A track of no process or thread (the kernel's own events) is
		// global, or its machine's.
		if (parent && machines_.count(parent))
			tracks_[uuid] = Track{pid, 0, name, false, 'p', {}, {}, {}, 0};
		else
			tracks_[uuid] = Track{pid, tid, name, !counter && parent != 0, parent ? 't' : 'g', {},
					      {},  {},  0};
		forget_pair(uuid);
	}
	void begin(int64_t ts, uint64_t track, const std::string &name, const Args &args,
		   uint64_t flow_in) override
	{
		const Recent &r = recent(track);
		const Track &t = *r.track;
		Names &names = *r.names;
		if (flow_in)
			flow("f", flow_in, t, ts);
		// The name shown (an async slice's followed by its track's) and
		// the line's head, made once per name (a lock's holds, one after
		// another); the shown name kept for the end in a slot reused (no
		// allocation), copied only when it is another one (its gen).
		Track::Head &h = t.heads[0];
		if (!h.made || h.src.size() != name.size() || !same(h.src.data(), name)) {
			std::string shown = name;
			if (t.async) {
				shown += ' ';
				shown += t.name;
			}
			make_head(t, track, 0, shown);
			h.src = name;
			h.gen = ++shown_gen_;
		}
		if (names.n == names.v.size())
			names.v.emplace_back();
		Names::Slot &slot = names.v[names.n++];
		if (slot.gen != h.gen) {
			slot.name = h.name;
			slot.gen = h.gen;
		}
		seen(ts);
		if (put_line(h.text, ts, args))
			return;
		JsonWriter w = start_event(t.async ? "b" : "B");
		w.key("name").str(slot.name);
		if (t.async)
			async_id(w, track);
		where(w, t, ts);
		json_args(w, args);
		w.end_object();
	}
	// An end carries its slice's name: speedscope ignores an E whose name
	// is not the innermost B's.
	void end(int64_t ts, uint64_t track, const Args &args, uint64_t flow_out) override
	{
		const Recent &r = recent(track);
		const Track &t = *r.track;
		Names &names = *r.names;
		const Names::Slot *top = names.n ? &names.v[names.n - 1] : nullptr;
		const std::string &name = top ? top->name : t.name;
		// The head made for this name: known by its gen, else compared.
		Track::Head &h = t.heads[1];
		const uint64_t gen = top ? top->gen : 0;
		if (!h.made ||
		    !((gen && h.gen == gen) || (h.name.size() == name.size() && same(h.name.data(), name)))) {
			make_head(t, track, 1, name);
		}
		h.gen = gen;
		seen(ts);
		if (!put_line(h.text, ts, args)) {
			JsonWriter w = start_event(t.async ? "e" : "E");
			w.key("name").str(name);
			if (t.async)
				async_id(w, track);
			where(w, t, ts);
			json_args(w, args);
			w.end_object();
		}
		if (names.n)
			names.n--;
		if (flow_out)
			flow("s", flow_out, t, ts);
	}
	// begin() and end() at once: the same heads (the end's made for the
	// begin's shown name), the 2 lines written together; the open names
	// left as they were (the slot the begin would have filled is past
	// their end, a (name, gen) of its own kept).  Most often both lines
	// are in the track's PairSlot, made for this name and millisecond:
	// no look-up, no head to check, nothing to read but the slot.
	void pair(int64_t ts, int64_t end, uint64_t track, const std::string &name) override
	{
		PairSlot &ps = pair_slot(track);
		if (__builtin_expect(ps.uuid == track && ps.len && ps.name_len == name.size() &&
					     same_bytes(ps.name, name),
				     1)) {
			// The nanoseconds of ts and end into the slot's millisecond:
			// below 10^6 when in it (a time before it wraps far above; no
			// division).
			const uint64_t t0 = static_cast<uint64_t>(t0_) + ps.base;
			const uint64_t ra = static_cast<uint64_t>(ts) - t0,
				       rz = static_cast<uint64_t>(end) - t0;
			if (__builtin_expect(ra < 1000000 && rz < 1000000, 1)) {
				seen(ts);
				seen(end);
				// Most often nothing to settle or flush, and then room at
				// hand (text_ reserved past kFlushAt): no call on the way
				// (no register saved at the entry).
				if (__builtin_expect(slow_.empty() && text_.size() < kFlushAt, 1))
					put_pair_text(text_.end(), ps, static_cast<uint32_t>(ra),
						      static_cast<uint32_t>(rz));
				else
					pair_text(ps, static_cast<uint32_t>(ra), static_cast<uint32_t>(rz));
				return;
			}
		}
		pair_slow(ps, ts, end, track, name);
	}
	void complete(int64_t ts, int64_t end, uint64_t track, const std::string &name, const Args &args,
		      uint64_t flow_in, uint64_t flow_out) override
	{
		const Track &t = track_of(track);
		if (t.async) { // no X on async tracks
			Sink::complete(ts, end, track, name, args, flow_in, flow_out);
			return;
		}
		if (flow_in)
			flow("f", flow_in, t, ts);
		const int64_t dur = end - ts < 0 ? 0 : end - ts;
		// Its head (up to the time) made once per name, in one of the
		// track's kXHeads (x_head()).
		const Track::Head &h = x_head(t, name);
		seen(ts);
		if (!put_line(h.text, ts, args, &dur)) {
			JsonWriter w = start_event("X");
			w.key("name").str(name);
			where(w, t, ts);
			w.key("dur").fixed(dur, 3);
			json_args(w, args);
			w.end_object();
		}
		if (flow_out)
			flow("s", flow_out, t, end);
	}
	void instant(int64_t ts, uint64_t track, const std::string &name, const Args &args) override
	{
		const Track &t = track_of(track);
		if ((t.scope == 't' || t.scope == 'p' || t.scope == 'g') &&
		    head_line(t, track, 2, name, ts, args))
			return;
		JsonWriter w = start_event("i");
		w.key("s").str(std::string(1, t.scope)).key("name").str(name);
		where(w, t, ts);
		json_args(w, args);
		w.end_object();
	}
	void counter(int64_t ts, uint64_t track, int64_t value) override
	{
		const Track &t = track_of(track);
		JsonWriter w = start_event("C");
		w.key("name").str(t.name).key("pid").i64(t.pid).key("ts");
		time(w, ts);
		w.key("args").begin_object().key("value").i64(value).end_object();
		w.end_object();
	}
	void sched_switch(int64_t ts, uint32_t m, uint32_t cpu, const std::string &, int64_t prev_tid,
			  int64_t, int64_t prev_state, const std::string &next_comm, int64_t next_tid,
			  int64_t) override
	{
		cpu_track(m, cpu);
		Running &r = running_[cpu_key(m, cpu)];
		if (r.open) { // its end (a switch from another thread: a switch was lost)
			cpu_event("E", m, cpu, ts, r.comm, r.tid == prev_tid ? prev_tid : -1, prev_state);
			r.open = false;
		}
		if (next_tid != 0) {
			cpu_event("B", m, cpu, ts, next_comm, next_tid, -1);
			r = Running{true, next_tid, next_comm};
		}
	}
	void wakeup(int64_t ts, uint32_t m, uint32_t cpu, int kind, const std::string &comm, int64_t tid,
		    int64_t, int64_t target_cpu) override
	{
		static const char *const names[] = {"sched_waking", "sched_wakeup", "sched_wakeup_new"};
		cpu_track(m, cpu);
		JsonWriter w = start_event("i");
		w.key("s").str("t").key("name").str(names[kind < 0 || kind > 2 ? 0 : kind]);
		w.key("pid").i64(machine_pid(m)).key("tid").u64(cpu).key("ts");
		time(w, ts);
		w.key("args").begin_object().key("comm").str(comm).key("tid").i64(tid);
		w.key("target_cpu").i64(target_cpu).end_object();
		w.end_object();
	}
	bool finish() override
	{
		for (auto &cr : running_)
			if (cr.second.open)
				cpu_event("E", static_cast<uint32_t>(cr.first >> 32),
					  static_cast<uint32_t>(cr.first), last_, cr.second.comm, -1, 0);
		settle();
		text_.append(syntax_.end.data(), syntax_.end.size());
		text_.append("\n", 1); // the file's last line ends
		flush();
		return !failed_;
	}

private:
	static constexpr uint8_t kXHeads = 4;
	struct Track {
		int64_t pid = 0, tid = 0;
		std::string name;
		bool async = false;
		char scope = 't'; // of instants: thread, process, global
		// The text of where() but the time: ,"pid":P,"tid":T,"ts":
		// (made at the track's first event; flow()'s).
		mutable std::string at;
		// A B/b (0) and an E/e (1) line up to its time, for the slice
		// name it was made for (head_line()).
		// A begin's head also keeps the name it was given (src; name is
		// the name shown) and a number (gen) unique to its shown name,
		// which the end's head and the open slices' names keep too.
		struct Head {
			std::string name, text, src;
			uint64_t gen = 0;
			bool made = false;
			// Made for name: its text cut from a JsonWriter's (put_line()
			// copies kHeadCopy bytes at once, or 32 at a time: room for
			// them).
			void set(const std::string &n, std::string &&head)
			{
				name = n;
				text = std::move(head);
				text.reserve(std::max(text.size() + 32, kHeadCopy));
				made = true;
			}
		};
		mutable Head heads[3]; // and an instant's (2)
		// An X's (complete()), for kXHeads names (a thread's waits and
		// the releases it gives, of two locks: with 2, a pthread trace's
		// export made a head for 1 X in 3); xnext: the one made next.
		mutable Head xheads[kXHeads];
		mutable uint8_t xnext = 0;
	};
	// complete()'s head of t for name: {"ph":"X","name":NAME,"pid":P,"tid":T,"ts":
	// made when none of t's kXHeads is for it, in place of the oldest made.
	__attribute__((always_inline)) const Track::Head &x_head(const Track &t, const std::string &name)
	{
		for (const Track::Head &h : t.xheads)
			if (h.made && h.name.size() == name.size() && same(h.name.data(), name))
				return h;
		return make_x_head(t, name);
	}
	__attribute__((noinline)) const Track::Head &make_x_head(const Track &t, const std::string &name)
	{
		Track::Head &h = t.xheads[t.xnext];
		t.xnext = static_cast<uint8_t>((t.xnext + 1) % kXHeads);
		h.set(name, head_text(t, 0, "X", nullptr, name, false));
		return h;
	}
	// The names of a track's open slices, innermost last: v[0, n) (the
	// strings past n kept for their buffers).
	struct Names {
		struct Slot {
			std::string name;
			uint64_t gen = 0; // its begin's head's (Track::Head::gen)
		};
		std::vector<Slot> v;
		size_t n = 0;
	};
	uint64_t shown_gen_ = 0; // the last Track::Head::gen given
	// A run on a CPU is a B/E pair, not an X: the E's time is then the next
	// B's, digit for digit, where ts + dur in a reader's doubles may come
	// out a hair later and nest the next run in this one (speedscope).
	struct Running {
		bool open = false;
		int64_t tid = 0;
		std::string comm;
	};
	FILE *out_;
	int64_t t0_;
	int64_t last_ = INT64_MIN;       // the latest time written
	const JsonSyntax syntax_;        // a copy of its own: reached from `this` on the per-event path
	JsonFixed3Cache at_us_, dur_us_; // the digits of times and of durations
	// {"displayTimeUnit":"ns","traceEvents":[ then one event a line, each
	// an object, drained into out_ at kFlushAt.  The lines of the per-event
	// path are written straight into text_; a JsonWriter writes its event
	// into slow_, appended to text_ before anything that follows.
	pb::Buf text_;
	std::string slow_;
	bool any_ = false; // an event written (the next one after a comma)
	std::unordered_map<uint64_t, Track> tracks_;
	std::unordered_map<uint64_t, Names> open_names_;
	// The last tracks looked up, most recent first, with their names
	// (unordered_map's elements do not move; a thread nesting two locks
	// alternates between two tracks).
	struct Recent {
		uint64_t uuid = 0;
		Track *track = nullptr;
		Names *names = nullptr;
	};
	static constexpr size_t kRecent = 4;
	Recent recent_[kRecent];
	// Moved field by field: a Recent copied whole was read back in a
	// 16-byte load from the 8-byte stores of the previous move, which the
	// CPU does not forward (a stall per event when threads alternate).
	Recent &recent(uint64_t uuid)
	{
		if (recent_[0].track && recent_[0].uuid == uuid)
			return recent_[0];
		size_t i = 1;
		while (i < kRecent && !(recent_[i].track && recent_[i].uuid == uuid))
			i++;
		Track *track;
		Names *names;
		if (i < kRecent) {
			track = recent_[i].track;
			names = recent_[i].names;
		} else {
			track = &tracks_[uuid];
			names = &open_names_[uuid];
			i = kRecent - 1;
		}
		for (; i > 0; i--) {
			recent_[i].uuid = recent_[i - 1].uuid;
			recent_[i].track = recent_[i - 1].track;
			recent_[i].names = recent_[i - 1].names;
		}
		recent_[0].uuid = uuid;
		recent_[0].track = track;
		recent_[0].names = names;
		return recent_[0];
	}
	// pair()'s tracks, by the top 6 bits of their uuid's hash: the two
	// lines of a pair of the track (after another line: ",\n" first) for
	// a name (up to kPairName bytes) and times of hi whole milliseconds
	// after t0_ (json_fixed3_text()'s cached digits; base: its first nanosecond
	// after t0_), the last 6 digits of each time (at at[0], at[1]) left
	// to write.  len 0: none (hi 0 or past kPairHiMax, lines too long, or
	// the track's heads made again since: forget_pair()).
	static constexpr size_t kPairName = 32;
	// base + 10^6 below 2^63: no negative time in the slot's millisecond.
	static constexpr uint64_t kPairHiMax = INT64_MAX / 1000000 - 1;
	struct PairSlot {
		uint64_t uuid = 0;
		uint64_t base = 0;
		uint32_t len = 0, at[2] = {};
		uint32_t name_len = 0;
		char name[kPairName];
		char text[320];
	};
	static constexpr size_t kPairCopy = 256;
	// Two ways a set (32 sets): the track's slot, else the set's least
	// recently used (one way a slot, 2 of a pthread trace's 13 busy
	// tracks in one slot took turns: 6 % of its pairs made their lines).
	PairSlot pair_slots_[64];
	uint8_t pair_mru_[32] = {}; // per set: its way used last
	PairSlot &pair_slot(uint64_t track)
	{
		const size_t set = (track ^ track >> 32) * 0x9e3779b97f4a7c15ull >> 59;
		PairSlot *const w = pair_slots_ + 2 * set;
		size_t way = w[0].uuid == track ? 0 : w[1].uuid == track ? 1 : pair_mru_[set] ^ 1u;
		pair_mru_[set] = static_cast<uint8_t>(way);
		return w[way];
	}
	// A track (re)described or a head of it made: its slot's lines go.
	void forget_pair(uint64_t track)
	{
		PairSlot &ps = pair_slot(track);
		if (ps.uuid == track)
			ps.len = 0;
	}
	// pair() of a track not in its slot, or of heads to make; its slot
	// made for this name and millisecond, when they fit.
	__attribute__((noinline)) void pair_slow(PairSlot &ps, int64_t ts, int64_t end, uint64_t track,
						 const std::string &name)
	{
		const Recent &r = recent(track);
		const Track &t = *r.track;
		Track::Head &b = t.heads[0];
		if (!b.made || b.src.size() != name.size() || !same(b.src.data(), name)) {
			Sink::pair(ts, end, track, name);
			return;
		}
		Track::Head &e = t.heads[1];
		if (!e.made || e.gen != b.gen) {
			if (!e.made || e.name.size() != b.name.size() || !same(e.name.data(), b.name))
				make_head(t, track, 1, b.name);
			e.gen = b.gen;
		}
		pair_lines(b, e, ts, end);
		ps.uuid = track;
		ps.len = 0;
		if (ts - t0_ >= 0 && name.size() <= kPairName) {
			ps.name_len = static_cast<uint32_t>(name.size());
			std::memcpy(ps.name, name.data(), name.size());
			make_pair_text(ps, b, e, static_cast<uint64_t>(ts - t0_) / 1000000);
		}
	}
	// ps's lines made for times of hi (after pair_lines(): not the
	// first line), when they fit.
	void make_pair_text(PairSlot &ps, const Track::Head &b, const Track::Head &e, uint64_t hi)
	{
		ps.base = hi * 1000000;
		ps.len = 0;
		if (hi == 0 || hi > kPairHiMax || !any_ ||
		    b.text.size() + e.text.size() + 2 * (2 + 13 + 8) > sizeof ps.text)
			return;
		char tmp[2 * (2 + kHeadCopy + 32 + 12) + sizeof ps.text];
		const int64_t ts = t0_ + static_cast<int64_t>(hi * 1000000);
		// Each time's last 7 bytes (ddd.ddd) before the line's close.
		const size_t back = 7 + syntax_.close[0].len;
		char *p = bare_line(tmp, b.text, ts);
		ps.at[0] = static_cast<uint32_t>(p - tmp - back);
		p = bare_line(p, e.text, ts);
		ps.at[1] = static_cast<uint32_t>(p - tmp - back);
		std::memcpy(ps.text, tmp, sizeof ps.text);
		ps.len = static_cast<uint32_t>(p - tmp);
	}
	// ps's lines at times ra and rz ns into its millisecond, when text_
	// has first to be settled, flushed or grown (out of pair()'s way).
	__attribute__((noinline)) void pair_text(const PairSlot &ps, uint32_t ra, uint32_t rz)
	{
		put_pair_text(line_room(sizeof ps.text), ps, ra, rz);
	}
	// ps's lines at p (room: sizeof ps.text), committed.
	__attribute__((always_inline)) void put_pair_text(char *p, const PairSlot &ps, uint32_t ra,
							  uint32_t rz)
	{
		if (ps.len <= kPairCopy) // most: 2 lines of ~120 bytes
			std::memcpy(p, ps.text, kPairCopy);
		else
			std::memcpy(p, ps.text, sizeof ps.text);
		json_fixed3_last6(p + ps.at[0], ra);
		json_fixed3_last6(p + ps.at[1], rz);
		text_.commit(ps.len);
	}
	// A begin's line of head b at ts and an end's of head e at end.
	__attribute__((noinline)) void pair_lines(const Track::Head &b, const Track::Head &e, int64_t ts,
						  int64_t end)
	{
		seen(ts);
		seen(end);
		char *const p0 = line_room(2 * (2 + kHeadCopy + 32 + 12) + b.text.size() + e.text.size());
		char *p = bare_line(p0, b.text, ts);
		any_ = true;
		p = bare_line(p, e.text, end);
		line_done(p0, p);
	}
	std::unordered_map<uint64_t, Running> running_; // by cpu_key()
	bool cpus_named_ = false;
	std::vector<bool> cpu_named_;                     // machine 0's
	std::unordered_map<uint64_t, bool> cpu_named_m_;  // several machines': by cpu_key()
	std::unordered_map<uint64_t, uint32_t> machines_; // a machine's uuid -> its number
	bool multi_ = false;                              // machines declared: sort processes by machine

	static uint64_t cpu_key(uint32_t m, uint32_t cpu) { return static_cast<uint64_t>(m) << 32 | cpu; }
	void process_name(int64_t pid, const std::string &name)
	{
		JsonWriter w = start_event("M");
		w.key("name").str("process_name").key("pid").i64(pid);
		w.key("args").begin_object().key("name").str(name).end_object();
		w.end_object();
		if (!multi_)
			return;
		JsonWriter s = start_event("M");
		s.key("name").str("process_sort_index").key("pid").i64(pid);
		s.key("args").begin_object().key("sort_index").i64(pid >> kMachineShift).end_object();
		s.end_object();
	}

	// Whether the s.size() bytes at p are s (inlined: std::string's
	// compare() is a call).
	__attribute__((always_inline)) static bool same(const char *p, const std::string &s)
	{
		return same_bytes(p, s);
	}
	Track &track_of(uint64_t uuid) { return *recent(uuid).track; }
	// An event's line: after the previous one's comma.
	void next_line()
	{
		line_ready();
		const JsonSyntax::Short &sep = syntax_.sep[any_];
		slow_.append(sep.text, sep.len);
		any_ = true;
	}
	// A JsonWriter's event, once written, into text_.
	__attribute__((always_inline)) void settle()
	{
		if (__builtin_expect(!slow_.empty(), 0)) {
			text_.append(slow_.data(), slow_.size());
			slow_.clear();
		}
	}
	// Before a line: what a JsonWriter wrote settled, text_ drained at
	// kFlushAt.
	__attribute__((always_inline)) void line_ready()
	{
		settle();
		if (text_.size() >= kFlushAt)
			flush();
	}
	// A line written straight into text_: room for need bytes at its start
	// (line_ready() first); line_done() commits what was written up to p.
	__attribute__((always_inline)) char *line_room(size_t need)
	{
		line_ready();
		return text_.room(need);
	}
	__attribute__((always_inline)) void line_done(const char *p0, const char *p)
	{
		text_.commit(static_cast<size_t>(p - p0));
		any_ = true;
	}
	// The separator at p of a line after another (",\n") or of the first
	// ("\n"), without a branch (8 bytes of room).
	__attribute__((always_inline)) char *line_sep(char *p) const { return syntax_.sep[any_].put(p); }
	// A line's start at p: its separator, `head` (its text up to the
	// time), the time and, with dur, ,"dur":DUR (an X's).  Room: 2 + head
	// + kHeadCopy + 32 (+ 8 + 32 with dur).
	__attribute__((always_inline)) char *line_start(char *p, std::string_view head, int64_t ts,
							const int64_t *dur)
	{
		p = copy_line_head(line_sep(p), head);
		p = json_fixed3_text(p, ts - t0_, at_us_);
		return dur_text(p, dur);
	}
	// The latest time written, for finish()'s ends of runs.
	__attribute__((always_inline)) void seen(int64_t ts) { last_ = ts > last_ ? ts : last_; }
	// An event's object opened, on a line of its own, with its phase, by a
	// writer of its own (the rare events, and those put_line() gives up).
	JsonWriter start_event(const char *ph)
	{
		next_line();
		JsonWriter w(slow_, JsonWriter::Style::kCompact);
		w.begin_object().key("ph").str(ph);
		return w;
	}
	// Microseconds with three decimals after the trace's first time.
	void time(JsonWriter &w, int64_t ts)
	{
		seen(ts);
		w.fixed(ts - t0_, 3);
	}
	void where(JsonWriter &w, const Track &t, int64_t ts)
	{
		place(w, t);
		time(w, ts);
	}
	// where() up to the time's key.
	static void place(JsonWriter &w, const Track &t)
	{
		w.key("pid").i64(t.pid);
		if (t.scope == 't')
			w.key("tid").i64(t.tid);
		w.key("ts");
	}
	// Kept with 16 bytes of capacity past its end (flow() copies it 16
	// at a time).
	__attribute__((always_inline)) static const std::string &at_of(const Track &t)
	{
		if (__builtin_expect(t.at.empty(), 0))
			make_at(t);
		return t.at;
	}
	__attribute__((noinline)) static void make_at(const Track &t)
	{
		JsonPieces a;
		a.w().begin_object().key("id");
		a.cut();
		place(a.w(), t);
		t.at = a.cut();
		t.at.reserve(t.at.size() + 16);
	}
	// A line's head, its text up to the time, cut from a JsonWriter's:
	// {"ph":PH[,"s":SCOPE],"name":NAME[,"cat":"lock","id":ID],"pid":P[,"tid":T],"ts":
	static std::string head_text(const Track &t, uint64_t track, const char *ph, const char *scope,
				     const std::string &name, bool id)
	{
		JsonPieces h;
		JsonWriter &w = h.w();
		w.begin_object().key("ph").str(ph);
		if (scope)
			w.key("s").str(scope);
		w.key("name").str(name);
		if (id)
			async_id(w, track);
		place(w, t);
		return h.cut();
	}
	// A slice's begin (kind 0) or end (1), or an instant (2, on a track
	// of scope t, p or g), on track t, put: its text up to the time is the
	// track's, made once per name (a lock's holds: one name, 2 lines each;
	// an event class's instants).  False (nothing written) when
	// put_line() gives up.
	bool head_line(const Track &t, uint64_t track, int kind, const std::string &name, int64_t ts,
		       const Args &args)
	{
		Track::Head &h = t.heads[kind];
		if (!h.made || h.name.size() != name.size() || !same(h.name.data(), name))
			make_head(t, track, kind, name);
		seen(ts);
		return put_line(h.text, ts, args);
	}
	void make_head(const Track &t, uint64_t track, int kind, const std::string &name)
	{
		forget_pair(track);
		Track::Head &h = t.heads[kind];
		static const char *const kPh[2][2] = {{"B", "b"}, {"E", "e"}};
		if (kind == 2) // an instant's, of a track of scope t, p or g
			h.set(name, head_text(t, track, "i",
					      t.scope == 't'   ? "t"
					      : t.scope == 'p' ? "p"
							       : "g",
					      name, false));
		else
			h.set(name, head_text(t, track, kPh[kind][t.async], nullptr, name, t.async));
	}
	// An event's line straight into text_: `head` (its text up to the
	// time), the time, the arguments and the closing brace.  False
	// (nothing written) when an argument has anything to escape, or its
	// names are more or longer than an ArgsText holds.
	// With dur: ,"dur":DUR after the time (an X's).
	__attribute__((always_inline)) bool put_line(std::string_view head, int64_t ts, const Args &args,
						     const int64_t *dur = nullptr)
	{
		if (__builtin_expect(args.layout != 0, 1)) { // an event class's fields
			const ArgsText &at = args_text(args);
			return __builtin_expect(at.ok, 1) && put_line_known(head, ts, args, at, dur);
		}
		const ArgsText *at = &kNoArgs;
		if (!args.empty()) { // names of no class (a handover's): made again when others
			if (!scratch_fits(args))
				make_scratch(args);
			at = &args_scratch_;
		}
		return at->ok && put_line_known(head, ts, args, *at, dur);
	}
	// The text around the values of an Args of a layout (an event class's
	// fields): ,"args":{"NAME": before the first, ,"NAME": before each
	// other (cut from a JsonWriter's text), each in a slot of kArgPre bytes
	// copied whole; by layout, in a slot by its hash.  ok false: too many
	// names or one too long (put_line() then gives up).
	// A layout's names are its class's (Args::layout): known by the
	// layout and their number alone (a damaged event may have fewer).
	// strs: whether any argument was a string when made (a class's fields
	// keep their kinds; one found otherwise makes put_line_known() give up).
	static constexpr size_t kArgsKnown = 16, kArgPre = 32;
	struct ArgsText {
		uint64_t layout = 0;
		uint32_t n = 0;
		bool ok = false, strs = false;
		uint8_t len[kArgsKnown];
		char pre[kArgsKnown][kArgPre];
	};
	ArgsText args_texts_[64];
	ArgsText args_scratch_; // an Args of no layout's, of these names and kinds:
	std::vector<std::pair<std::string, Arg::Kind>> scratch_of_;
	// Whether args_scratch_ was made for the names and kinds of args (a
	// handover's "to", every time: made once, not per event).
	bool scratch_fits(const Args &args) const
	{
		if (scratch_of_.size() != args.size())
			return false;
		for (size_t k = 0; k < args.size(); k++)
			if (scratch_of_[k].second != args[k].kind || scratch_of_[k].first != args[k].name)
				return false;
		return true;
	}
	__attribute__((noinline)) void make_scratch(const Args &args)
	{
		make_args_text(args_scratch_, args);
		scratch_of_.clear();
		for (const Arg &a : args)
			scratch_of_.emplace_back(std::string(a.name), a.kind);
	}
	static constexpr ArgsText kNoArgs{0, 0, true, false, {}, {}}; // an empty one's
	const ArgsText &args_text(const Args &args)
	{
		ArgsText &at = args_texts_[args.layout * 0x9e3779b97f4a7c15ull >> 58];
		if (__builtin_expect(at.layout != args.layout || at.n != args.size(), 0))
			make_args_text(at, args);
		return at;
	}
	__attribute__((noinline)) static void make_args_text(ArgsText &at, const Args &args)
	{
		at.layout = args.layout;
		at.n = static_cast<uint32_t>(args.size());
		at.ok = args.size() <= kArgsKnown;
		at.strs = false;
		if (!at.ok)
			return;
		JsonPieces a;
		a.w().begin_object().key("ts");
		a.cut();
		a.w().key("args").begin_object();
		for (size_t k = 0; k < args.size(); k++) {
			at.strs = at.strs || args[k].kind == Arg::Str;
			a.w().key(args[k].name);
			const std::string pre = a.cut();
			if (pre.size() > kArgPre) {
				at.ok = false;
				return;
			}
			std::memcpy(at.pre[k], pre.data(), pre.size());
			at.len[k] = static_cast<uint8_t>(pre.size());
		}
	}
	// put_line() of arguments whose text around the values is at's.
	__attribute__((always_inline)) bool put_line_known(std::string_view head, int64_t ts,
							   const Args &args, const ArgsText &at,
							   const int64_t *dur = nullptr)
	{
		const size_t n = args.size();
		size_t need = 2 + head.size() + kHeadCopy + 32 + 12 + n * (kArgPre + 48) + (dur ? 7 + 32 : 0);
		if (at.strs)
			for (size_t k = 0; k < n; k++)
				if (args[k].kind == Arg::Str)
					need += args[k].s.size();
		char *const p0 = line_room(need);
		char *p = line_start(p0, head, ts, dur);
		for (size_t k = 0; k < n; k++) {
			const Arg &a = args[k];
			std::memcpy(p, at.pre[k], kArgPre);
			p += at.len[k];
			// A string with no room counted, or with anything to escape.
			if (a.kind == Arg::Str && (!at.strs || !json_plain(a.s)))
				return false;
			p = put_arg_value(p, a);
		}
		p = syntax_.close[n != 0].put(p);
		line_done(p0, p);
		return true;
	}
	// An argument's value at p, as json_args() writes it: the end of what
	// it wrote.  A string must have nothing to escape and its room counted
	// (the caller checks).  Inlined: it is on every event's path.
	static inline __attribute__((always_inline)) char *put_arg_value(char *p, const Arg &a)
	{
		switch (a.kind) {
		case Arg::Int:
			return json_i64_text(p, a.i);
		case Arg::Uint:
			return json_u64_text(p, a.u);
		case Arg::Real:
			return json_f64_text(p, a.d);
		case Arg::Str:
			return json_plain_text(p, a.s);
		}
		return p;
	}
	// ,"dur":DUR at p when dur is given (8 + 32 bytes of room).
	__attribute__((always_inline)) char *dur_text(char *p, const int64_t *dur)
	{
		if (!dur)
			return p;
		p = syntax_.dur.put(p);
		return json_fixed3_text(p, *dur, dur_us_);
	}
	// A line's head at p: kHeadCopy bytes at once when it is no longer,
	// else 32 at a time (heads are kept with that much capacity,
	// make_head(); the room has kHeadCopy past the head).
	static constexpr size_t kHeadCopy = 128;
	__attribute__((always_inline)) static char *copy_line_head(char *p, std::string_view head)
	{
		if (head.size() <= kHeadCopy)
			std::memcpy(p, head.data(), kHeadCopy);
		else
			for (size_t k = 0; k < head.size(); k += 32)
				std::memcpy(p + k, head.data() + k, 32);
		return p + head.size();
	}
	// put_line() of no arguments at p (room: 2 + head + kHeadCopy + 44 bytes): the
	// end of what it wrote.
	__attribute__((always_inline)) char *bare_line(char *p, std::string_view head, int64_t ts)
	{
		p = line_start(p, head, ts, nullptr);
		*p++ = '}';
		return p;
	}
	// A flow's start ("s") or end ("f", bound to the enclosing slice),
	// straight into text_: byte for byte flow_writer()'s (built by a
	// JsonWriter, each flow was a tenth of a pthread trace's export).
	void flow(const char *ph, uint64_t id, const Track &t, int64_t ts)
	{
		if (ph[0] != 's' && ph[0] != 'f') {
			flow_writer(ph, id, t, ts);
			return;
		}
		const std::string &head = syntax_.flow[ph[0] == 'f'];
		const std::string &at = at_of(t);
		seen(ts);
		char *const p0 = line_room(8 + head.size() + 24 + at.size() + 16 + 32 + 8);
		char *p = line_sep(p0);
		std::memcpy(p, head.data(), head.size());
		p += head.size();
		p = json_u64_text(p, static_cast<uint64_t>(id & 0x7fffffffffffffULL));
		for (size_t k = 0; k < at.size(); k += 16) // no call for its few bytes
			std::memcpy(p + k, at.data() + k, 16);
		p += at.size();
		p = json_fixed3_text(p, ts - t0_, at_us_);
		p = syntax_.close[0].put(p);
		line_done(p0, p);
	}
	void flow_writer(const char *ph, uint64_t id, const Track &t, int64_t ts)
	{
		JsonWriter w = start_event(ph);
		if (ph[0] == 'f')
			w.key("bp").str("e");
		w.key("cat").str("lock").key("name").str("handover");
		w.key("id").u64(id & 0x7fffffffffffffULL);
		where(w, t, ts);
		w.end_object();
	}
	static void async_id(JsonWriter &w, uint64_t track)
	{
		char b[32] = {'0', 'x'}; // "0x%" PRIx64, per event: no snprintf
		char *e = std::to_chars(b + 2, b + sizeof b, track, 16).ptr;
		w.key("cat").str("lock").key("id").str(std::string_view(b, static_cast<size_t>(e - b)));
	}
	void json_args(JsonWriter &w, const Args &args)
	{
		if (args.empty())
			return;
		w.key("args").begin_object();
		for (const Arg &a : args) {
			w.key(a.name);
			switch (a.kind) {
			case Arg::Int:
				w.i64(a.i);
				break;
			case Arg::Uint:
				w.u64(a.u);
				break;
			case Arg::Real:
				w.f64(a.d); // JSON has no NaN or infinity: null
				break;
			case Arg::Str:
				w.str(a.s);
				break;
			}
		}
		w.end_object();
	}
	// A run's begin (args: tid) or end (args: tid, end_state; tid < 0:
	// none, the end is a lost switch's).
	void cpu_event(const char *ph, uint32_t m, uint32_t cpu, int64_t ts, const std::string &comm,
		       int64_t tid, int64_t end_state)
	{
		JsonWriter w = start_event(ph);
		w.key("name").str(comm);
		where(w, Track{machine_pid(m), cpu, std::string(), false, 't', {}, {}, {}, 0}, ts);
		if (tid >= 0) {
			w.key("args").begin_object().key("tid").i64(tid);
			if (ph[0] == 'E')
				w.key("end_state").i64(end_state);
			w.end_object();
		}
		w.end_object();
	}
	void cpu_track(uint32_t m, uint32_t cpu)
	{
		if (m) { // its process named by machine()
			bool &named = cpu_named_m_[cpu_key(m, cpu)];
			if (!named) {
				named = true;
				thread_name(machine_pid(m), cpu, "CPU " + std::to_string(cpu));
			}
			return;
		}
		if (!cpus_named_) {
			cpus_named_ = true;
			JsonWriter w = start_event("M");
			w.key("name").str("process_name").key("pid").i64(0);
			w.key("args").begin_object().key("name").str("CPUs").end_object().end_object();
		}
		if (cpu >= cpu_named_.size())
			cpu_named_.resize(cpu + 1, false);
		if (cpu_named_[cpu])
			return;
		cpu_named_[cpu] = true;
		thread_name(0, cpu, "CPU " + std::to_string(cpu));
	}
	void thread_name(int64_t pid, int64_t tid, const std::string &name)
	{
		JsonWriter w = start_event("M");
		w.key("name").str("thread_name").key("pid").i64(pid).key("tid").i64(tid);
		w.key("args").begin_object().key("name").str(name).end_object();
		w.end_object();
	}
	void flush()
	{
		settle();
		if (!text_.empty() && std::fwrite(text_.data(), 1, text_.size(), out_) != text_.size())
			failed_ = true;
		text_.clear();
	}
};

} // namespace

std::unique_ptr<Sink> make_json_sink(FILE *out, int64_t t0)
{
	return std::unique_ptr<Sink>(new JsonSink(out, t0));
}

} // namespace exp
} // namespace strata
