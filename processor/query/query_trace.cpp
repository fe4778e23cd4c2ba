// query_trace.cpp - opening a trace for the `strata` tables (query_trace.h).
#include "query_trace.h"

#include <algorithm>

#include "json_writer.h"

namespace strata {
namespace query {
namespace {

// The offsets of ClassMap::off, as TraceEvent::for_each_field lays the
// fields out (WIDE: each aligned to its size, from a payload 8-aligned).
std::vector<int64_t> scalar_offsets(const EventInfo &info, bool wide)
{
	std::vector<int64_t> off;
	int64_t o = 0;
	bool fixed = true;
	for (const FieldInfo &f : info.fields) {
		const int64_t b = f.elem_bits / 8 < 8 ? f.elem_bits / 8 : 8;
		const bool scalar =
			f.type == STRATA_FT_INTEGER || f.type == STRATA_FT_ENUM || f.type == STRATA_FT_FLOAT;
		if (fixed && wide && b > 1 && (scalar || f.type == STRATA_FT_ARRAY))
			o = (o + b - 1) & ~(b - 1);
		off.push_back(fixed && scalar ? o : -1);
		if (scalar)
			o += b;
		else if (f.type == STRATA_FT_ARRAY)
			o += (int64_t)f.length * b;
		else
			fixed = false;
	}
	return off;
}

// Trace::stream_base: each stream's span ends past its last packet.
std::vector<int64_t> stream_bases(const TraceReader &index)
{
	std::vector<int64_t> base(index.streams().size(), 0);
	int64_t at = 1; // rowids from 1
	for (const auto &s : index.streams()) {
		base[s->index] = at;
		uint64_t end = 0;
		for (const PacketEntry &p : s->packets)
			end = std::max(end, p.offset + p.size);
		at += (int64_t)end + 1;
	}
	return base;
}

Sizes trace_sizes(const Trace &t)
{
	Sizes z;
	std::set<std::pair<const SubTrace *, int32_t>> threads;
	double events = 0, kernel = 0, shared = 0, packets = 0, lost = 1;
	int64_t t0 = INT64_MAX, t1 = INT64_MIN;
	for (const auto &s : t.index.streams()) {
		for (const PacketEntry &p : s->packets) {
			const double n = (double)(p.content > 88 ? p.content - 88 : 0) / kRecordBytes;
			events += n;
			kernel += s->trace->kernel ? n : 0;
			shared += s->shared ? n : 0;
			packets++;
			lost += p.discarded != 0;
			if (p.vtid >= 0)
				threads.insert({&whole_of(*s->trace), p.vtid});
			if (!s->trace->kernel)
				z.pid_records[s->trace->vpid] += n;
			if (p.vtid >= 0 && !s->shared)
				z.tid_records[p.vtid] += n;
			else
				z.unowned += n;
			const int64_t b = s->trace->meta.ns_from_origin(p.ts_begin);
			const int64_t e = s->trace->meta.ns_from_origin(p.ts_end);
			t0 = std::min(t0, b);
			t1 = std::max(t1, e);
			z.by_begin.emplace_back(b, n);
			z.by_end.emplace_back(e, n);
		}
	}
	for (auto *v : {&z.by_begin, &z.by_end}) {
		std::sort(v->begin(), v->end());
		double sum = 0;
		for (auto &x : *v)
			x.second = sum += x.second;
	}
	z.events = std::max(1.0, events);
	z.kernel_events = std::max(1.0, kernel);
	z.shared_events = shared;
	z.packets = std::max(1.0, packets);
	z.processes = std::max<double>(1, (double)t.index.traces().size());
	z.threads = std::max<double>(1, (double)threads.size());
	z.classes = std::max<double>(1, (double)t.typed.size());
	z.lost = lost;
	z.t0 = t0 <= t1 ? t0 : 0;
	z.t1 = t0 <= t1 ? t1 : 0;
	return z;
}

std::map<const SubTrace *, SubOrder> sub_orders(const TraceReader &index)
{
	std::map<const SubTrace *, SubOrder> out;
	for (const auto &s : index.streams()) {
		SubOrder &o = out[s->trace];
		o.kernel |= s->trace->kernel;
		o.lanes &= !s->trace->kernel && s->trace->meta.record_format == STRATA_REC_COMPACT;
		double bytes = 0;
		for (const PacketEntry &p : s->packets) {
			bytes += (double)p.content;
			if (s->shared || !o.lanes)
				continue;
			o.lanes = p.vtid >= 0; // an owned lane's packet names its thread
			o.tids.insert(p.vtid);
		}
		o.packets += (double)s->packets.size() + 1;
		o.bytes += bytes;
		if (s->shared)
			o.shared_bytes += bytes;
	}
	return out;
}

// The threads of the shared lanes of the sub-traces in `want` (their
// SubOrder::tids, shared_read set), from one read of those lanes alone.
void read_shared_tids(Trace *t, const std::set<const SubTrace *> &want)
{
	TraceReader r;
	r.share_index(t->index);
	r.set_stream_filter([&](const StreamInfo &s) { return s.shared && want.count(s.trace) != 0; });
	TraceMsg m;
	while (r.next(&m))
		if (m.kind == TraceMsgKind::Event)
			t->orders[&m.event->trace()].tids.insert(m.event->tid);
	for (const SubTrace *sub : want)
		t->orders[sub].shared_read = true;
}

// Trace::thread_ids (TypedTable::thread_ids: of the sub-traces `subs`,
// null: all).  Each pass copies the index and looks at every packet: with
// threads x packets past kThreadPassPackets the passes would cost more
// than SQLite's sorter, and the trace has no thread order.  Each pass
// also reads every shared lane whole (keeping its thread's records): with
// threads x the shared lanes' bytes past kSharedReads x the trace's bytes
// it has none either, known before the shared lanes are read (there are
// at least the owned lanes' threads, or one) and after.  4: the sorter
// took 5 times the passes' CPU a row (GROUP BY tid on bench/run.py's
// large trace: 4.1 against 20.3 M rows per CPU second).
constexpr double kThreadPassPackets = 1 << 24;
constexpr double kSharedReads = 4;

std::vector<int32_t> thread_ids(Trace *t, const std::vector<const SubTrace *> *subs)
{
	std::set<int32_t> tids;
	std::set<const SubTrace *> unread;
	double packets = 0, bytes = 0, shared = 0;
	for (const auto &[sub, o] : t->orders) {
		if (subs && std::find(subs->begin(), subs->end(), sub) == subs->end())
			continue;
		if (!o.lanes)
			return {};
		tids.insert(o.tids.begin(), o.tids.end());
		packets += o.packets;
		bytes += o.bytes;
		shared += o.shared_bytes;
		if (o.shared_bytes > 0 && !o.shared_read)
			unread.insert(sub);
	}
	if ((double)std::max<size_t>(tids.size(), 1) * shared > kSharedReads * bytes)
		return {};
	if (!unread.empty()) {
		read_shared_tids(t, unread);
		return thread_ids(t, subs);
	}
	if ((double)tids.size() * packets > kThreadPassPackets)
		return {};
	return std::vector<int32_t>(tids.begin(), tids.end());
}

// Trace::key_orders (TypedTable::key_orders: of the sub-traces `subs`):
// each pass copies the index, as thread_ids'.
bool key_orders(const std::map<const SubTrace *, SubOrder> &orders, const std::vector<const SubTrace *> *subs,
		double traces)
{
	double packets = 0;
	for (const auto &[sub, o] : orders) {
		if (subs && std::find(subs->begin(), subs->end(), sub) == subs->end())
			continue;
		if (o.kernel)
			return false;
		packets += o.packets;
	}
	return traces * packets <= kThreadPassPackets;
}

std::string valid_utf8(const std::string &s)
{
	if (utf8_well_formed(std::string_view(s.data(), s.size())))
		return s;
	std::string o;
	utf8_append_repaired(o, std::string_view(s.data(), s.size()));
	return o;
}

// Each column's ColPlan for a class (its table's columns all known).
std::vector<ColPlan> col_plans(const MetaEvent &me, const ClassMap &cm, size_t ncols)
{
	std::vector<ColPlan> plan(ncols);
	for (size_t f = 0; f < cm.col.size(); f++) {
		const FieldInfo &fi = me.info.fields[f];
		const unsigned b = fi.elem_bits / 8 < 8 ? fi.elem_bits / 8 : 8;
		for (int label = 0; label < 2; label++) {
			const int c = label ? cm.label[f] : cm.col[f];
			if (c < 0)
				continue;
			ColPlan &p = plan[(size_t)c];
			p.field = (int32_t)f;
			p.label = label;
			p.off = cm.off[f];
			p.bytes = (uint8_t)b;
			const bool integer = fi.type == STRATA_FT_INTEGER || fi.type == STRATA_FT_ENUM;
			if (p.off < 0)
				p.kind = ColPlan::Decode;
			else if (integer && !label && (b == 1 || b == 2 || b == 4 || b == 8))
				p.kind = fi.is_signed ? ColPlan::Int : ColPlan::Uint;
			else
				p.kind = ColPlan::Scalar;
		}
	}
	return plan;
}

void build_typed(Trace *t)
{
	for (const auto &sub : t->index.traces()) {
		if (!sub->readable)
			continue;
		auto cls = sub->meta.events.find(sub->meta.stream_id);
		if (cls == sub->meta.events.end())
			continue;
		for (const auto &kv : cls->second) {
			const MetaEvent &me = kv.second;
			auto it = t->typed_by_name.find(me.full_name);
			if (it == t->typed_by_name.end()) {
				it = t->typed_by_name.emplace(me.full_name, t->typed.size()).first;
				t->typed.push_back(TypedTable{me.full_name, {}, {}, false, false, {}});
			}
			TypedTable &tt = t->typed[it->second];
			if (tt.subs.empty() || tt.subs.back() != sub.get())
				tt.subs.push_back(sub.get());
			ClassMap cm;
			cm.table = it->second;
			for (const FieldInfo &f : me.info.fields) {
				std::string col = f.name;
				for (const char *c : kCommonCols)
					if (col == c)
						col = "f_" + col;
				auto find = [&](const std::string &n, bool label) {
					for (size_t k = 0; k < tt.cols.size(); k++)
						if (tt.cols[k].name == n)
							return (int)k;
					tt.cols.push_back(FieldCol{n, &f, label});
					return (int)tt.cols.size() - 1;
				};
				cm.col.push_back(find(col, false));
				cm.label.push_back(f.type == STRATA_FT_ENUM ? find(col + "_label", true)
									    : -1);
			}
			cm.off = scalar_offsets(me.info, sub->meta.record_format != STRATA_REC_COMPACT);
			cm.provider = valid_utf8(sub->kernel ? std::string("kernel") : me.info.provider);
			cm.name = valid_utf8(me.full_name);
			t->classes.emplace(&me, std::move(cm));
		}
	}
	for (auto &kv : t->classes)
		kv.second.plan = col_plans(*kv.first, kv.second, t->typed[kv.second.table].cols.size());
	for (const auto &sub : t->index.traces())
		t->sub_text[sub.get()] = SubText{valid_utf8(sub->hostname), valid_utf8(sub->procname)};
}

} // namespace

void note_damage(Registry *reg, const std::string &line)
{
	if (reg->told.insert(line).second)
		reg->untold.push_back(line);
}

std::shared_ptr<Trace> get_trace(Registry *reg, const std::string &path, std::string *why)
{
	auto it = reg->traces.find(path);
	if (it != reg->traces.end())
		if (auto t = it->second.lock())
			return t;
	auto t = std::make_shared<Trace>();
	t->path = path;
	// Several roots read as one trace: their paths joined by '\n'
	// (open_trace refuses a path holding one).
	std::vector<std::string> roots, dirs;
	for (size_t at = 0;;) {
		const size_t nl = path.find('\n', at);
		roots.push_back(path.substr(at, nl == std::string::npos ? nl : nl - at));
		if (nl == std::string::npos)
			break;
		at = nl + 1;
	}
	if (!find_trace_dirs(roots, &dirs, why) || !t->index.open_dirs(dirs, why))
		return nullptr;
	size_t readable = 0;
	for (const auto &sub : t->index.traces()) {
		readable += sub->readable;
		if (!sub->readable)
			note_damage(reg, "cannot read " + sub->dir + ": " + sub->why);
	}
	if (!readable) {
		*why = "no sub-trace under '" + roots_label(roots) + "' can be read";
		return nullptr;
	}
	build_typed(t.get());
	t->stream_base = stream_bases(t->index);
	t->sizes = trace_sizes(*t);
	t->orders = sub_orders(t->index);
	const double traces = (double)t->index.traces().size();
	t->key_orders = key_orders(t->orders, nullptr, traces);
	for (TypedTable &tt : t->typed)
		tt.key_orders = key_orders(t->orders, &tt.subs, traces);
	reg->traces[path] = t;
	return t;
}

const std::vector<int32_t> &pass_tids(const Vtab *v)
{
	Trace *t = v->t.get();
	if (v->kind == Kind::Typed) {
		TypedTable &tt = t->typed[v->typed];
		if (!tt.tids_made) {
			tt.thread_ids = thread_ids(t, &tt.subs);
			tt.tids_made = true;
		}
		return tt.thread_ids;
	}
	if (!t->tids_made) {
		t->thread_ids = thread_ids(t, nullptr);
		t->tids_made = true;
	}
	return t->thread_ids;
}

} // namespace query
} // namespace strata
