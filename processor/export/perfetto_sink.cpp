// perfetto_sink.cpp - the Perfetto protobuf sink of export_sink.h.  The
// Perfetto field numbers are those of Perfetto's public .proto files
// (protos/perfetto/trace/...), written down again in
// tests/export/perfetto_subset.proto, against which the tests decode our
// output with protoc.
#include <algorithm>
#include <cassert>
#include <cinttypes>
#include <cstring>
#include <string_view>
#include <unordered_map>

#include "export_proto.h"
#include "export_sink.h"
#include "sink_bytes.h"

namespace strata {
namespace exp {
namespace {

// message Trace
constexpr uint32_t kTracePacket = 1;
// message TracePacket
constexpr uint32_t kPktFtraceEvents = 1, kPktTimestamp = 8, kPktSeqId = 10, kPktTrackEvent = 11,
		   kPktSequenceFlags = 13, kPktTrackDescriptor = 60, kPktMachineId = 98;
constexpr uint64_t kSeqIncrementalStateCleared = 1;
// message TrackDescriptor
constexpr uint32_t kTdUuid = 1, kTdName = 2, kTdProcess = 3, kTdThread = 4, kTdParent = 5, kTdCounter = 8;
// message ProcessDescriptor / ThreadDescriptor
constexpr uint32_t kPdPid = 1, kPdName = 6;
constexpr uint32_t kThPid = 1, kThTid = 2, kThName = 5;
// message TrackEvent
constexpr uint32_t kTeDebugAnnotations = 4, kTeType = 9, kTeTrackUuid = 11, kTeName = 23,
		   kTeCounterValue = 30, kTeFlowIds = 47, kTeTerminatingFlowIds = 48;
constexpr uint64_t kTypeSliceBegin = 1, kTypeSliceEnd = 2, kTypeInstant = 3, kTypeCounter = 4;
// message DebugAnnotation
constexpr uint32_t kDaUint = 3, kDaInt = 4, kDaDouble = 5, kDaString = 6, kDaName = 10;
// message FtraceEventBundle / FtraceEvent
constexpr uint32_t kFbCpu = 1, kFbEvent = 2;
constexpr uint32_t kFeTimestamp = 1, kFePid = 2, kFeSchedSwitch = 4, kFeSchedWakeup = 17, kFeSchedWaking = 20,
		   kFeSchedWakeupNew = 114;
// message SchedSwitchFtraceEvent / SchedWakeupFtraceEvent (and waking, wakeup_new)
constexpr uint32_t kSwPrevComm = 1, kSwPrevPid = 2, kSwPrevPrio = 3, kSwPrevState = 4, kSwNextComm = 5,
		   kSwNextPid = 6, kSwNextPrio = 7;
constexpr uint32_t kWkComm = 1, kWkPid = 2, kWkPrio = 3, kWkSuccess = 4, kWkTargetCpu = 5;

// A machine's packets are on one writer sequence: kSequence + its Perfetto
// machine id (perfetto_machine()).  The trace processor reads each machine
// id's packets apart, each with its own sequences, so each machine's first
// packet clears its sequence's incremental state; a reader that knows no
// machine_id sees a sequence per machine, as from a writer per machine.
constexpr uint64_t kSequence = 1;

class PerfettoSink final : public Sink {
public:
	explicit PerfettoSink(FILE *out) : out_(out)
	{
		w_.buf.reserve(kFlushAt + sizeof(PairHeads::bytes)); // pair()'s room below kFlushAt
	}

	void machine(uint32_t m, uint64_t uuid, const std::string &name) override
	{
		multi_ = true;
		const uint32_t mach = describe(uuid, perfetto_machine(m));
		const size_t pkt = open_packet(mach);
		const size_t td = w_.begin(kPktTrackDescriptor);
		w_.u64(kTdUuid, uuid);
		w_.str(kTdName, name);
		w_.end(td);
		close_packet(pkt);
	}
	void process(uint64_t uuid, int64_t pid, const std::string &name) override
	{
		const size_t pkt = open_packet(describe(uuid, machine_of_id(pid)));
		const size_t td = w_.begin(kPktTrackDescriptor);
		w_.u64(kTdUuid, uuid);
		const size_t pd = w_.begin(kTdProcess);
		w_.i64(kPdPid, pid);
		if (!name.empty())
			w_.str(kPdName, name);
		w_.end(pd);
		w_.end(td);
		close_packet(pkt);
	}
	void thread(uint64_t uuid, uint64_t parent, int64_t pid, int64_t tid,
		    const std::string &name) override
	{
		const size_t pkt = open_packet(describe(uuid, machine_of_id(pid)));
		const size_t td = w_.begin(kPktTrackDescriptor);
		w_.u64(kTdUuid, uuid);
		if (parent)
			w_.u64(kTdParent, parent);
		const size_t th = w_.begin(kTdThread);
		w_.i64(kThPid, pid);
		w_.i64(kThTid, tid);
		if (!name.empty())
			w_.str(kThName, name);
		w_.end(th);
		w_.end(td);
		close_packet(pkt);
	}
	void child_track(uint64_t uuid, uint64_t parent, int64_t pid, int64_t, const std::string &name,
			 bool counter) override
	{
		const size_t pkt =
			open_packet(describe(uuid, parent ? machine_of_track(parent) : machine_of_id(pid)));
		const size_t td = w_.begin(kPktTrackDescriptor);
		w_.u64(kTdUuid, uuid);
		if (parent)
			w_.u64(kTdParent, parent);
		w_.str(kTdName, name);
		if (counter)
			w_.end(w_.begin(kTdCounter)); // an empty CounterDescriptor
		w_.end(td);
		close_packet(pkt);
	}
	void begin(int64_t ts, uint64_t track, const std::string &name, const Args &args,
		   uint64_t flow_in) override
	{
		named_event(kTypeSliceBegin, ts, track, name, args, flow_in, 0);
	}
	void end(int64_t ts, uint64_t track, const Args &args, uint64_t flow_out) override
	{
		const uint32_t mach = machine_of_track(track);
		if (plain_event(mach, kTypeSliceEnd, ts, track, nullptr, args, 0, flow_out))
			return;
		const size_t pkt = open_packet(mach, ts);
		const size_t te = w_.begin(kPktTrackEvent);
		w_.u64(kTeType, kTypeSliceEnd);
		w_.u64(kTeTrackUuid, track);
		annotations(args);
		if (flow_out)
			w_.fixed64(kTeFlowIds, flow_out);
		w_.end(te);
		close_packet(pkt);
	}
	// Both flows on the slice's begin: a zero-length slice (a release) is
	// then a flow's source as surely as a wait is its destination.
	void complete(int64_t ts, int64_t end, uint64_t track, const std::string &name, const Args &args,
		      uint64_t flow_in, uint64_t flow_out) override
	{
		named_event(kTypeSliceBegin, ts, track, name, args, flow_in, flow_out);
		this->end(end, track, Args(), 0);
	}
	// Two packets of made heads (a begin's and an end's, both in a cache
	// of their own: a lock's holds follow one another), their lengths
	// known: the 2 events of plain_event() without their arguments' loop;
	// most often both packets copied whole from their cache (PairHeads),
	// two times written in (a third of pair()'s instructions).
	void pair(int64_t ts, int64_t end, uint64_t track, const std::string &name) override
	{
		PairHeads &ph = pair_place(track);
		const uint64_t hi = static_cast<uint64_t>(ts) >> 28;
		// Most holds: their packets made (ph.len: started, times >= 0,
		// a short name), for these times' high bits; a trace of one
		// machine (several: pair_slow(), which finds the track's).
		if (__builtin_expect(
			    !multi_ && ph.len != 0 && ph.hi == hi && static_cast<uint64_t>(end) >> 28 == hi &&
				    ph.begin.track == track && ph.begin.mach == 0 &&
				    ph.begin.name_len == name.size() && same_bytes(ph.begin.name, name),
			    1)) {
			// Most often below kFlushAt, and then room at hand (reserved
			// past kFlushAt): no call on the way (no register saved at
			// the entry).
			if (__builtin_expect(w_.buf.size() < kFlushAt, 1))
				put_pair_bytes(w_.buf.end(), ph, ts, end);
			else
				pair_flushed(ph, ts, end);
			return;
		}
		pair_slow(ph, ts, end, track, name);
	}
	void instant(int64_t ts, uint64_t track, const std::string &name, const Args &args) override
	{
		named_event(kTypeInstant, ts, track, name, args, 0, 0);
	}
	void counter(int64_t ts, uint64_t track, int64_t value) override
	{
		const size_t pkt = open_packet(machine_of_track(track), ts);
		const size_t te = w_.begin(kPktTrackEvent);
		w_.u64(kTeType, kTypeCounter);
		w_.u64(kTeTrackUuid, track);
		w_.i64(kTeCounterValue, value);
		w_.end(te);
		close_packet(pkt);
	}
	void sched_switch(int64_t ts, uint32_t m, uint32_t cpu, const std::string &prev_comm,
			  int64_t prev_tid, int64_t prev_prio, int64_t prev_state,
			  const std::string &next_comm, int64_t next_tid, int64_t next_prio) override
	{
		const size_t pkt = open_packet(multi_ ? perfetto_machine(m) : 0);
		const size_t fb = w_.begin(kPktFtraceEvents);
		w_.u64(kFbCpu, machine_cpu(m, cpu));
		const size_t fe = w_.begin(kFbEvent);
		w_.u64(kFeTimestamp, static_cast<uint64_t>(ts));
		w_.u64(kFePid, static_cast<uint64_t>(prev_tid));
		const size_t sw = w_.begin(kFeSchedSwitch);
		w_.str(kSwPrevComm, prev_comm);
		w_.i64(kSwPrevPid, prev_tid);
		w_.i64(kSwPrevPrio, prev_prio);
		w_.i64(kSwPrevState, prev_state);
		w_.str(kSwNextComm, next_comm);
		w_.i64(kSwNextPid, next_tid);
		w_.i64(kSwNextPrio, next_prio);
		w_.end(sw);
		w_.end(fe);
		w_.end(fb);
		close_packet(pkt);
	}
	void wakeup(int64_t ts, uint32_t m, uint32_t cpu, int kind, const std::string &comm, int64_t tid,
		    int64_t prio, int64_t target_cpu) override
	{
		static const uint32_t fields[] = {kFeSchedWaking, kFeSchedWakeup, kFeSchedWakeupNew};
		const size_t pkt = open_packet(multi_ ? perfetto_machine(m) : 0);
		const size_t fb = w_.begin(kPktFtraceEvents);
		w_.u64(kFbCpu, machine_cpu(m, cpu));
		const size_t fe = w_.begin(kFbEvent);
		w_.u64(kFeTimestamp, static_cast<uint64_t>(ts));
		w_.u64(kFePid, static_cast<uint64_t>(tid));
		const size_t wk = w_.begin(fields[kind < 0 || kind > 2 ? 0 : kind]);
		w_.str(kWkComm, comm);
		w_.i64(kWkPid, tid);
		w_.i64(kWkPrio, prio);
		w_.i64(kWkSuccess, 1);
		w_.i64(kWkTargetCpu,
		       target_cpu >= 0
			       ? static_cast<int64_t>(machine_cpu(m, static_cast<uint32_t>(target_cpu)))
			       : target_cpu);
		w_.end(wk);
		w_.end(fe);
		w_.end(fb);
		close_packet(pkt);
	}
	bool finish() override
	{
		flush();
		return !failed_;
	}

private:
	FILE *out_;
	pb::Writer w_;
	// Perfetto machine id -> its sequence's first packet is written.
	bool started_[kMaxMachine + 1] = {};
	// Several machines: each track's Perfetto machine, from its
	// descriptor (with one machine every packet is machine 0's).
	bool multi_ = false;
	std::unordered_map<uint64_t, uint32_t> track_machine_;
	uint64_t last_track_ = 0; // the last track looked up, and its machine
	uint32_t last_machine_ = 0;

	// A track's machine, as its descriptor said (0: not described, or
	// one machine); the last one kept, most events following one another
	// on one thread's tracks.
	uint32_t machine_of_track(uint64_t track)
	{
		if (!multi_)
			return 0;
		if (track != last_track_) {
			auto it = track_machine_.find(track);
			last_track_ = track;
			last_machine_ = it == track_machine_.end() ? 0 : it->second;
		}
		return last_machine_;
	}
	// The machine of a pid or tid: its machine_id() bits.
	uint32_t machine_of_id(int64_t id) const
	{
		if (!multi_ || id <= 0)
			return 0;
		return perfetto_machine(static_cast<uint32_t>(id >> kMachineShift));
	}
	uint32_t describe(uint64_t uuid, uint32_t mach)
	{
		if (multi_) {
			track_machine_[uuid] = mach;
			if (uuid == last_track_)
				last_machine_ = mach;
		}
		return mach;
	}

	// Perfetto keys its CPU tracks by number alone: each machine's own.
	static uint32_t machine_cpu(uint32_t m, uint32_t cpu) { return m * kCpuSpan + cpu; }

	// A slice's begin or an instant.
	void named_event(uint64_t type, int64_t ts, uint64_t track, const std::string &name, const Args &args,
			 uint64_t flow_in, uint64_t flow_out)
	{
		const uint32_t mach = machine_of_track(track);
		if (plain_event(mach, type, ts, track, &name, args, flow_in, flow_out))
			return;
		const size_t pkt = open_packet(mach, ts);
		const size_t te = w_.begin(kPktTrackEvent);
		w_.u64(kTeType, type);
		w_.u64(kTeTrackUuid, track);
		w_.str(kTeName, name);
		annotations(args);
		if (flow_out)
			w_.fixed64(kTeFlowIds, flow_out);
		if (flow_in)
			w_.fixed64(kTeTerminatingFlowIds, flow_in);
		w_.end(te);
		close_packet(pkt);
	}
	// Most events (a lock's hold begins and ends, an event's instant with
	// its fields): a TrackEvent of a type, a track, maybe a name, a few
	// short arguments and flows.  Written at once into the buffer, each
	// annotation's length one byte, the packet's and the TrackEvent's two
	// (a varint with a redundant continuation byte when short, as
	// pb::Writer's four): the same fields as open_packet() and the Writer
	// give them, in a third of the time.  False (nothing written) when
	// the event does not fit that shape.
	static constexpr size_t kMaxName = 64, kMaxArgs = 8, kMaxArgName = 32, kMaxArgStr = 64;
	// The bytes of such a packet from its sequence id to the TrackEvent's
	// name (its sequence, machine, type, track and name), the same for
	// every event of a (track, type, name): made once, then copied whole.
	struct Head {
		uint64_t track = 0, type = 0;
		uint32_t mach = 0;
		bool named = false, made = false;
		uint8_t len = 0, te_len = 0; // its size; where the TrackEvent's length goes
		uint8_t name_len = 0;
		char name[kMaxName];
		char bytes[128]; // copied whole: 16 + 15 + 3 + kMaxName < 128
	};
	static constexpr size_t kHeads = 128; // by the top 7 bits of the track's hash, plus the type
	// Two ways a slot (a waiter's track has its waits and the releases
	// it gives, begins of 2 names in turn: one way made a head for each);
	// heads_mru_: the way used last.
	Head heads_[2][kHeads];
	uint8_t heads_mru_[kHeads] = {};
	// pair()'s: a begin's head and its end's, by the top 5 bits of the
	// track's hash.
	// Its two packets whole for times whose bits above the low 28 are
	// hi (ts_varint()'s tail), their 4 low bytes left to write at lo_at:
	// bytes copied whole, two stores, no head nor varint to make.  len 0:
	// none (hi 0, or the packets too long), bare_packet() writes them.
	struct PairHeads {
		Head begin, end;
		uint64_t hi = 0;
		uint32_t len = 0;
		uint32_t lo_at[2] = {};
		char bytes[96];
	};
	// Two ways a set (32 sets): the track's, else the set's least
	// recently used (one way: tracks of one set took turns, and pair_slow()
	// made their heads again, 3.5 % of a Perfetto export of a pthread trace).
	PairHeads pair_heads_[64];
	uint8_t pair_mru_[32] = {}; // per set: its way used last
	PairHeads &pair_place(uint64_t track)
	{
		const size_t set = (track ^ track >> 32) * 0x9e3779b97f4a7c15ull >> 59;
		PairHeads *const w = pair_heads_ + 2 * set;
		const size_t way = w[0].begin.track == track   ? 0
				   : w[1].begin.track == track ? 1
							       : pair_mru_[set] ^ 1u;
		pair_mru_[set] = static_cast<uint8_t>(way);
		return w[way];
	}
	// pair()'s packets after a flush (out of its way).
	__attribute__((noinline)) void pair_flushed(const PairHeads &ph, int64_t ts, int64_t end)
	{
		flush();
		put_pair_bytes(w_.buf.end(), ph, ts, end);
	}
	// ph's packets at p (room: sizeof ph.bytes) for ts and end, committed.
	__attribute__((always_inline)) void put_pair_bytes(char *p, const PairHeads &ph, int64_t ts,
							   int64_t end)
	{
		std::memcpy(p, ph.bytes, sizeof ph.bytes);
		const uint32_t lo_ts = ts_low(static_cast<uint64_t>(ts)),
			       lo_end = ts_low(static_cast<uint64_t>(end));
		std::memcpy(p + ph.lo_at[0], &lo_ts, 4);
		std::memcpy(p + ph.lo_at[1], &lo_end, 4);
		w_.buf.commit(ph.len);
	}
	// pair() when its packets are not made for these times (made here
	// when they can be), or cannot be (a long name, times before 0, a
	// machine's first packet).
	__attribute__((noinline)) void pair_slow(PairHeads &ph, int64_t ts, int64_t end, uint64_t track,
						 const std::string &name)
	{
		const uint32_t mach = machine_of_track(track);
		if (!started_[mach] || ts < 0 || end < 0 || name.size() > kMaxName) {
			Sink::pair(ts, end, track, name);
			return;
		}
		if (!(ph.begin.made && ph.begin.track == track && ph.begin.mach == mach &&
		      ph.begin.name_len == name.size() && same_bytes(ph.begin.name, name))) {
			make_head(ph.begin, mach, kTypeSliceBegin, track, &name);
			make_head(ph.end, mach, kTypeSliceEnd, track, nullptr);
		}
		if (!multi_) // pair() takes them only then
			make_pair_bytes(ph, static_cast<uint64_t>(ts) >> 28,
					static_cast<uint64_t>(end) >> 28);
		char *const p0 = w_.buf.room(2 * (32 + sizeof ph.begin.bytes));
		char *p = bare_packet(p0, ts, ph.begin);
		p = bare_packet(p, end, ph.end);
		w_.buf.commit(static_cast<size_t>(p - p0));
		if (w_.buf.size() >= kFlushAt)
			flush();
	}
	// A time's varint: the bytes above its low 28 bits (its last ones),
	// the same for successive times (2^28 ns: 0.27 s), as the previous
	// time's (ts_hi_: those bits, 0 when unknown).
	uint64_t ts_hi_ = 0;
	char ts_tail_[8] = {};
	size_t ts_tail_len_ = 0;
	char *ts_varint(char *p, uint64_t v)
	{
		const uint64_t hi = v >> 28;
		if (__builtin_expect(hi != ts_hi_ || hi == 0, 0)) {
			if (hi == 0) // 4 bytes or fewer
				return varint(p, v);
			char b[16];
			ts_tail_len_ = static_cast<size_t>(varint(b, v) - b) - 4;
			std::memcpy(ts_tail_, b + 4, 8);
			ts_hi_ = hi;
		}
		const uint32_t lo = ts_low(v);
		std::memcpy(p, &lo, 4);
		std::memcpy(p + 4, ts_tail_, 8);
		return p + 4 + ts_tail_len_;
	}
	// A time's low 4 varint bytes (its low 28 bits, each byte continued),
	// as ts_varint() writes them.
	static uint32_t ts_low(uint64_t v)
	{
		return static_cast<uint32_t>((v & 0x7f) | (v << 1 & 0x7f00) | (v << 2 & 0x7f0000) |
					     (v << 3 & 0x7f000000) | 0x80808080u);
	}
	// ph's packets for times of high bits hi (begin) and end_hi (end):
	// made by bare_packet(), kept when both are the same, non-zero (the
	// varint's length then known) and the packets fit ph.bytes.
	void make_pair_bytes(PairHeads &ph, uint64_t hi, uint64_t end_hi)
	{
		ph.hi = hi;
		ph.len = 0;
		if (hi == 0 || end_hi != hi)
			return;
		char b[2 * (32 + sizeof ph.begin.bytes)];
		char *p = bare_packet(b, static_cast<int64_t>(hi << 28), ph.begin);
		const size_t first = static_cast<size_t>(p - b);
		p = bare_packet(p, static_cast<int64_t>(hi << 28), ph.end);
		const size_t n = static_cast<size_t>(p - b);
		if (n > sizeof ph.bytes)
			return;
		std::memcpy(ph.bytes, b, sizeof ph.bytes);
		ph.lo_at[0] = 4; // tag, 2 bytes of length, the timestamp's tag
		ph.lo_at[1] = static_cast<uint32_t>(first + 4);
		ph.len = static_cast<uint32_t>(n);
	}
	const Head &head(uint32_t mach, uint64_t type, uint64_t track, const std::string *name)
	{
		const size_t i =
			(((track ^ track >> 32) * 0x9e3779b97f4a7c15ull >> 57) + type) & (kHeads - 1);
		for (uint8_t w = 0; w < 2; w++) {
			Head &h = heads_[w][i];
			if (h.made && h.track == track && h.type == type && h.mach == mach &&
			    h.named == (name != nullptr) &&
			    (!name || (h.name_len == name->size() && same_bytes(h.name, *name)))) {
				heads_mru_[i] = w;
				return h;
			}
		}
		heads_mru_[i] ^= 1;
		Head &h = heads_[heads_mru_[i]][i];
		make_head(h, mach, type, track, name);
		return h;
	}
	// h made for these: its TrackEvent's length that of an event with no
	// arguments nor flows (plain_event() writes it again).
	static void make_head(Head &h, uint32_t mach, uint64_t type, uint64_t track, const std::string *name)
	{
		h.track = track;
		h.type = type;
		h.mach = mach;
		h.named = name != nullptr;
		h.name_len = static_cast<uint8_t>(name ? name->size() : 0);
		if (name)
			std::memcpy(h.name, name->data(), name->size());
		char *p = h.bytes;
		*p++ = static_cast<char>(kPktSeqId << 3 | pb::kVarint);
		p = varint(p, kSequence + mach);
		if (mach) {
			p = varint(p, kPktMachineId << 3 | pb::kVarint);
			p = varint(p, mach);
		}
		*p++ = static_cast<char>(kPktTrackEvent << 3 | pb::kLen);
		h.te_len = static_cast<uint8_t>(p - h.bytes);
		p += 2;
		*p++ = static_cast<char>(kTeType << 3 | pb::kVarint);
		*p++ = static_cast<char>(type);
		*p++ = static_cast<char>(kTeTrackUuid << 3 | pb::kVarint);
		p = varint(p, track);
		if (name) {
			p = varint(p, kTeName << 3 | pb::kLen);
			*p++ = static_cast<char>(name->size());
			std::memcpy(p, name->data(), name->size());
			p += name->size();
		}
		h.len = static_cast<uint8_t>(p - h.bytes);
		len2(h.bytes + h.te_len, static_cast<size_t>(h.len - h.te_len - 2));
		h.made = true;
	}
	// h's bytes at p (room: all of h.bytes), 32 or 128 at once (the
	// room's slack): most heads (a track, a type, a short name) fit 32.
	static void copy_head(char *p, const Head &h)
	{
		if (h.len <= 32)
			std::memcpy(p, h.bytes, 32);
		else
			std::memcpy(p, h.bytes, sizeof h.bytes);
	}
	// A packet of head h and time ts (>= 0), nothing more, at p (room:
	// 16 bytes and h.bytes): the end of what it wrote.
	char *bare_packet(char *p, int64_t ts, const Head &h)
	{
		*p++ = static_cast<char>(kTracePacket << 3 | pb::kLen);
		char *const pkt_len = p;
		p += 2;
		*p++ = static_cast<char>(kPktTimestamp << 3 | pb::kVarint);
		p = ts_varint(p, static_cast<uint64_t>(ts));
		copy_head(p, h);
		p += h.len;
		len2(pkt_len, static_cast<size_t>(p - pkt_len - 2));
		return p;
	}
	__attribute__((always_inline)) bool plain_event(uint32_t mach, uint64_t type, int64_t ts,
							uint64_t track, const std::string *name,
							const Args &args, uint64_t flow_in, uint64_t flow_out)
	{
		if (!started_[mach] || ts < 0 || type >= 0x80 || (name && name->size() > kMaxName) ||
		    args.size() > kMaxArgs)
			return false;
		for (const Arg &a : args)
			if (a.name.size() > kMaxArgName || (a.kind == Arg::Str && a.s.size() > kMaxArgStr))
				return false;
		const Head &h = head(mach, type, track, name);
		char *const p0 =
			w_.buf.room(64 + sizeof h.bytes + kMaxArgs * (16 + kMaxArgName + kMaxArgStr));
		char *p = p0;
		*p++ = static_cast<char>(kTracePacket << 3 | pb::kLen);
		char *const pkt_len = p;
		p += 2;
		*p++ = static_cast<char>(kPktTimestamp << 3 | pb::kVarint);
		p = ts_varint(p, static_cast<uint64_t>(ts));
		copy_head(p, h);
		char *const te_len = p + h.te_len;
		p += h.len;
		for (const Arg &a : args)
			p = plain_annotation(p, a);
		if (flow_out) {
			p = varint(p, kTeFlowIds << 3 | pb::kFixed64);
			std::memcpy(p, &flow_out, 8);
			p += 8;
		}
		if (flow_in) {
			p = varint(p, kTeTerminatingFlowIds << 3 | pb::kFixed64);
			std::memcpy(p, &flow_in, 8);
			p += 8;
		}
		len2(te_len, static_cast<size_t>(p - te_len - 2));
		len2(pkt_len, static_cast<size_t>(p - pkt_len - 2));
		w_.buf.commit(static_cast<size_t>(p - p0));
		if (w_.buf.size() >= kFlushAt)
			flush();
		return true;
	}
	// One short debug annotation of plain_event (its name's and string's
	// lengths checked there): the end of what it wrote.  Names and strings
	// are copied at their longest (the room's slack), not by a call.
	static char *plain_annotation(char *p, const Arg &a)
	{
		*p++ = static_cast<char>(kTeDebugAnnotations << 3 | pb::kLen);
		char *const da_len = p++;
		*p++ = static_cast<char>(kDaName << 3 | pb::kLen);
		*p++ = static_cast<char>(a.name.size());
		copy_short<kMaxArgName>(p, a.name);
		p += a.name.size();
		switch (a.kind) {
		case Arg::Int:
			*p++ = static_cast<char>(kDaInt << 3 | pb::kVarint);
			p = varint(p, static_cast<uint64_t>(a.i));
			break;
		case Arg::Uint:
			*p++ = static_cast<char>(kDaUint << 3 | pb::kVarint);
			p = varint(p, a.u);
			break;
		case Arg::Real:
			*p++ = static_cast<char>(kDaDouble << 3 | pb::kFixed64);
			std::memcpy(p, &a.d, 8); // little-endian (strata_abi.h)
			p += 8;
			break;
		case Arg::Str:
			*p++ = static_cast<char>(kDaString << 3 | pb::kLen);
			*p++ = static_cast<char>(a.s.size());
			copy_short<kMaxArgStr>(p, a.s);
			p += a.s.size();
			break;
		}
		*da_len = static_cast<char>(p - da_len - 1);
		return p;
	}
	// s (at most N bytes) at p, N bytes written: 16 at a time from s's
	// first bytes, so that nothing past s is read.
	template <size_t N> static void copy_short(char *p, std::string_view s)
	{
		const size_t n = s.size();
		if (n >= 16) {
			size_t k = 0;
			for (; k + 16 <= n; k += 16)
				std::memcpy(p + k, s.data() + k, 16);
			std::memcpy(p + n - 16, s.data() + n - 16, 16);
			return;
		}
		// Below 16: two overlapping loads of 8, 4 or 1..3 bytes.
		if (n >= 8) {
			uint64_t a, b;
			std::memcpy(&a, s.data(), 8);
			std::memcpy(&b, s.data() + n - 8, 8);
			std::memcpy(p, &a, 8);
			std::memcpy(p + n - 8, &b, 8);
		} else if (n >= 4) {
			uint32_t a, b;
			std::memcpy(&a, s.data(), 4);
			std::memcpy(&b, s.data() + n - 4, 4);
			std::memcpy(p, &a, 4);
			std::memcpy(p + n - 4, &b, 4);
		} else if (n) {
			p[0] = s[0];
			p[n / 2] = s[n / 2];
			p[n - 1] = s[n - 1];
		}
	}
	// A length below 2^14 as a two-byte varint.
	static void len2(char *at, size_t n)
	{
		at[0] = static_cast<char>((n & 0x7f) | 0x80);
		at[1] = static_cast<char>(n >> 7);
	}
	// v as a varint at p (plain_event's room: it may store up to 8 bytes
	// past the varint's end).  Straight-line: a timestamp or a track's
	// uuid is 9 or 10 bytes, whose loop was a third of plain_event's time.
	__attribute__((always_inline)) static char *varint(char *p, uint64_t v)
	{
		if (v < 0x80) {
			*p = static_cast<char>(v);
			return p + 1;
		}
		// Short values (arguments, lengths): 2 bytes, else 4 stored at
		// once, the last one's continuation bit cleared.
		if (v < (1u << 14)) {
			p[0] = static_cast<char>(v | 0x80);
			p[1] = static_cast<char>(v >> 7);
			return p + 2;
		}
		if (v < (1u << 28)) {
			const uint32_t w =
				static_cast<uint32_t>((v & 0x7f) | (v << 1 & 0x7f00) | (v << 2 & 0x7f0000) |
						      (v << 3 & 0x7f000000)) |
				(v < (1u << 21) ? 0x8080u : 0x808080u);
			std::memcpy(p, &w, 4);
			return p + (v < (1u << 21) ? 3 : 4);
		}
		// The low 56 bits in 8 groups of 7, one a byte, little-endian.
		uint64_t w = (v & 0x7f) | (v << 1 & 0x7f00) | (v << 2 & 0x7f0000) | (v << 3 & 0x7f000000) |
			     (v << 4 & 0x7f00000000) | (v << 5 & 0x7f0000000000) |
			     (v << 6 & 0x7f000000000000) | (v << 7 & 0x7f00000000000000);
		const unsigned n = (64 - static_cast<unsigned>(__builtin_clzll(v)) + 6) / 7; // 2..10 bytes
		if (n <= 8) {
			w |= 0x8080808080808080ull >> (8 * (9 - n)); // every byte but the last
			std::memcpy(p, &w, 8);
			return p + n;
		}
		w |= 0x8080808080808080ull;
		std::memcpy(p, &w, 8);
		p[8] = static_cast<char>(v >> 56 & 0x7f);
		if (n == 9)
			return p + 9;
		p[8] = static_cast<char>(p[8] | 0x80);
		p[9] = static_cast<char>(v >> 63);
		return p + 10;
	}
	// A packet of Perfetto machine `mach` (0: the host, the field left out).
	size_t open_packet(uint32_t mach, int64_t ts = -1)
	{
		const size_t at = w_.begin(kTracePacket);
		if (ts >= 0)
			w_.u64(kPktTimestamp, static_cast<uint64_t>(ts));
		w_.u64(kPktSeqId, kSequence + mach);
		if (mach)
			w_.u64(kPktMachineId, mach);
		if (!started_[mach]) {
			w_.u64(kPktSequenceFlags, kSeqIncrementalStateCleared);
			started_[mach] = true;
		}
		return at;
	}
	void close_packet(size_t at)
	{
		w_.end(at);
		if (w_.buf.size() >= kFlushAt)
			flush();
	}
	void annotations(const Args &args)
	{
		for (const Arg &a : args) {
			const size_t da = w_.begin(kTeDebugAnnotations);
			w_.str(kDaName, a.name.data(), a.name.size());
			switch (a.kind) {
			case Arg::Int:
				w_.i64(kDaInt, a.i);
				break;
			case Arg::Uint:
				w_.u64(kDaUint, a.u);
				break;
			case Arg::Real:
				w_.f64(kDaDouble, a.d);
				break;
			case Arg::Str:
				w_.str(kDaString, a.s);
				break;
			}
			w_.end(da);
		}
	}
	void flush()
	{
		if (!w_.buf.empty() && std::fwrite(w_.buf.data(), 1, w_.buf.size(), out_) != w_.buf.size())
			failed_ = true;
		w_.buf.clear();
	}
};

} // namespace

std::unique_ptr<Sink> make_perfetto_sink(FILE *out)
{
	return std::unique_ptr<Sink>(new PerfettoSink(out));
}

} // namespace exp
} // namespace strata
