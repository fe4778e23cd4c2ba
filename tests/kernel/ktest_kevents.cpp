/*
 * ktest_kevents.cpp - in-guest test of the kernel event buffers: enable
 * kernel:sched_switch, kernel:sched_process_* and kernel:sys_* in a slot, run
 * a known workload, disable, then read the buffer with the consumer's own
 * strata::Reader (libtrace/reader.h: the kernel buffer is an ordinary
 * strata_abi.h buffer), check what the workload must have produced, and
 * convert it to a CTF trace (consumerd's metadata writer) that babeltrace2
 * must read back whole.
 *
 * Oracles: events read == STATS.kevents_written delta; nothing lost; per
 * lane timestamps non-decreasing and inside their packet; the fork, exec,
 * exit of our child and our getppid() calls (id and return value) are
 * there; babeltrace2 prints exactly as many events as were read.
 */
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "abi/strata_abi.h"
#include "metadata.h"
#include "reader.h"

extern "C" {
#include "ktest.h"
}

namespace {

struct Event {
	uint32_t lane = 0;
	std::string name;
	uint64_t ts = 0;
	uint32_t tid = 0;
	std::map<std::string, int64_t> ints;
	std::map<std::string, std::string> strs;
};

struct Fail {
	std::string why;
};

[[noreturn]] void fail(const std::string &why)
{
	throw Fail{ why };
}

template <class T> T rd(const uint8_t *p)
{
	T v;
	memcpy(&v, p, sizeof v);
	return v;
}

// Parse one packet's records (layout of strata_abi.h).
void parse_packet(const std::vector<uint8_t> &pkt, uint32_t lane,
		  const std::vector<strata::EventInfo> &descs, std::vector<Event> *out,
		  uint64_t *last_ts)
{
	auto ph = rd<strata_packet_header>(pkt.data());
	if (ph.magic != STRATA_CTF_MAGIC || ph.content_size % 8 || ph.content_size / 8 > pkt.size() ||
	    ph.content_size / 8 < STRATA_PACKET_HEADER_SIZE || ph.lane_id != lane)
		fail("bad packet header");
	const uint64_t end = ph.content_size / 8;
	// Padding comes before records: content ends with the last record.
	for (uint64_t off = STRATA_PACKET_HEADER_SIZE; off < end;
	     off = (off + STRATA_EVENT_ALIGN - 1) / STRATA_EVENT_ALIGN * STRATA_EVENT_ALIGN) {
		if (off + STRATA_EVENT_HEADER_SIZE > end)
			fail("truncated record header");
		const uint8_t *r = pkt.data() + off;
		uint16_t id = rd<uint16_t>(r + STRATA_EVENT_ID_OFF);
		if (id >= descs.size())
			fail("unknown event id " + std::to_string(id));
		Event e;
		e.lane = lane;
		e.name = descs[id].name;
		e.ts = rd<uint64_t>(r + STRATA_EVENT_TS_OFF);
		e.tid = rd<uint32_t>(r + STRATA_EVENT_TID_OFF);
		if (e.ts < *last_ts)
			fail("timestamps decrease in lane " + std::to_string(lane));
		if (e.ts < ph.timestamp_begin || e.ts > ph.timestamp_end)
			fail("event outside its packet's time range");
		*last_ts = e.ts;
		uint64_t p = off + STRATA_EVENT_HEADER_SIZE;
		for (const auto &f : descs[id].fields) {
			uint64_t a = f.elem_bits / 8;
			if (f.type == STRATA_FT_STRING) {
				const void *z = p < end ? memchr(pkt.data() + p, 0, end - p) : nullptr;
				if (!z)
					fail("unterminated string");
				e.strs[f.name] = std::string((const char *)pkt.data() + p);
				p += e.strs[f.name].size() + 1;
				continue;
			}
			p = (p + a - 1) / a * a;
			uint64_t n = f.type == STRATA_FT_ARRAY ? f.length : 1;
			if (p + n * a > end)
				fail("field beyond content");
			if (f.type == STRATA_FT_INTEGER)
				e.ints[f.name] = a == 8 ? (int64_t)rd<uint64_t>(pkt.data() + p)
					       : f.is_signed ? (int64_t)rd<int32_t>(pkt.data() + p)
							     : (int64_t)rd<uint32_t>(pkt.data() + p);
			else
				e.ints[f.name + "[0]"] = (int64_t)rd<uint64_t>(pkt.data() + p);
			p += n * a;
		}
		off = p;
		out->push_back(std::move(e));
	}
}

int set_kernel_rules(int dev, unsigned slot, const std::vector<std::string> &patterns)
{
	std::vector<strata_kabi_rule> rules(patterns.size());
	for (size_t i = 0; i < patterns.size(); i++) {
		memset(&rules[i], 0, sizeof rules[i]);
		snprintf(rules[i].pattern, sizeof rules[i].pattern, "%s", patterns[i].c_str());
		rules[i].loglevel_max = -1;
		rules[i].enable = 1;
	}
	strata_kabi_set_rules a = {};
	a.size = sizeof a;
	a.slot = slot;
	a.n_rules = (uint32_t)rules.size();
	a.target_kind = STRATA_KABI_TARGET_UID;
	a.target_uid = STRATA_KABI_UID_ANY;
	a.rules_ptr = (uintptr_t)rules.data();
	return ioctl(dev, STRATA_IOC_SET_RULES, &a) ? -errno : 0;
}

void run()
{
	const unsigned slot = 1;
	int dev = kt_open();
	if (dev < 0)
		fail("open device");
	strata_kabi_stats s0, s1;
	if (kt_stats(dev, &s0))
		fail("stats");

	strata_kabi_kbuf_open ko = {};
	ko.size = sizeof ko;
	ko.slot = slot;
	if (set_kernel_rules(dev, slot, {}))
		fail("clear slot before the test");
	if (ioctl(dev, STRATA_IOC_KBUF_OPEN, &ko) >= 0 || errno != ENOENT)
		fail("KBUF_OPEN of a slot without kernel rules did not fail with ENOENT");
	if (set_kernel_rules(dev, slot, { "kernel:sched_switch", "kernel:sched_process_*",
					  "kernel:sys_e*" }))
		fail(std::string("set kernel rules: ") + strerror(errno));
	ko = {};
	ko.size = sizeof ko;
	ko.slot = slot;
	int kfd = ioctl(dev, STRATA_IOC_KBUF_OPEN, &ko);
	if (kfd < 0)
		fail(std::string("KBUF_OPEN: ") + strerror(errno));
	// A regular file, like a user buffer's memfd: the consumer's Reader
	// attaches to it unchanged.
	struct stat kst;
	if (fstat(kfd, &kst) || !S_ISREG(kst.st_mode) || (uint64_t)kst.st_size != ko.total_size)
		fail("kernel buffer fd is not a regular file of total_size bytes");

	// ---- the workload
	const pid_t me = getpid();
	pid_t child = fork();
	if (child == 0) {
		execl("/bin/true", "true", (char *)nullptr);
		_exit(127);
	}
	int st;
	waitpid(child, &st, 0);
	long ppid = 0;
	for (int i = 0; i < 3; i++)
		ppid = syscall(SYS_getppid);
	usleep(2000); // a context switch of ours with prev_state != 0 (not a sync)

	// ---- stop recording: clearing the slot disarms (and synchronises)
	if (set_kernel_rules(dev, slot, {}))
		fail("clear slot");
	if (kt_stats(dev, &s1))
		fail("stats");

	// ---- read with the consumer's Reader (libtrace/reader.h)
	std::string err;
	auto reader = strata::Reader::attach(kfd, &err);
	if (!reader)
		fail("Reader::attach: " + err);
	const strata::BufferInfo &info = reader->info();
	if (info.n_lanes != ko.n_lanes || info.channel != "kernel" || info.pid != 0 ||
	    info.mode != STRATA_MODE_DISCARD || info.clock_id != STRATA_CLOCK_MONOTONIC)
		fail("unexpected kernel buffer header");
	std::vector<strata::EventInfo> descs;
	std::vector<std::string> errors;
	if (!reader->read_new_events(&descs, &errors) || !errors.empty())
		fail("descriptors: " + (errors.empty() ? std::string("table broken") : errors[0]));
	if (descs.size() != 7 || descs[0].provider != "kernel" || descs[0].name != "sched_switch")
		fail("unexpected descriptors");
	for (uint32_t i = 0; i < descs.size(); i++)
		if (descs[i].id != i)
			fail("descriptor ids not 0..6 in order");

	std::vector<Event> events;
	std::vector<std::vector<uint8_t>> streams(info.n_lanes);
	uint64_t discarded = 0;
	for (uint32_t lane = 0; lane < info.n_lanes; lane++) {
		// The slot is cleared: no writer is left, the producer is "dead".
		std::string msg;
		if (reader->flush(lane, true, 2000, &msg) != strata::FlushStatus::kDone)
			fail("flush lane " + std::to_string(lane) + ": " + msg);
		uint64_t last_ts = 0;
		std::vector<uint8_t> pkt;
		for (;;) {
			strata::ReadStatus rs = reader->next_packet(lane, &pkt, &err);
			if (rs == strata::ReadStatus::kEmpty)
				break;
			if (rs == strata::ReadStatus::kSkipped)
				fail("Reader skipped a packet: " + err);
			parse_packet(pkt, lane, descs, &events, &last_ts);
			streams[lane].insert(streams[lane].end(), pkt.begin(), pkt.end());
		}
		if (reader->trailing_loss_packet(lane, &pkt))
			streams[lane].insert(streams[lane].end(), pkt.begin(), pkt.end());
		discarded += reader->lane_discarded(lane);
	}

	// ---- oracles
	uint64_t written = s1.kevents_written - s0.kevents_written;
	if (events.size() != written)
		fail("read " + std::to_string(events.size()) + " events, module wrote " +
		     std::to_string(written));
	if (discarded || s1.kevents_lost != s0.kevents_lost)
		fail("events lost: " + std::to_string(discarded));
	bool fork_ok = false, exec_ok = false, exit_ok = false, switch_ok = false;
	int getppid_enter = 0, getppid_exit = 0;
	for (const auto &e : events) {
		if (e.name == "sched_process_fork" && e.ints.at("child_tid") == child &&
		    e.ints.at("parent_tid") == me)
			fork_ok = true;
		if (e.name == "sched_process_exec" && e.ints.at("tid") == child &&
		    e.strs.at("filename") == "/bin/true")
			exec_ok = true;
		if (e.name == "sched_process_exit" && e.ints.at("tid") == child)
			exit_ok = true;
		if (e.name == "sched_switch" && e.ints.at("prev_tid") == me && e.tid == (uint32_t)me)
			switch_ok = true;
		if (e.name == "sys_enter" && e.tid == (uint32_t)me && e.ints.at("id") == SYS_getppid)
			getppid_enter++;
		if (e.name == "sys_exit" && e.tid == (uint32_t)me && e.ints.at("id") == SYS_getppid &&
		    e.ints.at("ret") == ppid)
			getppid_exit++;
	}
	if (!fork_ok || !exec_ok || !exit_ok || !switch_ok)
		fail("missing workload events: fork " + std::to_string(fork_ok) + " exec " +
		     std::to_string(exec_ok) + " exit " + std::to_string(exit_ok) + " switch " +
		     std::to_string(switch_ok));
	if (getppid_enter < 3 || getppid_exit < 3)
		fail("getppid: " + std::to_string(getppid_enter) + " enters, " +
		     std::to_string(getppid_exit) + " exits with the right value");

	// ---- CTF trace, read back by babeltrace2
	// Kept in the VM's output folder when there is one (for inspection).
	const char *keep = getenv("STRATA_VM_OUT");
	std::string dir_s = std::string(keep ? keep : "/tmp") + "/kevents-ctf-XXXXXX";
	std::vector<char> dirv(dir_s.begin(), dir_s.end());
	dirv.push_back(0);
	char *dir = dirv.data();
	if (!mkdtemp(dir))
		fail("mkdtemp " + dir_s);
	strata::TraceEnv env;
	env.domain = "kernel";
	env.procname = "kernel";
	std::string md = strata::ctf_metadata(info.uuid, strata::measure_session_clock(), env,
					      info.stream_id, descs);
	std::ofstream(std::string(dir) + "/metadata") << md;
	for (uint32_t lane = 0; lane < info.n_lanes; lane++) {
		std::ofstream f(std::string(dir) + "/kernel_" + std::to_string(lane), std::ios::binary);
		f.write((const char *)streams[lane].data(), (std::streamsize)streams[lane].size());
	}
	std::string cmd = std::string("babeltrace2 ") + dir + " 2>&1";
	FILE *p = popen(cmd.c_str(), "r");
	if (!p)
		fail("popen babeltrace2");
	char line[4096];
	size_t n_lines = 0, n_switch = 0;
	std::string first_err;
	while (fgets(line, sizeof line, p)) {
		n_lines++;
		if (strstr(line, "kernel:sched_switch:") && strstr(line, "next_tid = "))
			n_switch++;
		if (first_err.empty() && strstr(line, "ERROR"))
			first_err = line;
	}
	int brc = pclose(p);
	size_t want_switch = 0;
	for (const auto &e : events)
		want_switch += e.name == "sched_switch";
	if (brc != 0 || n_lines != events.size() || n_switch != want_switch)
		fail("babeltrace2 (rc " + std::to_string(brc) + ") printed " + std::to_string(n_lines) +
		     " lines (" + std::to_string(n_switch) + " sched_switch) for " +
		     std::to_string(events.size()) + " events (" + std::to_string(want_switch) +
		     "): " + first_err);
	printf("info kevents: %zu events (%zu sched_switch) over %u lanes, 0 lost; babeltrace2 read "
	       "them all (%s)\n", events.size(), want_switch, info.n_lanes, dir);
	reader.reset();
	close(kfd);
	close(dev);
}

} // namespace

extern "C" int kt_kevents(void)
{
	try {
		run();
		return 0;
	} catch (const Fail &f) {
		kt_fail("%s", f.why.c_str());
	} catch (const std::exception &e) {
		kt_fail("exception: %s", e.what());
	}
	return -1;
}
