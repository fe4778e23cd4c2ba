/*
 * registry.cpp - registered tracepoints, event ids, enablement rules and
 * the encoding of event descriptors into a buffer's descriptor table.
 *
 * Contract: everything here runs under the control lock (rt_internal.h).
 * Roles: module constructors/destructors (register/unregister, may
 * allocate), the control plane (rules, slot open/close: AS-safe, so they
 * only walk what register built), application threads (never read the
 * registry: they only load their tracepoint's `state`, which this file
 * writes with release stores).
 *
 * Why no RCU for unregister (dlclose): the fast path never follows a
 * registry pointer, it gets its tracepoint from the call site, which is in
 * the module being unloaded and so cannot run during or after its own
 * destructor.  The only other reader of the registry is the control plane,
 * which holds the same lock as unregister.  Unregister disarms (state = 0)
 * before unlinking so no later rule change can re-arm a removed tracepoint.
 *
 * Field filters (docs/filters.md).  Roles: the control plane compiles each
 * rule's filter when rules are set and publishes, per slot, the programs
 * and a mask of filtering rules per event id; application threads (and
 * signal handlers interrupting them) read both in strata_filter_pass.  The
 * publication is a per-slot seqlock: the control plane (one writer, under
 * the control lock) makes `seq` odd, stores program words and masks with
 * relaxed atomic stores, makes `seq` even again; a reader copies what it
 * needs with relaxed atomic loads, evaluates its private copy and keeps the
 * answer only if `seq` was even and unchanged around the copy.  A reader
 * that interrupted the writer (signal handler on the writer's thread) or
 * keeps losing the race drops the event after a few tries, counted as
 * discarded in its lane: it never waits.
 * The evaluator bounds-checks everything, so even a torn copy cannot make
 * it read outside the copy, the event's descriptor or its arguments.
 */
#include <errno.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "desc_rules.h"
#include "filter.h"
#include "probe_internal.h"
#include "rt_internal.h"

namespace strata {
namespace {

struct Entry {
	strata_tracepoint *tp;
	uint32_t id;
	bool valid;         // magic, version and description checked
	uint16_t described; // bit s: descriptor written into slot s's table
};

struct Module {
	strata_tracepoint *const *start;
	Module *next;
	size_t n;
	Entry entries[1]; // n entries (allocated with the module)
};

struct SlotRules {
	size_t n;
	strata_rule rules[STRATA_MAX_RULES];
	FilterProgram progs[STRATA_MAX_RULES]; // compiled filters (control plane's copy)
	bool prog_ok[STRATA_MAX_RULES];        // false: the filter did not compile
};

constexpr size_t kProgWords = sizeof(FilterProgram) / 8;
constexpr size_t kOpsWord = offsetof(FilterProgram, ops) / 8;
constexpr size_t kPoolWord = offsetof(FilterProgram, pool) / 8;
static_assert(offsetof(FilterProgram, ops) % 8 == 0 && offsetof(FilterProgram, pool) % 8 == 0,
	      "program parts are word-aligned");

// What readers of a slot's filters see (see the contract above).
struct SlotFilters {
	std::atomic<uint32_t> seq;                    // odd while the control plane rewrites
	uint64_t words[STRATA_MAX_RULES][kProgWords]; // FilterProgram per rule, atomic words
	std::atomic<uint32_t> mask[kMaxEventId + 1];  // per event id: rules whose filter applies
};

Module *g_modules;                   // under the control lock
std::atomic<uint32_t> g_next_id{0};  // ids in registration order, never reused
SlotRules g_rules[STRATA_MAX_SLOTS]; // under the control lock
SlotFilters g_filters[STRATA_MAX_SLOTS];
unsigned g_filter_write_depth[STRATA_MAX_SLOTS]; // under the control lock

// Seqlock write side (control plane only, nestable).
void filters_write_begin(unsigned slot)
{
	if (g_filter_write_depth[slot]++)
		return;
	SlotFilters &f = g_filters[slot];
	// Relaxed store then release fence: the odd value is ordered before the
	// data stores that follow; pairs with the reader's acquire fence.
	f.seq.store(f.seq.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
	std::atomic_thread_fence(std::memory_order_release);
}

void filters_write_end(unsigned slot)
{
	if (--g_filter_write_depth[slot])
		return;
	SlotFilters &f = g_filters[slot];
	// Release: the data stores are complete before the even value; pairs
	// with the reader's first (acquire) load of seq.
	f.seq.store(f.seq.load(std::memory_order_relaxed) + 1, std::memory_order_release);
}

void publish_program(unsigned slot, size_t rule, const FilterProgram &p)
{
	uint64_t w[kProgWords];
	memcpy(w, &p, sizeof w);
	for (size_t i = 0; i < kProgWords; i++) // Relaxed: inside the seqlock write.
		__atomic_store_n(&g_filters[slot].words[rule][i], w[i], __ATOMIC_RELAXED);
}

// Copy rule r's published program into *out (relaxed word loads, only the
// used part); the caller validates the seqlock afterwards.
void load_program(const SlotFilters &f, unsigned r, FilterProgram *out)
{
	const uint64_t *src = f.words[r];
	char *dst = (char *)out;
	// Relaxed: inside the seqlock read (see strata_filter_pass).
	uint64_t w = __atomic_load_n(&src[0], __ATOMIC_RELAXED);
	memcpy(dst, &w, 8);
	if (out->n_ops > kFilterMaxOps || out->pool_len > kFilterPoolMax) {
		out->n_ops = kFilterMaxOps + 1; // torn: filter_eval rejects it
		return;
	}
	size_t op_words = out->n_ops * sizeof(FilterOp) / 8, pool_words = (out->pool_len + 7) / 8;
	for (size_t i = 0; i < op_words; i++) {
		w = __atomic_load_n(&src[kOpsWord + i], __ATOMIC_RELAXED);
		memcpy(dst + (kOpsWord + i) * 8, &w, 8);
	}
	for (size_t i = 0; i < pool_words; i++) {
		w = __atomic_load_n(&src[kPoolWord + i], __ATOMIC_RELAXED);
		memcpy(dst + (kPoolWord + i) * 8, &w, 8);
	}
}

bool valid_description(const strata_event_desc *d)
{
	if (d->api_version != STRATA_API_VERSION || !d->provider || !d->name ||
	    !valid_identifier(d->provider) || !valid_identifier(d->name) ||
	    d->n_fields > STRATA_DESC_MAX_FIELDS || (d->n_fields && !d->fields))
		return false;
	for (uint32_t i = 0; i < d->n_fields; i++) {
		const strata_field_desc &f = d->fields[i];
		if (!f.name || !valid_identifier(f.name))
			return false;
		bool int_size = f.size == 1 || f.size == 2 || f.size == 4 || f.size == 8;
		switch (f.kind) {
		case STRATA_FIELD_INTEGER:
		case STRATA_FIELD_SEQUENCE:
			if (!int_size || !valid_base(f.base))
				return false;
			break;
		case STRATA_FIELD_ARRAY:
			if (!int_size || !valid_base(f.base) || f.length == 0 || f.length > kMaxArrayLength)
				return false;
			break;
		case STRATA_FIELD_FLOAT:
			if (f.size != 4 && f.size != 8)
				return false;
			break;
		case STRATA_FIELD_STRING:
			break;
		case STRATA_FIELD_ENUM: {
			const strata_enum_desc *e = f.enum_desc;
			if (!int_size || !e || e->n_labels == 0 || !e->labels)
				return false;
			for (uint32_t l = 0; l < e->n_labels; l++)
				if (!e->labels[l].label || !valid_label(e->labels[l].label) ||
				    e->labels[l].first > e->labels[l].last)
					return false;
			break;
		}
		default:
			return false;
		}
	}
	return encode_descriptor(d, 0, nullptr, STRATA_DESC_MAX_RECORD) != 0;
}

uint8_t field_type(uint8_t kind)
{
	switch (kind) {
	case STRATA_FIELD_INTEGER:
		return STRATA_FT_INTEGER;
	case STRATA_FIELD_FLOAT:
		return STRATA_FT_FLOAT;
	case STRATA_FIELD_ENUM:
		return STRATA_FT_ENUM;
	case STRATA_FIELD_STRING:
		return STRATA_FT_STRING;
	case STRATA_FIELD_ARRAY:
		return STRATA_FT_ARRAY;
	default:
		return STRATA_FT_SEQUENCE;
	}
}

bool already_registered(const strata_tracepoint *tp)
{
	for (Module *m = g_modules; m; m = m->next)
		for (size_t i = 0; i < m->n; i++)
			if (m->entries[i].tp == tp && m->entries[i].valid)
				return true;
	return false;
}

// "provider:name" of d into full (2 * kMaxNameLen + 2 bytes; valid
// descriptors' names are checked against kMaxNameLen).
void full_name(const strata_event_desc *d, char *full)
{
	size_t lp = strlen(d->provider), ln = strlen(d->name);
	memcpy(full, d->provider, lp);
	full[lp] = ':';
	memcpy(full + lp + 1, d->name, ln + 1);
}

// Whether the slot's rules enable d, and in *filter_mask the rules whose
// filter decides (0: recorded unconditionally).  The last matching disable
// rule cancels everything before it; enable rules after it add up: an event
// is recorded when one of them has no filter or any of their filters pass.
// A rule whose filter does not compile or does not bind to d (a field d
// lacks, or of another type) does not match d.
bool rules_enable(unsigned slot, const strata_event_desc *d, uint32_t *filter_mask)
{
	char full[2 * kMaxNameLen + 2];
	full_name(d, full);
	bool on = false, unconditional = false;
	uint32_t mask = 0;
	const SlotRules &sr = g_rules[slot];
	for (size_t i = 0; i < sr.n; i++) {
		const strata_rule &r = sr.rules[i];
		if ((r.loglevel_max >= 0 && d->loglevel > (uint32_t)r.loglevel_max) ||
		    !glob_match(r.pattern, full))
			continue;
		bool filtered = r.filter[0] != 0;
		if (filtered && (!sr.prog_ok[i] || !filter_bind(sr.progs[i], d)))
			continue;
		if (!r.enable) { // the last matching disable wins over what came before
			on = unconditional = false;
			mask = 0;
		} else if (!filtered) {
			on = unconditional = true;
			mask = 0;
		} else {
			on = true;
			if (!unconditional)
				mask |= 1u << i;
		}
	}
	*filter_mask = on ? mask : 0;
	return on;
}

// The state word a tracepoint should have: its slot bits, and FILTERED
// when any slot recording it has a filter mask for it; PROBED is kept
// (probe.cpp owns it).
uint32_t with_filtered_bit(uint32_t state, uint32_t id)
{
	uint32_t slots = state & STRATA_TP_SLOTS_MASK, filtered = 0;
	for (unsigned t = 0; t < STRATA_MAX_SLOTS; t++)
		// Relaxed: written only by the control plane, which is us.
		if ((slots & (1u << t)) && id <= kMaxEventId &&
		    g_filters[t].mask[id].load(std::memory_order_relaxed))
			filtered = STRATA_TP_FILTERED;
	return slots | filtered | (state & STRATA_TP_PROBED);
}

void set_state(strata_tracepoint *tp, uint32_t state)
{
	// Release: the event's id and its descriptor (published before with
	// desc_used), and its filter masks and programs, are written before a
	// call site can see the bits.  Call sites load `state` relaxed;
	// strata_rt_quiesce makes the change visible to every thread before the
	// control plane acknowledges.  Only the control plane writes `state`.
	__atomic_store_n(&tp->state, state, __ATOMIC_RELEASE);
}

void arm_entry(Entry &e, unsigned slot)
{
	if (!e.valid)
		return; // never written: it may not even be a tracepoint
	uint32_t bit = 1u << slot, mask = 0;
	bool on = (e.described & bit) && g_slots[slot].load(std::memory_order_relaxed) &&
		  rules_enable(slot, e.tp->desc, &mask);
	filters_write_begin(slot);
	// Relaxed: inside the seqlock write; readers validate with seq.
	g_filters[slot].mask[e.id].store(on ? mask : 0, std::memory_order_relaxed);
	filters_write_end(slot);
	uint32_t st = __atomic_load_n(&e.tp->state, __ATOMIC_RELAXED); // only we write it
	set_state(e.tp, with_filtered_bit(on ? st | bit : st & ~bit, e.id));
}

void describe_entry(Channel *ch, Entry &e)
{
	if (!ch->desc) { // a pending buffer (slots.cpp): described when it is made
		e.described = (uint16_t)(e.described | (1u << ch->slot));
		return;
	}
	size_t n = encode_descriptor(e.tp->desc, e.id, ch->desc + ch->desc_used,
				     ch->desc_capacity - ch->desc_used);
	if (n == 0) {
		// Relaxed: a statistic.
		g_descriptor_table_full.fetch_add(1, std::memory_order_relaxed);
		warn("descriptor table full: event not recorded in this session");
		return;
	}
	ch->desc_used += n;
	e.described = (uint16_t)(e.described | (1u << ch->slot));
}

void publish_descriptors(Channel *ch)
{
	if (!ch->hdr)
		return; // pending: nothing written yet
	// Release: the records appended above are complete before the consumer
	// sees them counted; pairs with Reader::read_new_events' acquire load.
	__atomic_store_n(&ch->hdr->desc_used, ch->desc_used, __ATOMIC_RELEASE);
}

size_t copy_str(char *dst, size_t off, const char *s)
{
	size_t n = strlen(s) + 1;
	if (dst)
		memcpy(dst + off, s, n);
	return n;
}

} // namespace

size_t encode_descriptor(const strata_event_desc *d, uint32_t id, char *out, size_t cap)
{
	const uint32_t nf = d->n_fields;
	size_t off = sizeof(strata_desc_event) + nf * sizeof(strata_desc_field);
	size_t n_label_entries = 0;
	size_t strings = strlen(d->provider) + strlen(d->name) + 2;
	for (uint32_t i = 0; i < nf; i++) {
		const strata_field_desc &f = d->fields[i];
		strings += strlen(f.name) + 1;
		if (f.kind != STRATA_FIELD_ENUM)
			continue;
		for (uint32_t l = 0; l < f.enum_desc->n_labels; l++) {
			const strata_enum_label &lab = f.enum_desc->labels[l];
			n_label_entries += lab.first == lab.last ? 1 : 2;
			strings += strlen(lab.label) + 1;
		}
	}
	size_t labels_at = off;
	size_t pool = labels_at + n_label_entries * sizeof(strata_desc_enum_label);
	size_t total = (pool + strings + 7) & ~(size_t)7;
	if (total > STRATA_DESC_MAX_RECORD || total > cap)
		return 0;
	if (!out)
		return total;

	memset(out, 0, total);
	strata_desc_event ev{};
	ev.record_size = (uint32_t)total;
	ev.id = id;
	ev.loglevel = d->loglevel;
	ev.n_fields = nf;
	ev.provider_off = (uint32_t)pool;
	pool += copy_str(out, pool, d->provider);
	ev.name_off = (uint32_t)pool;
	pool += copy_str(out, pool, d->name);
	memcpy(out, &ev, sizeof ev);
	for (uint32_t i = 0; i < nf; i++) {
		const strata_field_desc &f = d->fields[i];
		strata_desc_field df{};
		df.name_off = (uint32_t)pool;
		pool += copy_str(out, pool, f.name);
		df.type = field_type(f.kind);
		df.elem_bits = (uint8_t)(f.size * 8);
		df.is_signed = f.is_signed ? 1 : 0;
		df.base = f.kind == STRATA_FIELD_FLOAT || f.kind == STRATA_FIELD_STRING ||
					  f.kind == STRATA_FIELD_ENUM
				  ? 10
				  : f.base;
		if (f.kind == STRATA_FIELD_STRING)
			df.elem_bits = 8, df.is_signed = 0;
		if (f.kind == STRATA_FIELD_ARRAY)
			df.length = f.length;
		if (f.kind == STRATA_FIELD_ENUM) {
			df.labels_off = (uint32_t)labels_at;
			for (uint32_t l = 0; l < f.enum_desc->n_labels; l++) {
				const strata_enum_label &lab = f.enum_desc->labels[l];
				strata_desc_enum_label el{};
				el.value = lab.first;
				el.label_off = (uint32_t)pool;
				pool += copy_str(out, pool, lab.label);
				memcpy(out + labels_at, &el, sizeof el);
				labels_at += sizeof el;
				df.n_labels++;
				if (lab.first != lab.last) {
					strata_desc_enum_label end{};
					end.value = lab.last;
					end.flags = STRATA_DESC_LABEL_RANGE_END;
					memcpy(out + labels_at, &end, sizeof end);
					labels_at += sizeof end;
					df.n_labels++;
				}
			}
		}
		memcpy(out + sizeof ev + i * sizeof df, &df, sizeof df);
	}
	return total;
}

void registry_describe_all(Channel *ch)
{
	for (Module *m = g_modules; m; m = m->next)
		for (size_t i = 0; i < m->n; i++)
			if (m->entries[i].valid)
				describe_entry(ch, m->entries[i]);
	publish_descriptors(ch);
}

// A filtered enable rule whose pattern matches some of this process's
// events but whose filter binds to none of them (a misspelt field, or one
// of another type) records nothing: say so once, on the process's stderr,
// when the rules arrive (issue 31).  Events of a module loaded later are
// not looked at again.
static void warn_unbound_filters(unsigned slot)
{
	char full[2 * kMaxNameLen + 2];
	const SlotRules &sr = g_rules[slot];
	for (size_t r = 0; r < sr.n; r++) {
		const strata_rule &rule = sr.rules[r];
		if (!rule.enable || !rule.filter[0] || !sr.prog_ok[r])
			continue; // one that does not compile is warned about already
		bool matched = false, bound = false;
		for (Module *m = g_modules; m && !bound; m = m->next)
			for (size_t i = 0; i < m->n && !bound; i++) {
				const Entry &e = m->entries[i];
				if (!e.valid)
					continue;
				const strata_event_desc *d = e.tp->desc;
				full_name(d, full);
				if ((rule.loglevel_max >= 0 && d->loglevel > (uint32_t)rule.loglevel_max) ||
				    !glob_match(rule.pattern, full))
					continue;
				matched = true;
				bound = filter_bind(sr.progs[r], d);
			}
		if (!matched || bound)
			continue;
		// No stdio (the control plane is AS-safe): pieces copied in,
		// cut at the buffer's end.
		char msg[240];
		size_t n = 0;
		const char *parts[] = {"filter '", rule.filter, "' of rule '", rule.pattern,
				       "' names a field no matching event has (or compares it with "
				       "another type): the rule records nothing"};
		for (const char *part : parts)
			for (const char *c = part; *c && n < sizeof msg - 1; c++)
				msg[n++] = *c;
		msg[n] = 0;
		warn(msg);
	}
}

void registry_arm_slot(unsigned slot)
{
	for (Module *m = g_modules; m; m = m->next)
		for (size_t i = 0; i < m->n; i++)
			arm_entry(m->entries[i], slot);
	warn_unbound_filters(slot);
}

void registry_disarm_slot(unsigned slot)
{
	for (Module *m = g_modules; m; m = m->next)
		for (size_t i = 0; i < m->n; i++)
			if (m->entries[i].valid) {
				const Entry &e = m->entries[i];
				uint32_t st = __atomic_load_n(&e.tp->state, __ATOMIC_RELAXED);
				set_state(e.tp, with_filtered_bit(st & ~(1u << slot), e.id));
			}
}

void registry_forget_slot(unsigned slot)
{
	for (Module *m = g_modules; m; m = m->next)
		for (size_t i = 0; i < m->n; i++)
			m->entries[i].described = (uint16_t)(m->entries[i].described & ~(1u << slot));
	g_rules[slot].n = 0;
}

void registry_disarm_all_in_child()
{
	for (Module *m = g_modules; m; m = m->next)
		for (size_t i = 0; i < m->n; i++) {
			m->entries[i].described = 0;
			if (m->entries[i].valid) // Release: see arm_entry.  Probes stay.
				__atomic_store_n(&m->entries[i].tp->state,
						 __atomic_load_n(&m->entries[i].tp->state, __ATOMIC_RELAXED) &
							 STRATA_TP_PROBED,
						 __ATOMIC_RELEASE);
		}
	for (unsigned s = 0; s < STRATA_MAX_SLOTS; s++) {
		g_rules[s].n = 0;
		g_filter_write_depth[s] = 0;
		// Relaxed: the child has one thread; a fork in the middle of a
		// rewrite (impossible under the control lock) would leave seq odd.
		uint32_t q = g_filters[s].seq.load(std::memory_order_relaxed);
		g_filters[s].seq.store((q + 1) & ~1u, std::memory_order_relaxed);
	}
}

int registry_store_rules(unsigned slot, const strata_rule *rules, size_t n)
{
	if (n > STRATA_MAX_RULES || (n && !rules))
		return -E2BIG;
	for (size_t i = 0; i < n; i++)
		if (!memchr(rules[i].pattern, 0, sizeof rules[i].pattern) ||
		    !memchr(rules[i].filter, 0, sizeof rules[i].filter))
			return -EINVAL;
	SlotRules &sr = g_rules[slot];
	if (n)
		memcpy(sr.rules, rules, n * sizeof *rules);
	sr.n = n;
	filters_write_begin(slot);
	for (size_t i = 0; i < n; i++) {
		FilterError err;
		sr.prog_ok[i] = filter_compile(sr.rules[i].filter, &sr.progs[i], &err);
		if (!sr.prog_ok[i])
			warn("a rule's field filter does not compile: the rule matches nothing");
		publish_program(slot, i, sr.progs[i]);
	}
	filters_write_end(slot);
	return 0;
}

void registry_prefault_slot(unsigned slot)
{
	static bool done[STRATA_MAX_SLOTS]; // under the control lock
	if (slot >= STRATA_MAX_SLOTS || done[slot])
		return;
	done[slot] = true;
	// What a slot's open and first rules write (arm_entry, store_rules):
	// five ranges in five calls instead of a fault per page.
	SlotRules &sr = g_rules[slot];
	SlotFilters &f = g_filters[slot];
	constexpr size_t kFew = 4; // rules a session usually has
	const auto upto = [](const void *base, const void *end) {
		return static_cast<size_t>(static_cast<const char *>(end) - static_cast<const char *>(base));
	};
	prefault(&sr, upto(&sr, &sr.rules[kFew]));
	prefault(&sr.progs[0], sizeof sr.progs[0]);
	prefault(&sr.prog_ok[0], sizeof sr.prog_ok);
	prefault(&f, upto(&f, &f.words[1]));
	prefault(&f.mask[0], g_next_id.load(std::memory_order_relaxed) * sizeof f.mask[0]);
}

void registry_for_each(void (*fn)(strata_tracepoint *tp, void *ctx), void *ctx)
{
	for (Module *m = g_modules; m; m = m->next)
		for (size_t i = 0; i < m->n; i++)
			if (m->entries[i].valid)
				fn(m->entries[i].tp, ctx);
}

void registry_set_probed(strata_tracepoint *tp, bool on)
{
	uint32_t st = __atomic_load_n(&tp->state, __ATOMIC_RELAXED); // only we write it
	set_state(tp, on ? st | STRATA_TP_PROBED : st & ~STRATA_TP_PROBED);
}

uint64_t registry_encoded_size()
{
	uint64_t total = 0;
	for (Module *m = g_modules; m; m = m->next)
		for (size_t i = 0; i < m->n; i++)
			if (m->entries[i].valid)
				total += encode_descriptor(m->entries[i].tp->desc, 0, nullptr,
							   STRATA_DESC_MAX_RECORD);
	return total;
}

} // namespace strata

using namespace strata;

namespace strata {

bool registry_valid_description(const strata_event_desc *d)
{
	return valid_description(d);
}

int registry_register(strata_tracepoint *const *start, strata_tracepoint *const *stop)
{
	if (!start || !stop || stop <= start)
		return 0;
	if (control_lock() != 0) {
		count_invariant_error("tracepoints registered from inside a control call: ignored");
		return -EBUSY;
	}
	for (Module *m = g_modules; m; m = m->next)
		if (m->start == start) { // the same section registered again
			control_unlock();
			return 0;
		}
	size_t n = (size_t)(stop - start);
	auto *m = (Module *)calloc(1, sizeof(Module) + n * sizeof(Entry));
	if (!m) {
		control_unlock();
		count_invariant_error("out of memory registering tracepoints");
		return -ENOMEM;
	}
	int registered = 0;
	m->start = start;
	m->n = n;
	for (size_t i = 0; i < n; i++) {
		Entry &e = m->entries[i];
		e.tp = start[i];
		if (!e.tp || already_registered(e.tp))
			continue; // a null slot, or listed by another section too
		if (e.tp->magic != STRATA_TP_MAGIC || !e.tp->desc || !valid_description(e.tp->desc)) {
			// Relaxed: a statistic.
			g_rejected_tracepoints.fetch_add(1, std::memory_order_relaxed);
			warn("tracepoint rejected: bad magic, API version or description");
			continue;
		}
		// Relaxed: ids only need to be unique; the lock orders the rest.
		uint32_t id = g_next_id.fetch_add(1, std::memory_order_relaxed);
		if (id > kMaxEventId) {
			g_rejected_tracepoints.fetch_add(1, std::memory_order_relaxed);
			warn("more than 65535 events registered: tracepoint rejected");
			continue;
		}
		e.id = id;
		e.tp->id = id; // published to call sites by arm_entry's release
		e.valid = true;
		registered++;
		probe_on_register(e.tp);
	}
	m->next = g_modules;
	g_modules = m;
	for (unsigned s = 0; s < STRATA_MAX_SLOTS; s++) {
		Channel *ch = g_slots[s].load(std::memory_order_relaxed);
		if (!ch)
			continue;
		for (size_t i = 0; i < n; i++)
			if (m->entries[i].valid)
				describe_entry(ch, m->entries[i]);
		publish_descriptors(ch);
		for (size_t i = 0; i < n; i++)
			arm_entry(m->entries[i], s);
	}
	control_unlock();
	return registered;
}

} // namespace strata

extern "C" STRATA_EXPORT void strata_register_tracepoints(struct strata_tracepoint *const *start,
							  struct strata_tracepoint *const *stop)
{
	strata::registry_register(start, stop);
}

extern "C" STRATA_EXPORT void strata_unregister_tracepoints(struct strata_tracepoint *const *start,
							    struct strata_tracepoint *const *)
{
	if (!start || control_lock() != 0)
		return;
	for (Module **pm = &g_modules; *pm; pm = &(*pm)->next) {
		Module *m = *pm;
		if (m->start != start)
			continue;
		for (size_t i = 0; i < m->n; i++)
			if (m->entries[i].valid) { // Release: see arm_entry.
				__atomic_store_n(&m->entries[i].tp->state, 0, __ATOMIC_RELEASE);
				probe_on_unregister(m->entries[i].tp);
			}
		*pm = m->next;
		free(m);
		break;
	}
	control_unlock();
}

extern "C" STRATA_EXPORT int strata_rt_slot_set_rules(unsigned slot, const struct strata_rule *rules,
						      size_t n)
{
	if (slot >= STRATA_MAX_SLOTS)
		return -EINVAL;
	int rc = control_lock();
	if (rc)
		return rc;
	filters_write_begin(slot); // programs and masks change together
	rc = registry_store_rules(slot, rules, n);
	if (rc == 0)
		registry_arm_slot(slot);
	filters_write_end(slot);
	control_unlock();
	return rc;
}

extern "C" STRATA_EXPORT uint32_t strata_rt_event_count(void)
{
	// Relaxed: a count for listing; ids below it may have been unregistered.
	uint32_t n = g_next_id.load(std::memory_order_relaxed);
	return n > kMaxEventId + 1 ? kMaxEventId + 1 : n;
}

extern "C" STRATA_EXPORT int strata_rt_registry_hold(void)
{
	return control_lock();
}

extern "C" STRATA_EXPORT void strata_rt_registry_release(void)
{
	control_unlock();
}

extern "C" STRATA_EXPORT int strata_rt_event_name(uint32_t id, char *buf, size_t len, uint32_t *loglevel)
{
	if (!buf || len == 0)
		return -EINVAL;
	int rc = control_lock();
	if (rc)
		return rc;
	rc = strata_rt_event_name_held(id, buf, len, loglevel);
	control_unlock();
	return rc;
}

extern "C" STRATA_EXPORT int strata_rt_event_name_held(uint32_t id, char *buf, size_t len, uint32_t *loglevel)
{
	if (!buf || len == 0)
		return -EINVAL;
	int rc = -ENOENT;
	for (Module *m = g_modules; m && rc; m = m->next)
		for (size_t i = 0; i < m->n; i++) {
			const Entry &e = m->entries[i];
			if (!e.valid || e.id != id)
				continue;
			size_t k = 0;
			for (const char *p = e.tp->desc->provider; *p && k + 1 < len; p++)
				buf[k++] = *p;
			if (k + 1 < len)
				buf[k++] = ':';
			for (const char *p = e.tp->desc->name; *p && k + 1 < len; p++)
				buf[k++] = *p;
			buf[k] = 0;
			if (loglevel)
				*loglevel = e.tp->desc->loglevel;
			rc = 0;
			break;
		}
	return rc;
}

extern "C" STRATA_EXPORT int strata_filter_pass(struct strata_tracepoint *tp, unsigned slot,
						const void *const *argv)
{
	if (!tp || slot >= STRATA_MAX_SLOTS || !tp->desc || tp->id > kMaxEventId)
		return 0;
	const SlotFilters &f = g_filters[slot];
	for (int attempt = 0; attempt < 4; attempt++) {
		// Acquire: pairs with filters_write_end's release store, so the
		// words and masks read below are at least that rewrite's.
		uint32_t s1 = f.seq.load(std::memory_order_acquire);
		if (s1 & 1)
			continue; // a rewrite in progress (or we interrupted it)
		// Relaxed: validated by the seq re-check below.
		uint32_t mask = f.mask[tp->id].load(std::memory_order_relaxed);
		int pass = mask == 0; // no filter for this slot: record
		while (mask && !pass) {
			FilterProgram p;
			unsigned r = (unsigned)__builtin_ctz(mask);
			mask &= mask - 1;
			load_program(f, r, &p);
			pass = filter_eval(p, tp->desc, argv);
		}
		// Acquire fence: the loads above happen before the re-check; pairs
		// with filters_write_begin's release fence.
		std::atomic_thread_fence(std::memory_order_acquire);
		if (f.seq.load(std::memory_order_relaxed) == s1)
			return pass;
	}
	// Rules are changing under us (or we interrupted the rewrite): drop
	// rather than wait, and count the drop like any other discard.
	writer_count_discarded(slot);
	return 0;
}
