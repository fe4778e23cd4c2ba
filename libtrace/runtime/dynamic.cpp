/*
 * dynamic.cpp - events declared at run time (include/strata/dynamic.h).
 *
 * A declared event is a heap-allocated tracepoint with its description,
 * registered as a one-entry "section" through the same registry as a
 * module's static tracepoints: ids, descriptors in every open slot's
 * table, rules, filters, listing and acknowledgement are theirs.
 *
 * Concurrency contract.  Roles: declarers and releasers (application
 * threads, never signal handlers: they allocate), serialised by g_lock;
 * emitters (any thread or signal handler) read only the event's immutable
 * description and its `state` word, as a static call site does.  An event
 * is never freed: a release can race an emitter that already read `state`,
 * and the emitter keeps reading the description; a retired event is kept
 * on the list and revived by the next declaration of the same name and
 * shape.  So memory is bounded by the number of distinct events declared.
 */
#include <errno.h>
#include <pthread.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <strata/dynamic.h>

#include "desc_rules.h"
#include "rt_internal.h"

namespace strata {
namespace {

struct DynEvent {
	strata_tracepoint tp;    // first: the handle is &tp
	strata_tracepoint *self; // the one-entry section registered
	strata_event_desc desc;
	strata_field_desc fields[STRATA_DESC_MAX_FIELDS];
	uint32_t refs;  // declarations not yet released (g_lock)
	DynEvent *next; // g_events (g_lock)
	char names[1];  // provider, name, field names: NUL-separated
};

pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
DynEvent *g_events;
std::atomic<bool> g_warned_arity{false};
std::atomic<bool> g_warned_layout{false};

bool same_shape(const DynEvent &e, int loglevel, const strata_dyn_field *f, uint32_t n)
{
	if (e.desc.loglevel != (uint32_t)loglevel || e.desc.n_fields != n)
		return false;
	for (uint32_t i = 0; i < n; i++) {
		const strata_field_desc &g = e.fields[i];
		const uint8_t base = f[i].base ? f[i].base : 10;
		const bool str = f[i].kind == STRATA_FIELD_STRING;
		if (strcmp(g.name, f[i].name) != 0 || g.kind != f[i].kind ||
		    (!str &&
		     (g.size != f[i].size || g.is_signed != (f[i].is_signed ? 1 : 0) || g.base != base)) ||
		    (f[i].kind == STRATA_FIELD_ARRAY && g.length != f[i].length))
			return false;
	}
	return true;
}

// The description of a new event in one allocation; -EINVAL / -E2BIG /
// -ENOMEM.  The registry's own validation then decides (as for a static
// tracepoint), so both kinds obey one rule set.
int build(const char *provider, const char *name, int loglevel, const strata_dyn_field *f, uint32_t n,
	  DynEvent **out)
{
	if (!provider || !name || !valid_identifier(provider) || !valid_identifier(name) ||
	    loglevel < STRATA_LOGLEVEL_EMERG || loglevel > STRATA_LOGLEVEL_DEBUG || (n && !f))
		return -EINVAL;
	if (n > STRATA_DESC_MAX_FIELDS)
		return -E2BIG;
	size_t chars = strlen(provider) + strlen(name) + 2;
	for (uint32_t i = 0; i < n; i++) {
		if (!f[i].name || !valid_identifier(f[i].name))
			return -EINVAL;
		switch (f[i].kind) {
		case STRATA_FIELD_INTEGER:
		case STRATA_FIELD_FLOAT:
		case STRATA_FIELD_STRING:
		case STRATA_FIELD_ARRAY:
		case STRATA_FIELD_SEQUENCE:
			break;
		default: // enumerations need label tables: static events only
			return -EINVAL;
		}
		chars += strlen(f[i].name) + 1;
	}
	auto *e = (DynEvent *)calloc(1, sizeof(DynEvent) + chars);
	if (!e)
		return -ENOMEM;
	char *p = e->names;
	auto keep = [&p](const char *s) {
		size_t l = strlen(s) + 1;
		memcpy(p, s, l);
		p += l;
		return p - l;
	};
	e->desc.api_version = STRATA_API_VERSION;
	e->desc.loglevel = (uint32_t)loglevel;
	e->desc.provider = keep(provider);
	e->desc.name = keep(name);
	e->desc.n_fields = n;
	e->desc.fields = e->fields;
	for (uint32_t i = 0; i < n; i++) {
		strata_field_desc &g = e->fields[i];
		g.name = keep(f[i].name);
		g.kind = f[i].kind;
		const bool str = f[i].kind == STRATA_FIELD_STRING;
		g.size = str ? 1 : f[i].size;
		g.is_signed = str ? 0 : (f[i].is_signed ? 1 : 0);
		g.base = str || f[i].kind == STRATA_FIELD_FLOAT ? 10 : (f[i].base ? f[i].base : 10);
		if (f[i].kind == STRATA_FIELD_FLOAT)
			g.is_signed = 1;
		g.length = f[i].kind == STRATA_FIELD_ARRAY ? f[i].length : 0;
		g.enum_desc = nullptr;
	}
	if (!registry_valid_description(&e->desc)) {
		// Sizes, bases or lengths out of range, or a description larger
		// than a descriptor record may be.
		bool big = encode_descriptor(&e->desc, 0, nullptr, STRATA_DESC_MAX_RECORD) == 0;
		free(e);
		return big ? -E2BIG : -EINVAL;
	}
	e->tp.magic = STRATA_TP_MAGIC;
	e->tp.desc = &e->desc;
	e->self = &e->tp;
	*out = e;
	return 0;
}

// Registers e (new or retired): 0, -ENOSPC, -EBUSY or -ENOMEM.
int arm(DynEvent *e)
{
	int rc = registry_register(&e->self, &e->self + 1);
	return rc == 1 ? 0 : rc < 0 ? rc : -ENOSPC;
}

} // namespace
} // namespace strata

using namespace strata;

extern "C" STRATA_EXPORT int strata_dyn_declare(const char *provider, const char *name, int loglevel,
						const struct strata_dyn_field *fields, uint32_t n_fields,
						strata_dyn_event **out)
{
	if (!out)
		return -EINVAL;
	*out = nullptr;
	if (!provider || !name)
		return -EINVAL;
	const RtInside inside; // g_lock is not the program's (runtime.h)
	pthread_mutex_lock(&g_lock);
	int rc = 0;
	DynEvent *e = g_events;
	for (; e; e = e->next)
		if (strcmp(e->desc.provider, provider) == 0 && strcmp(e->desc.name, name) == 0)
			break;
	if (e) {
		if (!same_shape(*e, loglevel, fields, n_fields))
			rc = -EEXIST;
		else if (e->refs == 0)
			rc = arm(e); // retired: registered again, under a new id
	} else {
		rc = build(provider, name, loglevel, fields, n_fields, &e);
		if (rc == 0 && (rc = arm(e)) == 0) {
			e->next = g_events;
			g_events = e;
		} else if (rc != 0 && e) {
			free(e); // never registered: nobody can hold it
		}
	}
	if (rc == 0) {
		e->refs++;
		*out = &e->tp;
	}
	pthread_mutex_unlock(&g_lock);
	return rc;
}

extern "C" STRATA_EXPORT void strata_dyn_release(strata_dyn_event *ev)
{
	if (!ev)
		return;
	auto *e = reinterpret_cast<DynEvent *>(ev);
	const RtInside inside; // g_lock is not the program's (runtime.h)
	pthread_mutex_lock(&g_lock);
	if (e->refs > 0 && --e->refs == 0)
		strata_unregister_tracepoints(&e->self, &e->self + 1); // state = 0, unlisted
	pthread_mutex_unlock(&g_lock);
}

extern "C" STRATA_EXPORT const char *strata_dyn_strerror(int err)
{
	switch (err) {
	case 0:
		return "success";
	case -EINVAL:
		return "invalid event declaration: names must be identifiers ([A-Za-z_][A-Za-z0-9_]*, at "
		       "most 255 characters), log level 0..7, field kinds integer, float, string, array "
		       "or sequence, integer and element sizes 1, 2, 4 or 8 bytes, float sizes 4 or 8, "
		       "bases 2, 8, 10 or 16, array lengths 1..65536";
	case -E2BIG:
		return "event declaration too large: at most 64 fields, and a description of at most "
		       "64 KiB";
	case -EEXIST:
		return "an event with this provider and name is already declared with another log "
		       "level or other fields";
	case -ENOSPC:
		return "no event id left: a process has at most 65535 events";
	case -ENOMEM:
		return "out of memory";
	case -EBUSY:
		return "declared from a signal handler that interrupted a Strata control call";
	default:
		return "unknown error";
	}
}

namespace {

inline size_t elem_size(const strata_field_desc &f)
{
	return f.size ? f.size : 1;
}

// A scalar field's bytes, from its value: integers are the low `size` bytes
// (little-endian), a 4-byte float is the value rounded to float.
inline void put_scalar(char *out, const strata_field_desc &f, const union strata_dyn_value &v)
{
	if (f.kind == STRATA_FIELD_FLOAT) {
		if (f.size == 4) {
			const float x = (float)v.f;
			memcpy(out, &x, 4);
		} else {
			memcpy(out, &v.f, 8);
		}
		return;
	}
	switch (f.size) { // fixed-size copies: plain stores, no call
	case 1:
		memcpy(out, &v.u, 1);
		break;
	case 2:
		memcpy(out, &v.u, 2);
		break;
	case 4:
		memcpy(out, &v.u, 4);
		break;
	default:
		memcpy(out, &v.u, 8);
		break;
	}
}

// The filter's view of one field: a pointer to a value of the field's own
// type (as the static emitter passes its arguments), staged in `scalar`.
const void *filter_arg(const strata_field_desc &f, const union strata_dyn_value &v, const char *str,
		       uint64_t *scalar)
{
	switch (f.kind) {
	case STRATA_FIELD_INTEGER:
	case STRATA_FIELD_FLOAT:
		*scalar = 0;
		put_scalar((char *)scalar, f, v);
		return scalar;
	case STRATA_FIELD_STRING:
		return str;
	default:
		return v.seq.ptr;
	}
}

// The slots recording ev, from one relaxed load of its state word (0: none).
inline uint32_t recording(const strata_dyn_event *ev)
{
	return ev ? __atomic_load_n(&ev->state, __ATOMIC_RELAXED) : 0;
}

// One record of `size` payload bytes in every slot of state `st` whose
// filter passes: argv_of(argv, scalar) fills the filter's arguments as the
// static emitter builds them (a pointer per field; for a sequence, the
// pointer then a pointer to its size_t length), write(rec) the payload.
// `whole`: the payload already as the record's bytes (a packed event), or
// null; it goes through strata_write, whatever its size, one call as a
// small static event (docs/ring-buffer.md, "One call for small events"),
// not reserve, copy and commit.
template <class ArgvOf, class Write>
void emit_to_slots(strata_dyn_event *ev, uint32_t st, size_t size, ArgvOf &&argv_of, Write &&write,
		   const void *whole = nullptr)
{
	if (__builtin_expect(st & STRATA_TP_PROBED, 0)) { // probes first, as the static emitter
		const void *argv[2 * STRATA_DESC_MAX_FIELDS + 1];
		uint64_t scalar[STRATA_DESC_MAX_FIELDS];
		argv_of(argv, scalar);
		strata_probe_fire(ev, argv);
	}
	uint32_t m = st & STRATA_TP_SLOTS_MASK;
	while (m) {
		const unsigned slot = (unsigned)__builtin_ctz(m);
		m &= m - 1;
		if (st & STRATA_TP_FILTERED) {
			const void *argv[2 * STRATA_DESC_MAX_FIELDS + 1];
			uint64_t scalar[STRATA_DESC_MAX_FIELDS];
			argv_of(argv, scalar);
			if (!strata_filter_pass(ev, slot, argv))
				continue;
		}
		strata_reservation r;
		if (whole) {
			// strata_write reads the payload at r.rec; it never writes there
			r.rec = const_cast<char *>(static_cast<const char *>(whole));
			strata_write(&r, ev, slot, size);
			continue;
		}
		if (!strata_reserve(&r, ev, slot, size))
			continue;
		write(r.rec);
		strata_commit(&r);
	}
}

// Where the fields of a packed payload (strata_dyn_emit_packed) are: for
// field i, its first byte at p + at[i] (strings NUL-terminated inside, a
// sequence's uint32 count then its elements).  False unless the fields, in
// order, end exactly at len: the caller's bytes are checked, never trusted.
bool packed_walk(const strata_event_desc *d, const char *p, size_t len, uint32_t at[])
{
	size_t o = 0;
	for (uint32_t i = 0; i < d->n_fields; i++) {
		const strata_field_desc &f = d->fields[i];
		at[i] = (uint32_t)o;
		size_t n;
		switch (f.kind) {
		case STRATA_FIELD_INTEGER:
		case STRATA_FIELD_FLOAT:
			n = f.size;
			break;
		case STRATA_FIELD_STRING: {
			// Inline for the short strings most events carry (a call
			// to memchr costs more than it scans), memchr past 32.
			size_t k = 0;
			const size_t lim = std::min(len - o, (size_t)32);
			while (k < lim && p[o + k])
				k++;
			if (k == lim) {
				const void *z = k < len - o ? memchr(p + o + k, 0, len - o - k) : nullptr;
				if (!z)
					return false;
				k = (size_t)((const char *)z - (p + o));
			}
			n = k + 1;
			break;
		}
		case STRATA_FIELD_ARRAY:
			n = elem_size(f) * f.length;
			break;
		default: { // SEQUENCE
			uint32_t k;
			if (len - o < 4)
				return false;
			memcpy(&k, p + o, 4);
			if (k > 0xffffffu)
				return false;
			n = 4 + elem_size(f) * k;
			break;
		}
		}
		if (n > len - o)
			return false;
		o += n;
	}
	return o == len;
}

// strata_dyn_emit's first pass: the payload's size, and per field of
// variable size its bytes (strings with the NUL, sequences their element
// count: len) and, for strings, where they are (str).
inline size_t dyn_sizes(const strata_event_desc *d, uint32_t nf, const union strata_dyn_value *v,
			size_t len[], const char *str[])
{
	size_t size = 0;
	for (uint32_t i = 0; i < nf; i++) {
		const strata_field_desc &f = d->fields[i];
		str[i] = nullptr;
		switch (f.kind) {
		case STRATA_FIELD_INTEGER:
		case STRATA_FIELD_FLOAT:
			size += f.size;
			break;
		case STRATA_FIELD_STRING:
			str[i] = v[i].s ? v[i].s : "(null)";
			len[i] = strlen(str[i]) + 1;
			size += len[i];
			break;
		case STRATA_FIELD_ARRAY:
			size += elem_size(f) * f.length;
			break;
		default: { // SEQUENCE
			size_t k = v[i].seq.ptr ? v[i].seq.len : 0;
			if (k > 0xffffffu)
				k = 0xffffffu;
			len[i] = k;
			size += 4 + elem_size(f) * k;
			break;
		}
		}
	}
	return size;
}

// strata_dyn_emit's second pass, per slot: the payload written at w from
// the values and what dyn_sizes found.
inline void dyn_write(char *w, const strata_event_desc *d, uint32_t nf, const union strata_dyn_value *v,
		      const size_t len[], const char *const str[])
{
	for (uint32_t i = 0; i < nf; i++) {
		const strata_field_desc &f = d->fields[i];
		switch (f.kind) {
		case STRATA_FIELD_INTEGER:
		case STRATA_FIELD_FLOAT:
			put_scalar(w, f, v[i]);
			w += f.size;
			break;
		case STRATA_FIELD_STRING:
			memcpy(w, str[i], len[i]);
			w += len[i];
			break;
		case STRATA_FIELD_ARRAY: {
			const size_t b = elem_size(f) * f.length;
			if (v[i].seq.ptr)
				memcpy(w, v[i].seq.ptr, b);
			else // an array given no data: zeros
				memset(w, 0, b);
			w += b;
			break;
		}
		default: { // SEQUENCE
			const uint32_t l32 = (uint32_t)len[i];
			memcpy(w, &l32, 4);
			if (len[i])
				memcpy(w + 4, v[i].seq.ptr, elem_size(f) * len[i]);
			w += 4 + elem_size(f) * len[i];
			break;
		}
		}
	}
}

} // namespace

// The same layout as the STRATA_EVENT emitter (tracepoint.h): fields
// byte-packed in order; strings with their NUL, arrays their elements,
// sequences a u32 length then the elements.  Sequences hold at most
// 0xffffff elements, as there.  One pass sizes the payload (string lengths
// kept), then each slot's record is written straight from the values.
extern "C" STRATA_EXPORT void strata_dyn_emit(strata_dyn_event *ev, const union strata_dyn_value *v,
					      uint32_t n)
{
	const uint32_t st = recording(ev);
	if (!(st & (STRATA_TP_SLOTS_MASK | STRATA_TP_PROBED)))
		return;
	const strata_event_desc *d = ev->desc;
	const uint32_t nf = d->n_fields;
	if (n != nf || (nf && !v)) {
		// Relaxed: a once-only warning flag.
		if (!g_warned_arity.exchange(true, std::memory_order_relaxed))
			warn("strata_dyn_emit: the number of values differs from the event's fields; "
			     "nothing recorded");
		return;
	}
	size_t len[STRATA_DESC_MAX_FIELDS];
	const char *str[STRATA_DESC_MAX_FIELDS];
	const size_t size = dyn_sizes(d, nf, v, len, str);
	auto argv_of = [&](const void **argv, uint64_t *scalar) {
		size_t k = 0;
		for (uint32_t i = 0; i < nf; i++) {
			argv[k++] = filter_arg(d->fields[i], v[i], str[i], &scalar[i]);
			if (d->fields[i].kind == STRATA_FIELD_SEQUENCE)
				argv[k++] = &len[i];
		}
		argv[k] = nullptr;
	};
	emit_to_slots(ev, st, size, argv_of, [&](char *w) { dyn_write(w, d, nf, v, len, str); });
}

// The payload is already the record's bytes: one check, one copy.  The
// filter (rare) gets the same argv as the static emitter: scalars staged
// aligned, strings and elements pointing into the payload.
extern "C" STRATA_EXPORT void strata_dyn_emit_packed(strata_dyn_event *ev, const void *payload, size_t len)
{
	const uint32_t st = recording(ev);
	if (!(st & (STRATA_TP_SLOTS_MASK | STRATA_TP_PROBED)))
		return;
	const strata_event_desc *d = ev->desc;
	const char *p = (const char *)payload;
	uint32_t at[STRATA_DESC_MAX_FIELDS];
	if ((len && !p) || len > 0xffffffu || !packed_walk(d, p, len, at)) {
		// Relaxed: a once-only warning flag.
		if (!g_warned_layout.exchange(true, std::memory_order_relaxed))
			warn("strata_dyn_emit_packed: the payload does not match the event's fields; "
			     "nothing recorded");
		return;
	}
	size_t seq_len[STRATA_DESC_MAX_FIELDS]; // as strata_dyn_emit passes it
	auto argv_of = [&](const void **argv, uint64_t *scalar) {
		size_t k = 0;
		for (uint32_t i = 0; i < d->n_fields; i++) {
			const strata_field_desc &f = d->fields[i];
			const char *q = p + at[i];
			switch (f.kind) {
			case STRATA_FIELD_INTEGER:
			case STRATA_FIELD_FLOAT:
				scalar[i] = 0;
				memcpy(&scalar[i], q, f.size);
				argv[k++] = &scalar[i];
				break;
			case STRATA_FIELD_SEQUENCE: {
				uint32_t l32;
				memcpy(&l32, q, 4);
				seq_len[i] = l32;
				argv[k++] = q + 4;
				argv[k++] = &seq_len[i];
				break;
			}
			default: // STRING, ARRAY
				argv[k++] = q;
				break;
			}
		}
		argv[k] = nullptr;
	};
	auto copy = [&](char *w) { memcpy(w, p, len); };
	emit_to_slots(ev, st, len, argv_of, copy, p);
}
