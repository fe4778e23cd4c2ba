/*
 * proto.cpp - encoder and validating decoder of the control protocol.
 *
 * One description per message (the io() overloads below) serves both
 * directions: the Encoder appends fields, the Decoder reads them back and
 * stops at the first violation, remembering the first error.  Every
 * variable-length item is bounded twice: by its protocol maximum and by the
 * bytes actually left, so a hostile count cannot make the decoder allocate.
 */
#include "proto.h"

#include <algorithm>

#include <cctype>
#include <cstring>

#include "strata_abi.h"

namespace strata {
namespace proto {

const char *error_name(Error e)
{
	switch (e) {
	case Error::None:
		return "ok";
	case Error::BadMagic:
		return "bad magic";
	case Error::BadVersion:
		return "unsupported version";
	case Error::BadType:
		return "unknown message type";
	case Error::Truncated:
		return "truncated message";
	case Error::Oversized:
		return "oversized message";
	case Error::TrailingGarbage:
		return "trailing bytes after message";
	case Error::OutOfRange:
		return "field out of range";
	}
	return "?";
}

namespace {

inline bool pow2(uint64_t v)
{
	return v && !(v & (v - 1));
}

class Encoder {
public:
	std::vector<uint8_t> out;
	static constexpr bool decoding = false;
	uint16_t version = kVersion;

	void put(uint64_t v, int n)
	{
		for (int i = 0; i < n; i++)
			out.push_back(static_cast<uint8_t>(v >> (8 * i)));
	}
	void u8(const uint8_t &v) { put(v, 1); }
	void u16(const uint16_t &v) { put(v, 2); }
	void u32(const uint32_t &v) { put(v, 4); }
	void i32(const int32_t &v) { put(static_cast<uint32_t>(v), 4); }
	void u64(const uint64_t &v) { put(v, 8); }
	void bytes(const uint8_t *p, size_t n) { out.insert(out.end(), p, p + n); }
	void str(const std::string &s, size_t /*max*/)
	{
		put(s.size(), 4);
		out.insert(out.end(), s.begin(), s.end());
	}
	template <class T, class F> void vec(std::vector<T> &v, uint32_t /*max*/, size_t /*min_item*/, F f)
	{
		put(v.size(), 4);
		for (T &x : v)
			f(x);
	}
	void check(bool, const char *) {}
};

class Decoder {
public:
	const uint8_t *p;
	size_t n, off = 0;
	Error error = Error::None;
	std::string text;
	static constexpr bool decoding = true;

	uint16_t version = kVersion; // the header's: fields added later are read only from newer peers
	Decoder(const uint8_t *p_, size_t n_) : p(p_), n(n_) {}
	bool ok() const { return error == Error::None; }
	void fail(Error e, const std::string &t)
	{
		if (ok()) {
			error = e;
			text = t;
		}
	}
	uint64_t get(int k, const char *what)
	{
		if (!ok())
			return 0;
		if (n - off < static_cast<size_t>(k)) {
			fail(Error::Truncated, std::string("truncated at ") + what);
			return 0;
		}
		uint64_t v = load_le(p + off, k);
		off += k;
		return v;
	}
	void u8(uint8_t &v) { v = static_cast<uint8_t>(get(1, "u8")); }
	void u16(uint16_t &v) { v = static_cast<uint16_t>(get(2, "u16")); }
	void u32(uint32_t &v) { v = static_cast<uint32_t>(get(4, "u32")); }
	void i32(int32_t &v) { v = static_cast<int32_t>(static_cast<uint32_t>(get(4, "i32"))); }
	void u64(uint64_t &v) { v = get(8, "u64"); }
	void bytes(uint8_t *d, size_t k)
	{
		if (!ok())
			return;
		if (n - off < k)
			return fail(Error::Truncated, "truncated in byte array");
		memcpy(d, p + off, k);
		off += k;
	}
	void str(std::string &s, size_t max)
	{
		uint64_t len = get(4, "string length");
		if (!ok())
			return;
		if (len > max)
			return fail(Error::OutOfRange, "string of " + std::to_string(len) +
							       " bytes exceeds " + std::to_string(max));
		if (n - off < len)
			return fail(Error::Truncated, "truncated in string");
		if (memchr(p + off, 0, len))
			return fail(Error::OutOfRange, "NUL byte inside a string");
		s.assign(reinterpret_cast<const char *>(p + off), len);
		off += len;
	}
	template <class T, class F> void vec(std::vector<T> &v, uint32_t max, size_t min_item, F f)
	{
		uint64_t count = get(4, "count");
		if (!ok())
			return;
		if (count > max)
			return fail(Error::OutOfRange,
				    "count " + std::to_string(count) + " exceeds " + std::to_string(max));
		if (count * min_item > n - off)
			return fail(Error::Truncated, "count larger than the bytes left");
		v.clear();
		v.resize(count);
		for (T &x : v) {
			f(x);
			if (!ok())
				return;
		}
	}
	void check(bool cond, const char *what)
	{
		if (!cond)
			fail(Error::OutOfRange, what);
	}
};

// ---- one description per message -----------------------------------------
template <class A> void io(A &a, ChannelConfig &c)
{
	a.str(c.name, kMaxName);
	a.u32(c.stream_id);
	a.u32(c.mode);
	a.u32(c.n_lanes);
	a.u32(c.n_subbuf);
	a.u64(c.subbuf_size);
	if constexpr (A::decoding) {
		std::string why;
		if (a.ok() && !valid_channel(c, why))
			a.fail(Error::OutOfRange, why);
	}
}
template <class A> void io(A &a, Rule &r)
{
	a.str(r.pattern, kMaxPattern);
	a.i32(r.loglevel_max);
	a.u32(r.enable);
	a.str(r.filter, kMaxFilter);
	a.check(r.loglevel_max >= -1 && r.loglevel_max <= 15, "rule loglevel out of range");
	a.check(r.enable <= 1, "rule enable flag not 0 or 1");
	a.check(!r.pattern.empty(), "empty event pattern");
	a.check(std::all_of(r.pattern.begin(), r.pattern.end(),
			    [](char ch) { return ch > ' ' && ch < 0x7f; }),
		"event pattern with a space, a control character or a byte above ASCII");
}
template <class A> void io(A &, std::monostate &)
{
}
template <class A> void io(A &a, Hello &m)
{
	a.u16(m.min_version);
	a.u16(m.max_version);
	a.u32(m.role);
	a.str(m.client, kMaxName);
	a.check(m.min_version <= m.max_version, "hello: min_version > max_version");
	a.check(m.role == 1 || m.role == 2, "hello: unknown role");
}
template <class A> void io(A &a, HelloReply &m)
{
	a.u16(m.version);
	a.u32(m.server_pid);
}
template <class A> void io(A &a, Register &m)
{
	a.u32(m.pid);
	a.u32(m.uid);
	a.u32(m.abi_major);
	a.u32(m.abi_minor);
	a.u32(m.flags);
	a.u32(m.signo);
	a.check(m.flags <= (kRegisterAsync | kRegisterModule | kRegisterTable | kRegisterHandoff |
			    kRegisterProbes | kRegisterNote),
		"register: unknown flags");
	a.check(!(m.flags & (kRegisterProbes | kRegisterNote)) || a.version >= kMarksVersion,
		"register: the probe flags need protocol version 7");
	a.check(!(m.flags & kRegisterNote) || m.flags == (kRegisterNote | kRegisterProbes),
		"register: a note says kRegisterProbes and nothing else");
	a.check(!(m.flags & kRegisterHandoff) || (m.flags & kRegisterTable),
		"register: hand-off without the table flag");
	a.check(!(m.flags & kRegisterTable) || a.version >= 4,
		"register: the table flag needs protocol version 4");
	a.check(!((m.flags & kRegisterTable) && (m.flags & kRegisterModule)),
		"register: table and module flags together");
	a.check((m.flags & kRegisterAsync) ? (m.signo >= 1 && m.signo <= 64) : m.signo == 0,
		"register: bad signal number");
	a.str(m.comm, kMaxName);
	a.vec(m.events, kMaxEvents, 8, [&](EventName &e) {
		a.str(e.name, 2 * kMaxName + 1);
		a.u32(e.loglevel);
	});
	if (a.version >= 4)
		a.u64(m.table_gen);
}
template <class A> void io(A &a, RegisterReply &m)
{
	a.vec(m.sessions, kMaxSlots, 4 + 8 + 32 + 16 + 4, [&](SessionGrant &g) {
		a.u32(g.slot);
		a.check(g.slot < kMaxSlots, "grant: slot out of range");
		a.u64(g.session_id);
		io(a, g.channel);
		a.bytes(g.trace_uuid, 16);
		a.vec(g.rules, kMaxRules, 16, [&](Rule &r) { io(a, r); });
		if (a.version >= kAggVersion) {
			a.str(g.aggregate, kMaxAggregate);
			a.str(g.agg_filter, kMaxFilter);
		}
	});
}
template <class A> void io(A &a, Buffer &m)
{
	a.u32(m.slot);
	a.i32(m.status);
	a.check(m.slot < kMaxSlots, "buffer: slot out of range");
	a.check(m.status <= 0, "buffer: positive status");
	if (a.version >= 4)
		a.u64(m.session_id);
}
template <class A> void io(A &a, Create &m)
{
	a.str(m.session, kMaxName);
	a.str(m.output_dir, kMaxPath);
	io(a, m.channel);
	if (a.version >= 3) {
		a.str(m.relay, kMaxRelay);
		a.str(m.hostname, kMaxName);
		a.check(m.hostname.empty() || valid_session_name(m.hostname), "create: invalid hostname");
	}
	if (a.version >= 5) {
		a.u32(m.flags);
		const uint32_t known = a.version >= kTreeVersion ? kCreateOwned | kCreateTree : kCreateOwned;
		a.check((m.flags & ~known) == 0, "create: unknown flags");
	}
	if (a.version >= kAggVersion) {
		a.str(m.aggregate, kMaxAggregate);
		a.str(m.agg_filter, kMaxFilter);
		a.check(!m.aggregate.empty() || m.agg_filter.empty(),
			"create: an aggregation filter without aggregate");
	}
	a.check(valid_session_name(m.session), "create: invalid session name");
	a.check(!m.output_dir.empty() && m.output_dir[0] == '/', "create: output dir not absolute");
}
template <class A> void io(A &a, EnableEvent &m)
{
	a.str(m.session, kMaxName);
	io(a, m.rule);
}
template <class A> void io(A &a, DisableEvent &m)
{
	a.str(m.session, kMaxName);
	io(a, m.rule);
}
template <class A> void io(A &a, Start &m)
{
	a.str(m.session, kMaxName);
}
template <class A> void io(A &a, Stop &m)
{
	a.str(m.session, kMaxName);
}
template <class A> void io(A &a, Destroy &m)
{
	a.str(m.session, kMaxName);
}
template <class A> void io(A &, List &)
{
}
template <class A> void io(A &a, ListReply &m)
{
	a.vec(m.entries, 1u << 20, 16, [&](ListEntry &e) {
		a.u32(e.pid);
		a.str(e.comm, kMaxName);
		a.str(e.event, 2 * kMaxName + 1);
		a.u32(e.loglevel);
		if (a.version >= kMarksVersion) {
			a.u32(e.probes);
			a.check(e.probes <= kProbesUnknown, "list: unknown probes mark");
		}
	});
}
template <class A> void io(A &a, Status &m)
{
	a.str(m.session, kMaxName);
}
template <class A> void io(A &a, StatusReply &m)
{
	a.vec(m.sessions, kMaxSlots, 48, [&](SessionStatus &s) {
		a.str(s.name, kMaxName);
		a.u32(s.slot);
		a.u32(s.state);
		a.u32(s.uid);
		a.str(s.output_dir, kMaxPath);
		io(a, s.channel);
		a.vec(s.rules, kMaxRules, 16, [&](Rule &r) { io(a, r); });
		a.u32(s.n_buffers);
		a.u64(s.packets);
		a.u64(s.bytes);
		a.u64(s.errors);
		if (a.version >= 3)
			a.str(s.relay, kMaxText);
		if (a.version >= 5) {
			a.str(s.problems, kMaxText);
			a.u32(s.joined);
			a.vec(s.declared, kMaxDeclared, 4,
			      [&](std::string &e) { a.str(e, 2 * kMaxName + 1); });
		}
		if (a.version >= kAggVersion) {
			a.str(s.aggregate, kMaxAggregate);
			a.str(s.agg_filter, kMaxFilter);
			a.u32(s.agg_regions);
		}
		if (a.version >= kClocksVersion)
			a.str(s.clocks, kMaxText);
		a.check(s.slot < kMaxSlots, "status: slot out of range");
		a.check(s.state <= 2, "status: unknown state");
	});
	if (a.version >= kDaemonClocksVersion)
		a.str(m.clocks, kMaxText);
}
template <class A> void io(A &a, Reply &m)
{
	a.i32(m.status);
	a.str(m.text, kMaxText);
	a.check(m.status <= 0, "reply: positive status");
}
template <class A> void io(A &a, Wait &m)
{
	a.u32(m.timeout_ms);
	a.check(m.timeout_ms >= 1 && m.timeout_ms <= kMaxWaitMs, "wait: timeout out of range");
}
template <class A> void io(A &a, Snapshot &m)
{
	a.str(m.session, kMaxName);
	a.str(m.output_dir, kMaxPath);
	a.check(valid_session_name(m.session), "snapshot: invalid session name");
	a.check(m.output_dir.empty() || m.output_dir[0] == '/', "snapshot: output directory not absolute");
}
template <class A> void io(A &a, SnapshotOn &m)
{
	a.str(m.session, kMaxName);
	a.str(m.pattern, kMaxPattern);
	a.u32(m.holdoff_ms);
	a.u32(m.off);
	a.check(valid_session_name(m.session), "snapshot-on: invalid session name");
	a.check(m.off <= 1, "snapshot-on: off flag not 0 or 1");
	a.check(m.off || !m.pattern.empty(), "snapshot-on: empty event pattern");
	a.check(m.holdoff_ms <= kMaxHoldoffMs, "snapshot-on: hold-off longer than a day");
}
template <class A> void io(A &a, AggRegion &m)
{
	a.u32(m.slot);
	a.u64(m.session_id);
	a.check(m.slot < kMaxSlots, "agg-region: slot out of range");
}
template <class A> void io(A &a, AggFetch &m)
{
	a.str(m.session, kMaxName);
	a.u32(m.index);
	a.check(valid_session_name(m.session), "agg-fetch: invalid session name");
}
template <class A> void io(A &a, TargetRule &m)
{
	a.str(m.session, kMaxName);
	io(a, m.rule);
	a.vec(m.pids, kMaxTargetPids, 4, [&](uint32_t &p) {
		a.u32(p);
		a.check(p != 0, "target: pid 0");
	});
	a.vec(m.names, kMaxTargetNames, 4, [&](std::string &n) {
		a.str(n, kMaxName);
		a.check(!n.empty(), "target: empty process name");
	});
}

void put_header(std::vector<uint8_t> &out, const Header &h)
{
	Encoder e;
	e.u32(h.magic);
	e.u16(h.version);
	e.u16(h.type);
	e.u32(h.length);
	e.u32(h.seq);
	out.insert(out.begin(), e.out.begin(), e.out.end());
}

} // namespace

bool valid_session_name(const std::string &s)
{
	if (s.empty() || s.size() > kMaxName)
		return false;
	for (char c : s)
		if (!(isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.'))
			return false;
	return s != "." && s != "..";
}

bool valid_channel(const ChannelConfig &c, std::string &why)
{
	if (c.name.empty() || c.name.find('/') != std::string::npos || c.name == "." || c.name == "..")
		why = "channel name empty or not a file name";
	else if ((c.mode & STRATA_MODE_MASK) > STRATA_MODE_OVERWRITE)
		why = "channel mode must be discard (0) or overwrite (1)";
	else if (STRATA_MODE_BLOCK_MS(c.mode) && (c.mode & STRATA_MODE_MASK) != STRATA_MODE_DISCARD)
		why = "blocking applies to discard mode only";
	else if (c.n_lanes > STRATA_MAX_LANES)
		why = "lane count exceeds " + std::to_string(STRATA_MAX_LANES);
	else if (c.n_subbuf && (!pow2(c.n_subbuf) || c.n_subbuf < 2 || c.n_subbuf > STRATA_MAX_SUBBUF))
		why = "sub-buffer count must be a power of two in 2.." + std::to_string(STRATA_MAX_SUBBUF);
	else if (c.subbuf_size && (!pow2(c.subbuf_size) || c.subbuf_size < STRATA_MIN_SUBBUF_SIZE ||
				   c.subbuf_size > STRATA_MAX_SUBBUF_SIZE))
		why = "sub-buffer size must be a power of two in 4 KiB..64 MiB";
	else
		return true;
	return false;
}

std::vector<uint8_t> encode(const Message &m)
{
	Encoder e;
	e.version = m.version;
	Body body = m.body; // the shared io() descriptions take non-const references
	std::visit([&](auto &b) { io(e, b); }, body);
	Header h;
	h.type = static_cast<uint16_t>(m.body.index());
	h.length = static_cast<uint32_t>(e.out.size());
	h.seq = m.seq;
	h.version = m.version;
	put_header(e.out, h);
	return std::move(e.out);
}

DecodeResult decode_header(const uint8_t *p, size_t n, Header &h)
{
	DecodeResult r;
	Decoder d(p, n);
	d.u32(h.magic);
	d.u16(h.version);
	d.u16(h.type);
	d.u32(h.length);
	d.u32(h.seq);
	if (!d.ok()) {
		r.error = d.error;
		r.text = "header: " + d.text;
	} else if (h.magic != kMagic) {
		r.error = Error::BadMagic;
		r.text = "bad magic (not a Strata control message)";
	} else if (h.type == 0 || h.type > kTypeMax) {
		r.error = Error::BadType;
		r.text = "unknown message type " + std::to_string(h.type);
	} else if (h.type != static_cast<uint16_t>(Type::Hello) &&
		   (h.version < kMinVersion || h.version > kVersion)) {
		r.error = Error::BadVersion;
		r.text = "protocol version " + std::to_string(h.version) + " not supported (speak " +
			 std::to_string(kMinVersion) + ".." + std::to_string(kVersion) + ")";
	} else if (h.type > kTypeMaxV1 && h.version < 2) {
		r.error = Error::BadType;
		r.text = "message type " + std::to_string(h.type) + " needs protocol version 2";
	} else if (h.type >= kTypeMinV6 && h.version < kAggVersion) {
		r.error = Error::BadType;
		r.text = "message type " + std::to_string(h.type) + " needs protocol version " +
			 std::to_string(kAggVersion);
	} else if (h.length > (h.type == static_cast<uint16_t>(Type::ListReply) ||
					       h.type == static_cast<uint16_t>(Type::StatusReply)
				       ? kMaxReplyPayload
				       : kMaxPayload)) {
		r.error = Error::Oversized;
		r.text = "payload of " + std::to_string(h.length) + " bytes exceeds the limit of its type";
	}
	return r;
}

namespace {
template <size_t I> void emplace_index(Body &b, size_t type)
{
	if constexpr (I < std::variant_size<Body>::value) {
		if (type == I)
			b.emplace<I>();
		else
			emplace_index<I + 1>(b, type);
	}
}
} // namespace

DecodeResult decode(const uint8_t *p, size_t n, Message &out)
{
	Header h;
	DecodeResult r = decode_header(p, n, h);
	if (!r)
		return r;
	if (n - kHeaderSize < h.length) {
		r.error = Error::Truncated;
		r.text = "payload shorter than the header's length";
		return r;
	}
	if (n - kHeaderSize > h.length) {
		r.error = Error::TrailingGarbage;
		r.text = "bytes after the payload";
		return r;
	}
	out.seq = h.seq;
	out.version = h.version;
	emplace_index<0>(out.body, h.type);
	Decoder d(p + kHeaderSize, h.length);
	d.version = h.version;
	std::visit([&](auto &b) { io(d, b); }, out.body);
	if (d.ok() && d.off != d.n)
		d.fail(Error::TrailingGarbage,
		       std::to_string(d.n - d.off) + " bytes left after the last field");
	if (!d.ok()) {
		r.error = d.error;
		r.text = d.text;
		out.body = std::monostate{};
	}
	return r;
}

} // namespace proto
} // namespace strata
