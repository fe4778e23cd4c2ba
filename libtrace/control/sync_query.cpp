/*
 * sync_query.cpp - the process side of the control plane: the state query
 * (strata_ctl_sync_query, control.h) and asynchronous enablement
 * (strata_ctl_async_init).
 *
 * Exchange (docs/control-protocol.md, "Registration"):
 *
 *   process                         strata-consumerd
 *     HELLO(role=process)   ---->
 *     REGISTER(pid,uid,comm,        (sent with HELLO, without waiting)
 *       flags,signo,events) ---->   (opens a pidfd on the peer)
 *                           <----   HELLO_REPLY
 *                           <----   REGISTER_REPLY(active sessions)
 *     per granted session not joined yet: slot_open, set_rules,
 *       BUFFER(slot) + memfd ---->  (its REPLY is not waited for)
 *     per session already joined: set_rules (rules may have changed)
 *     per joined slot no longer granted: slot_close (session stopped)
 *     quiesce; close(socket)        (the close is the acknowledgement)
 *
 * The constructor's query, with nothing joined yet, first reads the daemon's
 * grant table (docs/control-protocol.md, "The grant table"): what REGISTER_REPLY
 * would say, published per uid in <socket>.grants.<uid>.  When the table
 * answers, no round trip is made:
 *
 *     read the table; per grant: slot_open_lazy, set_rules; quiesce
 *     HELLO, REGISTER(kRegisterTable, table generation) ---->  (no answer)
 *     close(socket)
 *   and at a joined slot's first event (runtime.h, strata_rt_slot_open_lazy),
 *   from whatever thread fires it, on a connection of its own:
 *     HELLO, REGISTER(kRegisterTable | kRegisterHandoff, generation),
 *       BUFFER(slot, session id) + memfd ---->   (one send; no answer)
 *
 * And when the process has a probe report the daemon may not know of
 * ("Probe marks" below; docs/control-protocol.md), on a connection of its own:
 *     HELLO(7..7), REGISTER(kRegisterNote | kRegisterProbes) ---->  (no answer)
 *   (a join from a version 7 table says kRegisterProbes on its REGISTER instead)
 *
 * The process does not wait for BUFFER's answer: the daemon validates and
 * maps the buffer on its own time, and reads every BUFFER already sent
 * before it stops a session (connections.cpp, serve_pending), so the wait bought
 * nothing but a refusal message, at a round trip (0.2-0.3 ms on a VM) per
 * process start.  A refused buffer is logged by the daemon; the process
 * then records into a buffer nobody reads, bounded by the channel's size,
 * until its next query (tp-async: the daemon signals it) closes the slot.
 *
 * With /dev/strata speaking kabi 2 (kmod_link.h), the module answers
 * instead (docs/control-protocol.md, "The module answers the state query"):
 *
 *   process                    strata.ko                strata-consumerd
 *     QUERY(grants)     ---->  sessions + rules for me
 *     per grant of one of my daemons not joined yet: slot_open_lazy, set_rules
 *     per joined grant: set_rules (no daemon contact)
 *     per joined slot not granted any more: slot_close
 *     quiesce; ACK(generation of the QUERY) ---->
 *   The constructor's query announces the events to the daemon (REGISTER
 *   with kRegisterModule, for LIST).  At a joined slot's first event:
 *       HELLO, REGISTER(kRegisterModule),
 *       BUFFER(slot) + memfd, in one send, no answer awaited ->  drain
 *
 * Contract:
 *   - roles: the constructor (tp-sync, tp-async) and the runtime's
 *     fork-child hook call the query in thread context; with tp-async the
 *     daemon's signal runs the same query from a signal handler on whatever
 *     thread it lands on;
 *   - so everything on the query path is async-signal-safe: the codec
 *     writes into static buffers (proc_codec.h), I/O is raw system calls
 *     with deadlines (sock.h), warnings are write(2);
 *   - one query at a time: g_busy is taken with an atomic exchange; a
 *     signal that finds it taken sets g_again and returns, and the running
 *     query goes round once more.  The static State is touched only by the
 *     holder of g_busy.
 * The daemon's answers are validated like anything else; a daemon that lies
 * can at worst make this process trace into a buffer nobody reads, which
 * costs memory bounded by the channel configuration.
 */
#include "control.h"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstddef>
#include <cstring>
#include <sys/prctl.h>
#include <fcntl.h>
#include <pthread.h>
#include <linux/futex.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "agg.h"
#include "strata_kmod.h"
#include "kmod_link.h"
#include "proto/proc_codec.h"
#include "proto/sock.h"
#include "runtime.h"

namespace strata {
namespace {

using proto::pc::Grants;
using proto::pc::Writer;

constexpr size_t kPathMax = proto::kSockPathMax;
constexpr size_t kInCap = 256 * 1024; // REGISTER_REPLY at its largest is ~210 KiB
constexpr size_t kOutCap = 64 * 1024;

struct State {
	char paths[2][kPathMax];
	int n_paths;
	char comm[64];
	int signo; // asynchronous enablement signal, 0: none
	int64_t timeout_ms;
	uint64_t joined[proto::kMaxSlots]; // session id of each open slot, 0: closed
	uint32_t seq;
	// In the order a start-up touches them: the fields above and the first
	// grant share a page, `out` holds the grant table and then what we send
	// (docs/benchmarks.md: each first touch of a page costs ~12 us).
	Grants grants;
	uint8_t out[kOutCap];
	uint8_t in[proto::kHeaderSize + kInCap];
};
State g_state;
// Acquire on take, release on give: the State written by one query is
// visible to the next one, on whatever thread it runs.
std::atomic<int> g_busy{0};
// A signal that came while busy (relaxed: read after the exchange on g_busy).
std::atomic<int> g_again{0};
std::atomic<int> g_ready{0}; // g_state's paths and comm are filled in

// STRATA_DEBUG: when the query's stages ended, stamped only when asked (a
// clock read touches the vDSO's pages: a start-up cost).  Holder of g_busy.
struct Stages {
	bool on;
	int n;
	const char *name[8];
	struct timespec t[8];
};
Stages g_stages;
void stage(const char *name)
{
	if (!g_stages.on || g_stages.n >= 8)
		return;
	clock_gettime(CLOCK_MONOTONIC, &g_stages.t[g_stages.n]);
	g_stages.name[g_stages.n++] = name;
}

void say_as(const char *lead, const char *a, const char *b = "", const char *c = "")
{
	char buf[512];
	size_t n = 0;
	for (const char *s : {"strata: ", lead, a, b, c, "\n"})
		for (; *s && n < sizeof(buf); s++)
			buf[n++] = *s;
	ssize_t w = write(2, buf, n);
	(void)w;
}

void say(const char *a, const char *b = "", const char *c = "")
{
	say_as("tracing disabled for this session: ", a, b, c);
}

// Writes v in decimal at out + *n (room for 10 digits needed), without
// stdio (async-signal-safe).
void put_decimal(char *out, size_t *n, uint32_t v)
{
	char d[10];
	int nd = 0;
	do
		d[nd++] = static_cast<char>('0' + v % 10);
	while ((v /= 10) && nd < 10);
	while (nd)
		out[(*n)++] = d[--nd];
}

// "errno N" without strerror (locale lookups are not async-signal-safe).
const char *err_text(int e)
{
	static char buf[24]; // under g_busy
	memcpy(buf, "errno ", 6);
	size_t k = 6;
	put_decimal(buf, &k, static_cast<uint32_t>(e < 0 ? -e : e));
	buf[k] = 0;
	return buf;
}

// ---- Probe marks (docs/probes.md, "Who is on a tracepoint") -------------
//
// `strata list` reads a process's probe report (abi/strata_probe_report.h)
// only if the daemon says it has one, so the process tells it: with
// kRegisterProbes on a REGISTER in a version 7 header (a join from a table
// written by a daemon that speaks 7), else with a note (proto.h,
// kRegisterNote) on a connection of its own, no answer awaited.
//
// Contract.  Roles: the runtime's report hook (on_report_made: thread
// context, the thread that registered a probe, once per pid) and the
// queries (holder of g_busy, maybe a signal handler) after each REGISTER
// (registered_with).  The report exists once g_has_report is true; the
// daemon last registered with is g_reg.  Each side stores its own word and
// then loads the other's, all seq_cst: whichever comes second in that order
// sees both and sends the note (both may: a second note is harmless), so a
// report made while a REGISTER without the flag is under way is never left
// untold.  g_told (relaxed: it only spares a repeated note) names the
// daemon told last.  The hook writes its own buffer; a query writes s.out.
// A note that could not leave (no connection within the timeout: the
// daemon away, its queue full) is owed (g_note_owed, relaxed: a hint, a
// second note is harmless): the process's next talk with the daemon sends
// it, a query's REGISTER (registered_with) or, for a process that never
// queries again (tp-sync), the next buffer hand-off (lazy_handoff, after
// its own send; so also its retries while the daemon stays away).
std::atomic<bool> g_has_report{false};
std::atomic<bool> g_note_owed{false};
// Bit 0: set; bit 1: the path index; bit 2: the daemon speaks below
// version 7 (told nothing); bits 32..63: its pid, 0 unknown (the module path).
std::atomic<uint64_t> g_reg{0};
std::atomic<uint32_t> g_told{0};

// connect_unix to path i's quiet socket (proto.h, kQuietSuffix), else to
// the socket itself (an older daemon has no quiet socket, or its queue is full).
int connect_quiet_first(int i, int64_t dl)
{
	const State &s = g_state;
	int fd = -1;
	char quiet[kPathMax];
	const size_t n = strlen(s.paths[i]), k = strlen(proto::kQuietSuffix);
	if (n + k < sizeof quiet) {
		memcpy(quiet, s.paths[i], n);
		memcpy(quiet + n, proto::kQuietSuffix, k + 1);
		// One try (a deadline already past): a full quiet queue sends
		// us to the socket at once, whose queue is served as it fills.
		fd = proto::connect_unix(quiet, 0);
	}
	return fd >= 0 ? fd : proto::connect_unix(s.paths[i], dl);
}

// Path i's daemon did not take our connection by the deadline (its
// socket's queue full: a burst of starts, or a daemon that stopped
// reading): one datagram on its knock socket (proto.h, kKnockSuffix), never
// waited for, tells it which process tried (our credentials travel with
// it), and our stderr says what happened.  Async-signal-safe.
void knock(int i)
{
	const State &s = g_state;
	struct sockaddr_un sa;
	memset(&sa, 0, sizeof sa);
	sa.sun_family = AF_UNIX;
	const size_t n = strlen(s.paths[i]), k = strlen(proto::kKnockSuffix);
	int r = -ENAMETOOLONG;
	if (n + k < sizeof sa.sun_path) {
		memcpy(sa.sun_path, s.paths[i], n);
		memcpy(sa.sun_path + n, proto::kKnockSuffix, k + 1);
		uint8_t msg[proto::kKnockSize] = {};
		const uint32_t words[2] = {proto::kKnockMagic, s.signo ? 1u : 0u};
		for (unsigned b = 0; b < 8; b++) // little-endian
			msg[b] = static_cast<uint8_t>(words[b / 4] >> (8 * (b % 4)));
		memcpy(msg + 8, s.comm, strnlen(s.comm, 15));
		const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		r = fd < 0 ? -errno : 0;
		if (fd >= 0 && sendto(fd, msg, sizeof msg, MSG_DONTWAIT | MSG_NOSIGNAL,
				      reinterpret_cast<const struct sockaddr *>(&sa), sizeof sa) < 0)
			r = -errno;
		if (fd >= 0)
			close(fd);
	}
	say_as("cannot connect to the consumer daemon within STRATA_REGISTER_TIMEOUT_MS (its queue is "
	       "full: a burst of starts, or a daemon that stopped reading): not joined; ",
	       r == 0 ? "the daemon names this process in its sessions' status"
		      : "nor could the daemon be told (its knock socket: ",
	       r == 0 ? "" : err_text(r), r == 0 ? "" : ")");
}

// The note: HELLO(7..7) and REGISTER(kRegisterNote | kRegisterProbes), one
// send to path i's daemon, encoded into buf.  The quiet socket first: a
// controller's command reads its queue before it answers, so a `strata
// list` that runs after this returned sees the mark.  0 or -errno.
// Async-signal-safe.
int send_note(uint8_t *buf, size_t cap, int i)
{
	const State &s = g_state;
	const int64_t dl = s.timeout_ms > 0 ? -s.timeout_ms : 0;
	Writer w(buf, cap);
	w.version = proto::kMarksVersion;
	proto::pc::encode_hello(w, 1);
	Writer rw(buf + w.len, cap - w.len);
	rw.version = proto::kMarksVersion;
	proto::pc::encode_register(rw, 2, static_cast<uint32_t>(getpid()), static_cast<uint32_t>(getuid()),
				   proto::kRegisterNote | proto::kRegisterProbes, 0, s.comm,
				   strata_rt_event_name, 0);
	if (!w.ok || !rw.ok)
		return -EMSGSIZE;
	const int fd = connect_quiet_first(i, dl);
	if (fd < 0)
		return fd;
	const int r = proto::send_all(fd, buf, w.len + rw.len, -1, dl);
	close(fd);
	return r < 0 ? r : 0;
}

// The note to the daemon last registered with, if it can hear one, into
// buf; owed until it leaves.  Async-signal-safe.
void note_last_daemon(uint8_t *buf, size_t cap)
{
	const uint64_t reg = g_reg.load(std::memory_order_seq_cst);
	if (!(reg & 1) || (reg & 4))
		return; // no daemon yet (its REGISTER will say), or one that cannot hear
	const bool sent = send_note(buf, cap, static_cast<int>((reg >> 1) & 1)) == 0;
	if (sent)
		g_told.store(static_cast<uint32_t>(reg >> 32), std::memory_order_relaxed);
	g_note_owed.store(!sent, std::memory_order_relaxed);
}

// The runtime's report hook (strata_rt_set_probe_report_hook).
void on_report_made()
{
	g_has_report.store(true, std::memory_order_seq_cst);
	static uint8_t buf[512]; // once per pid: one caller
	note_last_daemon(buf, sizeof buf);
}

// A query's REGISTER left for path i's daemon (its pid, 0 unknown; old: it
// speaks below version 7), with kRegisterProbes or without (flagged): the
// note follows if the report exists and the daemon may not know.  Holder
// of g_busy (s.out is free: what it held was sent).
void registered_with(int i, uint32_t daemon_pid, bool old, bool flagged)
{
	const uint64_t reg = 1u | (static_cast<uint64_t>(i & 1) << 1) | (old ? 4u : 0u) |
			     (static_cast<uint64_t>(daemon_pid) << 32);
	g_reg.store(reg, std::memory_order_seq_cst);
	if (flagged) {
		g_told.store(daemon_pid, std::memory_order_relaxed);
		g_note_owed.store(false, std::memory_order_relaxed);
		return;
	}
	if (old || !g_has_report.load(std::memory_order_seq_cst) ||
	    (daemon_pid && g_told.load(std::memory_order_relaxed) == daemon_pid))
		return;
	const bool sent = send_note(g_state.out, sizeof(g_state.out), i) == 0;
	if (sent)
		g_told.store(daemon_pid, std::memory_order_relaxed);
	g_note_owed.store(!sent, std::memory_order_relaxed);
}

// Thread context only (getenv): fills what the handler reads.
void init()
{
	State &s = g_state;
	s.n_paths = proto::client_socket_paths(s.paths, 2);
	// The kernel's comm, as /proc/self/comm shows it, without a file, a
	// FILE buffer or their system calls (start-up: docs/benchmarks.md).
	memset(s.comm, 0, sizeof(s.comm));
	if (prctl(PR_GET_NAME, s.comm, 0, 0, 0) != 0 || !s.comm[0])
		memcpy(s.comm, "unknown", 8);
	s.timeout_ms = 1000;
	const char *e = getenv("STRATA_REGISTER_TIMEOUT_MS");
	if (e && *e) {
		long v = strtol(e, nullptr, 10);
		if (v >= 0 && v <= 60000)
			s.timeout_ms = v;
	}
	g_ready.store(1, std::memory_order_release);
	if (strata_rt_set_probe_report_hook(on_report_made))
		g_has_report.store(true, std::memory_order_seq_cst); // made before we were here
}

// Send the message in s.out (w.len bytes), receive the answer into s.in.
// Returns the answer's type (>0) with its payload length, or -errno; a
// REPLY with a negative status where another type was expected returns
// that status with its text in `text`.  A descriptor that comes with the
// answer goes to *got_fd (when given; the caller closes it), else is closed.
int exchange(int fd, const Writer &w, int pass_fd, proto::Type expect, int64_t dl, size_t *len, char *text,
	     size_t cap, int *got_fd = nullptr)
{
	State &s = g_state;
	text[0] = 0;
	int r = proto::send_all(fd, s.out, w.len, pass_fd, dl);
	if (r < 0)
		return r;
	r = proto::recv_all(fd, s.in, proto::kHeaderSize, got_fd, dl);
	if (r < 0)
		return r;
	proto::Header h;
	if (!proto::pc::parse_header(s.in, kInCap, &h) || h.seq != s.seq)
		return -EPROTO;
	r = proto::recv_all(fd, s.in + proto::kHeaderSize, h.length, nullptr, dl);
	if (r < 0)
		return r;
	*len = h.length;
	if (h.type == static_cast<uint16_t>(proto::Type::Reply) && expect != proto::Type::Reply) {
		int32_t st;
		if (!proto::pc::parse_reply(s.in + proto::kHeaderSize, h.length, &st, text, cap) || st == 0)
			return -EPROTO;
		return st;
	}
	return h.type == static_cast<uint16_t>(expect) ? h.type : -EPROTO;
}

// HELLO, then REGISTER behind it, into w (s.out), for one send: the daemon
// answers a connection's messages in order.  w.len covers what fitted;
// false if REGISTER did not.
bool encode_hello_register(Writer &w, uint32_t flags, bool list_events, uint64_t table_gen = 0)
{
	State &s = g_state;
	proto::pc::encode_hello(w, ++s.seq);
	Writer rw(s.out + w.len, sizeof(s.out) - w.len);
	rw.version = w.version;
	// Every name under one hold of the registry, not one lock per event.
	const bool held = list_events && strata_rt_registry_hold() == 0;
	proto::pc::encode_register(rw, ++s.seq, static_cast<uint32_t>(getpid()),
				   static_cast<uint32_t>(getuid()), flags, static_cast<uint32_t>(s.signo),
				   s.comm, held ? strata_rt_event_name_held : strata_rt_event_name,
				   list_events ? strata_rt_event_count() : 0, table_gen);
	if (held)
		strata_rt_registry_release();
	w.len += rw.ok ? rw.len : 0;
	return rw.ok;
}

// BUFFER(slot) with the memfd (memfd < 0: its error), sent; its answer is
// not waited for (file comment).  0, or -errno of the send.
int send_buffer(int fd, uint32_t slot, int memfd, int64_t dl)
{
	State &s = g_state;
	Writer w(s.out, sizeof(s.out));
	proto::pc::encode_buffer(w, ++s.seq, slot, memfd < 0 ? memfd : 0);
	int r = proto::send_all(fd, s.out, w.len, memfd, dl);
	return r < 0 ? r : 0;
}

// After a hand-off (r: send_buffer's result): the slot is joined, or closed
// again with one warning.  0 if joined.
int joined_or_not(unsigned slot, uint64_t session_id, int memfd, int r)
{
	if (memfd < 0) {
		say("cannot open a buffer: ", err_text(memfd));
		return memfd;
	}
	if (r < 0) {
		strata_rt_slot_close(slot);
		say("cannot hand the buffer to the consumer daemon: ", err_text(r));
		return r;
	}
	g_state.joined[slot] = session_id;
	return 0;
}

// Open `slot` with its rules armed: its buffer's memfd, or -errno (the slot
// closed again).
int open_armed(unsigned slot, const struct strata_channel_config *cfg, const uint8_t uuid[16],
	       const struct strata_rule *rules, uint32_t n_rules)
{
	int memfd = strata_rt_slot_open(slot, cfg, uuid);
	if (memfd >= 0) {
		int r = strata_rt_slot_set_rules(slot, rules, n_rules);
		if (r < 0) {
			strata_rt_slot_close(slot);
			memfd = r;
		}
	}
	return memfd;
}

// Open one granted slot and hand its buffer over.  0 if joined.
int join(int fd, const proto::pc::Grant &g, int64_t dl)
{
	const int memfd = open_armed(g.slot, &g.cfg, g.uuid, g.rules, g.n_rules);
	return joined_or_not(g.slot, g.session_id, memfd, send_buffer(fd, g.slot, memfd, dl));
}

// The last query found no daemon at all.
bool g_no_daemon;

// Early tracing: with no daemon at start and STRATA_EARLY set to a
// comma-separated list of "provider:event" globs, the process records into a
// buffer of its own in slot 15 (memfd "strata-slot-15"; memfd needs no
// /dev/shm), a flight recorder (overwrite mode: keeps the newest events;
// STRATA_EARLY_MODE=discard keeps the first instead).  The first session a daemon starts
// later adopts the buffer through /proc/PID/fd and drains it from its first
// event (consumerd/daemon.cpp, adopt_early).  Thread context only (the
// constructor): never from a signal handler.
constexpr unsigned kEarlySlot = 15;
void early_open()
{
	const char *pat = getenv("STRATA_EARLY");
	if (!pat || !*pat)
		return;
	struct strata_channel_config cfg;
	memset(&cfg, 0, sizeof cfg);
	memcpy(cfg.name, "channel0", 9);
	const char *mode = getenv("STRATA_EARLY_MODE");
	// A flight recorder unless told otherwise: a process that records long
	// before any daemon keeps its newest events; the daemon that adopts the
	// buffer then drains it as it fills (Reader::stream_overwrite).
	cfg.mode = (mode && !strcmp(mode, "discard")) ? STRATA_MODE_DISCARD : STRATA_MODE_OVERWRITE;
	// Sizes (from the kernel command line for PID 1, docs/boot.md): powers
	// of two; a value the runtime refuses leaves tracing off, with a word.
	if (const char *v = getenv("STRATA_EARLY_SUBBUF_SIZE"))
		cfg.subbuf_size = strtoull(v, nullptr, 0);
	if (const char *v = getenv("STRATA_EARLY_SUBBUFS"))
		cfg.n_subbuf = static_cast<uint32_t>(strtoul(v, nullptr, 0));
	if (const char *v = getenv("STRATA_EARLY_LANES"))
		cfg.n_lanes = static_cast<uint32_t>(strtoul(v, nullptr, 0));
	uint8_t uuid[16];
	if (getrandom(uuid, sizeof uuid, 0) != (ssize_t)sizeof uuid)
		return;
	uuid[6] = static_cast<uint8_t>((uuid[6] & 0x0f) | 0x40);
	uuid[8] = static_cast<uint8_t>((uuid[8] & 0x3f) | 0x80);
	static struct strata_rule rules[STRATA_MAX_RULES];
	size_t n = 0;
	for (const char *p = pat; *p && n < STRATA_MAX_RULES;) {
		const char *e = strchr(p, ',');
		size_t len = e ? static_cast<size_t>(e - p) : strlen(p);
		if (len > 0 && len < STRATA_PATTERN_MAX) {
			memset(&rules[n], 0, sizeof rules[n]);
			memcpy(rules[n].pattern, p, len);
			rules[n].loglevel_max = -1;
			rules[n].enable = 1;
			n++;
		}
		p += len + (e ? 1 : 0);
	}
	if (n == 0)
		return;
	int fd = strata_rt_slot_open(kEarlySlot, &cfg, uuid);
	if (fd < 0) {
		say("early tracing: cannot open a buffer: ", err_text(fd));
		return;
	}
	if (strata_rt_slot_set_rules(kEarlySlot, rules, n) < 0) {
		strata_rt_slot_close(kEarlySlot);
		return;
	}
	strata_rt_quiesce();
}

// Close every joined slot not granted any more (its session stopped).
// True if one was.
bool close_ungranted(const bool granted[proto::kMaxSlots])
{
	bool changed = false;
	for (unsigned slot = 0; slot < proto::kMaxSlots; slot++)
		if (g_state.joined[slot] && !granted[slot]) {
			strata_rt_slot_close(slot);
			g_state.joined[slot] = 0;
			changed = true;
		}
	return changed;
}

void new_uuid(uint8_t uuid[16])
{
	// getrandom(2) is a plain system call (async-signal-safe); if the pool
	// is not ready, mix clock and pid: the uuid only needs to differ per buffer.
	if (syscall(SYS_getrandom, uuid, 16, GRND_NONBLOCK) != 16) {
		static uint64_t n; // under g_busy
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		uint64_t a = static_cast<uint64_t>(ts.tv_nsec) ^ (static_cast<uint64_t>(ts.tv_sec) << 30);
		uint64_t b = (static_cast<uint64_t>(getpid()) << 32) ^ ++n;
		memcpy(uuid, &a, 8);
		memcpy(uuid + 8, &b, 8);
	}
	uuid[6] = static_cast<uint8_t>((uuid[6] & 0x0f) | 0x40);
	uuid[8] = static_cast<uint8_t>((uuid[8] & 0x3f) | 0x80);
}

// The grant table of the daemon at `sock` for our uid (proto.h,
// kTableMagic), read into s.out (or s.in): true, with s.grants and *info, when it
// answers our query without the daemon.  Only a file owned by us or by
// root is believed: the table is the daemon's word, like its answers.
bool read_table(const char *sock, proto::pc::TableInfo *info)
{
	State &s = g_state;
	char path[kPathMax + 32];
	size_t n = strlen(sock), k = strlen(proto::kTableSuffix);
	if (n + k + 11 > sizeof(path))
		return false;
	memcpy(path, sock, n);
	memcpy(path + n, proto::kTableSuffix, k);
	n += k;
	const uid_t me = geteuid();
	put_decimal(path, &n, static_cast<uint32_t>(me));
	path[n] = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return false;
	struct stat st;
	ssize_t got = -1;
	// Into `out` when it fits (the usual few hundred bytes: the page the
	// answer is then encoded in), else into `in`; parsed before either is
	// written again.
	const bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (st.st_uid == me || st.st_uid == 0) &&
			st.st_size > 0;
	const bool small = ok && static_cast<size_t>(st.st_size) <= sizeof(s.out);
	uint8_t *buf = small ? s.out : s.in;
	const size_t cap = small ? sizeof(s.out) : sizeof(s.in);
	if (ok && static_cast<size_t>(st.st_size) <= cap) {
		// Up to the size fstat gave, no read for the end of the file: the
		// daemon replaces the table by rename, so this file never changes.
		const size_t want = static_cast<size_t>(st.st_size);
		size_t have = 0;
		ssize_t r;
		while (have < want && (r = read(fd, buf + have, want - have)) != 0) {
			if (r < 0 && errno == EINTR)
				continue;
			if (r < 0)
				break;
			have += static_cast<size_t>(r);
		}
		got = static_cast<ssize_t>(have);
	}
	close(fd);
	return got == st.st_size && proto::pc::parse_table(buf, static_cast<size_t>(got), info, &s.grants);
}

// The daemon's clock page named by its table, offered to the runtime as
// REGISTER_REPLY's would be (before a slot opens).  False if there is one
// we cannot open (another uid's daemon): then the round trip brings it.
bool table_clock(const proto::pc::TableInfo &t)
{
	if (t.clock_fd < 0)
		return true;
	char path[48] = "/proc/";
	size_t n = 6;
	put_decimal(path, &n, t.daemon_pid);
	memcpy(path + n, "/fd/", 4);
	n += 4;
	put_decimal(path, &n, static_cast<uint32_t>(t.clock_fd));
	path[n] = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	strata_rt_clock_offer(fd);
	close(fd);
	return true;
}

// What a buffer made at the first event needs to reach the daemon that
// granted it (strata_rt_slot_open_lazy's context, copied by the runtime).
struct LazyHandoff {
	uint64_t session_id;
	uint64_t table_gen;
	uint32_t path;   // index into g_state.paths
	uint32_t module; // 1: the module granted the slot (kRegisterModule), 0: the table did
};
static_assert(sizeof(LazyHandoff) <= STRATA_RT_HANDOFF_CTX, "the runtime keeps at most this much");

// The runtime's hand-off hook (runtime.h), run by the slot's first event
// under the runtime's control lock, in any thread or signal handler: a
// connection of its own carrying HELLO, REGISTER and BUFFER with the
// memfd, in one send, no answer awaited.  REGISTER says kRegisterTable |
// kRegisterHandoff with the table's generation and BUFFER names the
// session (a table grant), or kRegisterModule (a module grant, which the
// daemon checks with the module, as for to_daemon).  It reads
// only what init() and the join wrote before the slot opened (the control
// lock orders them) and writes only its own buffer (under that lock).
int lazy_handoff(unsigned slot, int memfd, const void *ctx)
{
	LazyHandoff h;
	memcpy(&h, ctx, sizeof h);
	const State &s = g_state;
	static uint8_t out[1024]; // under the runtime's control lock
	char err[24];
	const int64_t dl = s.timeout_ms > 0 ? -s.timeout_ms : 0;
	int r = h.path < static_cast<uint32_t>(s.n_paths) ? proto::connect_unix(s.paths[h.path], dl)
							  : -EINVAL;
	if (r >= 0) {
		const int fd = r;
		Writer w(out, sizeof out);
		w.version = 4;
		proto::pc::encode_hello(w, 1);
		Writer rw(out + w.len, sizeof out - w.len);
		rw.version = 4;
		const uint32_t flags = (h.module ? proto::kRegisterModule
						 : proto::kRegisterTable | proto::kRegisterHandoff) |
				       (s.signo ? proto::kRegisterAsync : 0);
		proto::pc::encode_register(rw, 2, static_cast<uint32_t>(getpid()),
					   static_cast<uint32_t>(getuid()), flags,
					   static_cast<uint32_t>(s.signo), s.comm, strata_rt_event_name, 0,
					   h.module ? 0 : h.table_gen);
		w.len += rw.ok ? rw.len : 0;
		Writer bw(out + w.len, sizeof out - w.len);
		bw.version = 4;
		proto::pc::encode_buffer(bw, 3, slot, 0, h.module ? 0 : h.session_id);
		w.len += bw.ok ? bw.len : 0;
		r = w.ok && rw.ok && bw.ok ? proto::send_all(fd, out, w.len, memfd, dl) : -EMSGSIZE;
		close(fd);
		// The daemon is there: a probe note still owed goes now (out
		// is free again).  Only after a note failed, never per event.
		if (r >= 0 && g_note_owed.load(std::memory_order_relaxed))
			note_last_daemon(out, sizeof out);
	}
	if (r < 0) {
		memcpy(err, "errno ", 6);
		size_t k = 6;
		put_decimal(err, &k, static_cast<uint32_t>(-r));
		err[k] = 0;
		// Not fatal: the runtime keeps the buffer and retries (slots.cpp);
		// said for the first few failures only (a retry comes every few
		// seconds while the daemon stays away).  Under the control lock.
		static unsigned said;
		if (said < 3) {
			said++;
			say_as("",
			       "cannot hand the buffer to the consumer daemon (at the first event, or a "
			       "retry): ",
			       err);
		}
		return r;
	}
	return 0;
}

// Open `slot` pending (its buffer made at its first event and handed over
// by lazy_handoff with `h`), with its rules armed, and note it joined to
// `session_id`.  0, or -errno with a word said and the slot closed again.
int join_lazy(unsigned slot, const struct strata_channel_config *cfg, const uint8_t uuid[16],
	      const struct strata_rule *rules, uint32_t n_rules, uint64_t session_id, const LazyHandoff &h)
{
	int r = strata_rt_slot_open_lazy(slot, cfg, uuid, lazy_handoff, &h, sizeof h);
	if (r == 0) {
		r = strata_rt_slot_set_rules(slot, rules, n_rules);
		if (r < 0)
			strata_rt_slot_close(slot);
	}
	if (r < 0) {
		say("cannot open a buffer: ", err_text(r));
		return r;
	}
	g_state.joined[slot] = session_id;
	return 0;
}

// Join from the grant table (generation gen, grants in s.grants): open and
// arm every granted slot with its buffer pending, quiesce, then HELLO and
// REGISTER(kRegisterTable, gen) leave in one send; nothing is awaited.
// Each buffer is made by the slot's first event, which hands it over on a
// connection of its own (lazy_handoff): a process that never fires an
// enabled event makes no buffer at all (docs/control-protocol.md, "The
// grant table"; docs/ring-buffer.md, "A buffer at the first event").  The
// daemon checks each BUFFER against its sessions and signals an
// asynchronous process whose table was stale.  Returns the joins.
int table_join(int fd, int path, const proto::pc::TableInfo &t, bool list_events, int64_t dl)
{
	State &s = g_state;
	const uint64_t gen = t.gen;
	const uint32_t n = s.grants.n;
	int joined = 0;
	for (uint32_t i = 0; i < n; i++) {
		proto::pc::Grant &g = s.grants.g[i];
		new_uuid(g.uuid);
		const LazyHandoff h = {g.session_id, gen, static_cast<uint32_t>(path), 0};
		if (join_lazy(g.slot, &g.cfg, g.uuid, g.rules, g.n_rules, g.session_id, h) == 0)
			joined++;
	}
	if (n)
		strata_rt_quiesce(); // armed before the daemon hears of it
	stage("slots");
	Writer w(s.out, sizeof(s.out));
	// A daemon that speaks version 7 hears it (it then believes our probe
	// mark, kRegisterProbes, or its absence); an older one, version 4.
	const bool marks = t.version >= proto::kMarksVersion;
	w.version = marks ? proto::kMarksVersion : 4;
	const bool flagged = marks && g_has_report.load(std::memory_order_seq_cst);
	int r = encode_hello_register(w,
				      proto::kRegisterTable | (s.signo ? proto::kRegisterAsync : 0) |
					      (flagged ? proto::kRegisterProbes : 0),
				      list_events, gen)
			? 0
			: -EMSGSIZE;
	if (r == 0)
		r = proto::send_all(fd, s.out, w.len, -1, dl);
	stage("sendmsg");
	if (r == 0)
		registered_with(path, t.daemon_pid, !marks, flagged);
	if (r < 0) { // the daemon would refuse our buffers: join nothing
		say("cannot register with the consumer daemon: ", err_text(r));
		for (uint32_t i = 0; i < n; i++)
			if (s.joined[s.grants.g[i].slot] == s.grants.g[i].session_id) {
				strata_rt_slot_close(s.grants.g[i].slot);
				s.joined[s.grants.g[i].slot] = 0;
			}
		return 0;
	}
	return joined;
}

// ---- Aggregation sessions (docs/probes.md, "Aggregation sessions") ----
//
// A grant that carries an aggregation (protocol version 6) asks for a region
// (libtrace/runtime/agg.h) counting its events, handed to the daemon with
// AGG_REGION on the query's connection.  Opening and closing one registers
// and unregisters a probe (allocation, a grace period): thread context only.
// So a query in tp-async's handler that finds the aggregations changed
// keeps its connection open (g_ack_fd: the acknowledgement is its close)
// and wakes the helper thread, which takes g_busy, queries again in thread
// context (applying them), and only then closes the handler's connection:
// `--wait` returns once the region counts.  The helper exists in tp-async
// processes that met a daemon speaking version 6 (agg_helper_start).
// Everything below is touched by the holder of g_busy only.
struct AggSlot {
	uint64_t session_id; // of the grant it counts for, 0: none
	strata_rt_agg *agg;
};
AggSlot g_agg[proto::kMaxSlots];
bool g_thread_ctx; // the query runs in thread context, not in the handler
// A daemon answered in version 6 (aggregations may come): only ever set,
// by a query, and read by agg_helper_start outside g_busy (relaxed: a late
// true only means no helper this time).
std::atomic<bool> g_daemon_agg{false};
int g_ack_fd = -1; // a handler query's connection, closed by the helper
// The helper's eventfd's identity, set before g_agg_wake publishes it
// (release store there, acquire load in agg_settle).
ino_t g_agg_wake_ino = 0;
dev_t g_agg_wake_dev = 0;
bool g_agg_warned;
// The helper's eventfd, -1: no helper.  Set once in thread context outside
// g_busy (agg_helper_start) while a handler's query may read it: the
// release store pairs with the handler's acquire load (an fd seen is open).
std::atomic<int> g_agg_wake{-1};

// The session id whose aggregation the grants want at `slot`, 0: none.
uint64_t agg_wanted(unsigned slot, const proto::pc::Grant **grant)
{
	const State &s = g_state;
	for (uint32_t i = 0; i < s.grants.n; i++)
		if (s.grants.g[i].slot == slot && s.grants.g[i].aggregate[0]) {
			*grant = &s.grants.g[i];
			return s.grants.g[i].session_id;
		}
	*grant = nullptr;
	return 0;
}

// Is slot i's aggregation what the grants want?  (A fork child's inherited
// ones have session id 0 and are closed: agg.cpp renewed their regions,
// which no daemon knows.)
bool agg_settled(unsigned i, const proto::pc::Grant **g)
{
	const uint64_t want = agg_wanted(i, g);
	return g_agg[i].session_id == want && (want || !g_agg[i].agg);
}

bool agg_pending()
{
	const proto::pc::Grant *g;
	for (unsigned i = 0; i < proto::kMaxSlots; i++)
		if (!agg_settled(i, &g))
			return true;
	return false;
}

// Open `g`'s aggregation and hand its region to the daemon on `fd`.
void agg_open(int fd, const proto::pc::Grant &g, int64_t dl)
{
	struct strata_agg_spec spec;
	char why[128];
	if (strata_rt_agg_parse(g.aggregate, &spec, why, sizeof why) != 0) {
		say_as("aggregation refused: ", g.aggregate, ": ", why);
		return;
	}
	memcpy(spec.filter, g.agg_filter, sizeof spec.filter);
	strata_rt_agg *ag = nullptr;
	int r = strata_rt_agg_open(&spec, &ag);
	if (r != 0) {
		say_as("aggregation not opened: ", g.aggregate, ": ", err_text(r));
		return;
	}
	State &s = g_state;
	Writer w(s.out, sizeof(s.out));
	proto::pc::encode_agg_region(w, ++s.seq, g.slot, g.session_id);
	r = w.ok ? proto::send_all(fd, s.out, w.len, strata_rt_agg_fd(ag), dl) : -EMSGSIZE;
	if (r < 0) // the region counts; nobody reads it until the next query
		say_as("cannot hand an aggregation to the consumer daemon: ", err_text(r));
	g_agg[g.slot] = AggSlot{g.session_id, ag};
}

// Thread context: open and close aggregations until they are what the
// grants want.
void agg_apply(int fd, int64_t dl)
{
	for (unsigned i = 0; i < proto::kMaxSlots; i++) {
		const proto::pc::Grant *g;
		if (agg_settled(i, &g))
			continue;
		if (g_agg[i].agg)
			strata_rt_agg_close(g_agg[i].agg);
		g_agg[i] = AggSlot{0, nullptr};
		if (g)
			agg_open(fd, *g, dl);
	}
}

// At the end of a round-trip query: apply the aggregations, or leave them
// to the helper.  Returns the connection to close (-1: kept for the helper).
int agg_settle(int fd, int64_t dl)
{
	if (!agg_pending())
		return fd;
	if (g_thread_ctx) {
		agg_apply(fd, dl);
		return fd;
	}
	const int wake = g_agg_wake.load(std::memory_order_acquire);
	// Still our eventfd?  A program that closed every descriptor (a daemon
	// detaching) may have the number back for a file of its own, which
	// must never receive our 8 bytes (fstat: async-signal-safe).
	struct stat wst;
	if (wake >= 0 &&
	    (fstat(wake, &wst) != 0 || wst.st_ino != g_agg_wake_ino || wst.st_dev != g_agg_wake_dev)) {
		g_agg_wake.store(-1, std::memory_order_relaxed); // the helper is gone for us
	} else if (wake >= 0) {
		g_ack_fd = fd;
		const uint64_t one = 1;
		if (write(wake, &one, sizeof one) == sizeof one)
			return -1;
		g_ack_fd = -1;
	}
	if (!g_agg_warned) {
		g_agg_warned = true;
		say_as("an aggregation session started after this process cannot reach it (no helper "
		       "thread: ",
		       "tp-async and a daemon at its start are needed)");
	}
	return fd;
}

int run_queries(bool list_events, bool thread_ctx);

// The helper: blocked on its eventfd with every signal blocked (the
// handler never runs on it, so waiting for g_busy cannot wait for itself).
// It says it runs (`started`, the starter's word) before its first read:
// from then on it holds no lock, of libc or of a sanitizer's runtime, that
// a fork could leave locked in the child.  A raw futex, not a semaphore:
// the pthread preload would record ours among the program's.
void *agg_helper(void *started)
{
	auto *word = static_cast<uint32_t *>(started);
	// Release: pairs with the starter's acquire load.  Not touched after.
	__atomic_store_n(word, 1u, __ATOMIC_RELEASE);
	syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
	for (;;) {
		uint64_t n; // the descriptor was set before this thread was made
		if (read(g_agg_wake.load(std::memory_order_relaxed), &n, sizeof n) != sizeof n) {
			if (errno == EINTR)
				continue;
			return nullptr;
		}
		const struct timespec ms = {0, 1000000};
		while (run_queries(false, true) == -EBUSY)
			nanosleep(&ms, nullptr); // a handler's query: short
	}
}

// Thread context, once: the helper, when a daemon speaking version 6 was met
// (the thread is the cost of sessions that aggregate reaching a running
// process; a program that never meets such a daemon gets none).
void agg_helper_start()
{
	// g_daemon_agg: written by this thread's query (held g_busy), or by a
	// handler's on another thread after it, which only makes it true.
	if (!g_daemon_agg.load(std::memory_order_relaxed) ||
	    g_agg_wake.load(std::memory_order_relaxed) >= 0 || !g_state.signo)
		return;
	const int efd = eventfd(0, EFD_CLOEXEC);
	if (efd < 0)
		return;
	struct stat est;
	if (fstat(efd, &est) != 0) {
		close(efd);
		return;
	}
	g_agg_wake_ino = est.st_ino; // before any handler can see efd (published below)
	g_agg_wake_dev = est.st_dev;
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 64 * 1024);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_t t;
	uint32_t started = 0;
	g_agg_wake.store(efd, std::memory_order_relaxed); // the thread reads it (ordered by its creation)
	if (pthread_create(&t, &attr, agg_helper, &started) != 0) {
		g_agg_wake.store(-1, std::memory_order_relaxed);
		close(efd);
	} else {
		pthread_setname_np(t, "strata-agg");
		// Until the thread runs its own code: a program that forks right
		// after start (the constructor made the thread) must not fork
		// while the thread's start-up holds a runtime lock (the likely
		// cause, unconfirmed, of a child hung under ASan in a CI run).
		// Acquire: pairs with the helper's release store.
		while (__atomic_load_n(&started, __ATOMIC_ACQUIRE) == 0)
			syscall(SYS_futex, &started, FUTEX_WAIT_PRIVATE, 0, nullptr, nullptr, 0);
		// Published to handlers only now that a thread reads it.
		g_agg_wake.store(efd, std::memory_order_release);
	}
	pthread_attr_destroy(&attr);
	pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

// The constructor's query with nothing joined yet, to path i's daemon
// when it publishes a grant table that answers (no round trip), sent to its
// quiet socket (proto.h, kQuietSuffix: the daemon reads it in batches
// instead of waking for each process start).  True with *joined set if the
// table served; false: ask over the socket, unless *conn_err says that
// neither socket took our connection (then it is not asked again).
bool join_from_table(int i, bool list_events, int64_t dl, int *joined, int *conn_err)
{
	State &s = g_state;
	proto::pc::TableInfo table;
	if (!read_table(s.paths[i], &table))
		return false;
	stage("table");
	if (table.version >= proto::kAggVersion)
		g_daemon_agg.store(true, std::memory_order_relaxed);
	int fd = connect_quiet_first(i, dl);
	stage("connect");
	*conn_err = fd < 0 ? fd : 0;
	if (fd >= 0 && table_clock(table)) {
		g_no_daemon = false;
		stage("clock page");
		*joined = table_join(fd, i, table, list_events, dl);
		close(fd);
		stage("closed");
		return true;
	}
	if (fd >= 0) // the clock page needs the round trip, on the socket itself
		close(fd);
	return false;
}

// Wait for the answers to a state query sent on fd, until *dl.  A process
// that the daemon cannot ask again (no update signal: tp-sync) and whose
// query the daemon has read by then (nothing we sent is left unread in
// the socket) waits once more as long, *dl moved: that daemon is alive and
// answering late (a loaded machine), and this is the process's only chance
// to join.  A daemon that has not read the query is taken for hung, and
// costs one deadline only (docs/control-protocol.md, "A state query that
// misses its deadline").  True if the wait was extended.
bool await_answer(int fd, int64_t *dl)
{
	const State &s = g_state;
	if (s.signo || s.timeout_ms <= 0 || proto::wait_readable(fd, *dl) != 0 ||
	    proto::unread_by_peer(fd) != 0)
		return false;
	*dl = proto::now_ms() + s.timeout_ms;
	stage("read late");
	return true;
}

// HELLO and REGISTER over fd, their answers read (s.grants, the clock
// page offered to the runtime).  > 0, or < 0 (told).  Both leave in one
// send: the daemon answers in order, so start-up waits for one round trip
// less (a HELLO it refuses is answered with an error and the connection
// closed, REGISTER unread).
int hello_register(int fd, bool list_events, int64_t dl, uint16_t *version_out, uint32_t *daemon_pid)
{
	State &s = g_state;
	char text[256];
	size_t len = 0;
	Writer w(s.out, sizeof(s.out));
	const bool register_ok = encode_hello_register(w, s.signo ? proto::kRegisterAsync : 0, list_events);
	const uint32_t register_seq = s.seq;
	s.seq = register_seq - 1; // the first answer is HELLO's
	bool late = false;
	int r = proto::send_all(fd, s.out, w.len, -1, dl);
	if (r == 0)
		late = await_answer(fd, &dl);
	w.len = 0; // sent: only receive
	if (r == 0)
		r = exchange(fd, w, -1, proto::Type::HelloReply, dl, &len, text, sizeof(text));
	uint16_t version = 0;
	if (r > 0 && !proto::pc::parse_hello_reply(s.in + proto::kHeaderSize, len, &version, daemon_pid))
		r = -EPROTO;
	*version_out = version;
	s.seq = register_seq;
	if (r > 0) {
		int page_fd = -1; // the daemon's clock page (control-protocol.md)
		r = register_ok ? exchange(fd, w, -1, proto::Type::RegisterReply, dl, &len, text,
					   sizeof(text), &page_fd)
				: -EMSGSIZE;
		if (r > 0 &&
		    !proto::pc::parse_register_reply(s.in + proto::kHeaderSize, len, version, &s.grants))
			r = -EPROTO;
		if (r > 0 && version >= proto::kAggVersion)
			g_daemon_agg.store(true, std::memory_order_relaxed);
		if (page_fd >= 0) {
			if (r > 0)
				strata_rt_clock_offer(page_fd); // before join() opens a slot
			close(page_fd);
		}
	}
	if (r == -ETIMEDOUT) // the daemon finds its answer unread (control-protocol.md)
		say_as("state query missed its deadline (STRATA_REGISTER_TIMEOUT_MS): not joined; ",
		       s.signo ? "the daemon asks again"
		       : late  ? "the daemon read it but did not answer in twice the deadline; it names "
				 "this process in its sessions' status (a tp-sync process asks at its "
				 "start only)"
			       : "the daemon had not read it (taken for hung); it names this process in "
				 "its sessions' status (a tp-sync process asks at its start only)");
	else if (r < 0)
		say("state query failed: ", text[0] ? text : err_text(r));
	return r;
}

// The slots as s.grants says: rules updated where joined already, joined
// where new, closed where no longer granted.  How many are joined.
int apply_grants(int fd, int64_t dl)
{
	State &s = g_state;
	int joined = 0;
	bool changed = false, granted[proto::kMaxSlots] = {};
	strata_rt_state_changing(); // while the sessions it may stop still record
	for (uint32_t i = 0; i < s.grants.n; i++) {
		const proto::pc::Grant &g = s.grants.g[i];
		if (g.aggregate[0] && !g.n_rules) // it only aggregates (agg_settle): no buffer
			continue;
		granted[g.slot] = true;
		if (s.joined[g.slot] == g.session_id) { // already in: the rules may have changed
			if (strata_rt_slot_set_rules(g.slot, g.rules, g.n_rules) == 0)
				joined++;
			changed = true;
			continue;
		}
		if (s.joined[g.slot]) { // the slot now belongs to another session
			strata_rt_slot_close(g.slot);
			s.joined[g.slot] = 0;
		}
		if (join(fd, g, dl) == 0)
			joined++;
		changed = true;
	}
	changed |= close_ungranted(granted);
	if (changed)
		strata_rt_quiesce(); // before the close that acknowledges
	strata_rt_state_settled();
	return joined;
}

// One query; the caller holds g_busy.
int query_once(bool list_events)
{
	State &s = g_state;
	// No socket file, no daemon: skip the socket.  The deadline stays
	// relative (sock.h) until something waits: a join from the grant table
	// never does, and never reads the clock (each first touch of a page
	// costs ~12 us on a VM: docs/benchmarks.md).
	int64_t dl = s.timeout_ms > 0 ? -s.timeout_ms : 0;
	bool fresh = list_events; // the constructor's query, nothing joined yet
	for (unsigned i = 0; i < proto::kMaxSlots && fresh; i++)
		fresh = !s.joined[i];
	int fd = -1, joined = 0, path = 0;
	for (int i = 0; i < s.n_paths && fd < 0; i++) {
		if (access(s.paths[i], F_OK) != 0 && errno == ENOENT)
			continue;
		int err = 0;
		if (fresh && join_from_table(i, list_events, dl, &joined, &err))
			return joined;
		fd = err < 0 ? err : proto::connect_unix(s.paths[i], dl);
		path = i;
		if (fd == -ETIMEDOUT) // a daemon is there, and did not take us: it is told
			knock(i);
	}
	g_no_daemon = fd < 0;
	if (fd < 0)       // no daemon: tracing stays off, silently (or early, below); one
		return 0; // that did not take us was told (knock), and so is the user
	stage("connect");
	dl = proto::resolve_deadline(dl); // the round trip: one bound for the whole exchange
	uint16_t version = 0;
	uint32_t daemon_pid = 0;
	const int r = hello_register(fd, list_events, dl, &version, &daemon_pid);
	if (r < 0) {
		close(fd);
		return r;
	}
	stage("answers");
	// Its REGISTER went before we knew the daemon's version: never flagged.
	registered_with(path, daemon_pid, version < proto::kMarksVersion, false);
	joined = apply_grants(fd, dl);
	fd = agg_settle(fd, dl);
	if (fd >= 0)
		close(fd);
	stage("slots, sends, closed");
	return joined;
}

// ---- The module answers the state query (kabi 2, kmod_link.h) ----------

// The module's records are copied straight into the runtime's types.
static_assert(sizeof(strata_kabi_rule) == sizeof(strata_rule) &&
		      offsetof(strata_kabi_rule, loglevel_max) == offsetof(strata_rule, loglevel_max) &&
		      offsetof(strata_kabi_rule, enable) == offsetof(strata_rule, enable) &&
		      offsetof(strata_kabi_rule, filter) == offsetof(strata_rule, filter),
	      "struct strata_kabi_rule must be struct strata_rule");
static_assert(sizeof(strata_kabi_channel) == sizeof(strata_channel_config) &&
		      offsetof(strata_kabi_channel, stream_id) ==
			      offsetof(strata_channel_config, stream_id) &&
		      offsetof(strata_kabi_channel, mode) == offsetof(strata_channel_config, mode) &&
		      offsetof(strata_kabi_channel, n_lanes) == offsetof(strata_channel_config, n_lanes) &&
		      offsetof(strata_kabi_channel, n_subbuf) == offsetof(strata_channel_config, n_subbuf) &&
		      offsetof(strata_kabi_channel, subbuf_size) ==
			      offsetof(strata_channel_config, subbuf_size),
	      "struct strata_kabi_channel must be struct strata_channel_config");

constexpr size_t kGrantsCap =
	proto::kMaxSlots * (sizeof(strata_kabi_grant) + STRATA_KABI_MAX_RULES * sizeof(strata_kabi_rule));
alignas(8) uint8_t g_kbuf[kGrantsCap]; // under g_busy

// A grant is ours when it names a daemon this process would ask itself
// (what the daemon path does: a private `strata record` daemon's session
// must not capture every process of the user).
bool our_daemon(const char *sock)
{
	for (int i = 0; i < g_state.n_paths; i++)
		if (!strcmp(g_state.paths[i], sock))
			return true;
	return false;
}

// One connection to the daemon at `path`: HELLO, REGISTER(kRegisterModule)
// and with slot >= 0 a BUFFER (memfd < 0: its error), in one send; no
// answer is waited for (the module granted the slot; the daemon checks the
// grant with the module, consumerd/processes.cpp).  0, or -errno of the connect or send.
int to_daemon(const char *path, bool list_events, int slot, int memfd, int64_t dl)
{
	State &s = g_state;
	int fd = proto::connect_unix(path, dl);
	if (fd < 0)
		return fd;
	Writer w(s.out, sizeof(s.out));
	int r = encode_hello_register(w, proto::kRegisterModule | (s.signo ? proto::kRegisterAsync : 0),
				      list_events)
			? 0
			: -EMSGSIZE;
	if (r == 0 && slot >= 0) {
		Writer bw(s.out + w.len, sizeof(s.out) - w.len);
		proto::pc::encode_buffer(bw, ++s.seq, static_cast<uint32_t>(slot), memfd < 0 ? memfd : 0);
		r = bw.ok ? 0 : -EMSGSIZE;
		w.len += bw.ok ? bw.len : 0;
	}
	// The descriptor rides with the first byte of this send; the daemon
	// queues descriptors per connection and BUFFER takes the oldest.
	if (r == 0)
		r = proto::send_all(fd, s.out, w.len, slot >= 0 ? memfd : -1, dl);
	close(fd);
	return r < 0 ? r : 0;
}

// Open a granted slot, armed, its buffer made at its first event and then
// handed to the grant's daemon (lazy_handoff).  0 if joined.
int join_granted(const strata_kabi_grant &g, const strata_rule *rules)
{
	struct strata_channel_config cfg;
	memcpy(&cfg, &g.channel, sizeof cfg);
	uint8_t uuid[16];
	new_uuid(uuid);
	uint32_t path = 0;
	while (path + 1 < static_cast<uint32_t>(g_state.n_paths) && strcmp(g_state.paths[path], g.sock_path))
		path++;
	const LazyHandoff h = {g.session_id, 0, path, 1};
	return join_lazy(g.slot, &cfg, uuid, rules, g.n_rules, g.session_id, h);
}

// One query answered by the module; the caller holds g_busy.  The module's
// records are checked against the size it reported before use.
int kmod_query_once(bool list_events)
{
	State &s = g_state;
	// Relative (sock.h): a hand-off that never waits never reads the clock.
	const int64_t dl = s.timeout_ms > 0 ? -s.timeout_ms : 0;
	uint32_t size = sizeof(g_kbuf), n = 0;
	uint64_t gen = 0;
	int r = kmod_link_query(g_kbuf, &size, &gen, &n);
	if (r < 0) {
		say("the module's state query failed: ", err_text(r));
		return r;
	}
	int joined = 0;
	bool changed = false, granted[proto::kMaxSlots] = {};
	size_t off = 0;
	strata_rt_state_changing(); // while the sessions it may stop still record
	for (uint32_t i = 0; i < n; i++) {
		strata_kabi_grant g;
		if (size - off < sizeof g)
			break;
		memcpy(&g, g_kbuf + off, sizeof g);
		off += sizeof g;
		if (g.n_rules > STRATA_KABI_MAX_RULES || (size - off) / sizeof(strata_kabi_rule) < g.n_rules)
			break;
		const strata_rule *rules = reinterpret_cast<const strata_rule *>(g_kbuf + off);
		off += g.n_rules * sizeof(strata_kabi_rule);
		if (g.slot >= proto::kMaxSlots || !g.session_id ||
		    !memchr(g.sock_path, 0, sizeof(g.sock_path)) ||
		    !memchr(g.channel.name, 0, sizeof(g.channel.name)) || !our_daemon(g.sock_path))
			continue;
		granted[g.slot] = true;
		changed = true;
		if (s.joined[g.slot] == g.session_id) { // already in: the rules may have changed
			if (strata_rt_slot_set_rules(g.slot, rules, g.n_rules) == 0)
				joined++;
			continue;
		}
		if (s.joined[g.slot]) { // the slot now belongs to another session
			strata_rt_slot_close(g.slot);
			s.joined[g.slot] = 0;
		}
		if (join_granted(g, rules) == 0)
			joined++;
	}
	changed |= close_ungranted(granted);
	if (changed)
		strata_rt_quiesce(); // before the acknowledgement
	strata_rt_state_settled();
	kmod_link_ack(gen);
	g_no_daemon = false;
	if (list_events) { // tell a daemon our events (LIST); buffers go later, at first events
		int a = -ENOENT, i = 0;
		for (; i < s.n_paths && (a == -ENOENT || a == -ECONNREFUSED); i++)
			a = to_daemon(s.paths[i], true, -1, -1, dl);
		g_no_daemon = a == -ENOENT || a == -ECONNREFUSED;
		// Its version unknown (no answer read): a note, which an older
		// daemon refuses at its HELLO, when we have a report.
		if (a == 0)
			registered_with(i - 1, 0, false, false);
	}
	return joined;
}

// Run queries while signals keep asking for one.  Returns the first's
// result.  thread_ctx: not in the handler (aggregations may be opened); the
// helper asks for the token without asking for another round (-EBUSY).
int run_queries(bool list_events, bool thread_ctx)
{
	if (g_busy.exchange(1, std::memory_order_acquire)) {
		if (!thread_ctx || list_events)
			g_again.store(1, std::memory_order_relaxed);
		return -EBUSY;
	}
	g_thread_ctx = thread_ctx;
	// A handler's connection the helper was to close: the query below
	// applies what it held back (in thread context) or holds it back again.
	const int held_ack = g_ack_fd;
	g_ack_fd = -1;
	int first = 0;
	for (bool once = true;; once = false) {
		g_again.store(0, std::memory_order_relaxed);
		uint64_t kgen = 0; // kabi 1: the module's generation before the query (kmod_link.h)
		const bool grants = kmod_link_grants();
		const bool kmod = !grants && kmod_link_generation(&kgen);
		int r = grants ? kmod_query_once(list_events) : query_once(list_events);
		if (kmod && r >= 0)
			kmod_link_ack(kgen);
		if (once)
			first = r;
		if (once && held_ack >= 0) // applied above, or held back again (g_ack_fd)
			close(held_ack);
		list_events = false;
		if (g_again.load(std::memory_order_relaxed))
			continue;
		g_thread_ctx = false;
		g_busy.store(0, std::memory_order_release);
		// A signal between the check and the release found us busy:
		// take the token back and serve it.
		if (!g_again.load(std::memory_order_relaxed) || g_busy.exchange(1, std::memory_order_acquire))
			break;
	}
	return first;
}

void on_signal(int)
{
	const int saved = errno;
	if (g_ready.load(std::memory_order_acquire))
		run_queries(false, false);
	errno = saved;
}

int timed(bool list_events)
{
	const char *dbg = getenv("STRATA_DEBUG");
	const bool debug = dbg && *dbg && *dbg != '0';
	struct timespec t0, t1;
	if (debug) { // the clock's pages only when asked (start-up: query_once)
		clock_gettime(CLOCK_MONOTONIC, &t0);
		g_stages.n = 0;
		g_stages.on = true;
	}
	int r = run_queries(list_events, true);
	if (debug) {
		clock_gettime(CLOCK_MONOTONIC, &t1);
		g_stages.on = false;
		const auto us = [&t0](const struct timespec &t) {
			return (t.tv_sec - t0.tv_sec) * 1000000L + (t.tv_nsec - t0.tv_nsec) / 1000;
		};
		char st[256] = "";
		size_t n = 0;
		for (int i = 0; i < g_stages.n && n < sizeof st; i++) {
			int w = snprintf(st + n, sizeof st - n, "%s%s at %ld", i ? ", " : " (",
					 g_stages.name[i], us(g_stages.t[i]));
			n += w > 0 ? static_cast<size_t>(w) : 0;
		}
		if (g_stages.n && n < sizeof st - 1)
			snprintf(st + n, sizeof st - n, ")");
		fprintf(stderr, "strata: state query: %d session(s) joined in %ld us%s\n", r, us(t1), st);
	}
	return r;
}

} // namespace
} // namespace strata

extern "C" int strata_ctl_sync_query(void)
{
	if (!strata::g_ready.load(std::memory_order_acquire))
		strata::init();
	if (!strata::g_state.signo) // tp-sync: registered, never signalled
		strata::kmod_link_register(0);
	int r = strata::timed(true);
	if (strata::g_no_daemon)
		strata::early_open();
	return r;
}

extern "C" int strata_ctl_fork_child(void)
{
	using namespace strata;
	// The runtime has forgotten the parent's slots; so do we.  A query the
	// parent was running on another thread does not exist in the child.
	memset(g_state.joined, 0, sizeof(g_state.joined));
	g_busy.store(0, std::memory_order_relaxed);
	g_again.store(0, std::memory_order_relaxed);
	for (AggSlot &a : g_agg) // the regions are the child's (agg.cpp), unknown to the daemon
		a.session_id = 0;
	// The child is a process of its own to the daemon, and has no report
	// of its own until its first probe change (probe_report.cpp).
	g_has_report.store(false, std::memory_order_seq_cst);
	g_reg.store(0, std::memory_order_seq_cst);
	g_told.store(0, std::memory_order_relaxed);
	if (g_ack_fd >= 0)
		close(g_ack_fd);
	g_ack_fd = -1;
	if (g_agg_wake.load(std::memory_order_relaxed) >= 0) // the helper stayed in the parent
		close(g_agg_wake.load(std::memory_order_relaxed));
	g_agg_wake.store(-1, std::memory_order_relaxed); // one thread in the child
	kmod_link_fork_child();
	// No helper thread in a fork child: the parent may have had other
	// threads, and a thread made before the child's exec is what POSIX
	// leaves undefined there (and TSan refuses).  Aggregations granted now
	// are applied by this query itself (thread context); one started later
	// is said once not to reach this process (agg_settle).
	return strata_ctl_sync_query();
}

extern "C" int strata_ctl_async_init(int signo)
{
	using namespace strata;
	if (!g_ready.load(std::memory_order_acquire))
		init();
	// Once per process: the handler and the runtime are process-wide, and a
	// module that initialises later (a shared library with tp-async-lib, a
	// dlopen) is armed by the registry when it registers its tracepoints.
	static std::atomic<int> once{0};
	if (once.exchange(1, std::memory_order_acq_rel))
		return 0;
	bool forced = signo != 0;
	if (!forced) {
		const char *e = getenv("STRATA_ASYNC_SIGNAL");
		forced = e && *e;
		signo = forced ? atoi(e) : SIGRTMAX - 3;
	}
	// A signal the program already handles is never taken over.  The
	// default one in use: take the next free real-time signal below it (the
	// daemon learns which at registration).  A signal forced by the caller
	// or STRATA_ASYNC_SIGNAL and in use: asynchronous enablement stays off.
	for (; signo >= 1 && signo <= 64 && signo != SIGKILL && signo != SIGSTOP; signo--) {
		struct sigaction old;
		if (sigaction(signo, nullptr, &old) == 0 && old.sa_handler == SIG_DFL &&
		    !(old.sa_flags & SA_SIGINFO)) {
			struct sigaction sa;
			memset(&sa, 0, sizeof(sa));
			sa.sa_handler = on_signal;
			sa.sa_flags = SA_RESTART;
			sigfillset(&sa.sa_mask); // one query at a time per thread, no nesting
			if (sigaction(signo, &sa, nullptr) == 0) {
				g_state.signo = signo;
				kmod_link_register(signo); // when /dev/strata exists
			}
			break;
		}
		if (forced || signo <= SIGRTMIN + 1) {
			fprintf(stderr,
				"strata: signal %d is in use by the program: "
				"sessions started later will not reach it\n",
				signo);
			break;
		}
	}
	int r = timed(true);
	if (g_no_daemon)
		early_open();
	agg_helper_start();
	return r;
}
