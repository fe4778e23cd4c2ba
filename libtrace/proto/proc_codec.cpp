/*
 * proc_codec.cpp - see proc_codec.h.  No allocation, no stdio, no locks:
 * only plain memory operations on the caller's buffers.
 */
#include "proc_codec.h"

#include <cstring>

namespace strata {
namespace proto {
namespace pc {

void Writer::put(uint64_t v, int n)
{
	if (!ok || cap - len < static_cast<size_t>(n)) {
		ok = false;
		return;
	}
	for (int i = 0; i < n; i++)
		p[len++] = static_cast<uint8_t>(v >> (8 * i));
}

void Writer::str(const char *s)
{
	size_t n = strlen(s);
	u32(static_cast<uint32_t>(n));
	if (!ok || cap - len < n) {
		ok = false;
		return;
	}
	memcpy(p + len, s, n);
	len += n;
}

void Writer::begin(Type t, uint32_t seq)
{
	len = 0;
	ok = true;
	u32(kMagic);
	u16(version);
	u16(static_cast<uint16_t>(t));
	u32(0);
	u32(seq);
}

bool Writer::end()
{
	if (!ok || len < kHeaderSize || len - kHeaderSize > kMaxPayload)
		return false;
	uint32_t l = static_cast<uint32_t>(len - kHeaderSize);
	for (int i = 0; i < 4; i++)
		p[8 + i] = static_cast<uint8_t>(l >> (8 * i));
	return true;
}

bool encode_hello(Writer &w, uint32_t seq)
{
	w.begin(Type::Hello, seq);
	w.u16(w.version); // libstrata needs nothing of versions 2, 3 and 5
	w.u16(w.version == kProcessVersion ? kProcessMaxVersion : w.version);
	w.u32(static_cast<uint32_t>(Role::Process));
	w.str("libstrata");
	return w.end();
}

bool encode_register(Writer &w, uint32_t seq, uint32_t pid, uint32_t uid, uint32_t flags, uint32_t signo,
		     const char *comm, int (*event_name)(uint32_t, char *, size_t, uint32_t *),
		     uint32_t n_events, uint64_t table_gen)
{
	w.begin(Type::Register, seq);
	w.u32(pid);
	w.u32(uid);
	w.u32(STRATA_ABI_MAJOR);
	w.u32(STRATA_ABI_MINOR);
	w.u32(flags);
	w.u32(signo);
	w.str(comm);
	const size_t count_at = w.len;
	w.u32(0);
	// Room kept for what follows the events (version 4: table_gen).
	const size_t tail = w.version >= 4 ? 8 : 0;
	if (w.cap - w.len < tail)
		w.ok = false;
	else
		w.cap -= tail;
	uint32_t sent = 0;
	for (uint32_t id = 0; w.ok && id < n_events && sent < kMaxEvents; id++) {
		char name[2 * kMaxName + 2];
		uint32_t ll = 0;
		if (event_name(id, name, sizeof(name), &ll) != 0 || strlen(name) > 2 * kMaxName + 1)
			continue;
		const size_t before = w.len;
		w.str(name);
		w.u32(ll);
		if (!w.ok) { // full: send what fits
			w.len = before;
			w.ok = true;
			break;
		}
		sent++;
	}
	if (w.ok)
		w.cap += tail;
	for (int i = 0; w.ok && i < 4; i++)
		w.p[count_at + i] = static_cast<uint8_t>(sent >> (8 * i));
	if (w.version >= 4)
		w.u64(table_gen);
	return w.end();
}

bool encode_buffer(Writer &w, uint32_t seq, uint32_t slot, int32_t status, uint64_t session_id)
{
	w.begin(Type::Buffer, seq);
	w.u32(slot);
	w.i32(status);
	if (w.version >= 4)
		w.u64(session_id);
	return w.end();
}

bool encode_agg_region(Writer &w, uint32_t seq, uint32_t slot, uint64_t session_id)
{
	const uint16_t v = w.version;
	w.version = kAggVersion;
	w.begin(Type::AggRegion, seq);
	w.version = v;
	w.u32(slot);
	w.u64(session_id);
	return w.end();
}

namespace {

struct Reader {
	const uint8_t *p;
	size_t n;
	size_t off = 0;
	bool ok = true;

	uint64_t get(int k)
	{
		if (!ok || n - off < static_cast<size_t>(k)) {
			ok = false;
			return 0;
		}
		uint64_t v = load_le(p + off, k);
		off += k;
		return v;
	}
	uint32_t u32() { return static_cast<uint32_t>(get(4)); }
	// A string into dst (NUL-terminated); rejects one longer than max or
	// than dst can hold, and embedded NULs.
	void str(char *dst, size_t cap, size_t max)
	{
		uint64_t len = get(4);
		if (!ok || len > max || len + 1 > cap || n - off < len || memchr(p + off, 0, len)) {
			ok = false;
			return;
		}
		memcpy(dst, p + off, len);
		dst[len] = 0;
		off += len;
	}
	void check(bool c)
	{
		if (!c)
			ok = false;
	}
	bool done() const { return ok && off == n; }
};

inline bool pow2(uint64_t v)
{
	return v && !(v & (v - 1));
}

void channel(Reader &r, struct strata_channel_config *c)
{
	memset(c, 0, sizeof(*c));
	r.str(c->name, sizeof(c->name), kMaxName);
	c->stream_id = r.u32();
	c->mode = r.u32();
	c->n_lanes = r.u32();
	c->n_subbuf = r.u32();
	c->subbuf_size = r.get(8);
	// The mode word: the mode, and a blocking timeout in discard mode only
	// (strata_abi.h).
	const uint32_t mode = c->mode & STRATA_MODE_MASK;
	r.check(c->name[0] && mode <= STRATA_MODE_OVERWRITE && c->n_lanes <= STRATA_MAX_LANES);
	r.check(!STRATA_MODE_BLOCK_MS(c->mode) || mode == STRATA_MODE_DISCARD);
	r.check(!c->n_subbuf || (pow2(c->n_subbuf) && c->n_subbuf >= 2 && c->n_subbuf <= STRATA_MAX_SUBBUF));
	r.check(!c->subbuf_size || (pow2(c->subbuf_size) && c->subbuf_size >= STRATA_MIN_SUBBUF_SIZE &&
				    c->subbuf_size <= STRATA_MAX_SUBBUF_SIZE));
}

void rule(Reader &r, struct strata_rule *x)
{
	memset(x, 0, sizeof(*x));
	r.str(x->pattern, sizeof(x->pattern), kMaxPattern);
	x->loglevel_max = static_cast<int32_t>(r.u32());
	x->enable = r.u32();
	r.str(x->filter, sizeof(x->filter), kMaxFilter);
	r.check(x->pattern[0] && x->loglevel_max >= -1 && x->loglevel_max <= 15 && x->enable <= 1);
}

} // namespace

bool parse_header(const uint8_t h[kHeaderSize], size_t max_payload, Header *out)
{
	Reader r{h, kHeaderSize};
	out->magic = r.u32();
	out->version = static_cast<uint16_t>(r.get(2));
	out->type = static_cast<uint16_t>(r.get(2));
	out->length = r.u32();
	out->seq = r.u32();
	return r.ok && out->magic == kMagic && out->version >= kProcessVersion &&
	       out->version <= kProcessMaxVersion && out->type >= 1 && out->type <= kTypeMaxV1 &&
	       out->length <= max_payload && out->length <= kMaxPayload;
}

bool parse_register_reply(const uint8_t *payload, size_t n, uint16_t version, Grants *out)
{
	Reader r{payload, n};
	out->n = r.u32();
	r.check(out->n <= kMaxSlots);
	for (uint32_t i = 0; r.ok && i < out->n; i++) {
		Grant &g = out->g[i];
		g.slot = r.u32();
		r.check(g.slot < kMaxSlots);
		g.session_id = r.get(8);
		channel(r, &g.cfg);
		for (int k = 0; k < 16; k++)
			g.uuid[k] = static_cast<uint8_t>(r.get(1));
		g.n_rules = r.u32();
		r.check(g.n_rules <= STRATA_MAX_RULES);
		for (uint32_t k = 0; r.ok && k < g.n_rules; k++)
			rule(r, &g.rules[k]);
		g.aggregate[0] = g.agg_filter[0] = 0;
		if (version >= kAggVersion) {
			r.str(g.aggregate, sizeof(g.aggregate), kMaxAggregate);
			r.str(g.agg_filter, sizeof(g.agg_filter), kMaxFilter);
		}
	}
	return r.done();
}

bool parse_table(const uint8_t *p, size_t n, TableInfo *info, Grants *out)
{
	Reader r{p, n};
	const uint32_t magic = r.u32();
	const uint16_t version = static_cast<uint16_t>(r.get(2));
	const uint16_t flags = static_cast<uint16_t>(r.get(2));
	const uint32_t abi = r.u32();
	info->daemon_pid = r.u32();
	info->gen = r.get(8);
	info->clock_fd = static_cast<int32_t>(r.u32());
	info->version = version;
	r.u32(); // zero
	if (!r.ok || magic != kTableMagic || version < 4 || (flags & kTableAsk) || abi != STRATA_ABI_MAJOR ||
	    info->clock_fd < -1 || (info->clock_fd >= 0 && info->daemon_pid == 0) ||
	    n - kTableHeaderSize < kHeaderSize)
		return false;
	Header h;
	if (!parse_header(p + kTableHeaderSize, n, &h) ||
	    h.type != static_cast<uint16_t>(Type::RegisterReply) ||
	    h.length != n - kTableHeaderSize - kHeaderSize)
		return false;
	return parse_register_reply(p + kTableHeaderSize + kHeaderSize, h.length, h.version, out);
}

bool parse_reply(const uint8_t *payload, size_t n, int32_t *status, char *text, size_t cap)
{
	Reader r{payload, n};
	*status = static_cast<int32_t>(r.u32());
	uint64_t len = r.get(4);
	if (!r.ok || len > kMaxText || n - r.off != len || *status > 0)
		return false;
	size_t k = len < cap ? static_cast<size_t>(len) : cap - 1; // truncated text is fine
	memcpy(text, payload + r.off, k);
	text[k] = 0;
	return true;
}

bool parse_hello_reply(const uint8_t *payload, size_t n, uint16_t *version, uint32_t *server_pid)
{
	Reader r{payload, n};
	*version = static_cast<uint16_t>(r.get(2));
	const uint32_t pid = r.u32();
	if (server_pid)
		*server_pid = pid;
	return r.done();
}

} // namespace pc
} // namespace proto
} // namespace strata
