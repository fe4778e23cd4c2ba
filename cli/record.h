/*
 * record.h - `strata record`'s parts (cli/cmd_record.cpp runs them in
 * order), private to the command:
 *   record_options.cpp  what it was asked (its option table) and what it
 *                       found before starting anything (the libraries to
 *                       load, the output directory, the buffers, CMD's file)
 *   record_session.cpp  a daemon (the running one, or a private one of its
 *                       own) and the session: created, its rules, started;
 *                       found again after the daemon's restart
 *   cmd_record.cpp      CMD run and waited for, with what it left running;
 *                       the signals caught meanwhile
 *   record_report.cpp   the end: the trace completed (stop, destroy) and
 *                       the report of where it went and what was lost, or
 *                       why nothing was recorded
 */
#ifndef STRATA_CLI_RECORD_H
#define STRATA_CLI_RECORD_H

#include <csignal>
#include <string>
#include <vector>
#include <sys/types.h>

#include "commands.h"
#include "control/ctl_client.h"

namespace strata {
namespace cli {
namespace record {

// The signals caught from the start to the end of `record` (cmd_record.cpp):
// given back their previous actions in CMD, and their defaults in the
// private daemon.
constexpr int kCaught[] = {SIGINT, SIGTERM, SIGQUIT, SIGHUP};

// What `record` was asked (its options) and what it found before starting
// anything (the libraries to load, CMD's file).
struct Record {
	proto::Create create;
	std::vector<std::string> patterns, preloads;
	bool jvm = false, add = false, agg_json = false;
	bool all_processes = false; // not only CMD's process tree
	int32_t loglevel = -1;
	char **command = nullptr;        // CMD and its arguments, null-terminated
	std::string preload_env;         // LD_PRELOAD's prefix: the --preload libraries
	std::string jvm_agent, java_api; // with --jvm
	bool is_static = false;          // CMD cannot load libstrata
	bool out_existed = false;        // the output directory was there before: not ours to remove
};

// A strata-consumerd of record's own on a private socket, for the
// duration of CMD (none answers on the usual socket, or the running one
// cannot serve this recording).
struct PrivateDaemon {
	pid_t pid = -1;
	std::string dir, socket;
	int restarts = 0; // started again after it died while CMD ran

	// Start it and wait (bounded) until it listens.  "" or an error text.
	std::string start();
	// Another on the same socket, after this one died: it takes the
	// sessions up from the state the dead one kept.  "" or an error text.
	std::string restart();
	void stop();
	~PrivateDaemon() { stop(); }

private:
	std::string make_dir();
	std::string spawn(const std::string &exe);
	[[noreturn]] void exec_daemon(const std::string &exe, pid_t parent, const int p[2]);
	static std::string wait_ready(int fd);
};

// How CMD went.
struct Child {
	pid_t pid = -1;
	int early_signal = 0; // caught before CMD started: it was not run
	int fork_errno = 0, exec_errno = 0;
	int status = 0; // waitpid's
};

// Steps 1 and 2 (record_options.cpp): the command line into `r`, then
// everything decided before a daemon is asked anything.  -1 to go on, else
// the exit status.
int parse_args(int argc, char **argv, Record &r);
int prepare(Record &r);

// Steps 3 and 4 (record_session.cpp): a daemon, the running one or our
// own; the session created, its rules enabled, started.
bool open_daemon(CtlClient &cl, PrivateDaemon &priv);
bool start_session(CtlClient &cl, PrivateDaemon &priv, Record &rec);
// After CMD: the session found again if the daemon was replaced meanwhile.
void rejoin_daemon(CtlClient &cl, const std::string &sock, const std::string &session, bool private_daemon,
		   bool private_restarted);

// Step 6 (record_report.cpp): complete the trace (stop, destroy, the
// private daemon's end) and say where it is and what was lost.  The exit
// status.
int finish(CtlClient &cl, PrivateDaemon &priv, const Record &rec, const Child &child, int exit_code);

} // namespace record
} // namespace cli
} // namespace strata

#endif
