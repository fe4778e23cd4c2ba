/*
 * read_event.h - one event interface over the CLI's two trace readers, so
 * that `strata analyze` and `strata export` have one logic path whichever
 * reads: Strata's own reader (processor/ctf/trace_reader.h) for the
 * traces Strata wrote, libbabeltrace2 (view_graph.h) for the others, or for
 * all when STRATA_READER=babeltrace2 (the agreement tests compare the two).
 *
 * A command writes its handler once, as templates over the event type:
 *
 *   struct H {
 *     template <class E> bool event(const E &ev);   // false: stop reading
 *     bool loss(const rd::Loss &l);                  // discarded events/packets
 *   };
 *   rd::Source src("analyze");
 *   if (!src.open(dir)) return 1;                    // the reason is printed
 *   bool ok = src.read(h);
 *   const bool whole = src.finish();                 // warnings; false: damage skipped
 *
 * and E is NativeEvent or BtEvent, with the same members:
 *
 *   class_key()      the event class, a key stable for the read (caches)
 *   name()           "provider:event" (kernel events: "sched_switch")
 *   trace_key(), trace()   the sub-trace and its identity (TraceIdent)
 *   stream_key()     a key of fewer look-ups than trace_key(): its stream
 *                    (Strata's reader) or its sub-trace; one key, one sub-trace
 *   stream_index()   Strata's reader: the stream's place in the reader's
 *                    streams (a slot per stream); babeltrace2: kNoStreamIndex
 *   timed(), ns()    the time, ns from the clock's origin
 *   tid(&t), cpu()   the thread (false: none known), the CPU (-1: none)
 *   slot(name)       a payload field by name (FieldSlot; resolved once per
 *                    class by SlotCache), then i64/u64/str/count/elem_u64
 *   for_each_field(fn)  the top-level integers, reals and strings (Field),
 *                    a sequence's length as the member babeltrace2 shows
 *
 * Field values follow bt_fields.h: an integer of either signedness as
 * int64/uint64 (enumerations are integers), any other type reads 0 or "".
 *
 * Damage (Strata's reader only): each damaged span is named on stderr as it
 * is met ("strata CMD: damaged: FILE at byte N ...") and counted; finish()
 * prints the warning with the counts and returns false, for the command's
 * exit status: 1 once everything readable was written, as `strata check`.  A tree of which no sub-trace can be
 * read is a failure (read() false, why()).  Single-threaded.
 */
#ifndef STRATA_CLI_READ_EVENT_H
#define STRATA_CLI_READ_EVENT_H

#include <babeltrace2/babeltrace.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bt_fields.h"
#include "strata_abi.h"
#include "trace_reader.h"
#include "view_graph.h"

namespace strata {
namespace rd {

// A sub-trace as the commands know it: its env, as either reader gives it.
struct TraceIdent {
	std::string procname; // "" when the env has none
	bool has_vpid = false;
	int64_t vpid = -1;
	std::string hostname, domain;
	bool kernel = false; // domain "kernel"
	std::string name;    // babeltrace2's trace name, or the directory
};

// A discarded-events or discarded-packets message.
struct Loss {
	const TraceIdent *trace = nullptr;
	bool events = true; // else packets
	bool known = true;  // the count is known
	uint64_t count = 0;
	bool times = false; // begin and end are known
	int64_t begin = 0, end = 0;
	uint64_t stream = 0; // the stream's instance id
};

// A top-level payload field, for commands that list them all.
struct Field {
	enum Kind : uint8_t { Int, Uint, Real, Str } kind = Int;
	std::string_view name = "";
	int64_t i = 0;
	uint64_t u = 0;
	double d = 0;
	std::string_view s;
};

// A payload field of one event class, resolved by name once.  index: the
// reader's own (-1: no such field); the rest is Strata's reader's: the
// byte offset from the payload when every field before it has a fixed
// size (COMPACT records are packed), else -1.
struct FieldSlot {
	int32_t index = -1;
	int32_t off = -1;
	uint8_t type = 0, bytes = 0;
	bool is_signed = false;
	// A SEQUENCE at a fixed offset (COMPACT), of elements of 1, 2, 4 or 8
	// bytes: where they begin from the payload, its 4-byte length just
	// before (read without decoding the record); else -1.
	int32_t elems = -1;
};

// A payload integer at a fixed offset of a COMPACT record (a FieldSlot
// with off >= 0 of 1, 2, 4 or 8 bytes), read by NativeEvent::fixed() with
// one 8-byte load and a mask (or two shifts), no switch on its size: Strata's reader
// leaves kTraceEventSlack readable bytes past every packet's content
// (trace_reader.h).  ok false (any other field, babeltrace2's slots, a
// big-endian host): read it with i64/u64.  The value is load_int()'s.
struct FixedInt {
	uint32_t off = 0;
	uint8_t shift = 0; // 64 - 8 * bytes (signed: sign-extended by shifts)
	uint64_t mask = 0; // the integer's bytes (unsigned)
	bool is_signed = false;
	bool ok = false;
	// An unsigned integer of `bytes` bytes (read whole by fixed_as()).
	bool plain(int bytes) const { return ok && !is_signed && shift == 64 - 8 * bytes; }
	static FixedInt of(const FieldSlot &s)
	{
		FixedInt f;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
		if (s.off >= 0 && (s.type == STRATA_FT_INTEGER || s.type == STRATA_FT_ENUM) &&
		    (s.bytes == 1 || s.bytes == 2 || s.bytes == 4 || s.bytes == 8)) {
			f.off = static_cast<uint32_t>(s.off);
			f.shift = static_cast<uint8_t>(64 - 8 * s.bytes);
			f.mask = ~uint64_t{0} >> f.shift;
			f.is_signed = s.is_signed;
			f.ok = true;
		}
#endif
		return f;
	}
};

// The slots of one event class, by field name.  Keep one per event class
// (class_key()); `name` must be a string literal (compared by address).
struct SlotCache {
	mutable std::vector<std::pair<const char *, FieldSlot>> slots;

	// Inlined: the look-up is a compare or two per field read, the call
	// was more.
	template <class E>
	__attribute__((always_inline)) const FieldSlot &get(const E &ev, const char *name) const
	{
		if (__builtin_expect(!slots.empty() && slots[0].first == name, 1))
			return slots[0].second;
		return get_slow(ev, name);
	}
	template <class E> const FieldSlot &get_slow(const E &ev, const char *name) const
	{
		for (const auto &p : slots)
			if (p.first == name)
				return p.second;
		slots.emplace_back(name, ev.slot(name));
		return slots.back().second;
	}
	template <class E> int64_t i64(const E &ev, const char *name) const { return ev.i64(get(ev, name)); }
	template <class E> uint64_t u64(const E &ev, const char *name) const { return ev.u64(get(ev, name)); }
	template <class E> std::string_view str(const E &ev, const char *name) const
	{
		return ev.str(get(ev, name));
	}
};

// stream_index() of an event whose reader numbers no streams (babeltrace2).
constexpr uint32_t kNoStreamIndex = UINT32_MAX;

// ---- Strata's reader ---------------------------------------------------------

// How for_each_field reads an event class's fields when they are all
// integers of fixed offsets (COMPACT records are packed: an integer's or
// an array's offset is the sum of the sizes before it): each integer
// loaded at its offset, no FieldValue decoded.  fast false: any other
// class (strings, sequences, reals, aligned WIDE records) is decoded.
struct FieldPlan {
	struct Int {
		std::string_view name;
		uint32_t off = 0;
		uint8_t bytes = 0;
		bool is_signed = false;
	};
	bool fast = false;
	std::vector<Int> ints;
	static FieldPlan make(const TraceEvent &e);
};

// What NativeEvent keeps across events: identities and decoded fields.
struct NativeCtx {
	std::unordered_map<const SubTrace *, TraceIdent> traces;
	const SubTrace *last_trace = nullptr;
	const TraceIdent *last_ident = nullptr;
	std::vector<FieldValue> values; // the fields of the event decoded last
	// Whose: the reader's event (reused for each record of its stream),
	// and which record (its packet's index entry, unique to a packet in
	// a pass, and its payload's offset in that packet): nothing counted
	// per event.
	const TraceEvent *decoded = nullptr;
	const PacketEntry *decoded_packet = nullptr;
	uint64_t decoded_payload = 0;
	std::unordered_map<const FieldInfo *, std::string> length_names; // sequences' "_NAME_length"
	std::unordered_map<const MetaEvent *, FieldPlan> plans;          // by event class
	const MetaEvent *last_plan_cls = nullptr;
	const FieldPlan *last_plan = nullptr;

	const FieldPlan &plan(const TraceEvent &e)
	{
		if (e.cls == last_plan_cls)
			return *last_plan;
		auto it = plans.find(e.cls);
		if (it == plans.end())
			it = plans.emplace(e.cls, FieldPlan::make(e)).first;
		last_plan_cls = e.cls;
		return *(last_plan = &it->second);
	}

	const TraceIdent &ident(const SubTrace &t)
	{
		if (&t == last_trace)
			return *last_ident;
		auto it = traces.find(&t);
		if (it == traces.end())
			it = traces.emplace(&t, make_ident(t)).first;
		last_trace = &t;
		return *(last_ident = &it->second);
	}
	static TraceIdent make_ident(const SubTrace &t);
	const std::string &length_name(const FieldInfo &f)
	{
		auto it = length_names.find(&f);
		if (it == length_names.end())
			it = length_names.emplace(&f, "_" + f.name + "_length").first;
		return it->second;
	}
};

class NativeEvent {
public:
	NativeEvent(const TraceEvent &e, NativeCtx &ctx) : e_(e), ctx_(ctx) {}

	const void *class_key() const { return e_.cls; }
	const char *name() const { return e_.cls->full_name.c_str(); }
	const void *trace_key() const { return &whole_of(e_.trace()); }
	const void *stream_key() const { return e_.stream; }
	uint32_t stream_index() const { return e_.stream->index; }
	const TraceIdent &trace() const { return ctx_.ident(whole_of(e_.trace())); }
	bool timed() const { return true; }
	int64_t ns() const { return e_.ns; }
	bool tid(int64_t *t) const
	{
		*t = e_.tid;
		return e_.tid >= 0 || e_.trace().kernel;
	}
	int64_t cpu() const { return e_.cpu; }

	FieldSlot slot(const char *name) const
	{
		FieldSlot s;
		const std::vector<FieldInfo> &fs = e_.cls->info.fields;
		const bool packed = e_.trace().meta.record_format == STRATA_REC_COMPACT;
		int32_t off = 0;
		for (size_t k = 0; k < fs.size(); k++) {
			const FieldInfo &f = fs[k];
			if (f.name == name) {
				s.index = (int32_t)k;
				s.type = f.type;
				s.is_signed = f.is_signed;
				s.bytes = (uint8_t)(f.elem_bits / 8 < 8 ? f.elem_bits / 8 : 8);
				s.off = packed && off >= 0 &&
							(f.type == STRATA_FT_INTEGER ||
							 f.type == STRATA_FT_ENUM)
						? off
						: -1;
				if (packed && off >= 0 && f.type == STRATA_FT_SEQUENCE &&
				    (f.elem_bits == 8 || f.elem_bits == 16 || f.elem_bits == 32 ||
				     f.elem_bits == 64))
					s.elems = off + 4;
				return s;
			}
			const uint32_t b = f.elem_bits / 8 < 8 ? f.elem_bits / 8 : 8;
			if (f.type == STRATA_FT_INTEGER || f.type == STRATA_FT_ENUM ||
			    f.type == STRATA_FT_FLOAT)
				off = off >= 0 ? off + (int32_t)b : -1;
			else if (f.type == STRATA_FT_ARRAY && (uint64_t)f.length * b < (1u << 20))
				off = off >= 0 ? off + (int32_t)(f.length * b) : -1;
			else
				off = -1;
		}
		return s;
	}
	int64_t i64(const FieldSlot &s) const
	{
		if (s.off >= 0)
			return load_int(e_.pkt + e_.payload + s.off, s.bytes, s.is_signed);
		const FieldValue *v = value(s);
		return v && (s.type == STRATA_FT_INTEGER || s.type == STRATA_FT_ENUM) ? v->i : 0;
	}
	uint64_t u64(const FieldSlot &s) const { return (uint64_t)i64(s); }
	// A FixedInt with ok true (see there).
	static constexpr bool kFixed = true;
	int64_t fixed(const FixedInt &f) const
	{
		uint64_t v;
		memcpy(&v, e_.pkt + e_.payload + f.off, 8);
		if (f.is_signed)
			return static_cast<int64_t>(v << f.shift) >> f.shift;
		return static_cast<int64_t>(v & f.mask);
	}
	// The same for an unsigned FixedInt of T's size, read as T.
	template <class T> T fixed_as(const FixedInt &f) const
	{
		T v;
		memcpy(&v, e_.pkt + e_.payload + f.off, sizeof v);
		return v;
	}
	std::string_view str(const FieldSlot &s) const
	{
		const FieldValue *v = s.type == STRATA_FT_STRING ? value(s) : nullptr;
		return v ? std::string_view(v->str, v->len) : std::string_view();
	}
	// An array's or sequence's length and elements (0 for any other field).
	uint32_t count(const FieldSlot &s) const
	{
		if (s.elems >= 0) {
			uint32_t n;
			memcpy(&n, e_.pkt + e_.payload + s.elems - 4, 4);
			return n;
		}
		const FieldValue *v =
			s.type == STRATA_FT_ARRAY || s.type == STRATA_FT_SEQUENCE ? value(s) : nullptr;
		return v ? v->count : 0;
	}
	uint64_t elem_u64(const FieldSlot &s, uint32_t k) const
	{
		if (s.elems >= 0)
			return (uint64_t)load_int(e_.pkt + e_.payload + s.elems + (size_t)k * s.bytes,
						  s.bytes, s.is_signed);
		const FieldValue *v = value(s);
		return s.is_signed ? (uint64_t)v->elem_i(k) : v->elem_u(k);
	}

	template <class Fn> void for_each_field(Fn &&fn) const
	{
		const FieldPlan &plan = ctx_.plan(e_);
		if (plan.fast) {
			const uint8_t *const base = e_.pkt + e_.payload;
			for (const FieldPlan::Int &f : plan.ints) {
				Field x;
				x.name = f.name;
				const int64_t v = load_int(base + f.off, f.bytes, f.is_signed);
				if (f.is_signed) {
					x.kind = Field::Int;
					x.i = v;
				} else {
					x.kind = Field::Uint;
					x.u = static_cast<uint64_t>(v);
				}
				fn(static_cast<const Field &>(x));
			}
			return;
		}
		e_.for_each_field([&](const FieldValue &v) {
			Field f;
			f.name = v.info->name;
			switch (v.info->type) {
			case STRATA_FT_INTEGER:
			case STRATA_FT_ENUM:
				if (v.info->is_signed) {
					f.kind = Field::Int;
					f.i = v.i;
				} else {
					f.kind = Field::Uint;
					f.u = v.u;
				}
				break;
			case STRATA_FT_FLOAT:
				f.kind = Field::Real;
				f.d = v.d;
				break;
			case STRATA_FT_STRING:
				f.kind = Field::Str;
				f.s = std::string_view(v.str, v.len);
				break;
			case STRATA_FT_SEQUENCE: // its length is a member of its own in CTF
				f.kind = Field::Uint;
				f.name = ctx_.length_name(*v.info);
				f.u = v.count;
				break;
			default:
				return; // arrays: left out
			}
			fn(static_cast<const Field &>(f));
		});
	}

private:
	const TraceEvent &e_;
	NativeCtx &ctx_;

	const FieldValue *value(const FieldSlot &s) const
	{
		if (s.index < 0)
			return nullptr;
		if (ctx_.decoded != &e_ || ctx_.decoded_packet != e_.packet ||
		    ctx_.decoded_payload != e_.payload) {
			e_.decode(&ctx_.values);
			ctx_.decoded = &e_;
			ctx_.decoded_packet = e_.packet;
			ctx_.decoded_payload = e_.payload;
		}
		return (size_t)s.index < ctx_.values.size() ? &ctx_.values[(size_t)s.index] : nullptr;
	}
};

// ---- babeltrace2 ---------------------------------------------------------------

// Where a stream class keeps the thread and the CPU: the index of `vtid`
// (or `tid`) and `cpu_id` (or `cpu`) in the event common context, else of
// `vtid` and `cpu_id` in the packet context (a lane owned by one thread);
// -1 absent.  The rule is bt_fields.h's event_tid(), resolved once per
// stream class.
struct BtStreamCtx {
	int64_t ev_tid = -1, ev_cpu = -1, pkt_tid = -1, pkt_cpu = -1;
	explicit BtStreamCtx(const bt_stream_class *sc);
	static const bt_field *at(const bt_field *st, int64_t i)
	{
		return st && i >= 0 ? bt_field_structure_borrow_member_field_by_index_const(
					      st, static_cast<uint64_t>(i))
				    : nullptr;
	}
	bool tid(const bt_event *ev, int64_t *out) const;
	int64_t cpu(const bt_event *ev) const;
};

struct BtCtx {
	std::unordered_map<const bt_trace *, TraceIdent> traces;
	const bt_trace *last_trace = nullptr;
	const TraceIdent *last_ident = nullptr;
	std::unordered_map<const bt_stream_class *, BtStreamCtx> streams;
	const bt_stream_class *last_sc = nullptr;
	const BtStreamCtx *last_ctx = nullptr;

	const TraceIdent &ident(const bt_trace *t)
	{
		if (t == last_trace)
			return *last_ident;
		auto it = traces.find(t);
		if (it == traces.end())
			it = traces.emplace(t, make_ident(t)).first;
		last_trace = t;
		return *(last_ident = &it->second);
	}
	static TraceIdent make_ident(const bt_trace *t);
	const BtStreamCtx &stream(const bt_stream_class *sc)
	{
		if (sc != last_sc) {
			last_sc = sc;
			last_ctx = &streams.emplace(sc, BtStreamCtx(sc)).first->second;
		}
		return *last_ctx;
	}
};

class BtEvent {
public:
	BtEvent(const bt_message *msg, BtCtx &ctx)
	    : msg_(msg), ev_(bt_message_event_borrow_event_const(msg)), ctx_(ctx),
	      pl_(bt_event_borrow_payload_field_const(ev_))
	{
		const bt_clock_snapshot *cs =
			bt_message_event_borrow_stream_class_default_clock_class_const(msg)
				? bt_message_event_borrow_default_clock_snapshot_const(msg)
				: nullptr;
		if (cs) {
			timed_ = bt_clock_snapshot_get_ns_from_origin(cs, &ns_) ==
				 BT_CLOCK_SNAPSHOT_GET_NS_FROM_ORIGIN_STATUS_OK;
			if (!timed_) // out of range: the raw value orders as well
				ns_ = static_cast<int64_t>(bt_clock_snapshot_get_value(cs));
		}
	}

	const void *class_key() const { return bt_event_borrow_class_const(ev_); }
	const char *name() const
	{
		const char *n = bt_event_class_get_name(bt_event_borrow_class_const(ev_));
		return n ? n : "";
	}
	const void *trace_key() const
	{
		return bt_stream_borrow_trace_const(bt_event_borrow_stream_const(ev_));
	}
	const TraceIdent &trace() const
	{
		return ctx_.ident(bt_stream_borrow_trace_const(bt_event_borrow_stream_const(ev_)));
	}
	const void *stream_key() const { return trace_key(); } // a bt_stream's life is not the read's
	static uint32_t stream_index() { return kNoStreamIndex; }
	bool timed() const { return timed_; }
	int64_t ns() const { return ns_; }
	bool tid(int64_t *t) const { return sctx().tid(ev_, t); }
	int64_t cpu() const { return sctx().cpu(ev_); }

	FieldSlot slot(const char *name) const
	{
		FieldSlot s;
		s.index =
			pl_ ? static_cast<int32_t>(member_index(bt_field_borrow_class_const(pl_), name)) : -1;
		return s;
	}
	int64_t i64(const FieldSlot &s) const { return as_i64(field(s)); }
	uint64_t u64(const FieldSlot &s) const { return as_u64(field(s)); }
	// No fixed offsets here: FixedInt::of() is never ok for these slots.
	static constexpr bool kFixed = false;
	int64_t fixed(const FixedInt &) const { return 0; }
	template <class T> T fixed_as(const FixedInt &) const { return 0; }
	std::string_view str(const FieldSlot &s) const
	{
		const bt_field *f = field(s);
		if (!f || bt_field_get_class_type(f) != BT_FIELD_CLASS_TYPE_STRING)
			return {};
		return std::string_view(bt_field_string_get_value(f), bt_field_string_get_length(f));
	}
	uint32_t count(const FieldSlot &s) const
	{
		const bt_field *f = field(s);
		if (!f || !bt_field_class_type_is(bt_field_get_class_type(f), BT_FIELD_CLASS_TYPE_ARRAY))
			return 0;
		return static_cast<uint32_t>(bt_field_array_get_length(f));
	}
	uint64_t elem_u64(const FieldSlot &s, uint32_t k) const
	{
		return as_u64(bt_field_array_borrow_element_field_by_index_const(field(s), k));
	}

	template <class Fn> void for_each_field(Fn &&fn) const
	{
		if (!pl_ || bt_field_get_class_type(pl_) != BT_FIELD_CLASS_TYPE_STRUCTURE)
			return;
		const bt_field_class *fc = bt_field_borrow_class_const(pl_);
		const uint64_t n = bt_field_class_structure_get_member_count(fc);
		for (uint64_t i = 0; i < n; i++) {
			const bt_field *f = bt_field_structure_borrow_member_field_by_index_const(pl_, i);
			const bt_field_class_type t = bt_field_get_class_type(f);
			Field a;
			a.name = bt_field_class_structure_member_get_name(
				bt_field_class_structure_borrow_member_by_index_const(fc, i));
			if (bt_field_class_type_is(t, BT_FIELD_CLASS_TYPE_SIGNED_INTEGER)) {
				a.kind = Field::Int;
				a.i = bt_field_integer_signed_get_value(f);
			} else if (bt_field_class_type_is(t, BT_FIELD_CLASS_TYPE_UNSIGNED_INTEGER)) {
				a.kind = Field::Uint;
				a.u = bt_field_integer_unsigned_get_value(f);
			} else if (t == BT_FIELD_CLASS_TYPE_STRING) {
				a.kind = Field::Str;
				a.s = std::string_view(bt_field_string_get_value(f),
						       bt_field_string_get_length(f));
			} else if (t == BT_FIELD_CLASS_TYPE_DOUBLE_PRECISION_REAL) {
				a.kind = Field::Real;
				a.d = bt_field_real_double_precision_get_value(f);
			} else if (t == BT_FIELD_CLASS_TYPE_SINGLE_PRECISION_REAL) {
				a.kind = Field::Real;
				a.d = bt_field_real_single_precision_get_value(f);
			} else if (t == BT_FIELD_CLASS_TYPE_BOOL) {
				a.kind = Field::Uint;
				a.u = bt_field_bool_get_value(f);
			} else {
				continue; // arrays, structures
			}
			fn(static_cast<const Field &>(a));
		}
	}

private:
	const bt_message *msg_;
	const bt_event *ev_;
	BtCtx &ctx_;
	const bt_field *pl_;
	bool timed_ = false;
	int64_t ns_ = 0;

	const BtStreamCtx &sctx() const
	{
		return ctx_.stream(bt_stream_borrow_class_const(bt_event_borrow_stream_const(ev_)));
	}
	const bt_field *field(const FieldSlot &s) const
	{
		return s.index < 0 ? nullptr
				   : bt_field_structure_borrow_member_field_by_index_const(
					     pl_, static_cast<uint64_t>(s.index));
	}
};

// ---- after Strata's reader ----------------------------------------------------

// After `r` read the sub-traces under `root`: each unreadable one named on
// stderr (unless quiet), what the damage means appended to *warnings.
// False (*why) when no sub-trace could be read at all.
bool native_after_read(const TraceReader &r, const char *cmd, const std::string &root, bool quiet,
		       std::string *warnings, std::string *why);
// Whether the read skipped damage (damaged spans, unreadable sub-traces):
// a reader's exit status is then 1, after everything readable was written.
// *none: not one event could be read, which tell_none_read() says (after
// the warnings) in words.
bool native_skipped(const TraceReader &r, bool *none);
void tell_none_read(const char *cmd, const std::string &root);

// ---- the source ----------------------------------------------------------------

// The sub-traces under a directory, read by the reader that fits them.
class Source {
public:
	// cmd: the command's name in messages ("analyze", "export").
	explicit Source(const char *cmd) : cmd_(cmd) {}
	~Source();
	Source(const Source &) = delete;
	Source &operator=(const Source &) = delete;

	// The sub-traces at or under `root` (false, the reason printed, when
	// there is none or root is no directory); or these trace directories.
	bool open(const std::string &root);
	// Several roots read as one trace (find_trace_dirs); messages name
	// them by roots_label().
	bool open(const std::vector<std::string> &roots);
	bool open_dirs(const std::vector<std::string> &dirs, const std::string &root);
	const std::vector<std::string> &dirs() const { return dirs_; }
	bool native() const { return native_; }
	// Quiet: damage is not named (another pass over the same traces does).
	void set_quiet(bool q) { quiet_ = q; }

	// The time range of the traces (the packets' bounds, read from their
	// indexes), in ns from the clock's origin; false if unknown.
	bool range(int64_t *begin, int64_t *end);

	// Every message, merged by time, to h (see the top of this file).  True
	// when the end (or a stop by h) was reached; false when the traces
	// cannot be read (why()).  Once per Source.
	template <class H> bool read(H &h);

	// After read(): the warnings (stderr).  True when the read skipped
	// nothing; false when it skipped damage (damaged spans, unreadable
	// sub-traces), which the caller's exit status says (1, as `strata
	// check`), and then a read that got not one event says so in words.
	bool finish();
	const std::string &why() const { return why_; }
	uint64_t damaged() const { return damaged_; }

private:
	const char *cmd_;
	std::string root_;
	std::vector<std::string> dirs_;
	bool native_ = false;
	std::unique_ptr<TraceReader> reader_; // native: opened by open()
	std::string why_, warnings_;
	uint64_t damaged_ = 0;
	bool opened_ = false;
	bool quiet_ = false;

	bool open_native();
	void on_damage(const TraceDamage &d);
	Loss native_loss(NativeCtx &ctx, const TraceMsg &m);
	static Loss bt_loss(BtCtx &ctx, const bt_message *msg);
	bool after_native_read(bool ok);
};

template <class H> bool Source::read(H &h)
{
	if (native_) {
		if (!open_native())
			return false;
		NativeCtx ctx;
		const bool ok = reader_->read_each([&](const TraceMsg &m) {
			if (__builtin_expect(m.kind == TraceMsgKind::Event, 1)) {
				const NativeEvent e(*m.event, ctx);
				return h.event(e);
			}
			switch (m.kind) {
			case TraceMsgKind::Event:
				break;
			case TraceMsgKind::DiscardedEvents:
			case TraceMsgKind::DiscardedPackets:
				return h.loss(native_loss(ctx, m));
			case TraceMsgKind::Damage:
				on_damage(*m.damage);
				return true;
			}
			return true;
		});
		return after_native_read(ok);
	}
	BtCtx ctx;
	return read_ctf_trace_dirs(
		dirs_,
		[&](const bt_message *m) {
			switch (bt_message_get_type(m)) {
			case BT_MESSAGE_TYPE_EVENT: {
				const BtEvent e(m, ctx);
				return h.event(e);
			}
			case BT_MESSAGE_TYPE_DISCARDED_EVENTS:
			case BT_MESSAGE_TYPE_DISCARDED_PACKETS:
				return h.loss(bt_loss(ctx, m));
			default:
				return true;
			}
		},
		&why_, &warnings_);
}

} // namespace rd
} // namespace strata
#endif
