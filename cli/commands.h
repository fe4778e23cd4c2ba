/*
 * commands.h - the `strata` command's subcommands, one file each
 * (cli/cmd_<name>.cpp), dispatched by main.cpp.  Each takes argv with
 * argv[0] = the subcommand name and returns the process exit status:
 *   0 ok, 1 runtime failure, 2 usage error.
 */
#ifndef STRATA_CLI_COMMANDS_H
#define STRATA_CLI_COMMANDS_H

#include <cstdint>
#include <string>
#include <vector>

#include "options.h"
#include "proto/proto.h"

int strata_cmd_create(int argc, char **argv);
int strata_cmd_enable_event(int argc, char **argv);
int strata_cmd_disable_event(int argc, char **argv);
int strata_cmd_start(int argc, char **argv);
int strata_cmd_stop(int argc, char **argv);
int strata_cmd_destroy(int argc, char **argv);
int strata_cmd_list(int argc, char **argv);
int strata_cmd_status(int argc, char **argv);
int strata_cmd_snapshot(int argc, char **argv);
int strata_cmd_record(int argc, char **argv);
int strata_cmd_receive(int argc, char **argv); // cli/cmd_receive.cpp (docs/serial.md)
int strata_cmd_recover(int argc, char **argv); // cli/cmd_recover.cpp (docs/crash.md)
int strata_cmd_split(int argc, char **argv);   // cli/cmd_split.cpp (docs/clocks.md)
int strata_cmd_align(int argc, char **argv);   // cli/cmd_align.cpp (docs/clocks.md)
int strata_cmd_view(int argc, char **argv);    // cli/cmd_view.cpp ("tools")
int strata_cmd_analyze(int argc, char **argv); // cli/cmd_analyze*.cpp ("pthread")
int strata_cmd_export(int argc, char **argv);  // cli/cmd_export.cpp (docs/viewing.md)
int strata_cmd_check(int argc, char **argv);   // cli/cmd_check.cpp (docs/reading.md)
int strata_cmd_query(int argc, char **argv);   // cli/cmd_query.cpp (docs/query.md)
int strata_cmd_top(int argc, char **argv);     // cli/cmd_top.cpp (docs/probes.md)

// ---- shared helpers (cli/cmd_common.cpp) -----------------------------------
namespace strata {
class CtlClient;
namespace cli {
// cli/cmd_top.cpp: one snapshot of an aggregation session's regions from the
// daemon at `socket` ("" the usual one), as `strata top -s SESSION --once`
// prints it (JSON with json): for `record --aggregate`.  0 or cli::kFail.
int top_session_once(const std::string &socket, const std::string &session, bool json);

// kOk, kFail, kUsage; parse_size, parse_u32: options.h.

// "strata CMD: msg" + a hint to --help on stderr; returns kUsage.
int usage_error(const char *cmd, const std::string &msg);
// emerg..debug or 0..7: the least severe level to record.
bool parse_loglevel(const char *s, int32_t &out);
const char *loglevel_name(uint32_t ll);

// The directory of the running strata executable.
std::string self_dir();
#ifndef STRATA_LIBDIR // the configured libdir (CMake defines it)
#define STRATA_LIBDIR "/usr/local/lib"
#endif
// One of our libraries (FILE: a file name): beside strata or in the build
// tree's preload/ and jvm/, in an install's lib/ or lib/strata/ next to
// bin/, or in the configured libdir or its strata/ (lib/x86_64-linux-gnu
// with prefix /usr).  "" if none is readable.
std::string find_library(const std::string &file);
// strata-consumerd: $STRATA_CONSUMERD, next to strata, the build tree's
// consumerd/, or PATH; "" if none.
std::string find_consumerd();
// `strata-consumerd --repair DIR` (check_only: --check DIR, which changes
// nothing and exits 3 when a stream file is torn).  The exit status, or -1.
int run_consumerd_repair(const std::string &dir, bool check_only, bool mark_lost = false);
// After a trace could not be read: if stream files under dir end inside a
// packet (a consumer killed while writing), say so and how to repair.
void hint_torn(const char *cmd, const std::string &dir);
// Whether a process this user may inspect holds a file under `dir` open
// for writing: *who gets "PID (COMM) writes PATH" (cli/cmd_split.cpp).
bool written_by_someone(const std::string &dir, std::string *who);

// The channel options shared by `create` and `record` (--mode,
// --subbuf-size, --subbuf-count, --lanes, --blocking[=MS]), rows of their
// option tables (options.h) that fill `c`, each value checked as the daemon
// would (proto::valid_channel).
// `--blocking` without a value: a writer waits up to 1 s for a full buffer
// (docs/ring-buffer.md, "Blocking mode").
constexpr uint32_t kDefaultBlockMs = 1000;
std::vector<Option> channel_options(proto::ChannelConfig &c);
// --relay HOST[:CTRL[:DATA]], --hostname NAME and --serial DEVICE[,BAUD] of
// create and record (streaming to lttng-relayd, docs/relay.md, or over a
// byte line, docs/serial.md): rows that fill m.relay and m.hostname.
std::vector<Option> relay_options(proto::Create &m);
// Where a session with a relay field streams: "lttng-relayd HOST..." or
// "the serial line DEVICE[,BAUD]".
std::string streamed_to(const proto::Create &m);
// A daemon too old for CREATE's relay (protocol < 3) would drop it: "" or why.
std::string relay_unsupported(const proto::Create &m, uint16_t daemon_version);

// Send a request answered by REPLY over a fresh controller connection (or
// `path` when not empty); print the daemon's text (stdout on success, stderr
// on error).  Returns kOk or kFail.
int simple_command(const char *cmd, proto::Body body, bool print_text = true);

// A change (ENABLE/DISABLE_EVENT, TARGET_RULE, START, STOP) followed, when
// wait_ms > 0, by a WAIT on the same connection: returns once every process
// the change signalled acknowledged it; kFail naming those that did not.
int change_command(const char *cmd, const std::vector<proto::Body> &bodies, uint32_t wait_ms);
// The same on a connection already open (`cl`): a stop among busy writers
// pays for each connection in CPU it waits for (docs/consumerd.md).
int change_command(const char *cmd, CtlClient &cl, const std::vector<proto::Body> &bodies, uint32_t wait_ms);

// The pthread preload's counting mode before a stop by a daemon older than
// protocol version 8 (docs/pthread.md, "Counting mode"; a newer daemon's
// stop waits for its processes itself): whether `rules` enable
// pthread:mutex_counts and our environment does not say STRATA_PTHREAD_COUNT=0
// (counting is the preload's default); switch it off in `session` and wait (2 s at most) for the
// processes to flush their counts into the running session (false: nothing
// done, a version 8 daemon); enable it again (after the stop).
bool counts_enabled(const std::vector<proto::Rule> &rules);
bool flush_counts(const std::string &socket, const std::string &session); // "": the default daemon
void counts_back_on(const std::string &session);
// "--wait" or "--wait=T" (T: seconds, or "<n>ms", "<n>s"; 1 ms .. 600 s):
// wait_ms = 10 s without T.
Option wait_option(uint32_t &wait_ms, const char *help);
// The only session this user can see, for commands whose SESSION is left
// out; "" (and a message on stderr) when there is none or several.
std::string implicit_session(const char *cmd);
// session, or if it is "" the implicit one: false (told) if there is none.
bool resolve_session(const char *cmd, std::string &session);
// A pattern as the daemon takes it: 1..127 bytes of printable ASCII with no
// space ("" if so, else why not).
std::string bad_pattern(const std::string &p);
// `s` with every control byte (below 0x20, and 0x7f) as \xHH: text from a
// daemon (another user's session under root) printed to a terminal.
std::string escaped(const std::string &s);

// Patterns naming kernel events (kernel:...) while the kernel module is not
// loaded (/dev/strata absent) would record nothing: say so on stderr,
// naming the module.  True if it warned.
bool warn_kernel_without_module(const char *cmd, const std::vector<std::string> &patterns);

// What a trace directory on disk says was discarded (cli/trace_loss.cpp):
// in total, and by sub-trace (a process's, the kernel's), most first.
struct TraceLoss {
	struct Sub {
		std::string path; // relative to the directory: ust/pid/COMM-PID-DATE, kernel
		uint64_t events = 0, packets = 0;
	};
	uint64_t events = 0, packets = 0;
	unsigned traces = 0;   // sub-traces read
	std::vector<Sub> subs; // those that lost something, most events first
	// Stream files whose walk met a header that is not a packet's (damage:
	// nothing after it counted), and the first of them ("PATH at offset N").
	unsigned damaged_files = 0;
	std::string damaged;
};
TraceLoss trace_loss(const std::string &dir);
// "nothing discarded", or "N event(s) and M packet(s) discarded (...); most
// by COMM-PID-DATE (n event(s), m packet(s)), ..." (the three worst); then
// "; N stream file(s) damaged, ..." when a walk met damage.
// `why`: the cause the summary names for what was discarded.
std::string
loss_summary(const TraceLoss &loss,
	     const char *why = "the ring buffers were full: larger --subbuf-size or --subbuf-count");

// Send a request whose answer is of type `expected` (LIST, STATUS) over a
// fresh connection `cl`; on any error print it and return kFail.
int query(const char *cmd, CtlClient &cl, proto::Body body, proto::Type expected, proto::Message &ans);

} // namespace cli
} // namespace strata

#endif
