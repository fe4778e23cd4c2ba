// sync_lazy.cpp - a table grant's buffer handed over to the daemon at
// the slot's first event (sync_shared.h).
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

// What a buffer made at the first event needs to reach the daemon that
// granted it (strata_rt_slot_open_lazy's context, copied by the runtime).
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

} // namespace syncq
} // namespace strata
