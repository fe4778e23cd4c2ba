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
 *     per granted session not joined yet: slot_open,
 *       BUFFER(slot) + memfd ---->  (its REPLY is not waited for),
 *       then set_rules (armed after the hand-over: sync_join.cpp)
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
 *     holder of g_busy;
 *   - the handler first asks the runtime whether the code it interrupted
 *     lets a change happen now (strata_rt_state_ready: the pthread
 *     preload's update of its own count table does not); if not it returns
 *     at once, and that code raises the signal again when it is done.
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
#include "sync_shared.h"

namespace strata {
namespace syncq {

State g_state;
// The token: the State written by one query is visible to the next one, on
// whatever thread it runs (the exchange that takes it pairs with the store
// that gives it back).  Seq_cst, with g_again's store and loads: a signal
// finds the token taken and sets g_again, while its holder gives the token
// back and then looks at g_again (run_queries).  That is a store then a load
// on each side, of different words; with release/acquire and relaxed both
// could miss the other's store (store-to-load reordering, which x86 does),
// and the signal would go unserved.  In a single total order one of the two
// sees the other.
std::atomic<int> g_busy{0};
// A signal that came while busy (seq_cst: see g_busy).
std::atomic<int> g_again{0};
// STRATA_TEST_DROP_SIGNALS (tests only): how many update signals the
// handler ignores, as ThreadSanitizer's runtime loses one that lands on a
// thread that is exiting (the daemon's re-signal, ack_tracker.h, is then
// what serves it).  Set in thread context before the handler is installed.
std::atomic<int> g_drop_signals{0};
std::atomic<int> g_ready{0}; // g_state's paths and comm are filled in

Stages g_stages;
void stage(const char *name)
{
	if (!g_stages.on || g_stages.n >= 8)
		return;
	clock_gettime(CLOCK_MONOTONIC, &g_stages.t[g_stages.n]);
	g_stages.name[g_stages.n++] = name;
}

void say_as(const char *lead, const char *a, const char *b, const char *c)
{
	char buf[512];
	size_t n = 0;
	for (const char *s : {"strata: ", lead, a, b, c, "\n"})
		for (; *s && n < sizeof(buf); s++)
			buf[n++] = *s;
	ssize_t w = write(2, buf, n);
	(void)w;
}

void say(const char *a, const char *b, const char *c)
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
	if (const char *d = getenv("STRATA_TEST_DROP_SIGNALS"); d && *d)
		g_drop_signals.store(atoi(d), std::memory_order_relaxed); // read by the handler after g_ready
	g_ready.store(1, std::memory_order_release);
	if (strata_rt_set_probe_report_hook(on_report_made))
		g_has_report.store(true, std::memory_order_seq_cst); // made before we were here
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

// Run queries while signals keep asking for one.  Returns the first's
// result.  thread_ctx: not in the handler (aggregations may be opened); the
// helper asks for the token without asking for another round (-EBUSY).
int run_queries(bool list_events, bool thread_ctx)
{
	if (g_busy.exchange(1, std::memory_order_seq_cst)) {
		if (!thread_ctx || list_events)
			g_again.store(1, std::memory_order_seq_cst); // pairs with the holder's loads
		return -EBUSY;
	}
	g_thread_ctx = thread_ctx;
	// A handler's connection the helper was to close: the query below
	// applies what it held back (in thread context) or holds it back again.
	const int held_ack = g_ack_fd;
	g_ack_fd = -1;
	int first = 0;
	for (bool once = true;; once = false) {
		g_again.store(0, std::memory_order_seq_cst); // a signal from here on: another round
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
		if (g_again.load(std::memory_order_seq_cst))
			continue;
		g_thread_ctx = false;
		g_busy.store(0, std::memory_order_seq_cst); // pairs with the exchanges that take it
		// A signal between the check and the release found us busy:
		// take the token back and serve it.  (The store above and this
		// load: see g_busy.)
		if (!g_again.load(std::memory_order_seq_cst) || g_busy.exchange(1, std::memory_order_seq_cst))
			break;
	}
	return first;
}

// The update signal.  A test may have asked that the first few be lost
// (g_drop_signals).
void on_signal(int)
{
	const int saved = errno;
	if (g_ready.load(std::memory_order_acquire)) {
		int drop = g_drop_signals.load(std::memory_order_relaxed); // a count only
		while (drop > 0 &&
		       !g_drop_signals.compare_exchange_weak(drop, drop - 1, std::memory_order_relaxed))
			;
		// Not ready: the code we interrupted raises the signal again once
		// out of its window (strata_rt_state_retry).
		if (drop <= 0 && strata_rt_state_ready())
			run_queries(false, false);
	}
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

} // namespace syncq
} // namespace strata

extern "C" int strata_ctl_sync_query(void)
{
	if (!strata::syncq::g_ready.load(std::memory_order_acquire))
		strata::syncq::init();
	if (!strata::syncq::g_state.signo) // tp-sync: registered, never signalled
		strata::kmod_link_register(0);
	int r = strata::syncq::timed(true);
	if (strata::syncq::g_no_daemon)
		strata::syncq::early_open();
	return r;
}

extern "C" int strata_ctl_fork_child(void)
{
	using namespace strata;
	using namespace strata::syncq;
	// The runtime has forgotten the parent's slots; so do we.  A query the
	// parent was running on another thread does not exist in the child.
	memset(g_state.joined, 0, sizeof(g_state.joined));
	g_busy.store(0, std::memory_order_relaxed); // one thread in the child: no pair
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
	using namespace strata::syncq;
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
			// The signal a deferred handler raises again: before one can run.
			strata_rt_set_update_signal(signo);
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
