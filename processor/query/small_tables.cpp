// small_tables.cpp - processes, threads and lost (small_tables.h).
#include "small_tables.h"

#include <algorithm>
#include <tuple>

namespace strata {
namespace query {
namespace {

// The (comm, tid) field pairs of a kernel class that name a thread:
// "comm" and "tid", or "X_comm" and "X_tid" (sched_switch's prev_ and
// next_, sched_process_fork's parent_ and child_).  Indices into its fields.
std::vector<std::pair<int, int>> naming_fields(const MetaEvent &me)
{
	std::vector<std::pair<int, int>> out;
	const auto &fs = me.info.fields;
	for (size_t c = 0; c < fs.size(); c++) {
		const std::string &n = fs[c].name;
		if (fs[c].type != STRATA_FT_STRING || n.size() < 4 || n.compare(n.size() - 4, 4, "comm") != 0)
			continue;
		const std::string tid = n.substr(0, n.size() - 4) + "tid";
		for (size_t t = 0; t < fs.size(); t++)
			if (fs[t].name == tid && (fs[t].type == STRATA_FT_INTEGER) && fs[t].elem_bits <= 64)
				out.emplace_back((int)c, (int)t);
	}
	return out;
}

// A thread's row being made: its span, its owned packets, its name.
struct ThreadRun {
	int64_t b = INT64_MAX, e = INT64_MIN;
	uint64_t packets = 0;
	std::string name;
	bool named = false;
};

// Each thread's rows (a rename starts one), by (sub-trace, tid).
using ThreadRuns = std::map<std::tuple<const SubTrace *, int64_t>, std::vector<ThreadRun>>;

// Thread tid of sub seen at ns, named (name, len) by a kernel event that
// names threads, or by none (null).
void thread_seen(ThreadRuns &th, const SubTrace *sub, int64_t tid, int64_t ns, const char *name, size_t len)
{
	std::vector<ThreadRun> &runs = th[{sub, tid}];
	const bool naming = name && len && tid != 0;
	if (runs.empty() ||
	    (naming && runs.back().named && runs.back().name.compare(0, std::string::npos, name, len) != 0))
		runs.emplace_back();
	ThreadRun &t = runs.back();
	if (naming && !t.named) {
		t.name.assign(name, len);
		t.named = true;
	}
	t.b = std::min(t.b, ns);
	t.e = std::max(t.e, ns);
}

// The owned lanes' threads, from the index; whether some stream must be
// read (shared lanes, the kernel's).
bool threads_from_index(Vtab *v, ThreadRuns &th)
{
	bool read = false;
	for (const auto &s : v->t->index.streams()) {
		const SubTrace *sub = s->trace;
		if (s->shared || sub->meta.record_format != STRATA_REC_COMPACT) {
			read = true;
			continue;
		}
		for (const PacketEntry &p : s->packets) {
			if (p.content <= STRATA_PACKET_HEADER_SIZE)
				continue; // no record (a packet closed empty: only its counts)
			std::vector<ThreadRun> &runs = th[{&whole_of(*sub), p.vtid}];
			if (runs.empty())
				runs.emplace_back();
			ThreadRun &t = runs.back();
			t.packets++;
			t.b = std::min(t.b, sub->meta.ns_from_origin(p.ts_begin));
			t.e = std::max(t.e, sub->meta.ns_from_origin(p.ts_end));
		}
	}
	return read;
}

// The shared lanes' and the kernel's threads, from their records (those
// streams only are read).
void threads_from_records(Vtab *v, ThreadRuns &th)
{
	TraceReader r;
	r.share_index(v->t->index);
	r.set_stream_filter([](const StreamInfo &s) {
		return s.shared || s.trace->meta.record_format != STRATA_REC_COMPACT;
	});
	std::unordered_map<const MetaEvent *, std::vector<std::pair<int, int>>> naming;
	std::vector<FieldValue> fv;
	TraceMsg m;
	while (r.next(&m)) {
		if (m.kind != TraceMsgKind::Event)
			continue;
		const TraceEvent &e = *m.event;
		const SubTrace *sub = &whole_of(*m.stream->trace);
		if (e.tid >= 0)
			thread_seen(th, sub, e.tid, e.ns, nullptr, 0);
		if (!sub->kernel)
			continue;
		auto it = naming.find(e.cls);
		if (it == naming.end())
			it = naming.emplace(e.cls, naming_fields(*e.cls)).first;
		if (it->second.empty())
			continue;
		e.decode(&fv);
		for (const auto &ct : it->second) {
			const FieldValue &c = fv[(size_t)ct.first], &t = fv[(size_t)ct.second];
			const int64_t tid = t.info->is_signed ? t.i : (int64_t)t.u;
			if (tid >= 0)
				thread_seen(th, sub, tid, e.ns, c.str, c.len);
		}
	}
	v->reg->bytes += r.stats().bytes;
}

// The thread a lost row belongs to, when the stream says it: a COMPACT
// owned lane's packets name their thread.  The loss lies in the stream's
// bytes [lo, hi): the thread of the packet holding lo (records cut off
// one), else of the packets on both sides when they agree, else of every
// packet of the stream when they agree; else -1.
int64_t lost_tid(const StreamInfo *s, uint64_t lo, uint64_t hi)
{
	if (!s || s->shared || s->packets.empty() || s->trace->meta.record_format != STRATA_REC_COMPACT)
		return -1;
	const PacketEntry *before = nullptr, *after = nullptr;
	bool one = true;
	for (const PacketEntry &p : s->packets) {
		one &= p.vtid == s->packets[0].vtid;
		if (lo >= p.offset && lo - p.offset < p.size)
			return p.vtid;
		if (p.offset + p.size <= lo)
			before = &p;
		else if (!after && p.offset >= hi)
			after = &p;
	}
	if (before && after && before->vtid == after->vtid)
		return before->vtid;
	return one ? s->packets[0].vtid : -1;
}

// The bytes a discard message's loss lies between: from the end of the
// packet before the one it is counted in (DiscardedPackets: the one after
// the gap; DiscardedEvents: the one whose header counts them) to that
// packet's start.
std::pair<uint64_t, uint64_t> discard_span(const StreamInfo &s, const TraceMsg &m)
{
	const TraceMeta &meta = s.trace->meta;
	for (size_t i = 1; i < s.packets.size(); i++) {
		const PacketEntry &e = s.packets[i], &prev = s.packets[i - 1];
		const uint64_t ts = m.kind == TraceMsgKind::DiscardedPackets ? e.ts_begin : e.ts_end;
		if (meta.ns_from_origin(ts) == m.end_ns)
			return {prev.offset + prev.size, e.offset};
	}
	return {UINT64_MAX, UINT64_MAX};
}

// A lost row's owner: machine, pid, process, tid, stream (NULLs for what is
// not known).
void lost_owner(std::vector<Cell> *row, const SubTrace *sub, const StreamInfo *s, uint64_t lo, uint64_t hi,
		const std::string &file)
{
	row->push_back(sub ? ctext(sub->hostname) : Cell());
	row->push_back(sub && !sub->kernel ? cint(sub->vpid) : Cell());
	row->push_back(sub && !sub->kernel ? ctext(sub->procname) : Cell());
	const int64_t tid = lost_tid(s, lo, hi);
	row->push_back(tid >= 0 ? cint(tid) : Cell());
	row->push_back(ctext(file));
}

// The stream or sub-trace a damaged file belongs to (the index's damage
// comes without its stream): the stream of that path, else the sub-trace
// of its directory.
void damage_owner(const TraceReader &index, const std::string &file, const StreamInfo **s,
		  const SubTrace **sub)
{
	for (const auto &st : index.streams())
		if (st->path == file) {
			*s = st.get();
			*sub = st->trace;
			return;
		}
	const std::string dir = file.substr(0, file.rfind('/') == std::string::npos ? 0 : file.rfind('/'));
	for (const auto &t : index.traces())
		if (t->dir == dir)
			*sub = t.get();
}

// The time span of a damaged span found by the index (it has none of its
// own: its bytes are the damaged ones): from the end of the stream's last
// good packet before it to the beginning of its first after it (NULL at
// the file's start or end).
void damage_span(std::vector<Cell> *row, const StreamInfo *s, const TraceDamage &d)
{
	const PacketEntry *before = nullptr, *after = nullptr;
	static const std::vector<PacketEntry> kNone;
	for (const PacketEntry &p : s ? s->packets : kNone) {
		if (p.offset + p.size <= d.offset)
			before = &p;
		else if (!after && p.offset >= d.offset + d.bytes)
			after = &p;
	}
	row->push_back(before ? cint(s->trace->meta.ns_from_origin(before->ts_end)) : Cell());
	row->push_back(after ? cint(s->trace->meta.ns_from_origin(after->ts_begin)) : Cell());
}

} // namespace

void fill_processes(Cur *cur, Vtab *v)
{
	for (const auto &sub : v->t->index.traces()) {
		if (!sub->readable || sub->whole)
			continue; // a piece directory: counted with its base
		int64_t b = INT64_MAX, e = INT64_MIN;
		uint64_t streams = 0, packets = 0, bytes = 0;
		for (const auto &s : v->t->index.streams()) {
			if (&whole_of(*s->trace) != sub.get())
				continue;
			streams++;
			for (const PacketEntry &p : s->packets) {
				packets++;
				bytes += p.size;
				b = std::min(b, s->trace->meta.ns_from_origin(p.ts_begin));
				e = std::max(e, s->trace->meta.ns_from_origin(p.ts_end));
			}
		}
		std::vector<Cell> r;
		r.push_back(ctext(sub->hostname));
		r.push_back(sub->kernel ? Cell() : cint(sub->vpid));
		r.push_back(sub->kernel ? Cell() : ctext(sub->procname));
		r.push_back(ctext(sub->kernel ? "kernel" : "ust"));
		r.push_back(packets ? cint(b) : Cell());
		r.push_back(packets ? cint(e) : Cell());
		r.push_back(cint((int64_t)streams));
		r.push_back(cint((int64_t)packets));
		r.push_back(cint((int64_t)bytes));
		r.push_back(ctext(sub->dir));
		cur->rows.push_back(std::move(r));
	}
}

// Threads: owned lanes' from the index; shared lanes' and the kernel's
// from their records.  A kernel thread has a row per name it went by, in
// time order (a rename starts a row): its names come from the kernel's
// events that name threads (naming_fields), each of its events belongs to
// the name it last went by (its first name before any), and a row spans
// the first to the last of its events and namings.  Tid 0 (the idle
// tasks, one per CPU: swapper/N) keeps no name.
void fill_threads(Cur *cur, Vtab *v)
{
	ThreadRuns th;
	if (threads_from_index(v, th))
		threads_from_records(v, th);
	for (const auto &kv : th) {
		const SubTrace *sub = std::get<0>(kv.first);
		const int64_t tid = std::get<1>(kv.first);
		for (const ThreadRun &t : kv.second) {
			std::vector<Cell> r;
			r.push_back(ctext(sub->hostname));
			r.push_back(sub->kernel ? Cell() : cint(sub->vpid));
			r.push_back(cint(tid));
			r.push_back(sub->kernel ? Cell() : ctext(sub->procname));
			r.push_back(t.named                            ? ctext(t.name)
				    : !sub->kernel && tid == sub->vpid ? ctext(sub->procname)
								       : Cell());
			r.push_back(cint(t.b));
			r.push_back(cint(t.e));
			r.push_back(cint((int64_t)t.packets));
			cur->rows.push_back(std::move(r));
		}
	}
}

void fill_lost(Cur *cur, Vtab *v)
{
	TraceReader r;
	r.share_index(v->t->index);
	TraceMsg m;
	while (r.next(&m)) {
		if (m.kind == TraceMsgKind::Event)
			continue;
		std::vector<Cell> row;
		if (m.kind == TraceMsgKind::Damage) {
			const TraceDamage &d = *m.damage;
			note_damage(v->reg, damage_line(d));
			const StreamInfo *s = m.stream;
			const SubTrace *sub = s ? s->trace : nullptr;
			if (s) {
				row = {cint(m.begin_ns), cint(m.end_ns)};
			} else {
				damage_owner(v->t->index, d.file, &s, &sub);
				damage_span(&row, s, d);
			}
			lost_owner(&row, sub, s, d.offset, d.offset + d.bytes, d.file);
			row.push_back(ctext("damage"));
			// Packets missing from a stream file (its index names
			// them): how many, and their bytes.
			row.push_back(d.missing_packets ? cint((int64_t)d.missing_packets) : Cell());
			row.push_back(cint((int64_t)(d.bytes ? d.bytes : d.missing_bytes)));
			row.push_back(ctext("at byte " + std::to_string(d.offset) + ": " + d.why));
		} else {
			row = {cint(m.begin_ns), cint(m.end_ns)};
			const auto span = discard_span(*m.stream, m);
			lost_owner(&row, m.stream->trace, m.stream, span.first, span.second, m.stream->path);
			row.push_back(ctext(m.kind == TraceMsgKind::DiscardedEvents ? "events" : "packets"));
			row.push_back(cint((int64_t)m.count));
			row.push_back(Cell());
			row.push_back(Cell());
		}
		cur->rows.push_back(std::move(row));
	}
	v->reg->bytes += r.stats().bytes;
}

} // namespace query
} // namespace strata
