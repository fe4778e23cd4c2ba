/*
 * ktest_kevents.cpp - in-guest test of the kernel event buffers: enable
 * kernel:sched_switch, kernel:sched_process_* and kernel:sys_* in a slot, run
 * a known workload, disable, then read the buffer with the strata_abi.h
 * lane protocol (consumer-side close, complete packets only, `consumed`),
 * check what the workload must have produced, and convert it to a CTF trace
 * (consumerd's metadata writer) that babeltrace2 must read back whole.
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

// The descriptor table, validated (the test trusts nothing either).
std::vector<strata::EventInfo> parse_descriptors(const uint8_t *base, uint64_t map_size,
						 const strata_buffer_header &h)
{
	std::vector<strata::EventInfo> evs;
	uint64_t used = __atomic_load_n(&((const strata_buffer_header *)base)->desc_used,
					__ATOMIC_ACQUIRE); // pairs with the module's release
	if (h.desc_offset > map_size || used > h.desc_capacity ||
	    h.desc_offset + h.desc_capacity > map_size)
		fail("descriptor table out of bounds");
	const uint8_t *t = base + h.desc_offset;
	for (uint64_t off = 0; off < used;) {
		auto de = rd<strata_desc_event>(t + off);
		if (de.record_size < sizeof de || de.record_size % 8 || off + de.record_size > used ||
		    de.n_fields > STRATA_DESC_MAX_FIELDS)
			fail("bad descriptor record");
		const uint8_t *rec = t + off;
		auto str = [&](uint32_t o) {
			if (o >= de.record_size || !memchr(rec + o, 0, de.record_size - o))
				fail("bad descriptor string");
			return std::string((const char *)rec + o);
		};
		strata::EventInfo ei;
		ei.id = de.id;
		ei.loglevel = de.loglevel;
		ei.provider = str(de.provider_off);
		ei.name = str(de.name_off);
		for (uint32_t i = 0; i < de.n_fields; i++) {
			auto df = rd<strata_desc_field>(rec + sizeof de + i * sizeof(strata_desc_field));
			strata::FieldInfo fi;
			fi.name = str(df.name_off);
			fi.type = df.type;
			fi.elem_bits = df.elem_bits;
			fi.is_signed = df.is_signed;
			fi.base = df.base;
			fi.length = df.length;
			ei.fields.push_back(fi);
		}
		evs.push_back(ei);
		off += de.record_size;
	}
	return evs;
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
	uint64_t map_size = ko.total_size;
	auto *base = (uint8_t *)mmap(nullptr, map_size, PROT_READ | PROT_WRITE, MAP_SHARED, kfd, 0);
	if (base == MAP_FAILED)
		fail(std::string("mmap kernel buffer: ") + strerror(errno));

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

	// ---- read (validated private copy of the geometry)
	auto h = rd<strata_buffer_header>(base);
	if (h.magic != STRATA_ABI_MAGIC || h.abi_major != STRATA_ABI_MAJOR ||
	    h.total_size != map_size || h.n_lanes != ko.n_lanes || h.n_lanes == 0 ||
	    h.n_lanes > STRATA_MAX_LANES || h.subbuf_size < STRATA_MIN_SUBBUF_SIZE ||
	    (h.subbuf_size & (h.subbuf_size - 1)) || h.n_subbuf < 2 ||
	    h.n_subbuf > STRATA_MAX_SUBBUF || h.lane_stride != h.n_subbuf * h.subbuf_size ||
	    h.lanes_offset + h.n_lanes * sizeof(strata_lane_ctl) > h.data_offset ||
	    h.data_offset + h.n_lanes * h.lane_stride > map_size || strcmp(h.channel, "kernel"))
		fail("bad kernel buffer header");
	auto descs = parse_descriptors(base, map_size, h);
	if (descs.size() != 7 || descs[0].provider != "kernel" || descs[0].name != "sched_switch")
		fail("unexpected descriptors");

	const uint64_t S = h.subbuf_size;
	std::vector<Event> events;
	std::vector<std::vector<uint8_t>> streams(h.n_lanes);
	uint64_t discarded = 0;
	for (uint32_t lane = 0; lane < h.n_lanes; lane++) {
		auto *lc = (strata_lane_ctl *)(base + h.lanes_offset) + lane;
		uint8_t *data = base + h.data_offset + lane * h.lane_stride;
		// Consumer-side close of the open packet (no writer is left).
		uint64_t head = __atomic_load_n(&lc->head, __ATOMIC_ACQUIRE);
		if (head % S) {
			uint64_t start = head - head % S;
			if (!__atomic_compare_exchange_n(&lc->head, &head, start + S, false,
							 __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
				fail("head moved after disarming");
			auto *ph = (strata_packet_header *)(data + (start & (h.lane_stride - 1)));
			ph->content_size = (head - start) * 8;
			ph->packet_size = S * 8;
			// Our clock is the module's (CLOCK_MONOTONIC): after every event.
			struct timespec now;
			clock_gettime(CLOCK_MONOTONIC, &now);
			ph->timestamp_end = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
			ph->events_discarded = __atomic_load_n(&lc->events_discarded, __ATOMIC_RELAXED);
			// Release: the closing fields before the count that completes it.
			__atomic_add_fetch(&lc->commit[(start / S) % h.n_subbuf], S - (head - start),
					   __ATOMIC_RELEASE);
			head = start + S;
		}
		uint64_t last_ts = 0;
		for (uint64_t pos = __atomic_load_n(&lc->consumed, __ATOMIC_RELAXED); pos < head; pos += S) {
			uint64_t lap = pos / h.lane_stride;
			// Acquire: pairs with the module's release add on commit.
			uint64_t c = __atomic_load_n(&lc->commit[(pos / S) % h.n_subbuf], __ATOMIC_ACQUIRE);
			if (c != (lap + 1) * S)
				fail("sub-buffer incomplete after disarming (lane " + std::to_string(lane) + ")");
			std::vector<uint8_t> pkt(data + (pos & (h.lane_stride - 1)),
						 data + (pos & (h.lane_stride - 1)) + S);
			parse_packet(pkt, lane, descs, &events, &last_ts);
			streams[lane].insert(streams[lane].end(), pkt.begin(), pkt.end());
			// Release: our copy is done before the writers may reuse it.
			__atomic_store_n(&lc->consumed, pos + S, __ATOMIC_RELEASE);
		}
		discarded += __atomic_load_n(&lc->events_discarded, __ATOMIC_RELAXED);
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
	std::string md = strata::ctf_metadata(h.trace_uuid, strata::measure_session_clock(), env,
					      h.stream_id, descs);
	std::ofstream(std::string(dir) + "/metadata") << md;
	for (uint32_t lane = 0; lane < h.n_lanes; lane++) {
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
	       "them all (%s)\n", events.size(), want_switch, h.n_lanes, dir);
	munmap(base, map_size);
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
