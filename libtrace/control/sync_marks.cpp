// sync_marks.cpp - probe marks: the daemon told that this process has a
// probe report (sync_shared.h).
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
#include "sync_shared.h"

namespace strata {
namespace syncq {

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
// it) and which signal asks us again, and our stderr says what happened.
// Async-signal-safe.
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
		const uint32_t signo = static_cast<uint32_t>(s.signo);
		const uint32_t async = signo ? proto::kKnockAsync | signo << proto::kKnockSignoShift : 0u;
		const uint32_t words[2] = {proto::kKnockMagic, async};
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
	       r == 0 ? (s.signo ? "the daemon asks again"
				 : "the daemon names this process in its sessions' status")
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

} // namespace syncq
} // namespace strata
