// read_event.cpp - see read_event.h.
#include "read_event.h"

#include <cinttypes>
#include <cstdio>

#include "read_progress.h"

namespace strata {
namespace rd {

TraceIdent NativeCtx::make_ident(const SubTrace &t)
{
	TraceIdent id;
	id.procname = t.meta.env_string("procname");
	const MetaEnvValue *v = t.meta.env_value("vpid");
	id.has_vpid = v && v->is_int;
	id.vpid = id.has_vpid ? v->i : -1;
	id.hostname = t.meta.env_string("hostname");
	id.domain = t.meta.env_string("domain");
	id.kernel = id.domain == "kernel";
	id.name = t.dir;
	return id;
}

FieldPlan FieldPlan::make(const TraceEvent &e)
{
	FieldPlan plan;
	if (e.trace().meta.record_format != STRATA_REC_COMPACT)
		return plan; // WIDE records align their fields: offsets vary
	uint64_t off = 0;
	for (const FieldInfo &f : e.cls->info.fields) {
		const unsigned b = f.elem_bits / 8;
		if ((b != 1 && b != 2 && b != 4 && b != 8) || f.elem_bits != b * 8)
			return plan;
		if (f.type == STRATA_FT_INTEGER || f.type == STRATA_FT_ENUM) {
			plan.ints.push_back(Int{f.name, static_cast<uint32_t>(off), static_cast<uint8_t>(b),
						f.is_signed});
			off += b;
		} else if (f.type == STRATA_FT_ARRAY) { // left out by for_each_field
			off += static_cast<uint64_t>(f.length) * b;
		} else {
			return plan;
		}
		if (off >= (1u << 20))
			return plan;
	}
	plan.fast = true;
	return plan;
}

TraceIdent BtCtx::make_ident(const bt_trace *t)
{
	TraceIdent id;
	env_string(t, "procname", &id.procname);
	id.has_vpid = env_int(t, "vpid", &id.vpid);
	if (!id.has_vpid)
		id.vpid = -1;
	env_string(t, "hostname", &id.hostname);
	env_string(t, "domain", &id.domain);
	id.kernel = id.domain == "kernel";
	const char *n = bt_trace_get_name(t);
	id.name = n ? n : "";
	return id;
}

BtStreamCtx::BtStreamCtx(const bt_stream_class *sc)
{
	const bt_field_class *ec = bt_stream_class_borrow_event_common_context_field_class_const(sc);
	ev_tid = member_index(ec, "vtid");
	if (ev_tid < 0)
		ev_tid = member_index(ec, "tid");
	ev_cpu = member_index(ec, "cpu_id");
	if (ev_cpu < 0)
		ev_cpu = member_index(ec, "cpu");
	const bt_field_class *pc = bt_stream_class_borrow_packet_context_field_class_const(sc);
	pkt_tid = member_index(pc, "vtid");
	pkt_cpu = member_index(pc, "cpu_id");
}

bool BtStreamCtx::tid(const bt_event *ev, int64_t *out) const
{
	if (ev_tid >= 0)
		return integer_value(at(bt_event_borrow_common_context_field_const(ev), ev_tid), out);
	if (pkt_tid < 0)
		return false;
	const bt_packet *p = bt_event_borrow_packet_const(ev);
	return p && integer_value(at(bt_packet_borrow_context_field_const(p), pkt_tid), out) && *out >= 0;
}

int64_t BtStreamCtx::cpu(const bt_event *ev) const
{
	int64_t v = 0;
	if (ev_cpu >= 0 && integer_value(at(bt_event_borrow_common_context_field_const(ev), ev_cpu), &v))
		return v;
	const bt_packet *p = bt_event_borrow_packet_const(ev);
	if (pkt_cpu >= 0 && p && integer_value(at(bt_packet_borrow_context_field_const(p), pkt_cpu), &v))
		return v;
	return -1;
}

Source::~Source() = default;

bool Source::open(const std::string &root)
{
	std::vector<std::string> dirs;
	std::string why;
	if (!find_ctf_traces(root, &dirs, &why)) {
		std::fprintf(stderr, "strata %s: %s\n", cmd_, why.c_str());
		return false;
	}
	return open_dirs(dirs, root);
}

bool Source::open(const std::vector<std::string> &roots)
{
	std::vector<std::string> dirs;
	std::string why;
	if (!find_trace_dirs(roots, &dirs, &why)) {
		std::fprintf(stderr, "strata %s: %s\n", cmd_, why.c_str());
		return false;
	}
	return open_dirs(dirs, roots_label(roots));
}

bool Source::open_dirs(const std::vector<std::string> &dirs, const std::string &root)
{
	dirs_ = dirs;
	root_ = root;
	native_ = use_native_reader(dirs_);
	return true;
}

// Strata's reader indexes every stream (packet headers only) when opened.
bool Source::open_native()
{
	if (opened_)
		return reader_ != nullptr;
	opened_ = true;
	reader_ = std::make_unique<TraceReader>();
	if (!reader_->open_dirs(dirs_, &why_)) {
		reader_.reset();
		return false;
	}
	return true;
}

bool Source::range(int64_t *begin, int64_t *end)
{
	if (!native_)
		return trace_range(dirs_, begin, end);
	if (!open_native())
		return false;
	bool any = false;
	*begin = INT64_MAX;
	*end = INT64_MIN;
	for (const auto &s : reader_->streams()) {
		if (s->packets.empty())
			continue;
		const TraceMeta &m = s->trace->meta;
		*begin = std::min(*begin, m.ns_from_origin(s->packets.front().ts_begin));
		*end = std::max(*end, m.ns_from_origin(s->packets.back().ts_end));
		any = true;
	}
	return any && *end >= *begin;
}

void Source::on_damage(const TraceDamage &d)
{
	damaged_++;
	if (quiet_)
		return;
	char skipped[48] = "";
	if (d.bytes)
		std::snprintf(skipped, sizeof skipped, " (%" PRIu64 " bytes skipped)", d.bytes);
	std::fprintf(stderr, "strata %s: damaged: %s at byte %" PRIu64 "%s: %s\n", cmd_, d.file.c_str(),
		     d.offset, skipped, d.why.c_str());
}

Loss Source::native_loss(NativeCtx &ctx, const TraceMsg &m)
{
	Loss l;
	l.trace = &ctx.ident(whole_of(*m.stream->trace));
	l.events = m.kind == TraceMsgKind::DiscardedEvents;
	l.known = true;
	l.count = m.count;
	l.times = true;
	l.begin = m.begin_ns;
	l.end = m.end_ns;
	l.stream = m.stream->instance;
	return l;
}

Loss Source::bt_loss(BtCtx &ctx, const bt_message *msg)
{
	Loss l;
	l.events = bt_message_get_type(msg) == BT_MESSAGE_TYPE_DISCARDED_EVENTS;
	const bool events = l.events;
	const bt_stream *stream = events ? bt_message_discarded_events_borrow_stream_const(msg)
					 : bt_message_discarded_packets_borrow_stream_const(msg);
	l.trace = &ctx.ident(bt_stream_borrow_trace_const(stream));
	l.stream = bt_stream_get_id(stream);
	l.known = events ? bt_message_discarded_events_get_count(msg, &l.count) ==
				   BT_PROPERTY_AVAILABILITY_AVAILABLE
			 : bt_message_discarded_packets_get_count(msg, &l.count) ==
				   BT_PROPERTY_AVAILABILITY_AVAILABLE;
	if (!l.known)
		l.count = 0;
	const bt_stream_class *sc = bt_stream_borrow_class_const(stream);
	const bool has_times = events ? bt_stream_class_discarded_events_have_default_clock_snapshots(sc)
				      : bt_stream_class_discarded_packets_have_default_clock_snapshots(sc);
	if (!has_times)
		return l;
	const bt_clock_snapshot *b =
		events ? bt_message_discarded_events_borrow_beginning_default_clock_snapshot_const(msg)
		       : bt_message_discarded_packets_borrow_beginning_default_clock_snapshot_const(msg);
	const bt_clock_snapshot *e =
		events ? bt_message_discarded_events_borrow_end_default_clock_snapshot_const(msg)
		       : bt_message_discarded_packets_borrow_end_default_clock_snapshot_const(msg);
	l.times = bt_clock_snapshot_get_ns_from_origin(b, &l.begin) ==
			  BT_CLOCK_SNAPSHOT_GET_NS_FROM_ORIGIN_STATUS_OK &&
		  bt_clock_snapshot_get_ns_from_origin(e, &l.end) ==
			  BT_CLOCK_SNAPSHOT_GET_NS_FROM_ORIGIN_STATUS_OK;
	return l;
}

bool native_after_read(const TraceReader &r, const char *cmd, const std::string &root, bool quiet,
		       std::string *warnings, std::string *why)
{
	size_t readable = 0;
	for (const auto &t : r.traces()) {
		readable += t->readable;
		if (!t->readable && !quiet)
			std::fprintf(stderr, "strata %s: cannot read %s: %s\n", cmd, t->dir.c_str(),
				     t->why.c_str());
	}
	if (!readable) {
		*why = "no sub-trace under '" + root + "' can be read";
		return false;
	}
	for (const TraceDamage &d : r.damages())
		if (d.why == "packet runs past the end of the file" || d.why == "truncated packet header") {
			*warnings += "a stream file ends inside a packet (a consumer daemon killed while "
				     "writing?): 'strata view --repair " +
				     root + "' cuts it back to its last whole packet for other readers\n";
			break;
		}
	const TraceReadStats &st = r.stats();
	if (st.damaged || st.unreadable_traces)
		*warnings += std::to_string(st.damaged) + " damaged span(s) skipped, " +
			     std::to_string(st.unreadable_traces) +
			     " unreadable sub-trace(s); every undamaged packet was read ('strata check " +
			     root + "' lists them)\n";
	return true;
}

bool native_skipped(const TraceReader &r, bool *none)
{
	const TraceReadStats &st = r.stats();
	*none = st.events == 0;
	return st.damaged || st.unreadable_traces;
}

void tell_none_read(const char *cmd, const std::string &root)
{
	std::fprintf(stderr,
		     "strata %s: not one event could be read under '%s': what it holds is damaged "
		     "('strata check %s' says where)\n",
		     cmd, root.c_str(), root.c_str());
}

bool Source::after_native_read(bool ok)
{
	std::string why;
	if (!native_after_read(*reader_, cmd_, root_, quiet_, &warnings_, &why) && ok) {
		why_ = why;
		return false;
	}
	return ok;
}

bool Source::finish()
{
	if (!warnings_.empty())
		std::fprintf(stderr, "strata %s: warning: %s", cmd_, warnings_.c_str());
	warnings_.clear();
	bool none = false;
	if (!native_ || !reader_ || !native_skipped(*reader_, &none))
		return true;
	if (none && !quiet_)
		tell_none_read(cmd_, root_);
	return false;
}

} // namespace rd
} // namespace strata
