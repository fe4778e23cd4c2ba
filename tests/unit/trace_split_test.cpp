// trace_split_test.cpp - a follower's sub-trace split into one CTF trace per
// clock piece (processor/ctf/trace_split.h, docs/clocks.md "babeltrace2 across a
// step"): a WIDE (kernel layout) sub-trace whose packets straddle two piece
// boundaries is cut at record boundaries; every record lands in exactly one
// directory, inside that directory's piece, read back by Strata's reader
// without damage; a second split changes nothing; a split cut short (the
// moved packets still in the base) shows every record once.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <unistd.h>

#include "metadata.h"
#include "strata_abi.h"
#include "trace_reader.h"
#include "trace_split.h"

using namespace strata;
namespace fs = std::filesystem;

namespace {

const uint8_t kUuid[16] = {9, 8, 7, 6, 5, 4, 3, 2, 1};

// A WIDE record: 16-byte header, one u64 field (its own timestamp).
void put_record(std::vector<uint8_t> *p, uint64_t ts)
{
	uint8_t r[24] = {};
	const uint16_t id = 0;
	const uint32_t tid = 42;
	memcpy(r + STRATA_EVENT_ID_OFF, &id, 2);
	memcpy(r + STRATA_EVENT_TS_OFF, &ts, 8);
	memcpy(r + STRATA_EVENT_TID_OFF, &tid, 4);
	memcpy(r + 16, &ts, 8);
	p->insert(p->end(), r, r + sizeof r);
}

// A packet of records at ts = first, first + step, ... (n of them), with 40
// bytes of padding after its content.
std::vector<uint8_t> packet(uint64_t seq, uint64_t first, uint64_t step, int n, uint32_t lane = 0)
{
	std::vector<uint8_t> p(STRATA_PACKET_HEADER_SIZE);
	for (int i = 0; i < n; i++)
		put_record(&p, first + step * static_cast<uint64_t>(i));
	strata_packet_header h{};
	h.magic = STRATA_CTF_MAGIC;
	memcpy(h.uuid, kUuid, 16);
	h.timestamp_begin = first - 1;
	h.timestamp_end = first + step * static_cast<uint64_t>(n - 1) + 1;
	h.content_size = p.size() * 8;
	p.resize(p.size() + 40);
	h.packet_size = p.size() * 8;
	h.packet_seq_num = seq;
	h.stream_instance_id = lane;
	h.lane_id = lane;
	memcpy(p.data(), &h, sizeof h);
	return p;
}

std::string slurp(const fs::path &p)
{
	std::ifstream f(p, std::ios::binary);
	std::stringstream s;
	s << f.rdbuf();
	return s.str();
}

std::map<std::string, std::string> tree(const fs::path &root)
{
	std::map<std::string, std::string> m;
	for (const auto &e : fs::recursive_directory_iterator(root))
		if (e.is_regular_file())
			m[fs::relative(e.path(), root).string()] = slurp(e.path());
	return m;
}

// Every event's timestamp read by Strata's reader under root, by
// directory; the damage count.
std::map<std::string, std::vector<uint64_t>> read_back(const fs::path &root, size_t *damage)
{
	TraceReader r;
	std::string why;
	EXPECT_TRUE(r.open(root.string(), &why)) << why;
	std::map<std::string, std::vector<uint64_t>> out;
	r.read([&](const TraceMsg &m) {
		if (m.kind == TraceMsgKind::Event) {
			std::vector<FieldValue> f;
			m.event->decode(&f);
			EXPECT_EQ(f.size(), 1u);
			EXPECT_EQ(f.empty() ? 0 : f[0].u, m.event->ts); // its payload is its timestamp
			out[fs::path(m.stream->trace->dir).filename().string()].push_back(m.event->ts);
		}
		return true;
	});
	*damage = r.damages().size();
	return out;
}

class TraceSplit : public ::testing::Test {
protected:
	void SetUp() override
	{
		root_ = fs::temp_directory_path() / ("strata-split-" + std::to_string(getpid()));
		fs::remove_all(root_);
		base_ = root_ / "kernel";
		fs::create_directories(base_);
		ClockInfo c;
		c.uuid = "f5c620ec-505c-499c-addb-57758d93b1f0";
		TraceEnv env;
		env.domain = "kernel";
		env.hostname = "guest";
		env.record_format = STRATA_REC_WIDE;
		EventInfo ev;
		ev.id = 0;
		ev.name = "tick";
		FieldInfo f;
		f.name = "v";
		f.type = STRATA_FT_INTEGER;
		f.elem_bits = 64;
		ev.fields.push_back(f);
		std::ofstream(base_ / "metadata") << ctf_metadata(kUuid, c, env, 0, {ev});
		// Pieces from 300 (segment 1) and 450 (segment 3; 2 unbounded).
		std::ofstream s(base_ / "channel0_0", std::ios::binary);
		for (const auto &p : {packet(0, 100, 10, 10), packet(1, 200, 10, 20), packet(2, 400, 10, 10)})
			s.write(reinterpret_cast<const char *>(p.data()),
				static_cast<std::streamsize>(p.size()));
		// A second stream wholly in the first piece.
		std::ofstream s1(base_ / "channel0_1", std::ios::binary);
		const auto p = packet(0, 150, 1, 5, 1);
		s1.write(reinterpret_cast<const char *>(p.data()), static_cast<std::streamsize>(p.size()));
		const int64_t from[3] = {INT64_MIN, 300, 450};
		const size_t seg[3] = {0, 1, 3};
		for (int i = 0; i < 3; i++) {
			CtfPiece pc;
			pc.segment = seg[i];
			pc.from = from[i];
			pc.clock = c;
			pc.clock.freq = 1000000000 + static_cast<uint64_t>(i) + 1;
			pc.env = "\tsync_test = " + std::to_string(i) + ";\n";
			pieces_.push_back(pc);
		}
	}
	void TearDown() override { fs::remove_all(root_); }
	fs::path root_, base_;
	std::vector<CtfPiece> pieces_;
};

TEST_F(TraceSplit, CutAtRecordBoundariesEveryRecordOnce)
{
	SplitStats st;
	std::string err;
	ASSERT_TRUE(split_subtrace(base_.string(), pieces_, &st, &err)) << err;
	EXPECT_EQ(st.packets_cut, 2u); // 200..390 at 300, 400..490 at 450
	EXPECT_EQ(st.dirs_made, 2u);   // ~seg0 and ~seg1; the base keeps segment 3
	EXPECT_TRUE(fs::exists(root_ / "kernel~seg0" / "channel0_0"));
	EXPECT_TRUE(fs::exists(root_ / "kernel~seg0" / "channel0_1"));
	EXPECT_TRUE(fs::exists(root_ / "kernel~seg1" / "channel0_0"));
	EXPECT_FALSE(fs::exists(base_ / "channel0_1")); // nothing of it left in the base
	const std::string m0 = slurp(root_ / "kernel~seg0" / "metadata"), mb = slurp(base_ / "metadata");
	EXPECT_NE(m0.find("freq = 1000000001;"), std::string::npos);
	EXPECT_NE(m0.find("sync_piece_to = 300;"), std::string::npos);
	EXPECT_NE(slurp(root_ / "kernel~seg1" / "metadata").find("freq = 1000000002;"), std::string::npos);
	EXPECT_NE(mb.find("freq = 1000000003;"), std::string::npos);
	EXPECT_NE(mb.find("sync_piece_from = 450;"), std::string::npos);
	EXPECT_EQ(mb.find("sync_piece_to"), std::string::npos);
	TraceMeta tm;
	std::string why;
	ASSERT_TRUE(parse_trace_meta(m0, &tm, &why)) << why;
	EXPECT_FALSE(tm.has_uuid); // babeltrace2 would merge one uuid's directories
	ASSERT_TRUE(parse_trace_meta(mb, &tm, &why)) << why;
	EXPECT_TRUE(tm.has_uuid);

	size_t damage = 0;
	auto got = read_back(root_, &damage);
	EXPECT_EQ(damage, 0u);
	const std::map<std::string, std::pair<uint64_t, uint64_t>> range = {
		{"kernel~seg0", {0, 300}}, {"kernel~seg1", {300, 450}}, {"kernel", {450, UINT64_MAX}}};
	std::vector<uint64_t> all;
	for (const auto &kv : got) {
		ASSERT_TRUE(range.count(kv.first)) << kv.first;
		for (uint64_t ts : kv.second) {
			EXPECT_GE(ts, range.at(kv.first).first) << kv.first;
			EXPECT_LT(ts, range.at(kv.first).second) << kv.first;
			all.push_back(ts);
		}
	}
	std::sort(all.begin(), all.end());
	std::vector<uint64_t> want;
	for (int i = 0; i < 10; i++)
		want.push_back(100 + 10 * i);
	for (int i = 0; i < 5; i++)
		want.push_back(150 + i);
	for (int i = 0; i < 20; i++)
		want.push_back(200 + 10 * i);
	for (int i = 0; i < 10; i++)
		want.push_back(400 + 10 * i);
	std::sort(want.begin(), want.end());
	EXPECT_EQ(all, want);

	// A second split changes nothing.
	const auto before = tree(root_);
	SplitStats again;
	ASSERT_TRUE(split_subtrace(base_.string(), pieces_, &again, &err)) << err;
	EXPECT_EQ(again.packets_moved, 0u);
	EXPECT_EQ(tree(root_), before);

	// A split cut short: the moved packets back in the base, before its
	// own.  The reader skips them there (outside the base's range).
	for (const char *piece : {"kernel~seg1", "kernel~seg0"}) { // seg0, seg1, the base
		const std::string moved = slurp(root_ / piece / "channel0_0"),
				  kept = slurp(base_ / "channel0_0");
		std::ofstream(base_ / "channel0_0", std::ios::binary | std::ios::trunc) << moved << kept;
	}
	auto shown = read_back(root_, &damage);
	std::vector<uint64_t> once;
	for (const auto &kv : shown)
		once.insert(once.end(), kv.second.begin(), kv.second.end());
	std::sort(once.begin(), once.end());
	EXPECT_EQ(once, want);
}

// A packet opened in one piece whose records all lie in the next (open
// across the step, nothing written before it): it goes to its records'
// piece with their first value as its timestamp_begin, so that it begins
// inside that piece's range and Strata's reader shows its records.
TEST_F(TraceSplit, PacketOpenedBeforeItsRecordsPieceBeginsWithThem)
{
	auto p = packet(0, 305, 10, 3, 2);
	strata_packet_header h;
	memcpy(&h, p.data(), sizeof h);
	h.timestamp_begin = 250; // piece 0's
	memcpy(p.data(), &h, sizeof h);
	std::ofstream(base_ / "channel0_2", std::ios::binary)
		.write(reinterpret_cast<const char *>(p.data()), static_cast<std::streamsize>(p.size()));
	SplitStats st;
	std::string err;
	ASSERT_TRUE(split_subtrace(base_.string(), pieces_, &st, &err)) << err;
	const std::string moved = slurp(root_ / "kernel~seg1" / "channel0_2");
	ASSERT_GE(moved.size(), sizeof h);
	memcpy(&h, moved.data(), sizeof h);
	EXPECT_EQ(h.timestamp_begin, 305u);
	EXPECT_EQ(h.content_size, h.packet_size);
	size_t damage = 0;
	auto got = read_back(root_, &damage);
	EXPECT_EQ(damage, 0u);
	size_t in_seg1 = 0;
	for (uint64_t ts : got["kernel~seg1"])
		in_seg1 += ts == 305 || ts == 315 || ts == 325;
	EXPECT_EQ(in_seg1, 3u);
	const auto before = tree(root_);
	ASSERT_TRUE(split_subtrace(base_.string(), pieces_, &st, &err)) << err;
	EXPECT_EQ(tree(root_), before); // a second split changes nothing
}

// split_tree: the pieces rebuilt from a stored clocks.json (the CLI's
// path: strata receive, strata split); only a clocks.json inside the
// root counts; a second run changes nothing.
TEST_F(TraceSplit, TreeFromClocksJson)
{
	const std::string text = slurp(base_ / "metadata");
	std::ofstream(base_ / "metadata", std::ios::trunc)
		<< rewrite_metadata_env(text, "\tsync_state = \"correlated\";\n\tsync_peer = \"host\";\n");
	const std::string json =
		"{\"format\": \"strata-clocks\", \"version\": 1, \"machine\": \"guest\", \"links\": [\n"
		" {\"name\": \"host\", \"role\": \"follower\", \"peer_hostname\": \"h\", \"peer_boot_id\": "
		"\"f5c620ec-505c-499c-addb-57758d93b1f0\", \"peer_clock_offset_ns\": 1000, \"segments\": [\n"
		"  {\"bounded\": true, \"x_first\": 100, \"x_last\": 250, \"x0\": 150, \"y0\": 1150, "
		"\"slope\": 1.0, \"knots\": [[100, 1090, 1110]]},\n"
		"  {\"bounded\": true, \"x_first\": 300, \"x_last\": 500, \"x0\": 400, \"y0\": 9400, "
		"\"slope\": 1.0, \"knots\": []}]}]}\n";
	// Above the root: not this trace's.
	fs::create_directories(root_ / "t");
	fs::rename(base_, root_ / "t" / "kernel");
	std::ofstream(root_ / "clocks.json") << json;
	TreeSplit above;
	std::string err;
	ASSERT_TRUE(split_tree((root_ / "t").string(), &above, &err)) << err;
	EXPECT_EQ(above.subtraces, 1u);
	EXPECT_EQ(above.skipped, 1u);
	EXPECT_EQ(above.split, 0u);
	ASSERT_EQ(above.notes.size(), 1u);
	EXPECT_NE(above.notes[0].find("no clocks.json"), std::string::npos) << above.notes[0];
	// Inside it: split at the handover (300: the earlier line meets the
	// later's first time only past it).
	fs::rename(root_ / "clocks.json", root_ / "t" / "clocks.json");
	TreeSplit ts;
	ASSERT_TRUE(split_tree((root_ / "t").string(), &ts, &err)) << err;
	EXPECT_EQ(ts.split, 1u);
	EXPECT_TRUE(ts.notes.empty());
	const std::string m0 = slurp(root_ / "t" / "kernel~seg0" / "metadata");
	EXPECT_NE(m0.find("sync_piece = 0;"), std::string::npos);
	EXPECT_NE(m0.find("sync_piece_to = 300;"), std::string::npos);
	EXPECT_NE(m0.find("sync_bound_ns = 20;"), std::string::npos);
	EXPECT_NE(m0.find("monotonic clock of guest mapped onto host's (h)"), std::string::npos);
	const std::string mb = slurp(root_ / "t" / "kernel" / "metadata");
	EXPECT_NE(mb.find("sync_piece = 1;"), std::string::npos);
	EXPECT_NE(mb.find("sync_piece_from = 300;"), std::string::npos);
	const auto before = tree(root_);
	TreeSplit again;
	ASSERT_TRUE(split_tree((root_ / "t").string(), &again, &err)) << err;
	EXPECT_EQ(again.st.packets_moved, 0u);
	EXPECT_EQ(tree(root_), before);
	// Only the listed directories.
	TreeSplit none;
	const std::vector<std::string> other = {(root_ / "t" / "elsewhere").string()};
	ASSERT_TRUE(split_tree((root_ / "t").string(), &none, &err, &other)) << err;
	EXPECT_EQ(none.subtraces, 0u);
}

TEST(TraceSplitNames, PieceDirAndUuid)
{
	EXPECT_TRUE(is_piece_dir("/t/ust/pid/a-1-2~seg0"));
	EXPECT_TRUE(is_piece_dir("a~seg12"));
	EXPECT_FALSE(is_piece_dir("a~seg"));
	EXPECT_FALSE(is_piece_dir("a~seg1x"));
	EXPECT_FALSE(is_piece_dir("/t/ust/pid/a-1-2"));
	const std::string t =
		"/* CTF 1.8 */\ntrace {\n\tmajor = 1;\n\tuuid = \"x\";\n};\nclock {\n\tuuid = \"y\";\n};\n";
	EXPECT_EQ(drop_trace_uuid(t),
		  "/* CTF 1.8 */\ntrace {\n\tmajor = 1;\n};\nclock {\n\tuuid = \"y\";\n};\n");
}

} // namespace
