/*
 * strata/probe.h - tracepoints as hooks: call a function of yours when a
 * tracepoint is hit, in the process, beside (or instead of) recording it.
 * Usable from C11 and C++17.  Design and concurrency contract:
 * docs/probes.md.
 *
 *     static void count(const struct strata_probe_event *ev, void *priv)
 *     {
 *         (void)ev;
 *         __atomic_fetch_add((uint64_t *)priv, 1, __ATOMIC_RELAXED);
 *     }
 *     ...
 *     uint64_t hits = 0;
 *     strata_probe *p;
 *     int rc = strata_probe_register("demo:*", STRATA_LOGLEVEL_DEBUG, count, &hits, &p);
 *     if (rc < 0)
 *         fprintf(stderr, "%s\n", strata_probe_strerror(rc));
 *     ...
 *     strata_probe_unregister(p);  // count() runs no more; &hits may go
 *
 * A probe matches tracepoints by "provider:event" glob ('*' any run of
 * characters) and log level, static (STRATA_EVENT) and declared at run time
 * (strata/dynamic.h) alike, including those of libraries loaded after it is
 * registered.  Several probes, and any number of recording sessions, can be
 * on one tracepoint: each hit calls every matching probe once, in
 * registration order, and records the event in every session as before.
 * A tracepoint with only probes on it costs its probes and no buffer.
 *
 * Who calls what (the contract):
 *   - strata_probe_register / strata_probe_unregister: any thread, not from
 *     a signal handler and not from inside a probe callback (they allocate,
 *     lock, and unregister waits for a grace period).  Thread-safe.
 *   - Hits that start after strata_probe_register returns call the probe,
 *     on every thread (the change is made visible to all threads before the
 *     call returns).
 *   - Once strata_probe_unregister returns, the callback is not running and
 *     will not run again, on any thread: its private data may be freed.
 *   - The callback runs on the thread that hit the tracepoint, possibly in a
 *     signal handler, possibly nested in itself (a signal that interrupts a
 *     probed hit and hits again).  So it must be async-signal-safe if the
 *     program hits tracepoints from signal handlers, and must not block.
 *   - Everything an event points to (ev, its arguments) is valid only
 *     during the call.
 */
#ifndef STRATA_PROBE_H
#define STRATA_PROBE_H

#include <strata/tracepoint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * One hit, as a probe sees it.
 *
 * `argv` holds the arguments as the call site passed them, in field order,
 * one pointer per field and two for a sequence:
 *   INTEGER, ENUM  a pointer to the value, `size` bytes, native byte order
 *   FLOAT          a pointer to a float (size 4) or a double (size 8)
 *   STRING         the NUL-terminated string (a NULL argument is "(null)")
 *   ARRAY          a pointer to `length` elements of `size` bytes
 *   SEQUENCE       a pointer to the elements, then a pointer to a size_t
 *                  count (as recorded: at most 0xffffff)
 * The accessors below read them by field index; strata_probe_pack lays
 * them out as the trace records them (the packed payload).
 */
struct strata_probe_event {
	const struct strata_event_desc *desc; /* provider, name, log level, fields */
	const void *const *argv;
	uint64_t timestamp; /* ns, the clock events are stamped with */
	struct strata_tracepoint *tp;
};

typedef void (*strata_probe_fn)(const struct strata_probe_event *ev, void *priv);
typedef struct strata_probe strata_probe;

/*
 * Registers fn(ev, priv) on every tracepoint, present and future, whose
 * "provider:event" matches `pattern` and whose log level is <= loglevel_max
 * (-1: any).  0 and *out on success; else a negative errno:
 *   -EINVAL  no fn or out, or a pattern empty or of 128 bytes or more
 *   -ENOMEM  out of memory
 *   -EBUSY   called from a signal handler that interrupted a Strata control call
 */
int strata_probe_register(const char *pattern, int loglevel_max, strata_probe_fn fn, void *priv,
			  strata_probe **out);

/* Removes the probe and waits until no thread runs its callback (see the
 * contract above); then frees the handle.  0, or -EINVAL for NULL. */
int strata_probe_unregister(strata_probe *p);

/* A sentence for a code strata_probe_register returned (never NULL). */
const char *strata_probe_strerror(int err);

/* How many tracepoints the probe is on now (for tests and listings). */
uint32_t strata_probe_attached(const strata_probe *p);

/* ---- typed accessors (field = index in ev->desc->fields) ---------------- */

/* Index of the field named `name`, or -1. */
static inline int strata_probe_field_index(const struct strata_event_desc *d, const char *name)
{
	for (uint32_t i = 0; i < d->n_fields; i++)
		if (strcmp(d->fields[i].name, name) == 0)
			return (int)i;
	return -1;
}

/* Where field `field`'s first argv entry is (sequences take two). */
static inline const void *const *strata_probe__arg(const struct strata_probe_event *ev, uint32_t field)
{
	uint32_t k = 0;
	for (uint32_t i = 0; i < field; i++)
		k += ev->desc->fields[i].kind == STRATA_FIELD_SEQUENCE ? 2u : 1u;
	return ev->argv + k;
}

/* An integer of `size` bytes at p, widened by its signedness. */
static inline int64_t strata_probe__load_int(const void *p, unsigned size, int is_signed)
{
	switch (size) {
	case 1: {
		uint8_t v;
		memcpy(&v, p, 1);
		return is_signed ? (int64_t)(int8_t)v : (int64_t)v;
	}
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
		int64_t v;
		memcpy(&v, p, 8);
		return v;
	}
	}
}

/* INTEGER or ENUM field: its value, sign-extended if signed (an unsigned
 * 64-bit value above INT64_MAX comes back as its two's complement: cast it
 * to uint64_t).  0 for a field of another kind or out of range. */
static inline int64_t strata_probe_int(const struct strata_probe_event *ev, uint32_t field)
{
	if (field >= ev->desc->n_fields)
		return 0;
	const struct strata_field_desc *f = &ev->desc->fields[field];
	if (f->kind != STRATA_FIELD_INTEGER && f->kind != STRATA_FIELD_ENUM)
		return 0;
	return strata_probe__load_int(*strata_probe__arg(ev, field), f->size, f->is_signed);
}

/* FLOAT field (float or double): its value.  0 otherwise. */
static inline double strata_probe_float(const struct strata_probe_event *ev, uint32_t field)
{
	if (field >= ev->desc->n_fields || ev->desc->fields[field].kind != STRATA_FIELD_FLOAT)
		return 0;
	const void *p = *strata_probe__arg(ev, field);
	if (ev->desc->fields[field].size == 4) {
		float v;
		memcpy(&v, p, 4);
		return v;
	}
	double d;
	memcpy(&d, p, 8);
	return d;
}

/* STRING field: the string.  NULL for a field of another kind. */
static inline const char *strata_probe_string(const struct strata_probe_event *ev, uint32_t field)
{
	if (field >= ev->desc->n_fields || ev->desc->fields[field].kind != STRATA_FIELD_STRING)
		return NULL;
	return (const char *)*strata_probe__arg(ev, field);
}

/* ARRAY or SEQUENCE field: its element count (0 for another kind). */
static inline size_t strata_probe_count(const struct strata_probe_event *ev, uint32_t field)
{
	if (field >= ev->desc->n_fields)
		return 0;
	const struct strata_field_desc *f = &ev->desc->fields[field];
	if (f->kind == STRATA_FIELD_ARRAY)
		return f->length;
	if (f->kind != STRATA_FIELD_SEQUENCE)
		return 0;
	size_t n;
	memcpy(&n, strata_probe__arg(ev, field)[1], sizeof n);
	return n;
}

/* ARRAY or SEQUENCE field: element i, widened as strata_probe_int does
 * (0 beyond the count or for another kind). */
static inline int64_t strata_probe_elem(const struct strata_probe_event *ev, uint32_t field, size_t i)
{
	if (i >= strata_probe_count(ev, field))
		return 0;
	const struct strata_field_desc *f = &ev->desc->fields[field];
	const char *p = (const char *)*strata_probe__arg(ev, field);
	return strata_probe__load_int(p + i * f->size, f->size, f->is_signed);
}

/*
 * The event's payload as the trace records it (and strata_dyn_emit_packed
 * takes it): fields byte-packed in order, integers and floats in their
 * size, strings with their NUL, arrays their elements, sequences a uint32_t
 * count then the elements.  Writes it to buf if it fits in cap; returns its
 * size either way (call with cap 0 to learn it).
 */
size_t strata_probe_pack(const struct strata_probe_event *ev, void *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_PROBE_H */
