/*
 * daemon.h - strata-consumerd's control loop.
 *
 * Contract:
 *   - one main thread owns every socket, session, process record and the
 *     epoll set; it alone mutates them, so they need no lock;
 *   - each attached buffer is drained by one pooled worker thread at a
 *     time (drain.h, drain.cpp "The pool"; a session keeps one warm),
 *     which touches only that buffer, its files and its counters;
 *   - one attacher thread validates and maps a process's buffer and starts
 *     its drain thread, then hands the drain to the main thread
 *     (attach.cpp); module WAITs run on threads of their own (kmod_link.cpp);
 *   - signals (SIGTERM, SIGINT) arrive through a signalfd in the epoll set:
 *     nothing runs in signal context;
 *   - every byte from a socket goes through the protocol decoder; a peer
 *     that sends garbage is answered with an error REPLY and dropped.
 */
#ifndef STRATA_CONSUMERD_DAEMON_H
#define STRATA_CONSUMERD_DAEMON_H

#include <string>

namespace strata {

struct DaemonOptions {
	std::string socket_path;  // empty: proto::server_socket_path()
	int ready_fd = -1;        // written "ready\n" and closed once listening
	bool verbose = false;
	bool quiet = false;        // warnings and errors only
	// Sessions that START adopt the early buffers (STRATA_EARLY) of processes
	// they may trace.  Off by default: a private daemon (strata record) must
	// record only its own command.
	bool adopt_early = false;
};

// Runs until SIGTERM/SIGINT; returns the process exit code.
int run_daemon(const DaemonOptions &opt);

} // namespace strata
#endif
