// sync_kmod.cpp - the kernel module's answer to the state query
// (sync_shared.h).
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

} // namespace syncq
} // namespace strata
