/*
 * kernel_source.cpp - see kernel_source.h for the contract.
 *
 * Per-slot state (main thread only): whether the module's slot was set by
 * us, and the trace uuid of the kernel buffer we drain, so that a new
 * buffer (the module frees a slot's buffer when its rules stop wanting
 * kernel events, and makes a new one when they want them again) gets its
 * own drain and directory while an unchanged one is not opened twice.
 */
#include "kernel_source.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <sys/mman.h>
#include <unistd.h>

#include "strata_kmod.h"
#include "strata_abi.h"

#include <sys/un.h>

namespace strata {

// The module's limits are the protocol's and the runtime's (all from
// strata_limits.h): a session the daemon accepts fits the module's slot.
// The socket path's is the system's.
static_assert(STRATA_KABI_SOCK_MAX == sizeof(sockaddr_un::sun_path), "strata_kabi.h: a socket path");

namespace {

struct SlotState {
	bool set = false;      // the module's slot holds our rules
	bool grants = false;   // ... with a session: the module answers QUERY
	bool tree = false;     // ... for the session's process tree alone (TARGET_TREE)
	bool draining = false; // a drain reads the buffer `uuid`
	uint8_t uuid[16] = {};
	bool warned = false; // "no kernel events" said once per start
	// A dead predecessor drained the buffer `resume_uuid` into
	// `resume_dir` (kernel_resume): continue that sub-trace.
	bool resume = false;
	uint8_t resume_uuid[16] = {};
	std::string resume_dir;
	std::string said_targets; // what rule_targets last said of this slot's targets
};

int g_dev = -1;         // /dev/strata, opened on first use, kept
int g_kabi = 0;         // the module's kabi version (REGISTER's answer)
bool g_no_keep = false; // the module refused STRATA_KABI_SET_KEEP (older)
bool g_no_tree = false; // the module refused STRATA_KABI_TARGET_TREE (older)
// The module's boot slot (kmod/strata_ctl.c, strata_ctl_boot).
constexpr uint32_t kBootSlot = STRATA_KABI_MAX_SLOTS - 1;
SlotState g_slots[proto::kMaxSlots];

void say(uint32_t slot, const std::string &what)
{
	fprintf(stderr, "strata-consumerd: slot %u: kernel events: %s\n", slot, what.c_str());
}

// The session records user events only: say why, once per start.
void not_recorded(SlotState &st, uint32_t slot, const std::string &what, int err)
{
	if (!st.warned)
		say(slot, "not recorded: " + what + ": " + strerror(-err) +
				  (err == -EPERM ? " (kernel events need CAP_SYS_ADMIN)" : ""));
	st.warned = true;
}

bool wants_kernel(const std::vector<proto::Rule> &rules)
{
	for (const proto::Rule &r : rules)
		if (r.enable && r.pattern.compare(0, 7, "kernel:") == 0)
			return true;
	return false;
}

// The daemon's rules as the module's, into kr; their count (one too long
// is left out: the daemon bounds them already; never overflow).
uint32_t kabi_rules(const std::vector<proto::Rule> &rules, strata_kabi_rule kr[STRATA_KABI_MAX_RULES])
{
	uint32_t n = 0;
	for (const proto::Rule &r : rules) {
		if (n == STRATA_KABI_MAX_RULES || r.pattern.size() >= sizeof kr[0].pattern ||
		    r.filter.size() >= sizeof kr[0].filter)
			continue;
		memset(&kr[n], 0, sizeof kr[n]);
		memcpy(kr[n].pattern, r.pattern.data(), r.pattern.size());
		memcpy(kr[n].filter, r.filter.data(), r.filter.size());
		kr[n].loglevel_max = r.loglevel_max;
		kr[n].enable = r.enable;
		n++;
	}
	return n;
}

// SET_RULES without a session's grant.  With `geom`, its V3 tail (the
// kernel buffer's geometry): a module without it refuses the longer struct
// (-E2BIG), then the defaults.
int set_rules_only(uint32_t slot, uint32_t target_uid, const strata_kabi_rule *kr, uint32_t n,
		   const proto::ChannelConfig &channel, bool geom, uint64_t *gen)
{
	if (geom) {
		strata_kabi_set_rules a;
		strata_kmod_rules_init(&a, slot, kr, n, STRATA_KABI_TARGET_UID, target_uid);
		a.kbuf_subbuf_size = static_cast<uint32_t>(channel.subbuf_size);
		a.kbuf_n_subbuf = channel.n_subbuf;
		const int r = strata_kmod_rules_send(g_dev, &a, gen, nullptr);
		if (r != -E2BIG)
			return r;
	}
	return strata_kmod_set_rules(g_dev, slot, kr, n, STRATA_KABI_TARGET_UID, target_uid, nullptr, 0, gen,
				     nullptr);
}

// The grant's targets of its first n rules (pids, process names) into tg;
// whether any rule has one.  The protocol bounds a rule's targets as the
// module does (strata_limits.h); what the module cannot hold as sent (a name
// longer than a comm: the kernel keeps a process's first 15 bytes, which it
// matches; targets past the module's count) is said, once per change.
bool rule_targets(uint32_t slot, const KmodGrant &grant, uint32_t n,
		  strata_kabi_rule_target tg[STRATA_KABI_MAX_RULES])
{
	memset(tg, 0, sizeof(strata_kabi_rule_target) * STRATA_KABI_MAX_RULES);
	bool any = false;
	std::string note;
	for (uint32_t i = 0; i < n && i < grant.targets.size(); i++) {
		const auto &t = grant.targets[i];
		for (uint32_t pid : t.first)
			if (pid && tg[i].n_pids < STRATA_KABI_RULE_PIDS)
				tg[i].pids[tg[i].n_pids++] = pid;
			else if (pid)
				note += "; rule " + std::to_string(i) + ": pid " + std::to_string(pid) +
					" left out";
		for (const std::string &name : t.second) {
			const size_t len = std::min<size_t>(name.size(), STRATA_KABI_COMM_MAX - 1);
			if (len < name.size())
				note += "; rule " + std::to_string(i) + ": process name '" + name +
					"' matches by its first " + std::to_string(len) + " bytes, '" +
					name.substr(0, len) + "' (the kernel's comm)";
			if (len && tg[i].n_comms < STRATA_KABI_RULE_COMMS)
				memcpy(tg[i].comms[tg[i].n_comms++], name.data(), len);
			else if (len)
				note += "; rule " + std::to_string(i) + ": process name '" + name +
					"' left out";
		}
		any = any || tg[i].n_pids || tg[i].n_comms;
	}
	if (note != g_slots[slot].said_targets && !note.empty())
		say(slot, "targets" + note.substr(1));
	g_slots[slot].said_targets = note;
	return any;
}

// SET_RULES with a session.  An older module refuses (-EINVAL) what it does
// not know; what is left out, newest first, is said once: the process-tree
// target, the keep flag, the blocking timeout of the processes' channel.
int send_session(uint32_t slot, strata_kmod_session &ks, const strata_kabi_rule *kr, uint32_t n,
		 uint32_t target_uid, uint64_t *gen)
{
	int r = strata_kmod_set_session(g_dev, slot, &ks, kr, n, target_uid, gen, nullptr);
	if (r == -EINVAL && ks.tree) {
		ks.tree = 0;
		r = strata_kmod_set_session(g_dev, slot, &ks, kr, n, target_uid, gen, nullptr);
		g_no_tree = r == 0;
		if (g_no_tree)
			say(slot, "the kernel module has no process-tree grants (an older strata.ko): it "
				  "offers the session to every process of the user; the daemon takes "
				  "buffers from the tree alone");
	}
	if (r == -EINVAL && ks.flags) {
		ks.flags = 0;
		r = strata_kmod_set_session(g_dev, slot, &ks, kr, n, target_uid, gen, nullptr);
		g_no_keep = r == 0;
	}
	if (r == -EINVAL && STRATA_MODE_BLOCK_MS(ks.channel.mode)) {
		ks.channel.mode &= STRATA_MODE_MASK;
		r = strata_kmod_set_session(g_dev, slot, &ks, kr, n, target_uid, gen, nullptr);
		if (r == 0)
			say(slot, "the kernel module refuses a blocking channel (an older strata.ko): the "
				  "processes it answers discard at a full ring without waiting");
	}
	return r;
}

// channel: the session's sub-buffer size and count, for the kernel buffer
// this SET_RULES may create (0: the module's defaults; it bounds them).
int set_slot(uint32_t slot, uid_t uid, const std::vector<proto::Rule> &rules,
	     const proto::ChannelConfig &channel, const KmodGrant *grant, uint64_t *gen)
{
	strata_kabi_rule kr[STRATA_KABI_MAX_RULES];
	const uint32_t n = kabi_rules(rules, kr);
	const uint32_t target_uid = uid == 0 ? STRATA_KABI_UID_ANY : static_cast<uint32_t>(uid);
	// The kernel buffer this SET_RULES may create takes the session's
	// geometry when kernel events are wanted (0: the module's defaults).
	const bool geom = wants_kernel(rules) && (channel.subbuf_size || channel.n_subbuf) &&
			  channel.subbuf_size <= UINT32_MAX;
	if (!grant || g_kabi < 2 || grant->sock_path.empty() || grant->sock_path[0] != '/' ||
	    grant->sock_path.size() >= STRATA_KABI_SOCK_MAX || grant->channel.name.empty() ||
	    grant->channel.name.size() >= STRATA_KABI_NAME_MAX || n != rules.size()) {
		g_slots[slot].tree = false;
		return set_rules_only(slot, target_uid, kr, n, channel, geom, gen);
	}
	static strata_kabi_rule_target tg[STRATA_KABI_MAX_RULES]; // main thread only
	const bool any = rule_targets(slot, *grant, n, tg);
	strata_kmod_session ks;
	memset(&ks, 0, sizeof ks);
	ks.session_id = grant->session_id;
	memcpy(ks.channel.name, grant->channel.name.data(), grant->channel.name.size());
	ks.channel.stream_id = grant->channel.stream_id;
	// The processes' channel, its blocking timeout included (the kernel's
	// own buffer never blocks: the module makes it a discard one).
	ks.channel.mode = grant->channel.mode;
	ks.channel.n_lanes = grant->channel.n_lanes;
	ks.channel.n_subbuf = grant->channel.n_subbuf;
	ks.channel.subbuf_size = grant->channel.subbuf_size;
	memcpy(ks.sock_path, grant->sock_path.data(), grant->sock_path.size());
	ks.rule_targets = any && n ? tg : nullptr;
	if (geom) {
		ks.kbuf_subbuf_size = static_cast<uint32_t>(channel.subbuf_size);
		ks.kbuf_n_subbuf = channel.n_subbuf;
	}
	// The slot outlives our death for a while, so that a restarted daemon
	// takes it over with its kernel buffer (docs/crash.md); an older
	// module refuses the flag: then without.
	ks.flags = g_no_keep || !grant->keep ? 0 : STRATA_KABI_SET_KEEP;
	// A process-tree session: the module grants the tree alone.  A module
	// without TARGET_TREE grants every process of the user; the tree is
	// then kept at BUFFER (processes.cpp: a buffer from outside refused).
	ks.tree = g_no_tree || grant->tree <= 0 ? 0 : static_cast<uint32_t>(grant->tree);
	const int r = send_session(slot, ks, kr, n, target_uid, gen);
	g_slots[slot].tree = r == 0 && ks.tree != 0;
	return r;
}

// KBUF_OPEN asking for a wait fd too (*wait_fd, -1 without one): a module
// of KBUF_OPEN V1 refuses the longer struct (-E2BIG), then open without;
// the drain then polls on its timeout.
int kbuf_open(uint32_t slot, uint64_t *size, int *wait_fd)
{
	strata_kabi_kbuf_open a;
	memset(&a, 0, sizeof a);
	a.size = sizeof a;
	a.slot = slot;
	a.flags = STRATA_KABI_KBUF_WAIT_FD;
	*wait_fd = -1;
	int kfd = strata_kmod_ioctl(g_dev, STRATA_IOC_KBUF_OPEN, &a);
	if (kfd == -E2BIG || kfd == -EINVAL)
		return strata_kmod_kbuf_open(g_dev, slot, size, nullptr);
	if (kfd >= 0) {
		*size = a.total_size;
		*wait_fd = a.wait_fd;
	}
	return kfd;
}

std::string unique_dir(const std::string &base)
{
	std::string dir = base;
	for (int n = 1; access(dir.c_str(), F_OK) == 0; n++)
		dir = base + "." + std::to_string(n);
	return dir;
}

// The predecessor's kernel sub-trace continued (Drain::resume), or nullptr
// (then a new one), saying which and why.  `kfd` stays ours on failure.
std::unique_ptr<Drain> resume_drain(uint32_t slot, SlotState &st, int kfd, const uint8_t uuid[16],
				    const ClockInfo &clock, const TraceEnv &env, const Owner &owner)
{
	st.resume = false;
	if (memcmp(uuid, st.resume_uuid, 16) != 0) {
		// Its sub-trace is made at its first packet: it may have none.
		const bool made = access(st.resume_dir.c_str(), F_OK) == 0;
		say(slot, "the previous daemon's kernel buffer is gone (the module cleared the slot): "
			  "kernel events from its end to now were not recorded; " +
				  (made ? st.resume_dir + " ends there"
					: "it had written no kernel sub-trace (" + st.resume_dir + ")"));
		return nullptr;
	}
	std::string err;
	const int fd = dup(kfd); // Drain::create takes its fd, also when it fails
	std::unique_ptr<Drain> d =
		fd < 0 ? nullptr : Drain::create(fd, uuid, st.resume_dir, clock, env, owner, err, true);
	if (d && d->resume(err)) {
		say(slot, "the previous daemon's kernel buffer taken up: " + st.resume_dir + " continues");
		close(kfd);
		return d;
	}
	say(slot, "the previous daemon's kernel buffer cannot be continued in " + st.resume_dir + " (" + err +
			  "): a new sub-trace");
	return nullptr;
}

// The kernel buffer of `slot`, as a started drain into a new directory
// named after `base`.  nullptr with `why` on failure, with `why` empty when
// the buffer is the one `skip_uuid` names (already drained).
// With `st` resuming: the predecessor's sub-trace when the buffer is the
// one it drained (the module kept the slot), else a new directory and a
// line saying what was not recorded.
std::unique_ptr<Drain> kernel_drain(uint32_t slot, const std::string &base, const ClockInfo &clock,
				    const Owner &owner, const std::string &hostname, const uint8_t *skip_uuid,
				    std::string &why, const char *want_comm, const PrepareDrain &prepare,
				    SlotState *st = nullptr)
{
	uint64_t size = 0;
	int wait_fd = -1;
	int kfd = kbuf_open(slot, &size, &wait_fd);
	if (kfd < 0) {
		why = std::string("KBUF_OPEN: ") + strerror(-kfd);
		return nullptr;
	}
	// The uuid only decides whether this buffer is new to us; Drain::create
	// validates the whole header (hostile memory) and checks it again.
	// (The module's file is not readable with read(2): map its header.)
	strata_buffer_header h;
	void *m = size >= sizeof h ? mmap(nullptr, sizeof h, PROT_READ, MAP_SHARED, kfd, 0) : MAP_FAILED;
	if (m == MAP_FAILED) {
		why = std::string("cannot map the kernel buffer's header: ") + strerror(errno);
		close(kfd);
		if (wait_fd >= 0)
			close(wait_fd);
		return nullptr;
	}
	memcpy(&h, m, sizeof h);
	munmap(m, sizeof h);
	if ((skip_uuid && memcmp(skip_uuid, h.trace_uuid, 16) == 0) ||
	    (want_comm && strncmp(h.comm, want_comm, sizeof h.comm) != 0)) {
		close(kfd); // already drained, or not the buffer we look for
		if (wait_fd >= 0)
			close(wait_fd);
		return nullptr;
	}
	TraceEnv env;
	env.domain = "kernel";
	env.procname = "kernel";
	env.hostname = hostname;
	std::string err;
	std::unique_ptr<Drain> d;
	if (st && st->resume)
		d = resume_drain(slot, *st, kfd, h.trace_uuid, clock, env, owner);
	if (!d)
		d = Drain::create(kfd, h.trace_uuid, unique_dir(base), clock, env, owner, err, true);
	if (!d) {
		why = "kernel buffer rejected: " + err;
		if (wait_fd >= 0)
			close(wait_fd);
		return nullptr;
	}
	if (wait_fd >= 0)
		d->set_wait_fd(wait_fd); // woken at sub-buffer completions
	if (prepare)
		prepare(*d); // its output (a relay session's), before the thread runs
	d->start();
	return d;
}

} // namespace

// Open /dev/strata once; learn whether it speaks kabi 2 (a version-1
// module refuses QUERY's format field, a non-zero tail, with -E2BIG).
bool open_dev()
{
	if (g_dev >= 0)
		return true;
	g_dev = strata_kmod_open();
	if (g_dev < 0) {
		g_dev = -1;
		return false;
	}
	uint32_t size = 0;
	int r = strata_kmod_query_grants(g_dev, nullptr, &size, nullptr, nullptr);
	g_kabi = r == 0 || r == -EMSGSIZE ? 2 : 1;
	return true;
}

void kernel_apply(uint32_t slot, uid_t uid, const std::vector<proto::Rule> &rules,
		  const proto::ChannelConfig &channel, const std::string &out, const ClockInfo &clock,
		  const Owner &owner, const std::string &hostname,
		  std::vector<std::unique_ptr<Drain>> &drains, const KmodGrant *grant, uint64_t *gen_out,
		  const PrepareDrain &prepare)
{
	uint64_t gen = 0, dummy;
	uint64_t &kgen = gen_out ? *gen_out : dummy;
	kgen = 0;
	if (slot >= proto::kMaxSlots)
		return;
	SlotState &st = g_slots[slot];
	const bool want = wants_kernel(rules);
	if (!open_dev()) {
		if (want) // no module: silent unless kernel events were asked for
			not_recorded(st, slot, STRATA_KABI_DEVICE, -errno);
		return;
	}
	// Every session is mirrored (kmod_link.h: the module signals the
	// processes it targets, and they acknowledge to it; with a grant it
	// also answers their state queries).
	int r = set_slot(slot, uid, rules, channel, grant, &gen);
	if (r < 0) {
		if (want)
			not_recorded(st, slot, "SET_RULES", r);
		else if (!st.warned)
			say(slot, std::string("cannot mirror the session's rules into the module: ") +
					  strerror(-r));
		st.warned = true;
		st.grants = false;
		return;
	}
	st.set = true;
	st.grants = grant && g_kabi >= 2;
	kgen = gen;
	if (!want)
		return;
	std::string why;
	std::unique_ptr<Drain> d = kernel_drain(slot, out + "/kernel", clock, owner, hostname,
						st.draining ? st.uuid : nullptr, why, nullptr, prepare, &st);
	if (!d) {
		if (!why.empty())
			say(slot, why);
		return;
	}
	memcpy(st.uuid, d->uuid(), 16);
	st.draining = true;
	drains.push_back(std::move(d));
}

void kernel_resume(uint32_t slot, const uint8_t uuid[16], const std::string &dir)
{
	if (slot >= proto::kMaxSlots)
		return;
	SlotState &st = g_slots[slot];
	st.resume = true;
	memcpy(st.resume_uuid, uuid, 16);
	st.resume_dir = dir;
}

void kernel_adopt_boot(const std::string &out, const ClockInfo &clock, const Owner &owner,
		       const std::string &hostname, std::vector<std::unique_ptr<Drain>> &drains,
		       const PrepareDrain &prepare)
{
	if (!open_dev() || g_kabi < 2)
		return;
	if (g_slots[kBootSlot].set)
		return; // our own session's slot, not the boot recording
	std::string why;
	std::unique_ptr<Drain> d = kernel_drain(kBootSlot, out + "/kernel-boot", clock, owner, hostname,
						nullptr, why, "kernel-boot", prepare);
	if (!d) {
		if (!why.empty() && why.find(strerror(ENOENT)) == std::string::npos)
			say(kBootSlot, "kernel events from boot not adopted: " + why);
		return;
	}
	// Stop the boot recording: the buffer stays readable through our file
	// to its end (kmod/strata_ctl.c, strata_ctl_boot).
	int r = strata_kmod_set_rules(g_dev, kBootSlot, nullptr, 0, STRATA_KABI_TARGET_UID,
				      STRATA_KABI_UID_ANY, nullptr, 0, nullptr, nullptr);
	if (r < 0)
		say(kBootSlot, std::string("cannot stop the boot recording: ") + strerror(-r));
	drains.push_back(std::move(d));
}

uint64_t kernel_stop(uint32_t slot)
{
	if (slot >= proto::kMaxSlots)
		return 0;
	SlotState &st = g_slots[slot];
	uint64_t gen = 0;
	if (st.set && g_dev >= 0) {
		int r = strata_kmod_set_rules(g_dev, slot, nullptr, 0, STRATA_KABI_TARGET_UID,
					      STRATA_KABI_UID_ANY, nullptr, 0, &gen, nullptr);
		if (r < 0)
			say(slot, std::string("cannot clear the module's slot: ") + strerror(-r));
	}
	st = SlotState();
	return gen;
}

bool kernel_grants(uint32_t slot)
{
	return slot < proto::kMaxSlots && g_slots[slot].grants;
}

bool kernel_tree_grants(uint32_t slot)
{
	return kernel_grants(slot) && g_slots[slot].tree;
}

uint32_t kernel_busy_slots()
{
	if (!open_dev() || g_kabi < 2)
		return 0;
	strata_kabi_stats st;
	if (strata_kmod_stats(g_dev, &st) < 0)
		return 0;
	uint32_t mine = 0;
	for (uint32_t i = 0; i < proto::kMaxSlots; i++)
		if (g_slots[i].set)
			mine |= 1u << i;
	return static_cast<uint32_t>(st.slots_busy) & ~mine;
}

bool kernel_registered(pid_t pid)
{
	const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
	DIR *d = opendir(dir.c_str());
	if (!d)
		return false;
	bool found = false;
	while (struct dirent *e = found ? nullptr : readdir(d)) {
		char target[sizeof STRATA_KABI_DEVICE + 1];
		ssize_t n = readlink((dir + "/" + e->d_name).c_str(), target, sizeof target);
		found = n == static_cast<ssize_t>(sizeof STRATA_KABI_DEVICE - 1) &&
			memcmp(target, STRATA_KABI_DEVICE, static_cast<size_t>(n)) == 0;
	}
	closedir(d);
	return found;
}

int kernel_wait(uint64_t gen, uint32_t timeout_ms, std::vector<uint32_t> &missing)
{
	uint32_t buf[4096], n = 0;
	missing.clear();
	int r = strata_kmod_wait(g_dev, gen, timeout_ms, buf, 4096, &n);
	if (r == -ETIMEDOUT)
		missing.assign(buf, buf + std::min<uint32_t>(n, 4096));
	return r;
}

} // namespace strata
