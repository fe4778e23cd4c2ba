// sync_join.cpp - the exchange with the daemon, the slots a grant opens,
// the grant table read, early tracing (sync_shared.h).
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
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "agg.h"
#include "strata_kmod.h"
#include "kmod_link.h"
#include "proto/proc_codec.h"
#include "proto/sock.h"
#include "runtime.h"
#include "sync_shared.h"

namespace strata {
namespace syncq {

// Send the message in s.out (w.len bytes), receive the answer into s.in.
// Returns the answer's type (>0) with its payload length, or -errno; a
// REPLY with a negative status where another type was expected returns
// that status with its text in `text`.  A descriptor that comes with the
// answer goes to *got_fd (when given; the caller closes it), else is closed.
int exchange(int fd, const Writer &w, int pass_fd, proto::Type expect, int64_t dl, size_t *len, char *text,
	     size_t cap, int *got_fd)
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
bool encode_hello_register(Writer &w, uint32_t flags, bool list_events, uint64_t table_gen)
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

// Open one granted slot, hand its buffer over, then arm its rules: every
// record of the buffer is read from the clock after its hand-over reached
// the daemon's socket, as a buffer made at its first event (sync_lazy.cpp).
// A live session's gate counts on it (consumerd/relay_gate.cpp).  0 if
// joined.
int join(int fd, const proto::pc::Grant &g, int64_t dl)
{
	int memfd = strata_rt_slot_open(g.slot, &g.cfg, g.uuid);
	const int r = send_buffer(fd, g.slot, memfd, dl);
	if (memfd >= 0 && r >= 0) {
		const int armed = strata_rt_slot_set_rules(g.slot, g.rules, g.n_rules);
		if (armed < 0) {
			strata_rt_slot_close(g.slot); // the daemon drains what it got: nothing
			memfd = armed;
		}
	}
	return joined_or_not(g.slot, g.session_id, memfd, r);
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

} // namespace syncq
} // namespace strata
