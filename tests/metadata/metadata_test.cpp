// The metadata writer checked against babeltrace2: hand-encode packets exactly
// as strata_abi.h and include/strata/tracepoint.h lay them out, write the
// metadata for them, and read the whole trace back with the babeltrace2 CLI.
// Oracle: every field value printed as encoded, no warning on stderr.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "strata_abi.h"
#include "metadata.h"

using namespace strata;

namespace {

struct Rec {
	std::vector<uint8_t> b;
	size_t align(size_t a)
	{
		if (a > 8)
			a = 8;
		while (b.size() % a)
			b.push_back(0);
		return b.size();
	}
	template <typename T> void put(T v)
	{
		align(sizeof(T));
		const uint8_t *p = reinterpret_cast<const uint8_t *>(&v);
		b.insert(b.end(), p, p + sizeof(T));
	}
	void str(const char *s) { b.insert(b.end(), s, s + std::strlen(s) + 1); }
};

Rec record_header(uint16_t id, uint64_t ts, uint32_t tid, uint16_t cpu)
{
	Rec r;
	r.b.resize(16);
	std::memcpy(&r.b[0], &id, 2);
	std::memcpy(&r.b[2], &ts, 8);
	std::memcpy(&r.b[10], &tid, 4);
	std::memcpy(&r.b[14], &cpu, 2);
	return r;
}

std::vector<EventInfo> events()
{
	EventInfo all;
	all.id = 0;
	all.provider = "demo";
	all.name = "all";
	all.loglevel = 6;
	auto fi = [](const char *n, uint8_t t, uint8_t bits, bool s, uint8_t base = 10) {
		FieldInfo f;
		f.name = n;
		f.type = t;
		f.elem_bits = bits;
		f.is_signed = s;
		f.base = base;
		return f;
	};
	all.fields.push_back(fi("u8", STRATA_FT_INTEGER, 8, false));
	all.fields.push_back(fi("i16", STRATA_FT_INTEGER, 16, true));
	all.fields.push_back(fi("x32", STRATA_FT_INTEGER, 32, false, 16));
	all.fields.push_back(fi("i64", STRATA_FT_INTEGER, 64, true));
	all.fields.push_back(fi("f", STRATA_FT_FLOAT, 32, true));
	all.fields.push_back(fi("d", STRATA_FT_FLOAT, 64, true));
	FieldInfo e = fi("color", STRATA_FT_ENUM, 32, true);
	e.labels = {{"red", 0, 0}, {"blue \"ish\"", 1, 5}};
	all.fields.push_back(e);
	all.fields.push_back(fi("event", STRATA_FT_STRING, 8, false));
	FieldInfo a = fi("arr", STRATA_FT_ARRAY, 16, true);
	a.length = 3;
	all.fields.push_back(a);
	all.fields.push_back(fi("seq", STRATA_FT_SEQUENCE, 32, false));
	all.fields.push_back(fi("blob", STRATA_FT_SEQUENCE, 8, false, 16));
	EventInfo tick;
	tick.id = 1;
	tick.provider = "demo";
	tick.name = "tick";
	tick.loglevel = 7;
	return {all, tick};
}

std::string run(const std::string &cmd, std::string *err)
{
	// stderr through a file of this call's own, removed after.
	char errf[] = "/tmp/strata-metadata-test-XXXXXX";
	const int efd = mkstemp(errf);
	if (efd >= 0)
		close(efd);
	FILE *p = popen((cmd + " 2>" + errf).c_str(), "r");
	std::string out;
	char buf[4096];
	size_t n;
	while ((n = fread(buf, 1, sizeof buf, p)) > 0)
		out.append(buf, n);
	int st = pclose(p);
	std::ifstream ef(errf);
	std::stringstream ss;
	ss << ef.rdbuf();
	*err = ss.str();
	unlink(errf);
	EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << cmd << "\n" << *err;
	return out;
}

// The packet of HandEncodedPacketReadsBackInBabeltrace2: its header, then
// two demo:all records and a demo:tick, padded between records.
std::vector<uint8_t> two_records_and_a_tick(const uint8_t uuid[16])
{
	std::vector<uint8_t> pkt(STRATA_PACKET_HEADER_SIZE, 0);
	for (uint64_t n = 0; n < 2; n++) {
		Rec r = record_header(0, 1000 + n, 77, 1);
		r.put<uint8_t>(200);
		r.put<int16_t>(-300);
		r.put<uint32_t>(0xdeadbeef);
		r.put<int64_t>(-(int64_t)n - 5);
		r.put<float>(0.5f);
		r.put<double>(2.25);
		r.put<int32_t>(n ? 3 : 0);
		r.str("hello \"x\"");
		r.put<int16_t>(1);
		r.put<int16_t>(-2);
		r.put<int16_t>(3);
		r.put<uint32_t>(2);
		r.put<uint32_t>(10);
		r.put<uint32_t>(20);
		r.put<uint32_t>(3);
		r.put<uint8_t>(0xab);
		r.put<uint8_t>(0xcd);
		r.put<uint8_t>(0xef);
		while (pkt.size() % 8)
			pkt.push_back(0xee); // inter-record padding: must be skipped
		pkt.insert(pkt.end(), r.b.begin(), r.b.end());
	}
	{
		Rec r = record_header(1, 3000, 78, 0);
		while (pkt.size() % 8)
			pkt.push_back(0);
		pkt.insert(pkt.end(), r.b.begin(), r.b.end());
	}
	strata_packet_header h{};
	h.magic = STRATA_CTF_MAGIC;
	std::memcpy(h.uuid, uuid, 16);
	h.stream_id = 0;
	h.stream_instance_id = 0;
	h.timestamp_begin = 1000;
	h.timestamp_end = 3000;
	h.content_size = pkt.size() * 8;
	h.packet_size = pkt.size() * 8;
	h.packet_seq_num = 0;
	h.events_discarded = 0;
	h.lane_id = 0;
	std::memcpy(pkt.data(), &h, sizeof h);
	return pkt;
}

} // namespace

TEST(Metadata, HandEncodedPacketReadsBackInBabeltrace2)
{
	char tmpl[] = "/tmp/strata-metadata-XXXXXX";
	ASSERT_NE(mkdtemp(tmpl), nullptr);
	const std::string dir = tmpl;
	uint8_t uuid[16];
	for (int i = 0; i < 16; i++)
		uuid[i] = static_cast<uint8_t>(i * 17 + 1);
	ClockInfo clock = measure_session_clock();
	ASSERT_EQ(clock.uuid.size(), 36u);
	TraceEnv env;
	env.procname = "demo";
	env.pid = 4242;
	env.hostname = "host";
	std::vector<EventInfo> evs = events();
	{
		std::ofstream m(dir + "/metadata");
		m << ctf_metadata(uuid, clock, env, 0, {evs[0]});
		m << ctf_metadata_events(0, {evs[1]}, env); // appended later, as after a dlopen
	}

	const std::vector<uint8_t> pkt = two_records_and_a_tick(uuid);
	{
		std::ofstream s(dir + "/channel0_0", std::ios::binary);
		s.write(reinterpret_cast<const char *>(pkt.data()), pkt.size());
	}

	std::string err;
	std::string out = run("babeltrace2 --clock-cycles " + dir, &err);
	EXPECT_EQ(err, "");
	std::istringstream lines(out);
	std::vector<std::string> v;
	for (std::string l; std::getline(lines, l);) {
		// "[cycles] (+delta) host:procname:(pid) event: ..." -> from the event on
		const size_t at = l.find(" demo:");
		ASSERT_NE(at, std::string::npos) << l;
		EXPECT_NE(l.find("host:demo:(4242)"), std::string::npos) << l;
		v.push_back(l.substr(at + 1));
	}
	ASSERT_EQ(v.size(), 3u) << out;
	EXPECT_EQ(v[0], "demo:all: { lane_id = 0 }, { vtid = 77, cpu_id = 1 }, { u8 = 200, i16 = -300, x32 = "
			"0xDEADBEEF, "
			"i64 = -5, f = 0.5, d = 2.25, color = ( \"red\" : container = 0 ), "
			"event = \"hello \\\"x\\\"\", arr = [ [0] = 1, [1] = -2, [2] = 3 ], _seq_length = 2, "
			"seq = [ [0] = 10, [1] = 20 ], _blob_length = 3, blob = [ [0] = 0xAB, [1] = 0xCD, "
			"[2] = 0xEF ] }");
	EXPECT_NE(v[1].find("i64 = -6"), std::string::npos) << v[1];
	EXPECT_NE(v[1].find("color = ( \"blue \\\"ish\\\"\" : container = 3 )"), std::string::npos) << v[1];
	EXPECT_EQ(v[2], "demo:tick: { lane_id = 0 }, { vtid = 78, cpu_id = 0 }, { }");
	EXPECT_EQ(out.rfind("[00000000000000003000]", 0), std::string::npos); // sorted: tick last
	EXPECT_EQ(out.find("[00000000000000001000]"), 0u);
	std::system(("rm -rf " + dir).c_str());
}

TEST(Metadata, SessionClockIsAbsoluteAndShared)
{
	ClockInfo c = measure_session_clock();
	// Three sub-traces of one session: two processes (their own trace uuid,
	// pid, name, events and stream class) and the kernel's.
	uint8_t uuid_a[16] = {1}, uuid_b[16] = {2}, uuid_k[16] = {3};
	TraceEnv env_a, env_b, env_k;
	env_a.procname = "app";
	env_a.pid = 100;
	env_a.clock_source = "consumer-page";
	env_b.procname = "other";
	env_b.pid = 200;
	env_b.host_pid = 4200;
	env_b.clock_source = "monotonic";
	env_b.record_format = STRATA_REC_COMPACT;
	env_k.domain = "kernel";
	env_k.clock_source = "kclock-page";
	env_k.record_format = STRATA_REC_WIDE;
	EventInfo ev;
	ev.id = 0;
	ev.provider = "demo";
	ev.name = "tick";
	EventInfo kev;
	kev.id = 3;
	kev.provider = "kernel";
	kev.name = "sched_switch";
	const std::string a = ctf_metadata(uuid_a, c, env_a, 0, {});
	const std::string b = ctf_metadata(uuid_b, c, env_b, 2, {ev});
	const std::string k = ctf_metadata(uuid_k, c, env_k, 0, {kev});
	EXPECT_EQ(a.rfind("/* CTF 1.8 */", 0), 0u);
	EXPECT_NE(a.find("absolute = true;"), std::string::npos);
	EXPECT_NE(a.find("uuid = \"" + c.uuid + "\""), std::string::npos);
	// The sub-traces differ (the comparison below is not of one text with itself)...
	EXPECT_NE(a, b);
	EXPECT_NE(a, k);
	EXPECT_NE(b, k);
	EXPECT_NE(a.find(uuid_to_string(uuid_a)), std::string::npos);
	EXPECT_EQ(b.find(uuid_to_string(uuid_a)), std::string::npos);
	// ...and the same session clock gives byte-identical clock blocks in
	// every one of them, so that readers put them on one timeline.
	auto clock_block = [](const std::string &m) {
		const size_t at = m.find("clock {");
		const size_t end = at == std::string::npos ? at : m.find("};", at);
		return at == std::string::npos || end == std::string::npos ? std::string()
									   : m.substr(at, end - at);
	};
	const std::string ca = clock_block(a);
	ASSERT_FALSE(ca.empty()) << a;
	EXPECT_NE(ca.find("offset_s = " + std::to_string(c.offset_s) + ";"), std::string::npos) << ca;
	EXPECT_EQ(clock_block(b), ca);
	EXPECT_EQ(clock_block(k), ca);
	EXPECT_GE(c.offset_ns, 0);
	EXPECT_LT(c.offset_ns, 1000000000);
	EXPECT_GT(c.offset_s, 1600000000); // REALTIME - MONOTONIC is a recent epoch
}

// The kernel sub-trace follows lttng-modules' conventions (docs/kernel-module.md,
// "Reading kernel traces with LTTng tools"): bare event names, lttng-modules'
// env; user sub-traces keep provider:event and Strata's env.
TEST(Metadata, KernelDomainUsesLttngKernelLayout)
{
	uint8_t uuid[16] = {1};
	ClockInfo c = measure_session_clock();
	EventInfo ev;
	ev.id = 0;
	ev.provider = "kernel";
	ev.name = "syscall_entry_openat";
	TraceEnv kenv;
	kenv.domain = "kernel";
	const std::string k = ctf_metadata(uuid, c, kenv, 0, {ev});
	EXPECT_NE(k.find("name = \"syscall_entry_openat\";"), std::string::npos) << k;
	EXPECT_EQ(k.find("kernel:syscall_entry_openat"), std::string::npos);
	for (const char *f : {"domain = \"kernel\";", "tracer_name = \"lttng-modules\";", "tracer_major = 2;",
			      "tracer_minor = 13;", "tracer_patchlevel = 0;", "strata_tracer = \"strata\";",
			      "sysname = \"Linux\";"})
		EXPECT_NE(k.find(f), std::string::npos) << f;
	EXPECT_NE(ctf_metadata_events(0, {ev}, kenv).find("name = \"syscall_entry_openat\";"),
		  std::string::npos);
	TraceEnv uenv;
	const std::string u = ctf_metadata(uuid, c, uenv, 0, {ev});
	EXPECT_NE(u.find("name = \"kernel:syscall_entry_openat\";"), std::string::npos);
	EXPECT_NE(u.find("tracer_name = \"strata\";"), std::string::npos);
	EXPECT_EQ(u.find("lttng-modules"), std::string::npos);
}
