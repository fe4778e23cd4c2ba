// The daemon's kept sessions (consumerd/state_store.h) and the taking back
// of a process's buffer (consumerd/reattach.h): docs/crash.md, "The daemon
// dies".  The state files are read back as hostile text.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <signal.h>
#include <string>
#include <vector>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fs.h"
#include "reattach.h"
#include "state_store.h"
#include "strata_abi.h"

using namespace strata;

namespace {

SessionRecord sample()
{
	SessionRecord r;
	r.name = "s-1";
	r.id = 7;
	r.run_id = 42;
	r.slot = 3;
	r.uid = 1000;
	r.owner_uid = 1000;
	r.owner_gid = -1;
	r.owner_pid = 4321;
	r.out = "/tmp/a dir/with%odd,chars\n";
	r.channel.name = "chan";
	r.channel.mode = 1u | (200u << 8);
	r.channel.n_lanes = 4;
	r.channel.n_subbuf = 8;
	r.channel.subbuf_size = 65536;
	r.clock.uuid = "0b1c-x";
	r.clock.offset_s = 1700000000;
	r.clock.offset_ns = 999999999;
	proto::Rule u;
	u.pattern = "p:*";
	u.loglevel_max = 5;
	u.filter = "size > 4096 && path == \"/tmp/*\"";
	r.rules.push_back(u);
	r.targets.push_back({{12, 34}, {"a,b", "c d"}});
	u.pattern = "q:e";
	u.enable = 0;
	u.filter.clear();
	r.rules.push_back(u);
	r.targets.push_back({});
	BufferRecord b;
	b.pid = 99;
	b.start_time = 123456;
	b.dev = 5;
	b.ino = 77;
	for (int i = 0; i < 16; i++)
		b.uuid[i] = static_cast<uint8_t>(i * 17);
	b.signo = 61;
	b.uid = 1000;
	b.comm = "my prog";
	b.dir = r.out + "/ust/pid/my_prog-99-x";
	r.buffers.push_back(b);
	b.kmod = true; // joined through the kernel module
	b.pid = 100;
	r.buffers.push_back(b);
	r.kernel = true;
	for (int i = 0; i < 16; i++)
		r.kernel_uuid[i] = static_cast<uint8_t>(255 - i);
	r.kernel_dir = r.out + "/kernel";
	r.trigger = "p:fatal";
	return r;
}

// A scratch directory, removed with what it holds when the test program
// exits (the suite leaves nothing in /tmp).
std::vector<std::string> g_scratch;

std::string tmpdir()
{
	char t[] = "/tmp/strata-state-XXXXXX";
	if (!mkdtemp(t))
		return "/nonexistent";
	if (g_scratch.empty())
		std::atexit([] {
			for (const std::string &d : g_scratch) {
				std::error_code ec;
				std::filesystem::remove_all(d, ec);
			}
		});
	g_scratch.push_back(t);
	return t;
}

} // namespace

TEST(StateStore, RoundTripKeepsEveryField)
{
	const SessionRecord r = sample();
	SessionRecord back;
	std::string err;
	ASSERT_TRUE(StateStore::decode(StateStore::encode(r), back, err)) << err;
	EXPECT_EQ(StateStore::encode(back), StateStore::encode(r));
	EXPECT_EQ(back.out, r.out);
	EXPECT_EQ(back.rules[0].filter, r.rules[0].filter);
	EXPECT_EQ(back.targets[0].names, r.targets[0].names);
	EXPECT_EQ(back.targets[0].pids, r.targets[0].pids);
	EXPECT_EQ(back.buffers[0].comm, "my prog");
	EXPECT_EQ(0, memcmp(back.buffers[0].uuid, r.buffers[0].uuid, 16));
	EXPECT_EQ(back.owner_gid, -1);
	EXPECT_EQ(back.clock.offset_ns, 999999999);
	EXPECT_FALSE(back.buffers[0].kmod);
	EXPECT_TRUE(back.buffers[1].kmod);
	EXPECT_TRUE(back.kernel);
	EXPECT_EQ(0, memcmp(back.kernel_uuid, r.kernel_uuid, 16));
	EXPECT_EQ(back.kernel_dir, r.kernel_dir);
	EXPECT_EQ(back.trigger, "p:fatal");
	EXPECT_TRUE(back.unkept.empty());
	SessionRecord named = r, back2;
	named.unkept = "it streamed to serial line /dev/ttyS1";
	ASSERT_TRUE(StateStore::decode(StateStore::encode(named), back2, err)) << err;
	EXPECT_EQ(back2.unkept, named.unkept);
	EXPECT_EQ(back.aggregate, "");
	// An aggregation session keeps its spec and filter (issue 35).
	SessionRecord a = sample();
	a.aggregate = "pthread:mutex_lock:wait_ns by lock limit 64";
	a.agg_filter = "wait_ns > 1000";
	ASSERT_TRUE(StateStore::decode(StateStore::encode(a), back, err)) << err;
	EXPECT_EQ(back.aggregate, a.aggregate);
	EXPECT_EQ(back.agg_filter, a.agg_filter);
	EXPECT_EQ(StateStore::encode(back), StateStore::encode(a));
	a.aggregate = std::string(300, 'x'); // longer than a CREATE may say
	EXPECT_FALSE(StateStore::decode(StateStore::encode(a), back, err));
	// A process-tree session keeps its root (kCreateTree); none writes no line.
	EXPECT_EQ(r.tree, 0u);
	EXPECT_EQ(StateStore::encode(r).find("\ntree "), std::string::npos);
	SessionRecord t = sample();
	t.tree = 4321;
	ASSERT_TRUE(StateStore::decode(StateStore::encode(t), back, err)) << err;
	EXPECT_EQ(back.tree, 4321u);
	EXPECT_EQ(StateStore::encode(back), StateStore::encode(t));
}

TEST(StateStore, HostileTextIsRefused)
{
	const std::string good = StateStore::encode(sample());
	auto refused = [](const std::string &text) {
		SessionRecord r;
		std::string err;
		return !StateStore::decode(text, r, err) && !err.empty();
	};
	EXPECT_TRUE(refused(""));
	EXPECT_TRUE(refused(good.substr(0, good.size() - 4))); // no end
	EXPECT_TRUE(refused(good + "buffer 1\n"));             // after its end
	EXPECT_TRUE(refused("strata-session 2\nend\n"));       // another version
	EXPECT_TRUE(refused("strata-session 1\nend\n"));       // no session line
	auto with = [&](const std::string &from, const std::string &to) {
		std::string t = good;
		const size_t p = t.find(from);
		EXPECT_NE(p, std::string::npos) << from;
		return t.replace(p, from.size(), to);
	};
	EXPECT_TRUE(refused(with("s-1 7 42 3", "s-1 7 42 16"))); // slot out of range
	EXPECT_TRUE(refused(with("s-1 7 42 3", "s-1 7 42 -3")));
	EXPECT_TRUE(refused(with("4321 /tmp", "4321 tmp")));           // relative output
	EXPECT_TRUE(refused(with("buffer 99", "buffer 99999999999"))); // pid beyond u32
	EXPECT_TRUE(refused(with("/ust/pid/", "/../../etc/")));        // outside the output
	EXPECT_TRUE(refused(with("chan 0", "chan 0 0")));              // field count
	EXPECT_TRUE(refused(with("%0a", "%0")));                       // torn escape
	EXPECT_TRUE(refused(with("%0a", "%zz")));
	EXPECT_TRUE(refused(with("rule 1", "rule 2")));
	EXPECT_TRUE(refused(with("channel ", "tunnel ")));       // unknown line
	EXPECT_TRUE(refused(with("999999999 ", "1000000000 "))); // offset_ns
	EXPECT_TRUE(refused(with("-x 1\n", "-x 2\n")));          // a buffer's module flag
	EXPECT_TRUE(refused(with("/kernel\n", "/../kernel\n"))); // kernel sub-trace outside
	EXPECT_TRUE(refused(good + "kernel 00 /x\n"));
	EXPECT_TRUE(refused(with("trigger p:fatal\n", "trigger p:fatal\ntrigger q:x\n"))); // twice
	EXPECT_TRUE(refused(with("trigger p:fatal\n", "trigger\n")));
	EXPECT_TRUE(
		refused(with("trigger p:fatal\n", "trigger p:fatal\ntree 1\n"))); // pid 1: everyone's root
	EXPECT_TRUE(refused(with("trigger p:fatal\n", "trigger p:fatal\ntree x\n")));
}

TEST(StateStore, SaveLoadRemove)
{
	const std::string dir = tmpdir() + "/sock.state";
	StateStore st(dir);
	SessionRecord r = sample();
	ASSERT_TRUE(st.save(r));
	struct stat a, b;
	const std::string file = dir + "/s-1.session";
	ASSERT_EQ(0, stat(file.c_str(), &a));
	EXPECT_EQ(a.st_mode & 0777, 0600u);
	ASSERT_TRUE(st.save(r)); // unchanged: not written again
	ASSERT_EQ(0, stat(file.c_str(), &b));
	EXPECT_EQ(a.st_ino, b.st_ino);
	r.buffers.clear();
	ASSERT_TRUE(st.save(r)); // changed: a new file put in its place
	ASSERT_EQ(0, stat(file.c_str(), &b));
	EXPECT_NE(a.st_ino, b.st_ino);
	EXPECT_NE(0, access((file + ".tmp").c_str(), F_OK)); // the old one gone
	// A torn file and a foreign one beside it.
	FILE *f = fopen((dir + "/t.session").c_str(), "w");
	fputs("strata-session 1\nsession t 1 2 3", f);
	fclose(f);
	ASSERT_EQ(0, symlink(file.c_str(), (dir + "/l.session").c_str()));
	StateStore again(dir);
	std::vector<std::string> errors;
	std::vector<SessionRecord> recs = again.load(errors);
	ASSERT_EQ(recs.size(), 1u);
	EXPECT_EQ(recs[0].name, "s-1");
	EXPECT_EQ(errors.size(), 2u);
	EXPECT_EQ(0, access((dir + "/t.session.ignored").c_str(), F_OK)); // read once only
	EXPECT_EQ(again.names(), std::vector<std::string>{"s-1"});
	again.remove("s-1");
	EXPECT_NE(0, access(file.c_str(), F_OK));
}

static std::string slurp(const std::string &path)
{
	std::string s;
	if (FILE *f = fopen(path.c_str(), "re")) {
		char buf[256];
		size_t n;
		while ((n = fread(buf, 1, sizeof buf, f)) > 0)
			s.append(buf, n);
		fclose(f);
	}
	return s;
}

// replace_file (fs.h): a rename where nothing is in the way, a swap of
// the names and the old file removed where something is; a reader that
// opened the old file keeps reading the old text.
TEST(StateStore, ReplaceFileSwapsAndRemovesTheOld)
{
	const std::string dir = tmpdir(), path = dir + "/f", tmp = path + ".tmp";
	auto put = [](const std::string &p, const char *text) {
		FILE *f = fopen(p.c_str(), "we");
		ASSERT_NE(f, nullptr);
		fputs(text, f);
		fclose(f);
	};
	put(tmp, "one");
	ASSERT_EQ(0, replace_file(tmp, path)); // nothing there yet
	EXPECT_EQ(slurp(path), "one");
	EXPECT_NE(0, access(tmp.c_str(), F_OK));
	const int old = open(path.c_str(), O_RDONLY | O_CLOEXEC);
	ASSERT_GE(old, 0);
	put(tmp, "two");
	ASSERT_EQ(0, replace_file(tmp, path));
	EXPECT_EQ(slurp(path), "two");
	EXPECT_NE(0, access(tmp.c_str(), F_OK)); // the old text not left behind
	char buf[8] = {};
	EXPECT_EQ(3, pread(old, buf, sizeof buf, 0));
	EXPECT_STREQ(buf, "one");
	close(old);
	errno = 0;
	EXPECT_EQ(-1, replace_file(dir + "/none.tmp", path)); // no new file: nothing changes
	EXPECT_EQ(errno, ENOENT);
	EXPECT_EQ(slurp(path), "two");
}

// A child holds a memfd; we take it back by (dev, ino), and refuse
// another process (start time) or another file (inode).
TEST(Reattach, TakesTheBufferBackFromItsProcess)
{
	int ready[2];
	ASSERT_EQ(0, pipe(ready));
	const pid_t child = fork();
	ASSERT_GE(child, 0);
	if (child == 0) {
		const int fd = static_cast<int>(syscall(SYS_memfd_create, "strata-slot-03", MFD_CLOEXEC));
		if (fd < 0 || ftruncate(fd, 4096) != 0 || write(ready[1], "x", 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	close(ready[1]);
	char c;
	ASSERT_EQ(1, read(ready[0], &c, 1));
	close(ready[0]);
	// The child's memfd, found as the daemon would have recorded it.
	struct stat st = {};
	bool found = false;
	for (int n = 0; n < 64 && !found; n++) {
		const std::string link = "/proc/" + std::to_string(child) + "/fd/" + std::to_string(n);
		char target[64] = {};
		if (readlink(link.c_str(), target, sizeof target - 1) > 0 &&
		    !strncmp(target, "/memfd:strata-slot-03", 21))
			found = stat(link.c_str(), &st) == 0;
	}
	ASSERT_TRUE(found);
	const uint64_t start = proc_start_time(static_cast<uint32_t>(child));
	ASSERT_NE(start, 0u);
	std::string err;
	int fd = reclaim_memfd(static_cast<uint32_t>(child), start, st.st_dev, st.st_ino, err);
	ASSERT_GE(fd, 0) << err;
	struct stat got;
	ASSERT_EQ(0, fstat(fd, &got));
	EXPECT_EQ(got.st_ino, st.st_ino);
	close(fd);
	EXPECT_LT(reclaim_memfd(static_cast<uint32_t>(child), start + 1, st.st_dev, st.st_ino, err), 0);
	EXPECT_NE(err.find("another process"), std::string::npos) << err;
	EXPECT_LT(reclaim_memfd(static_cast<uint32_t>(child), start, st.st_dev, st.st_ino + 1, err), 0);
	EXPECT_NE(err.find("no longer holds"), std::string::npos) << err;
	kill(child, SIGKILL);
	waitpid(child, nullptr, 0);
	EXPECT_LT(reclaim_memfd(static_cast<uint32_t>(child), start, st.st_dev, st.st_ino, err), 0);
	EXPECT_EQ(err, "exited");
}

// A stream file cut back to its last whole packet, whose header is read.
TEST(Reattach, StreamTailCutsATornPacket)
{
	const std::string path = tmpdir() + "/channel0_0";
	uint8_t uuid[16] = {1, 2, 3};
	std::string data;
	for (uint64_t seq = 5; seq < 8; seq++) {
		std::string pkt(256, '\0');
		strata_packet_header ph = {};
		ph.magic = STRATA_CTF_MAGIC;
		memcpy(ph.uuid, uuid, 16);
		ph.packet_size = ph.content_size = 256 * 8;
		ph.packet_seq_num = seq;
		ph.events_discarded = seq * 10;
		ph.timestamp_begin = seq * 100;
		ph.timestamp_end = seq * 100 + 50;
		memcpy(&pkt[0], &ph, sizeof ph);
		data += pkt;
	}
	const std::string torn = data.substr(0, 256 + 100); // a kill in a write
	FILE *f = fopen(path.c_str(), "wb");
	fwrite(data.data(), 1, data.size(), f);
	fwrite(torn.data(), 1, torn.size(), f);
	fclose(f);
	PacketTail t;
	std::string err;
	ASSERT_TRUE(stream_tail(path, uuid, t, err)) << err;
	EXPECT_EQ(t.packets, 4u); // three, and the first of the torn write whole
	EXPECT_EQ(t.seq, 5u);
	EXPECT_EQ(t.discarded, 50u);
	struct stat st;
	ASSERT_EQ(0, stat(path.c_str(), &st));
	EXPECT_EQ(st.st_size, 4 * 256);
	uint8_t other[16] = {9};
	EXPECT_FALSE(stream_tail(path, other, t, err)); // another trace's file
	EXPECT_TRUE(stream_tail(path + "-none", uuid, t, err));
	EXPECT_EQ(t.packets, 0u);
}

// A buffer lost at a restart: each lane with a packet ends with an empty
// one whose sequence number skips one (a reader's "discarded packets").
TEST(Reattach, MarkLostTailAppendsAGap)
{
	const std::string dir = tmpdir();
	uint8_t uuid[16] = {4, 5, 6};
	std::string pkt(256, '\0');
	strata_packet_header ph = {};
	ph.magic = STRATA_CTF_MAGIC;
	memcpy(ph.uuid, uuid, 16);
	ph.packet_size = ph.content_size = 256 * 8;
	ph.packet_seq_num = 9;
	ph.events_discarded = 3;
	ph.timestamp_end = 777;
	ph.lane_id = 1;
	memcpy(&pkt[0], &ph, sizeof ph);
	FILE *f = fopen((dir + "/chan_1").c_str(), "wb");
	fwrite(pkt.data(), 1, pkt.size(), f);
	fclose(f);
	fclose(fopen((dir + "/chan_2").c_str(), "wb")); // a lane with no packet
	fclose(fopen((dir + "/metadata").c_str(), "wb"));
	std::string err;
	EXPECT_EQ(1u, mark_lost_tail(dir, uuid, err)) << err;
	PacketTail t;
	ASSERT_TRUE(stream_tail(dir + "/chan_1", uuid, t, err)) << err;
	EXPECT_EQ(t.packets, 2u);
	EXPECT_EQ(t.seq, 11u);
	EXPECT_EQ(t.discarded, 3u);
	EXPECT_EQ(t.ts_end, 777u);
	struct stat st;
	ASSERT_EQ(0, stat((dir + "/chan_1").c_str(), &st));
	EXPECT_EQ(st.st_size, 256 + STRATA_PACKET_HEADER_SIZE);
	ASSERT_EQ(0, stat((dir + "/chan_2").c_str(), &st));
	EXPECT_EQ(st.st_size, 0);
	uint8_t other[16] = {7};
	EXPECT_EQ(0u, mark_lost_tail(dir, other, err)); // another trace's files
	EXPECT_FALSE(err.empty());
}
