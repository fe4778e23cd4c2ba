/*
 * daemon.h - strata-consumerd's control loop.
 *
 * Contract (docs/consumerd.md; each part's header has its own):
 *   - one main thread runs the event loop (event_loop.h) and owns every
 *     socket, connection, session (session_table.h), process record
 *     (process_registry.h), held answer (ack_tracker.h) and grant table
 *     (grant_tables.h); it alone mutates them, so they need no lock;
 *   - the attached buffers are drained by a pool of worker threads
 *     (drain_pool.h), each running one drain at a time and touching only that
 *     buffer, its files and its counters;
 *   - one attacher thread validates and maps a process's buffer and starts
 *     its drain, then hands the drain to the main thread (attacher.h);
 *     module WAITs run on threads of their own (ack_tracker.h);
 *   - signals (SIGTERM, SIGINT, SIGHUP) arrive through a signalfd in the
 *     event loop: nothing runs in signal context;
 *   - every byte from a socket goes through the protocol decoder; a peer
 *     that sends garbage is answered with an error REPLY and dropped.
 */
#ifndef STRATA_CONSUMERD_DAEMON_H
#define STRATA_CONSUMERD_DAEMON_H

#include <string>
#include <vector>

namespace strata {

struct DaemonOptions {
	std::string socket_path; // empty: proto::server_socket_path()
	int ready_fd = -1;       // written "ready\n" and closed once listening
	bool verbose = false;
	bool quiet = false; // warnings and errors only
	// Sessions that START adopt the early buffers (STRATA_EARLY) of processes
	// they may trace.  Off by default: a private daemon (strata record) must
	// record only its own command.
	bool adopt_early = false;
	// Clock links to other machines' daemons (sync_link.h, docs/clocks.md):
	// "NAME=SPEC" each; `sync`: this machine follows the peer's clock (a
	// guest), `sync_guest`: the peer follows this one (its host).
	std::vector<std::string> sync, sync_guest;
	uint32_t sync_period_ms = 0; // between probes (0: the adaptive rate, sync_rate.h)
};

// Runs until SIGTERM/SIGINT; returns the process exit code.
int run_daemon(const DaemonOptions &opt);

} // namespace strata
#endif
