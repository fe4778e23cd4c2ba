/*
 * agg.cpp - aggregation in the process: a probe (probe.cpp) folding hits
 * into a shared-memory region laid out as agg_layout.h says.
 *
 * Roles: strata_rt_agg_open/close run on any thread but a handler (they
 * register and unregister the probe); agg_hit runs on every hitting thread
 * and in signal handlers, so it never waits: atomic RMWs on the region, an
 * entry claimed by one CAS, a key that finds no entry counted in overflow
 * (the ordering contract is in agg_layout.h).  The region lives until
 * close; close unregisters the probe first, whose grace period guarantees
 * no hit is still writing when the mapping goes.  A fork child gets fresh
 * regions of its own (renew_in_child).
 */
#include <errno.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstring>

#include <strata/probe.h>

#include "agg.h"
#include "filter.h"
#include "probe_internal.h"
#include "rt_internal.h"

struct strata_rt_agg {
	strata_agg_header *hdr;
	strata_agg_entry *entries;
	size_t size;
	int fd;
	uint32_t mask; // n_entries - 1
	uint32_t key_kind;
	strata_probe *probe;
	// How to read the value and key fields, per event description: a word
	// per description (a Plan, see plan_of), the description's address
	// shifted right by 3 in bits 20..63, the key's field code in bits
	// 10..19 and the value's in bits 0..9.  Any hit may store a word
	// (relaxed: each store is a correct word for its description); a hit
	// loads one (relaxed) and works it out again when it does not describe
	// its event.  Saves two name lookups and the argv walks per hit.
	uint64_t fields[8];
	// The spec's filter, compiled once at open and read-only after (the
	// probe's registration orders it before any hit).
	bool filtered;
	strata::FilterProgram filter;
};

namespace strata {
namespace {

// Relaxed RMWs on the region: counters, each exact once hits stop
// (agg_layout.h); nothing is ordered by them.
inline void add(uint64_t *p, uint64_t v)
{
	__atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}

inline void add_signed(int64_t *p, int64_t v)
{
	__atomic_fetch_add(reinterpret_cast<uint64_t *>(p), static_cast<uint64_t>(v), __ATOMIC_RELAXED);
}

inline void lower(int64_t *p, int64_t v)
{
	int64_t cur = __atomic_load_n(p, __ATOMIC_RELAXED);
	while (v < cur &&
	       !__atomic_compare_exchange_n(p, &cur, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
	}
}

inline void raise_to(int64_t *p, int64_t v)
{
	int64_t cur = __atomic_load_n(p, __ATOMIC_RELAXED);
	while (v > cur &&
	       !__atomic_compare_exchange_n(p, &cur, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
	}
}

inline unsigned bucket_of(int64_t v)
{
	return v <= 0 ? 0u : 64u - (unsigned)__builtin_clzll((uint64_t)v);
}

inline uint64_t mix(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	return k;
}

uint64_t fnv1a(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
	return h;
}

/*
 * A field code (10 bits): where a field's argument is and how to read it.
 * Bits 0..5 its argv index (sequences take two entries), 6..7 log2 of its
 * size, 8 signed, 9 a string (else an integer or enum).  kNoField: absent,
 * or of a kind the aggregation does not read (a value that is not a
 * number, a key that is neither a number nor a string), or past argv
 * index 62 (then *cacheable is cleared: the plan is worked out per hit).
 */
constexpr uint32_t kNoField = 63;
constexpr uint32_t kStringBit = 1u << 9;

uint32_t field_code(const strata_event_desc *d, int f, bool strings, bool *cacheable)
{
	if (f < 0)
		return kNoField;
	const strata_field_desc &fd = d->fields[f];
	const bool integer = fd.kind == STRATA_FIELD_INTEGER || fd.kind == STRATA_FIELD_ENUM;
	if (!integer && !(strings && fd.kind == STRATA_FIELD_STRING))
		return kNoField;
	uint32_t a = 0; // its argv index: sequences take two
	for (int i = 0; i < f; i++)
		a += d->fields[i].kind == STRATA_FIELD_SEQUENCE ? 2u : 1u;
	if (a >= kNoField) {
		*cacheable = false;
		return kNoField;
	}
	if (!integer)
		return a | kStringBit;
	const uint32_t lsz = fd.size == 1 ? 0u : fd.size == 2 ? 1u : fd.size == 4 ? 2u : 3u;
	return a | lsz << 6 | (fd.is_signed ? 1u << 8 : 0u);
}

// An integer field's value by its code, as int64_t (unsigned above
// INT64_MAX clamped): probe.h's load, the size from the code's log2.
inline int64_t read_int(const strata_probe_event *ev, uint32_t code)
{
	const bool sgn = code >> 8 & 1;
	const int64_t v = strata_probe__load_int(ev->argv[code & 63], 1u << (code >> 6 & 3), sgn);
	return !sgn && v < 0 ? INT64_MAX : v;
}

void put_text(char *dst, const char *a, const char *b)
{
	size_t k = 0;
	for (; *a && k + 1 < STRATA_AGG_KEY_TEXT; a++)
		dst[k++] = *a;
	if (b) {
		if (k + 1 < STRATA_AGG_KEY_TEXT)
			dst[k++] = ':';
		for (; *b && k + 1 < STRATA_AGG_KEY_TEXT; b++)
			dst[k++] = *b;
	}
	dst[k] = 0;
}

__attribute__((noinline)) bool same_text(const char *stored, const char *a, const char *b)
{
	char t[STRATA_AGG_KEY_TEXT];
	put_text(t, a, b);
	return strncmp(stored, t, STRATA_AGG_KEY_TEXT) == 0;
}

// Claims the FREE entry e for `key`: false when another hit claimed it
// first.
__attribute__((noinline)) bool claim(strata_agg_entry *e, uint64_t key, const char *a, const char *b)
{
	uint32_t want = STRATA_AGG_FREE;
	// Acquire (on failure too, which C++17 ties to success): the state we
	// then see may be LIVE, and its key is read (pairs with the release of
	// LIVE).  The claim itself is ours alone; LIVE publishes it.
	if (!__atomic_compare_exchange_n(&e->state, &want, (uint32_t)STRATA_AGG_CLAIMING, false,
					 __ATOMIC_ACQUIRE, __ATOMIC_ACQUIRE))
		return false;
	e->key = key;
	if (a)
		put_text(e->key_text, a, b);
	e->min = INT64_MAX;
	e->max = INT64_MIN;
	// Release: key, text, min, max before LIVE; pairs with the acquire
	// loads of state (here and in readers).
	__atomic_store_n(&e->state, (uint32_t)STRATA_AGG_LIVE, __ATOMIC_RELEASE);
	return true;
}

// The entry of `key` (text a[:b] for string and event keys): found, or
// claimed, or null when every entry is taken by other keys.  Never waits.
strata_agg_entry *entry_for(strata_rt_agg *ag, uint64_t key, const char *a, const char *b)
{
	const uint32_t start = (uint32_t)mix(key);
	for (uint32_t i = 0; i <= ag->mask; i++) {
		strata_agg_entry *e = &ag->entries[(start + i) & ag->mask];
		// Acquire: pairs with the release store of LIVE in claim(): the key
		// and initial min/max are visible.
		uint32_t st = __atomic_load_n(&e->state, __ATOMIC_ACQUIRE);
		if (st == STRATA_AGG_FREE) {
			if (claim(e, key, a, b))
				return e;
			st = __atomic_load_n(&e->state, __ATOMIC_ACQUIRE); // someone else claimed it first
		}
		if (st == STRATA_AGG_LIVE && e->key == key && (!a || same_text(e->key_text, a, b)))
			return e;
		// CLAIMING (key not known yet) or another key: probe on.
	}
	return nullptr;
}

// The value's code (bits 0..9) and the key's (10..19) for ev's event:
// from the cache word of its description, or worked out and cached.
__attribute__((noinline)) uint32_t plan_slow(strata_rt_agg *ag, const strata_probe_event *ev, uint64_t *slot)
{
	const uint64_t d = (uint64_t)(uintptr_t)ev->desc;
	const strata_agg_header *h = ag->hdr;
	const int vf = h->has_value ? strata_probe_field_index(ev->desc, h->value_field) : -1;
	const int kf =
		ag->key_kind == STRATA_AGG_KEY_FIELD ? strata_probe_field_index(ev->desc, h->key_field) : -1;
	bool cacheable = (d & 7) == 0 && d >> 47 == 0; // the address fits: user space, 8-aligned
	const uint32_t plan = field_code(ev->desc, vf, false, &cacheable) |
			      field_code(ev->desc, kf, true, &cacheable) << 10;
	if (cacheable)
		__atomic_store_n(slot, d >> 3 << 20 | plan, __ATOMIC_RELAXED);
	return plan;
}

inline uint32_t plan_of(strata_rt_agg *ag, const strata_probe_event *ev)
{
	const uint64_t d = (uint64_t)(uintptr_t)ev->desc;
	uint64_t *slot = &ag->fields[(d >> 4) & 7];
	const uint64_t w = __atomic_load_n(slot, __ATOMIC_RELAXED); // see strata_rt_agg
	if (__builtin_expect(w >> 20 == d >> 3 && (d & 7) == 0, 1))
		return (uint32_t)(w & 0xfffff);
	return plan_slow(ag, ev, slot);
}

// The hit's key (and its text, for string and event keys); false when the
// key field gives none.
inline bool key_of(strata_rt_agg *ag, const strata_probe_event *ev, uint32_t kc, uint64_t *key,
		   const char **a, const char **b)
{
	switch (ag->key_kind) {
	case STRATA_AGG_KEY_TID:
		*key = current_tid();
		return true;
	case STRATA_AGG_KEY_EVENT:
		*key = ev->tp->id;
		*a = ev->desc->provider;
		*b = ev->desc->name;
		return true;
	case STRATA_AGG_KEY_FIELD:
		if ((kc & 63) == kNoField)
			return false;
		if (kc & kStringBit) {
			*a = (const char *)ev->argv[kc & 63];
			*key = fnv1a(*a);
		} else {
			*key = (uint64_t)read_int(ev, kc);
		}
		return true;
	default:
		return true;
	}
}

void agg_hit(const strata_probe_event *ev, void *priv)
{
	auto *ag = static_cast<strata_rt_agg *>(priv);
	strata_agg_header *h = ag->hdr;
	if (ag->filtered && !filter_eval(ag->filter, ev->desc, ev->argv))
		return;
	// No count of hits here: a reader adds up the entries' counts,
	// overflow and no_value, which every hit past the filter lands in
	// exactly once (agg_layout.h, version 2): one locked add a hit less.
	const uint32_t plan = plan_of(ag, ev);
	int64_t value = 0;
	const bool has_value = h->has_value;
	if (has_value) {
		if ((plan & 63) == kNoField) {
			add(&h->no_value, 1);
			return;
		}
		value = read_int(ev, plan & 0x3ff);
	}
	uint64_t key = 0;
	const char *a = nullptr, *b = nullptr;
	if (!key_of(ag, ev, plan >> 10, &key, &a, &b)) {
		add(&h->no_value, 1);
		return;
	}
	strata_agg_entry *e = entry_for(ag, key, a, b);
	if (!e) {
		add(&h->overflow, 1);
		return;
	}
	add(&e->count, 1);
	if (has_value) {
		add_signed(&e->sum, value);
		lower(&e->min, value);
		raise_to(&e->max, value);
		add(&e->hist[bucket_of(value)], 1);
	}
}

// Open regions, for the fork child (renew_in_child).  A region takes a
// free slot with one CAS at open and gives it back at close; past
// kMaxOpen regions a child shares the region with its parent.
constexpr size_t kMaxOpen = 64;
std::atomic<strata_rt_agg *> g_open[kMaxOpen];
pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;

// A fresh memfd of the region's size, header written: the region's fd
// and header fields; -errno on failure.
int make_region_fd(size_t size)
{
	int fd = (int)syscall(SYS_memfd_create, "strata-agg", MFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)size) != 0) {
		int rc = -errno;
		close(fd);
		return rc;
	}
	return fd;
}

// The child's regions are its own: each inherited mapping (shared with
// the parent) is replaced in place (MAP_FIXED) by a fresh memfd with the
// same header and no counts, so the probes, which hold the same pointers,
// count the child's hits there.  System calls only, no lock: the child
// has one thread and may be in any state.  A region that cannot be
// renewed is unmapped privately (the child's hits then go nowhere).
void renew_in_child()
{
	for (auto &slot : g_open) {
		// Relaxed: the child has one thread; the parent's stores were
		// ordered by fork.
		strata_rt_agg *ag = slot.load(std::memory_order_relaxed);
		if (!ag)
			continue;
		strata_agg_header keep;
		memcpy(&keep, ag->hdr, sizeof keep);
		keep.pid = (uint32_t)getpid();
		keep.hits = keep.overflow = keep.no_value = 0;
		int fd = make_region_fd(ag->size);
		void *m = fd < 0 ? MAP_FAILED
				 : mmap(ag->hdr, ag->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
					0);
		if (m == MAP_FAILED) {
			if (fd >= 0)
				close(fd);
			mmap(ag->hdr, ag->size, PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
			fd = -1;
		}
		memcpy(ag->hdr, &keep, sizeof keep);
		close(ag->fd); // the parent's
		ag->fd = fd;
	}
}

void install_atfork()
{
	pthread_atfork(nullptr, nullptr, renew_in_child);
}

bool terminated(const char *s, size_t cap)
{
	return memchr(s, 0, cap) != nullptr;
}

} // namespace
} // namespace strata

using namespace strata;

// A new region's header (fresh zero pages: only what is not 0).
static void init_header(strata_agg_header *h, const struct strata_agg_spec *spec, uint32_t n, uint32_t kind)
{
	h->magic = STRATA_AGG_MAGIC;
	h->version = STRATA_AGG_VERSION;
	h->header_size = sizeof(strata_agg_header);
	h->entry_size = sizeof(strata_agg_entry);
	h->n_entries = n;
	h->key_kind = kind;
	h->pid = (uint32_t)getpid();
	h->has_value = spec->value_field[0] != 0;
	memcpy(h->pattern, spec->pattern, sizeof h->pattern);
	memcpy(h->value_field, spec->value_field, sizeof h->value_field);
	memcpy(h->key_field, spec->key_field, sizeof h->key_field);
}

extern "C" STRATA_EXPORT int strata_rt_agg_open(const struct strata_agg_spec *spec, strata_rt_agg **out)
{
	if (!spec || !out || !terminated(spec->pattern, sizeof spec->pattern) || !spec->pattern[0] ||
	    !terminated(spec->value_field, sizeof spec->value_field) ||
	    !terminated(spec->key_field, sizeof spec->key_field) ||
	    !terminated(spec->filter, sizeof spec->filter) || spec->max_keys == 0 ||
	    spec->max_keys > STRATA_AGG_MAX_ENTRIES)
		return -EINVAL;
	uint32_t kind = STRATA_AGG_KEY_NONE;
	if (!strcmp(spec->key_field, "$tid"))
		kind = STRATA_AGG_KEY_TID;
	else if (!strcmp(spec->key_field, "$event"))
		kind = STRATA_AGG_KEY_EVENT;
	else if (spec->key_field[0] == '$')
		return -EINVAL;
	else if (spec->key_field[0])
		kind = STRATA_AGG_KEY_FIELD; // integer or string: per event
	uint32_t n = 1;
	while (n < spec->max_keys)
		n <<= 1;
	if (kind == STRATA_AGG_KEY_NONE)
		n = 1;
	const size_t size = sizeof(strata_agg_header) + (size_t)n * sizeof(strata_agg_entry);
	auto *ag = (strata_rt_agg *)calloc(1, sizeof(strata_rt_agg));
	if (!ag)
		return -ENOMEM;
	FilterError ferr{};
	if (spec->filter[0] && !filter_compile(spec->filter, &ag->filter, &ferr)) {
		free(ag);
		return -EINVAL;
	}
	ag->filtered = ag->filter.n_ops != 0;
	ag->fd = make_region_fd(size);
	if (ag->fd < 0) {
		int rc = ag->fd;
		free(ag);
		return rc;
	}
	void *m = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, ag->fd, 0);
	if (m == MAP_FAILED) {
		int rc = -errno;
		close(ag->fd);
		free(ag);
		return rc;
	}
	ag->size = size;
	ag->hdr = (strata_agg_header *)m;
	ag->entries = (strata_agg_entry *)((char *)m + sizeof(strata_agg_header));
	ag->mask = n - 1;
	ag->key_kind = kind;
	init_header(ag->hdr, spec, n, kind);
	// The probe's registration (control lock, then quiescence) orders the
	// header before any hit.
	int rc = probe_register(spec->pattern, -1, agg_hit, ag, false, &ag->probe);
	if (rc < 0) {
		munmap(m, size);
		close(ag->fd);
		free(ag);
		return rc;
	}
	pthread_once(&g_atfork_once, install_atfork);
	for (auto &slot : g_open) {
		strata_rt_agg *none = nullptr;
		// Relaxed: the slot only matters to a fork child, ordered by fork.
		if (slot.compare_exchange_strong(none, ag, std::memory_order_relaxed))
			break;
	}
	*out = ag;
	return 0;
}

extern "C" STRATA_EXPORT int strata_rt_agg_fd(const strata_rt_agg *a)
{
	return a ? a->fd : -EINVAL;
}

extern "C" STRATA_EXPORT void strata_rt_agg_close(strata_rt_agg *a)
{
	if (!a)
		return;
	for (auto &slot : g_open) {
		strata_rt_agg *me = a;
		if (slot.compare_exchange_strong(me, nullptr, std::memory_order_relaxed))
			break;
	}
	strata_probe_unregister(a->probe); // after it, no hit touches the region
	munmap(a->hdr, a->size);
	close(a->fd);
	free(a);
}
