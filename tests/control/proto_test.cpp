/*
 * proto_test.cpp - the control protocol's decoders against hostile input:
 * round trips of every message type, each class of malformed message with
 * its exact error code, every truncation of valid messages, and a fuzz loop
 * (random bytes and mutations of valid messages) whose oracle is: the
 * decoder either rejects the input, or accepts it and re-encoding the
 * result gives back exactly the input bytes (the encoding is canonical).
 * The process side's allocation-free codec (proc_codec.h) is checked
 * against the full one in both directions, and fuzzed.  And the socket
 * waits' deadlines (sock.h).
 */
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>

#include "proto/proc_codec.h"
#include "proto/proto.h"
#include "proto/sock.h"

using namespace strata::proto;

namespace {

std::vector<Message> samples()
{
	std::vector<Message> v;
	auto add = [&](Body b) {
		Message m;
		m.seq = static_cast<uint32_t>(v.size() + 7);
		m.body = std::move(b);
		v.push_back(std::move(m));
	};
	add(Hello{1, 1, 2, "strata"});
	add(HelloReply{1, 4242});
	Register reg;
	reg.pid = 99;
	reg.uid = 1000;
	reg.abi_major = 1;
	reg.comm = "demo";
	reg.events = {{"demo:hello", 6}, {"demo:bye", 7}};
	add(reg);
	RegisterReply rr;
	SessionGrant g;
	g.slot = 3;
	g.channel.mode = 1;
	g.channel.n_subbuf = 4;
	g.channel.subbuf_size = 8192;
	for (int i = 0; i < 16; i++)
		g.trace_uuid[i] = static_cast<uint8_t>(i * 17);
	g.rules = {{"demo:*", -1, 1, ""}, {"demo:bye", 3, 0, "x > 1"}};
	rr.sessions = {g, g};
	rr.sessions[1].slot = 15;
	add(rr);
	add(Buffer{2, 0});
	add(Buffer{2, -12});
	Create c;
	c.session = "s1";
	c.output_dir = "/tmp/x";
	c.channel.n_lanes = 4;
	add(c);
	add(EnableEvent{"s1", {"*", -1, 1, ""}});
	add(DisableEvent{"s1", {"p:e", 5, 0, ""}});
	add(Start{"s1"});
	add(Stop{"s1"});
	add(Destroy{"s1"});
	add(List{});
	ListReply lr;
	lr.entries = {{1, "a", "p:e", 3}, {2, "b", "p:f", 7}};
	add(lr);
	add(Status{""});
	StatusReply sr;
	SessionStatus ss;
	ss.name = "s1";
	ss.slot = 1;
	ss.state = 1;
	ss.output_dir = "/tmp/x";
	ss.rules = {{"*", -1, 1, ""}};
	ss.packets = 1ull << 40;
	sr.sessions = {ss};
	add(sr);
	add(Reply{-2, "no such session"});
	add(Wait{250});
	add(TargetRule{"s1", {"mutex:*", -1, 1, ""}, {42, 7}, {"svc", "worker"}});
	add(Snapshot{"s1", ""});
	add(Snapshot{"s1", "/tmp/snap"});
	add(SnapshotOn{"s1", "svc:fatal", 1000, 0});
	add(SnapshotOn{"s1", "", 0, 1});
	add(AggRegion{4, 77});
	add(AggFetch{"s1", 2});
	return v;
}

// Header helpers for hand-made messages.
std::vector<uint8_t> header(uint32_t magic, uint16_t ver, uint16_t type, uint32_t len, uint32_t seq = 1)
{
	std::vector<uint8_t> b(16);
	memcpy(&b[0], &magic, 4);
	memcpy(&b[4], &ver, 2);
	memcpy(&b[6], &type, 2);
	memcpy(&b[8], &len, 4);
	memcpy(&b[12], &seq, 4);
	return b;
}

Error decode_err(const std::vector<uint8_t> &b)
{
	Message m;
	return decode(b.data(), b.size(), m).error;
}

void set_len(std::vector<uint8_t> &b)
{
	uint32_t len = static_cast<uint32_t>(b.size() - kHeaderSize);
	memcpy(&b[8], &len, 4);
}

} // namespace

TEST(Proto, EveryTypeRoundTrips)
{
	std::vector<Message> v = samples();
	ASSERT_EQ(v.size(), 25u);
	std::vector<bool> seen(kTypeMax + 1);
	for (const Message &m : v) {
		std::vector<uint8_t> b = encode(m);
		Message d;
		DecodeResult r = decode(b.data(), b.size(), d);
		ASSERT_TRUE(r) << r.text << " for type " << static_cast<int>(m.type());
		EXPECT_EQ(d.type(), m.type());
		EXPECT_EQ(d.seq, m.seq);
		EXPECT_EQ(encode(d), b);
		seen[static_cast<size_t>(m.type())] = true;
	}
	for (uint16_t t = 1; t <= kTypeMax; t++)
		EXPECT_TRUE(seen[t]) << "type " << t << " not covered";
	// Field values, for a deep message.
	std::vector<uint8_t> b = encode(v[3]);
	Message d;
	ASSERT_TRUE(decode(b.data(), b.size(), d));
	const RegisterReply &rr = std::get<RegisterReply>(d.body);
	ASSERT_EQ(rr.sessions.size(), 2u);
	EXPECT_EQ(rr.sessions[0].slot, 3u);
	EXPECT_EQ(rr.sessions[1].slot, 15u);
	EXPECT_EQ(rr.sessions[0].channel.subbuf_size, 8192u);
	EXPECT_EQ(rr.sessions[0].trace_uuid[15], 255);
	ASSERT_EQ(rr.sessions[0].rules.size(), 2u);
	EXPECT_EQ(rr.sessions[0].rules[1].pattern, "demo:bye");
	EXPECT_EQ(rr.sessions[0].rules[1].loglevel_max, 3);
	EXPECT_EQ(rr.sessions[0].rules[1].filter, "x > 1");
}

TEST(Proto, HeaderErrors)
{
	std::vector<uint8_t> ok = encode(Message{5, Start{"s"}});
	ASSERT_EQ(decode_err(ok), Error::None);

	std::vector<uint8_t> b = ok;
	b[0] ^= 1;
	EXPECT_EQ(decode_err(b), Error::BadMagic);

	b = ok;
	b[4] = kVersion + 1; // a version beyond ours, on a non-HELLO message
	EXPECT_EQ(decode_err(b), Error::BadVersion);
	b[4] = 1; // version 1 is still spoken
	EXPECT_EQ(decode_err(b), Error::None);
	b[4] = 0;
	EXPECT_EQ(decode_err(b), Error::BadVersion);

	for (uint16_t t : {0, 23, 255, 65535}) {
		b = ok;
		memcpy(&b[6], &t, 2);
		EXPECT_EQ(decode_err(b), Error::BadType) << t;
	}
	// WAIT, TARGET_RULE, SNAPSHOT and SNAPSHOT_ON exist only from version 2 on.
	for (Body body : {Body{Wait{5}}, Body{TargetRule{"s", {"*", -1, 1, ""}, {1}, {}}},
			  Body{Snapshot{"s", ""}}, Body{SnapshotOn{"s", "a:b", 0, 0}}}) {
		b = encode(Message{1, body});
		EXPECT_EQ(decode_err(b), Error::None);
		b[4] = 1;
		EXPECT_EQ(decode_err(b), Error::BadType);
	}
	EXPECT_EQ(decode_err(encode(Message{1, Wait{0}})), Error::OutOfRange);
	EXPECT_EQ(decode_err(encode(Message{1, TargetRule{"s", {"*", -1, 1, ""}, {0}, {}}})),
		  Error::OutOfRange);
	EXPECT_EQ(decode_err(encode(Message{1, TargetRule{"s", {"*", -1, 1, ""}, {}, {""}}})),
		  Error::OutOfRange);
	EXPECT_EQ(decode_err(encode(Message{1, Snapshot{"s", "rel/dir"}})), Error::OutOfRange);
	EXPECT_EQ(decode_err(encode(Message{1, Snapshot{"", ""}})), Error::OutOfRange);
	EXPECT_EQ(decode_err(encode(Message{1, SnapshotOn{"s", "", 0, 0}})), Error::OutOfRange);
	EXPECT_EQ(decode_err(encode(Message{1, SnapshotOn{"s", "a:b", 0, 2}})), Error::OutOfRange);
	EXPECT_EQ(decode_err(encode(Message{1, SnapshotOn{"s", "a:b", kMaxHoldoffMs + 1, 0}})),
		  Error::OutOfRange);

	b = header(kMagic, 1, static_cast<uint16_t>(Type::Reply), kMaxPayload + 1);
	Header h;
	EXPECT_EQ(decode_header(b.data(), b.size(), h).error, Error::Oversized);
	b = header(kMagic, 1, static_cast<uint16_t>(Type::Reply), 0xffffffffu);
	EXPECT_EQ(decode_err(b), Error::Oversized);
	// LIST and STATUS replies grow with the live processes: up to
	// kMaxReplyPayload (their readers are clients; the daemon keeps 1 MiB).
	b = header(kMagic, 1, static_cast<uint16_t>(Type::ListReply), kMaxPayload + 1);
	EXPECT_EQ(decode_header(b.data(), b.size(), h).error, Error::None);
	b = header(kMagic, 1, static_cast<uint16_t>(Type::StatusReply), kMaxReplyPayload + 1);
	EXPECT_EQ(decode_header(b.data(), b.size(), h).error, Error::Oversized);

	b = ok;
	b.push_back(0);
	EXPECT_EQ(decode_err(b), Error::TrailingGarbage); // beyond the header's length
	set_len(b);
	EXPECT_EQ(decode_err(b), Error::TrailingGarbage); // inside the length, after the fields

	// A HELLO from a future version still decodes: that is negotiation.
	std::vector<uint8_t> hello = encode(Message{1, Hello{1, 9, 1, "x"}});
	hello[4] = 9;
	EXPECT_EQ(decode_err(hello), Error::None);
}

TEST(Proto, EveryTruncationIsAnError)
{
	for (const Message &m : samples()) {
		std::vector<uint8_t> b = encode(m);
		for (size_t n = 0; n < b.size(); n++) {
			Message d;
			DecodeResult r = decode(b.data(), n, d);
			EXPECT_EQ(r.error, Error::Truncated)
				<< "type " << static_cast<int>(m.type()) << " cut at " << n;
			// Truncated payload but header length adjusted: the fields are cut.
			if (n >= kHeaderSize && n < b.size()) {
				std::vector<uint8_t> c(b.begin(), b.begin() + static_cast<long>(n));
				set_len(c);
				DecodeResult r2 = decode(c.data(), c.size(), d);
				EXPECT_FALSE(r2)
					<< "type " << static_cast<int>(m.type()) << " shortened to " << n;
			}
		}
	}
}

TEST(Proto, OutOfRangeFields)
{
	auto err_of = [](Body body) {
		std::vector<uint8_t> b = encode(Message{1, std::move(body)});
		return decode_err(b);
	};
	EXPECT_EQ(err_of(Buffer{16, 0}), Error::OutOfRange);
	EXPECT_EQ(err_of(Buffer{0, 1}), Error::OutOfRange);
	EXPECT_EQ(err_of(Hello{2, 1, 1, ""}), Error::OutOfRange);
	EXPECT_EQ(err_of(Hello{1, 1, 3, ""}), Error::OutOfRange);
	EXPECT_EQ(err_of(Start{std::string(64, 'a')}), Error::OutOfRange);
	EXPECT_EQ(err_of(Start{std::string("a\0b", 3)}), Error::OutOfRange);
	EXPECT_EQ(err_of(Reply{1, ""}), Error::OutOfRange);
	EXPECT_EQ(err_of(EnableEvent{"s", {"", -1, 1, ""}}), Error::OutOfRange);
	EXPECT_EQ(err_of(EnableEvent{"s", {"p", -2, 1, ""}}), Error::OutOfRange);
	EXPECT_EQ(err_of(EnableEvent{"s", {"p", -1, 2, ""}}), Error::OutOfRange);
	EXPECT_EQ(err_of(EnableEvent{"s", {std::string(128, 'p'), -1, 1, ""}}), Error::OutOfRange);
	// Patterns are printed by `strata status` (root's sees every user's):
	// printable ASCII only, no space (issue 31).
	EXPECT_EQ(err_of(EnableEvent{"s", {"a\x1b[2J:*", -1, 1, ""}}), Error::OutOfRange);
	EXPECT_EQ(err_of(EnableEvent{"s", {"a b", -1, 1, ""}}), Error::OutOfRange);
	EXPECT_EQ(err_of(EnableEvent{"s", {"caf\xc3\xa9:*", -1, 1, ""}}), Error::OutOfRange);

	Create c;
	c.session = "s";
	c.output_dir = "relative/dir";
	EXPECT_EQ(err_of(c), Error::OutOfRange);
	c.output_dir = "/abs";
	c.session = "../evil";
	EXPECT_EQ(err_of(c), Error::OutOfRange);
	c.session = "ok";
	EXPECT_EQ(err_of(c), Error::None);
	for (auto bad : {std::make_pair(0, 2), std::make_pair(1, 3), std::make_pair(1, 128),
			 std::make_pair(2, 4095), std::make_pair(2, 1 << 27), std::make_pair(3, 257)}) {
		Create x = c;
		if (bad.first == 0)
			x.channel.mode = static_cast<uint32_t>(bad.second);
		else if (bad.first == 1)
			x.channel.n_subbuf = static_cast<uint32_t>(bad.second);
		else if (bad.first == 2)
			x.channel.subbuf_size = static_cast<uint64_t>(bad.second);
		else
			x.channel.n_lanes = static_cast<uint32_t>(bad.second);
		EXPECT_EQ(err_of(x), Error::OutOfRange) << bad.first << " " << bad.second;
	}
	c.channel.name = "../x";
	EXPECT_EQ(err_of(c), Error::OutOfRange);

	// Counts larger than the protocol allows, or than the bytes left.
	RegisterReply rr;
	rr.sessions.resize(17);
	EXPECT_EQ(err_of(rr), Error::OutOfRange);
	std::vector<uint8_t> b = header(kMagic, 1, static_cast<uint16_t>(Type::ListReply), 4);
	uint32_t huge = 1000000;
	b.resize(20);
	memcpy(&b[16], &huge, 4);
	EXPECT_EQ(decode_err(b), Error::Truncated); // a count the payload cannot hold
	huge = 0xffffffffu;
	memcpy(&b[16], &huge, 4);
	EXPECT_EQ(decode_err(b), Error::OutOfRange);
	// A string length beyond the payload.
	b = header(kMagic, 1, static_cast<uint16_t>(Type::Start), 8);
	uint32_t slen = 60;
	b.resize(24);
	memcpy(&b[16], &slen, 4);
	EXPECT_EQ(decode_err(b), Error::Truncated);
}

TEST(Proto, FuzzNeverCrashesAndAcceptsOnlyCanonicalInput)
{
	std::mt19937_64 rng(12345);
	std::vector<std::vector<uint8_t>> seeds;
	for (const Message &m : samples())
		seeds.push_back(encode(m));
	const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
	uint64_t runs = 0, accepted = 0;
	while (std::chrono::steady_clock::now() < end) {
		for (int k = 0; k < 1000; k++, runs++) {
			std::vector<uint8_t> b;
			int mode = static_cast<int>(rng() % 4);
			if (mode == 0) { // random bytes behind a plausible header
				b = header(kMagic, 1, static_cast<uint16_t>(1 + rng() % kTypeMax), 0);
				size_t n = rng() % 200;
				for (size_t i = 0; i < n; i++)
					b.push_back(static_cast<uint8_t>(rng()));
				set_len(b);
			} else if (mode == 1) { // pure random
				size_t n = rng() % 64;
				for (size_t i = 0; i < n; i++)
					b.push_back(static_cast<uint8_t>(rng()));
			} else { // mutate a valid message
				b = seeds[rng() % seeds.size()];
				int flips = 1 + static_cast<int>(rng() % 4);
				for (int f = 0; f < flips; f++) {
					size_t at = rng() % b.size();
					if (mode == 2)
						b[at] ^= static_cast<uint8_t>(1u << (rng() % 8));
					else
						b[at] = static_cast<uint8_t>(rng());
				}
				if (rng() % 3 == 0)
					b.resize(rng() % (b.size() + 8));
			}
			Message d;
			DecodeResult r = decode(b.data(), b.size(), d);
			if (!r) {
				ASSERT_NE(r.error, Error::None);
				ASSERT_FALSE(r.text.empty());
				continue;
			}
			accepted++;
			std::vector<uint8_t> again = encode(d);
			if (d.type() == Type::Hello)
				again[4] = b[4], again[5] = b[5]; // HELLO keeps any header version
			ASSERT_EQ(again, b)
				<< "accepted a non-canonical message of type " << static_cast<int>(d.type());
		}
	}
	RecordProperty("runs", static_cast<int>(runs));
	printf("fuzz: %llu inputs, %llu accepted (all canonical)\n", static_cast<unsigned long long>(runs),
	       static_cast<unsigned long long>(accepted));
	EXPECT_GT(runs, 10000u);
}

// ---- the process-side, allocation-free codec against the full one ---------

TEST(ProcCodec, ReadsWhatTheDaemonWrites)
{
	RegisterReply rr = std::get<RegisterReply>(samples()[3].body);
	rr.sessions[0].session_id = 0x0102030405060708ull;
	rr.sessions[1].rules.clear();
	rr.sessions[1].channel.name = std::string(63, 'c');
	std::vector<uint8_t> b = encode(Message{4, rr, kProcessVersion}); // what a process is sent
	Header h;
	ASSERT_TRUE(pc::parse_header(b.data(), kMaxPayload, &h));
	EXPECT_EQ(h.type, static_cast<uint16_t>(Type::RegisterReply));
	static pc::Grants g; // large: static, as in libstrata
	ASSERT_TRUE(pc::parse_register_reply(b.data() + kHeaderSize, h.length, h.version, &g));
	ASSERT_EQ(g.n, 2u);
	EXPECT_EQ(g.g[0].slot, 3u);
	EXPECT_EQ(g.g[0].session_id, 0x0102030405060708ull);
	EXPECT_EQ(g.g[0].cfg.mode, 1u);
	EXPECT_EQ(g.g[0].cfg.n_subbuf, 4u);
	EXPECT_EQ(g.g[0].cfg.subbuf_size, 8192u);
	EXPECT_STREQ(g.g[0].cfg.name, "channel0");
	EXPECT_EQ(0, memcmp(g.g[0].uuid, rr.sessions[0].trace_uuid, 16));
	ASSERT_EQ(g.g[0].n_rules, 2u);
	EXPECT_STREQ(g.g[0].rules[1].pattern, "demo:bye");
	EXPECT_EQ(g.g[0].rules[1].loglevel_max, 3);
	EXPECT_EQ(g.g[0].rules[1].enable, 0u);
	EXPECT_STREQ(g.g[0].rules[1].filter, "x > 1");
	EXPECT_EQ(g.g[1].slot, 15u);
	EXPECT_EQ(g.g[1].n_rules, 0u);
	EXPECT_EQ(std::string(g.g[1].cfg.name), rr.sessions[1].channel.name);

	std::vector<uint8_t> r = encode(Message{5, Reply{-17, "exists"}});
	int32_t st = 0;
	char text[4];
	ASSERT_TRUE(pc::parse_reply(r.data() + kHeaderSize, r.size() - kHeaderSize, &st, text, sizeof(text)));
	EXPECT_EQ(st, -17);
	EXPECT_STREQ(text, "exi"); // truncated to the caller's buffer
	std::vector<uint8_t> hr = encode(Message{6, HelloReply{1, 77}});
	uint16_t v = 0;
	ASSERT_TRUE(pc::parse_hello_reply(hr.data() + kHeaderSize, hr.size() - kHeaderSize, &v));
	EXPECT_EQ(v, 1);
}

// Version 6: a grant's aggregation reaches the process codec; a version 5
// answer has none; the new types need a version 6 header; the process's
// HELLO offers up to 6 and its AGG_REGION decodes.
TEST(ProcCodec, AggregationGrantsAndRegions)
{
	RegisterReply rr = std::get<RegisterReply>(samples()[3].body);
	rr.sessions[0].aggregate = "pthread:mutex_lock:wait_ns by lock limit 64";
	rr.sessions[0].agg_filter = "wait_ns > 1000";
	static pc::Grants g;
	for (uint16_t ver : {kAggVersion, uint16_t(kAggVersion - 1)}) {
		std::vector<uint8_t> b = encode(Message{4, rr, ver});
		Header h;
		ASSERT_TRUE(pc::parse_header(b.data(), kMaxPayload, &h));
		ASSERT_TRUE(pc::parse_register_reply(b.data() + kHeaderSize, h.length, h.version, &g));
		ASSERT_EQ(g.n, 2u);
		EXPECT_STREQ(g.g[0].aggregate, ver >= kAggVersion ? rr.sessions[0].aggregate.c_str() : "");
		EXPECT_STREQ(g.g[0].agg_filter, ver >= kAggVersion ? "wait_ns > 1000" : "");
		EXPECT_STREQ(g.g[1].aggregate, "");
		Message d;
		ASSERT_TRUE(decode(b.data(), b.size(), d));
		EXPECT_EQ(std::get<RegisterReply>(d.body).sessions[0].aggregate,
			  ver >= kAggVersion ? rr.sessions[0].aggregate : "");
	}
	for (Body body : {Body{AggRegion{1, 2}}, Body{AggFetch{"s", 0}}}) {
		std::vector<uint8_t> b = encode(Message{1, body, kAggVersion});
		EXPECT_EQ(decode_err(b), Error::None);
		b[4] = static_cast<uint8_t>(kAggVersion - 1); // an older peer's header
		EXPECT_EQ(decode_err(b), Error::BadType);
	}
	Create c;
	c.session = "s";
	c.output_dir = "/tmp/x";
	c.agg_filter = "x > 1"; // a filter with no aggregation
	EXPECT_EQ(decode_err(encode(Message{1, c, kAggVersion})), Error::OutOfRange);
	uint8_t buf[256];
	pc::Writer w(buf, sizeof buf);
	ASSERT_TRUE(pc::encode_hello(w, 1));
	Message m;
	ASSERT_TRUE(decode(buf, w.len, m));
	EXPECT_EQ(std::get<Hello>(m.body).min_version, kProcessVersion);
	EXPECT_EQ(std::get<Hello>(m.body).max_version, kProcessMaxVersion);
	ASSERT_TRUE(pc::encode_agg_region(w, 5, 9, 0x1122334455667788ull));
	ASSERT_TRUE(decode(buf, w.len, m));
	EXPECT_EQ(m.version, kAggVersion);
	EXPECT_EQ(std::get<AggRegion>(m.body).slot, 9u);
	EXPECT_EQ(std::get<AggRegion>(m.body).session_id, 0x1122334455667788ull);
}

namespace {
int two_events(uint32_t id, char *buf, size_t len, uint32_t *ll)
{
	if (id >= 2)
		return -2;
	snprintf(buf, len, "prov:ev%u", id);
	*ll = 4 + id;
	return 0;
}
} // namespace

TEST(ProcCodec, WritesWhatTheDaemonReads)
{
	uint8_t buf[4096];
	pc::Writer w(buf, sizeof(buf));
	ASSERT_TRUE(pc::encode_register(w, 9, 123, 1000, kRegisterAsync, 61, "myprog", two_events, 5));
	Message m;
	DecodeResult r = decode(buf, w.len, m);
	ASSERT_TRUE(r) << r.text;
	EXPECT_EQ(m.seq, 9u);
	const Register &reg = std::get<Register>(m.body);
	EXPECT_EQ(reg.pid, 123u);
	EXPECT_EQ(reg.uid, 1000u);
	EXPECT_EQ(reg.flags, kRegisterAsync);
	EXPECT_EQ(reg.signo, 61u);
	EXPECT_EQ(reg.comm, "myprog");
	ASSERT_EQ(reg.events.size(), 2u);
	EXPECT_EQ(reg.events[1].name, "prov:ev1");
	EXPECT_EQ(reg.events[1].loglevel, 5u);

	// A buffer too small for every event: as many as fit, still valid.
	uint8_t small[80];
	pc::Writer ws(small, sizeof(small));
	ASSERT_TRUE(pc::encode_register(ws, 1, 1, 1, 0, 0, "p", two_events, 2));
	ASSERT_TRUE(decode(small, ws.len, m));
	EXPECT_EQ(std::get<Register>(m.body).events.size(), 1u);

	ASSERT_TRUE(pc::encode_hello(w, 2));
	ASSERT_TRUE(decode(buf, w.len, m));
	EXPECT_EQ(std::get<Hello>(m.body).role, static_cast<uint32_t>(Role::Process));
	ASSERT_TRUE(pc::encode_buffer(w, 3, 7, -24));
	ASSERT_TRUE(decode(buf, w.len, m));
	EXPECT_EQ(std::get<Buffer>(m.body).slot, 7u);
	EXPECT_EQ(std::get<Buffer>(m.body).status, -24);
	// Overflow is reported, never written past the buffer.
	pc::Writer tiny(small, 10);
	EXPECT_FALSE(pc::encode_hello(tiny, 1));
}

TEST(ProcCodec, FuzzedRepliesNeverCrashAndAreNoLooserThanTheDaemon)
{
	RegisterReply rr = std::get<RegisterReply>(samples()[3].body);
	std::vector<uint8_t> seed = encode(Message{1, rr});
	std::mt19937_64 rng(99);
	static pc::Grants g;
	uint64_t accepted = 0;
	for (int k = 0; k < 50000; k++) {
		std::vector<uint8_t> b = seed;
		int flips = 1 + static_cast<int>(rng() % 3);
		for (int f = 0; f < flips; f++)
			b[kHeaderSize + rng() % (b.size() - kHeaderSize)] = static_cast<uint8_t>(rng());
		if (rng() % 4 == 0)
			b.resize(kHeaderSize + rng() % (b.size() - kHeaderSize));
		const bool pc_ok = pc::parse_register_reply(b.data() + kHeaderSize, b.size() - kHeaderSize,
							    kVersion, &g);
		// The full decoder's verdict on the same payload.
		uint32_t len = static_cast<uint32_t>(b.size() - kHeaderSize);
		memcpy(&b[8], &len, 4);
		Message m;
		const bool full_ok = static_cast<bool>(decode(b.data(), b.size(), m));
		if (pc_ok) {
			accepted++;
			ASSERT_LE(g.n, kMaxSlots);
			for (uint32_t i = 0; i < g.n; i++) {
				ASSERT_LT(g.g[i].slot, kMaxSlots);
				ASSERT_LE(g.g[i].n_rules, static_cast<uint32_t>(STRATA_MAX_RULES));
				ASSERT_TRUE(memchr(g.g[i].cfg.name, 0, sizeof(g.g[i].cfg.name)));
			}
		}
		if (full_ok) {
			ASSERT_TRUE(pc_ok) << "the process rejects what the daemon accepts";
		}
	}
	printf("%llu of 50000 mutated replies accepted\n", static_cast<unsigned long long>(accepted));
}

// Version 7, the probe marks (docs/probes.md, "Who is on a tracepoint"):
// LIST_REPLY's per-entry mark travels from version 7 on (an older reply has
// none: read as unknown, every process is read), REGISTER's kRegisterProbes
// and kRegisterNote need a version 7 header (a version 6 daemon refuses
// them as unknown flags), a note says nothing else, and the process codec
// writes what the daemon reads.
TEST(Proto, ProbeMarksAreVersion7)
{
	ListReply lr;
	lr.entries = {{1, "a", "p:e", 3, kProbesNone},
		      {2, "b", "p:f", 7, kProbesMarked},
		      {3, "c", "p:g", 1, kProbesUnknown}};
	Message d;
	std::vector<uint8_t> b7 = encode(Message{1, lr, kMarksVersion});
	ASSERT_TRUE(decode(b7.data(), b7.size(), d));
	const auto &e7 = std::get<ListReply>(d.body).entries;
	ASSERT_EQ(e7.size(), 3u);
	EXPECT_EQ(e7[0].probes, kProbesNone);
	EXPECT_EQ(e7[1].probes, kProbesMarked);
	EXPECT_EQ(e7[2].probes, kProbesUnknown);
	std::vector<uint8_t> b6 = encode(Message{1, lr, uint16_t(kMarksVersion - 1)});
	EXPECT_EQ(b6.size() + 3 * 4, b7.size()); // no mark on the wire
	ASSERT_TRUE(decode(b6.data(), b6.size(), d));
	for (const ListEntry &e : std::get<ListReply>(d.body).entries)
		EXPECT_EQ(e.probes, kProbesUnknown);
	lr.entries.resize(1);
	lr.entries[0].probes = 3; // no such mark
	EXPECT_EQ(decode_err(encode(Message{1, lr, kMarksVersion})), Error::OutOfRange);

	Register reg;
	reg.abi_major = 1;
	reg.comm = "p";
	for (uint32_t flags :
	     {kRegisterProbes, kRegisterProbes | kRegisterTable, kRegisterNote | kRegisterProbes}) {
		reg.flags = flags;
		EXPECT_EQ(decode_err(encode(Message{1, reg, kMarksVersion})), Error::None) << flags;
		EXPECT_EQ(decode_err(encode(Message{1, reg, uint16_t(kMarksVersion - 1)})), Error::OutOfRange)
			<< flags;
	}
	for (uint32_t flags : {kRegisterNote, kRegisterNote | kRegisterProbes | kRegisterTable}) {
		reg.flags = flags;
		EXPECT_EQ(decode_err(encode(Message{1, reg, kMarksVersion})), Error::OutOfRange) << flags;
	}
	reg.flags = 64; // beyond every flag
	EXPECT_EQ(decode_err(encode(Message{1, reg, kMarksVersion})), Error::OutOfRange);

	// The process's note: HELLO 7..7 and REGISTER(note) in version 7 headers.
	uint8_t buf[512];
	pc::Writer w(buf, sizeof buf);
	w.version = kMarksVersion;
	ASSERT_TRUE(pc::encode_hello(w, 1));
	ASSERT_TRUE(decode(buf, w.len, d));
	EXPECT_EQ(std::get<Hello>(d.body).min_version, kMarksVersion);
	EXPECT_EQ(std::get<Hello>(d.body).max_version, kMarksVersion);
	ASSERT_TRUE(pc::encode_register(w, 2, 77, 1000, kRegisterNote | kRegisterProbes, 0, "prog",
					two_events, 0));
	DecodeResult r = decode(buf, w.len, d);
	ASSERT_TRUE(r) << r.text;
	EXPECT_EQ(d.version, kMarksVersion);
	EXPECT_EQ(std::get<Register>(d.body).flags, kRegisterNote | kRegisterProbes);
	EXPECT_EQ(std::get<Register>(d.body).comm, "prog");
	EXPECT_TRUE(std::get<Register>(d.body).events.empty());
	// A join from a version 7 table, flagged, events and generation kept.
	ASSERT_TRUE(pc::encode_register(w, 3, 77, 1000, kRegisterTable | kRegisterProbes, 0, "prog",
					two_events, 2, 42));
	ASSERT_TRUE(decode(buf, w.len, d));
	EXPECT_EQ(std::get<Register>(d.body).events.size(), 2u);
	EXPECT_EQ(std::get<Register>(d.body).table_gen, 42u);
	// What a version 7 daemon answers reaches the process: its header, and
	// HELLO_REPLY's pid (the daemon told of the report, libtrace/control).
	std::vector<uint8_t> hr = encode(Message{6, HelloReply{kMarksVersion, 4242}, kMarksVersion});
	Header h;
	ASSERT_TRUE(pc::parse_header(hr.data(), kMaxPayload, &h));
	uint16_t v = 0;
	uint32_t pid = 0;
	ASSERT_TRUE(pc::parse_hello_reply(hr.data() + kHeaderSize, h.length, &v, &pid));
	EXPECT_EQ(v, kMarksVersion);
	EXPECT_EQ(pid, 4242u);
	hr[4] = static_cast<uint8_t>(kProcessMaxVersion + 1); // newer than the process reads
	EXPECT_FALSE(pc::parse_header(hr.data(), kMaxPayload, &h));
}

// Version 3: CREATE carries the relay and hostname, STATUS the relay line;
// a version 2 peer neither writes nor reads them (its messages keep their
// version 2 layout), and a hostile hostname is refused.
TEST(Proto, CreateRelayFieldsAreVersion3)
{
	Create c;
	c.session = "s";
	c.output_dir = "/abs";
	c.relay = "relay.example:5342:5343";
	c.hostname = "hostA";
	Message m{1, c};
	m.version = 3;
	std::vector<uint8_t> b = encode(m);
	Message d;
	ASSERT_TRUE(decode(b.data(), b.size(), d));
	EXPECT_EQ(std::get<Create>(d.body).relay, c.relay);
	EXPECT_EQ(std::get<Create>(d.body).hostname, "hostA");

	m.version = 2;
	std::vector<uint8_t> b2 = encode(m);
	EXPECT_EQ(b2.size() + 8 + c.relay.size() + c.hostname.size(),
		  b.size()); // two length-prefixed strings fewer
	ASSERT_TRUE(decode(b2.data(), b2.size(), d));
	EXPECT_EQ(d.version, 2);
	EXPECT_TRUE(std::get<Create>(d.body).relay.empty());
	// A version 3 payload under a version 2 header: trailing bytes, refused.
	std::vector<uint8_t> mixed = b;
	mixed[4] = 2;
	EXPECT_FALSE(decode(mixed.data(), mixed.size(), d));

	c.hostname = "../etc";
	Message bad{1, c};
	bad.version = 3;
	b = encode(bad);
	DecodeResult r = decode(b.data(), b.size(), d);
	EXPECT_EQ(r.error, Error::OutOfRange);
	c.hostname = "";
	c.relay = std::string(kMaxRelay + 1, 'h');
	Message big{1, c};
	big.version = 3;
	b = encode(big);
	EXPECT_EQ(decode(b.data(), b.size(), d).error, Error::OutOfRange);

	StatusReply sr;
	SessionStatus st;
	st.name = "s";
	st.relay = "h:1:2 hostA/s-1 (link down: x)";
	sr.sessions = {st};
	Message sm{2, sr};
	sm.version = 3;
	b = encode(sm);
	ASSERT_TRUE(decode(b.data(), b.size(), d));
	EXPECT_EQ(std::get<StatusReply>(d.body).sessions[0].relay, st.relay);
}

// Version 5: CREATE's flags (a session owned by its connection) and
// STATUS_REPLY's joined and declared; absent from a version 4 layout.
TEST(Proto, CreateFlagsAndStatusJoinedAreVersion5)
{
	Create c;
	c.session = "s";
	c.output_dir = "/abs";
	c.flags = kCreateOwned;
	Message m{1, c, 5};
	std::vector<uint8_t> b = encode(m);
	Message d;
	ASSERT_TRUE(decode(b.data(), b.size(), d));
	EXPECT_EQ(std::get<Create>(d.body).flags, kCreateOwned);
	m.version = 4;
	std::vector<uint8_t> b4 = encode(m);
	EXPECT_EQ(b4.size() + 4, b.size());
	ASSERT_TRUE(decode(b4.data(), b4.size(), d));
	EXPECT_EQ(std::get<Create>(d.body).flags, 0u);
	c.flags = 4; // unknown
	b = encode(Message{1, c});
	EXPECT_EQ(decode(b.data(), b.size(), d).error, Error::OutOfRange);
	// kCreateTree (version 10): refused in an older header, read in its own.
	c.flags = kCreateOwned | kCreateTree;
	b = encode(Message{1, c, 9});
	EXPECT_EQ(decode(b.data(), b.size(), d).error, Error::OutOfRange);
	b = encode(Message{1, c, kTreeVersion});
	ASSERT_TRUE(decode(b.data(), b.size(), d));
	EXPECT_EQ(std::get<Create>(d.body).flags, kCreateOwned | kCreateTree);

	StatusReply sr;
	SessionStatus st;
	st.name = "s";
	st.joined = 3;
	st.declared = {"demo:ints", "demo:mix"};
	sr.sessions = {st};
	sr.clocks = "clock link vm1 (reference for ...): correlated\n";
	b = encode(Message{2, sr});
	ASSERT_TRUE(decode(b.data(), b.size(), d));
	EXPECT_EQ(std::get<StatusReply>(d.body).clocks, sr.clocks);
	Message old{2, sr};
	old.version = kClocksVersion; // a version-9 peer: no daemon-level links
	std::vector<uint8_t> b9 = encode(old);
	ASSERT_TRUE(decode(b9.data(), b9.size(), d));
	EXPECT_TRUE(std::get<StatusReply>(d.body).clocks.empty());
	sr.clocks.clear();
	EXPECT_EQ(std::get<StatusReply>(d.body).sessions[0].joined, 3u);
	EXPECT_EQ(std::get<StatusReply>(d.body).sessions[0].declared, st.declared);
	sr.sessions[0].declared.assign(kMaxDeclared + 1, "p:e");
	b = encode(Message{2, sr});
	EXPECT_EQ(decode(b.data(), b.size(), d).error, Error::OutOfRange);
}

// Version 4: a table join's REGISTER and BUFFER carry the table generation
// and the session id; the process codec writes what the daemon reads, and a
// version-1 message keeps the version-1 layout.
TEST(ProcCodec, TableJoinMessagesAreVersion4)
{
	uint8_t buf[4096];
	pc::Writer w(buf, sizeof(buf));
	w.version = 4;
	ASSERT_TRUE(pc::encode_register(w, 5, 1, 2, kRegisterTable | kRegisterAsync, 40, "p", two_events, 2,
					0x1122334455667788ull));
	Message m;
	DecodeResult r = decode(buf, w.len, m);
	ASSERT_TRUE(r) << r.text;
	EXPECT_EQ(m.version, 4);
	EXPECT_EQ(std::get<Register>(m.body).flags, kRegisterTable | kRegisterAsync);
	EXPECT_EQ(std::get<Register>(m.body).table_gen, 0x1122334455667788ull);
	EXPECT_EQ(std::get<Register>(m.body).events.size(), 2u);
	ASSERT_TRUE(pc::encode_buffer(w, 6, 3, 0, 0xabcdefull));
	ASSERT_TRUE(decode(buf, w.len, m));
	EXPECT_EQ(std::get<Buffer>(m.body).slot, 3u);
	EXPECT_EQ(std::get<Buffer>(m.body).session_id, 0xabcdefull);

	// Full: events are cut, the generation still fits.
	uint8_t small[80];
	pc::Writer ws(small, sizeof(small));
	ws.version = 4;
	ASSERT_TRUE(pc::encode_register(ws, 1, 1, 1, kRegisterTable, 0, "p", two_events, 2, 9));
	ASSERT_TRUE(decode(small, ws.len, m));
	EXPECT_EQ(std::get<Register>(m.body).events.size(), 1u);
	EXPECT_EQ(std::get<Register>(m.body).table_gen, 9u);

	// The table flag in a version-1 message, or with the module flag: refused.
	pc::Writer w1(buf, sizeof(buf));
	ASSERT_TRUE(pc::encode_register(w1, 1, 1, 1, kRegisterTable, 0, "p", two_events, 0));
	EXPECT_EQ(decode(buf, w1.len, m).error, Error::OutOfRange);
	ASSERT_TRUE(
		pc::encode_register(w, 1, 1, 1, kRegisterTable | kRegisterModule, 0, "p", two_events, 0, 1));
	EXPECT_EQ(decode(buf, w.len, m).error, Error::OutOfRange);
	// Version 1 BUFFER: no session id on the wire.
	ASSERT_TRUE(pc::encode_buffer(w1, 2, 3, 0, 77));
	EXPECT_EQ(w1.len, kHeaderSize + 8);
}

namespace {
// A grant table as consumerd/grant_tables.cpp lays it out (proto.h).
std::vector<uint8_t> table_bytes(uint16_t version, uint16_t flags, uint32_t abi, uint32_t pid, uint64_t gen,
				 int32_t clock_fd, const RegisterReply &rr)
{
	std::vector<uint8_t> v;
	auto put = [&](uint64_t x, int n) {
		for (int i = 0; i < n; i++)
			v.push_back(static_cast<uint8_t>(x >> (8 * i)));
	};
	put(kTableMagic, 4);
	put(version, 2);
	put(flags, 2);
	put(abi, 4);
	put(pid, 4);
	put(gen, 8);
	put(static_cast<uint32_t>(clock_fd), 4);
	put(0, 4);
	EXPECT_EQ(v.size(), kTableHeaderSize);
	Message m{0, rr};
	m.version = kProcessVersion; // what a version-1 process reads
	std::vector<uint8_t> msg = encode(m);
	v.insert(v.end(), msg.begin(), msg.end());
	return v;
}
} // namespace

TEST(ProcCodec, GrantTableIsBelievedOnlyWhole)
{
	RegisterReply rr = std::get<RegisterReply>(samples()[3].body);
	ASSERT_FALSE(rr.sessions.empty());
	static pc::Grants g;
	pc::TableInfo info;
	std::vector<uint8_t> t = table_bytes(4, 0, STRATA_ABI_MAJOR, 321, 42, 7, rr);
	ASSERT_TRUE(pc::parse_table(t.data(), t.size(), &info, &g));
	EXPECT_EQ(info.gen, 42u);
	EXPECT_EQ(info.daemon_pid, 321u);
	EXPECT_EQ(info.clock_fd, 7);
	ASSERT_EQ(g.n, rr.sessions.size());
	EXPECT_EQ(g.g[0].slot, rr.sessions[0].slot);
	EXPECT_EQ(g.g[0].session_id, rr.sessions[0].session_id);
	EXPECT_EQ(g.g[0].n_rules, rr.sessions[0].rules.size());

	// No clock page, a newer daemon: fine.
	t = table_bytes(5, 0, STRATA_ABI_MAJOR, 321, 1, -1, rr);
	ASSERT_TRUE(pc::parse_table(t.data(), t.size(), &info, &g));
	EXPECT_EQ(info.clock_fd, -1);
	// Ask, an older protocol, another buffer ABI, a clock fd without a pid,
	// a bad magic: not believed.
	for (const std::vector<uint8_t> &bad : {table_bytes(4, kTableAsk, STRATA_ABI_MAJOR, 321, 1, -1, rr),
						table_bytes(3, 0, STRATA_ABI_MAJOR, 321, 1, -1, rr),
						table_bytes(4, 0, STRATA_ABI_MAJOR + 1, 321, 1, -1, rr),
						table_bytes(4, 0, STRATA_ABI_MAJOR, 0, 1, 5, rr)})
		EXPECT_FALSE(pc::parse_table(bad.data(), bad.size(), &info, &g));
	t = table_bytes(4, 0, STRATA_ABI_MAJOR, 321, 1, -1, rr);
	t[0] ^= 1;
	EXPECT_FALSE(pc::parse_table(t.data(), t.size(), &info, &g));
	// Every truncation and every extension (a torn or appended file): refused.
	t = table_bytes(4, 0, STRATA_ABI_MAJOR, 321, 1, -1, rr);
	for (size_t n = 0; n < t.size(); n++)
		EXPECT_FALSE(pc::parse_table(t.data(), n, &info, &g)) << n;
	t.push_back(0);
	EXPECT_FALSE(pc::parse_table(t.data(), t.size(), &info, &g));
	// Fuzzed: never crashes, never yields an out-of-range grant.
	std::mt19937_64 rng(7);
	const std::vector<uint8_t> seed = table_bytes(4, 0, STRATA_ABI_MAJOR, 321, 1, -1, rr);
	for (int k = 0; k < 20000; k++) {
		std::vector<uint8_t> b = seed;
		b[rng() % b.size()] = static_cast<uint8_t>(rng());
		if (pc::parse_table(b.data(), b.size(), &info, &g)) {
			ASSERT_LE(g.n, kMaxSlots);
			for (uint32_t i = 0; i < g.n; i++)
				ASSERT_LT(g.g[i].slot, kMaxSlots);
		}
	}
}

// A wait whose deadline passed before it began (its thread kept off its CPU
// past it, a loaded machine) still looks once: what arrived meanwhile is
// taken, not called a timeout; a socket with nothing to read times out at
// once.  recv_all reads before it waits; wait_readable is the state
// query's own wait (sync_query.cpp, await_answer).
TEST(Sock, AWaitPastItsDeadlineLooksOnceBeforeTimingOut)
{
	int sv[2];
	ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
	const int64_t passed = strata::proto::now_ms() - 5000;
	EXPECT_EQ(strata::proto::wait_readable(sv[0], passed), 0) << "nothing to read: a timeout";
	const char msg[4] = {'a', 'b', 'c', 'd'};
	ASSERT_EQ(write(sv[1], msg, sizeof msg), (ssize_t)sizeof msg);
	EXPECT_EQ(strata::proto::wait_readable(sv[0], passed), 1)
		<< "an answer waiting, its deadline past: called a timeout without a look";
	char got[4] = {};
	EXPECT_EQ(strata::proto::recv_all(sv[0], got, sizeof got, nullptr, passed), 0);
	EXPECT_EQ(memcmp(got, msg, sizeof msg), 0);
	EXPECT_EQ(strata::proto::recv_all(sv[0], got, sizeof got, nullptr, passed), -ETIMEDOUT);
	close(sv[0]);
	close(sv[1]);
}
