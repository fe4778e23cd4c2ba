// view_graph.h - read every CTF trace under a directory, merged by time,
// through libbabeltrace2:
//
//   source.ctf.fs (one per directory holding a `metadata` file)
//     -> filter.utils.muxer (merges all streams by time)
//     -> a simple sink that hands each message to the caller.
//
// For the CLI's trace readers (`strata view`; usable by `strata analyze`).
// Single-threaded: the callback runs on the calling thread, inside
// read_ctf_traces().
#ifndef STRATA_CLI_VIEW_GRAPH_H
#define STRATA_CLI_VIEW_GRAPH_H

#include <babeltrace2/babeltrace.h>

#include <functional>
#include <string>
#include <vector>

namespace strata {

// Every directory at or under `root` that holds a regular file `metadata`
// (a trace directory's own sub-directories are not searched, as in
// babeltrace2), sorted.  False with *why when there is none or `root` is
// not a readable directory.
bool find_ctf_traces(const std::string &root, std::vector<std::string> *out, std::string *why);

// Whether the trace directory `dir` (from find_ctf_traces()) is a kernel
// sub-trace (its metadata says domain = "kernel").
bool is_kernel_trace(const std::string &dir);

// How many machines the sub-traces `dirs` come from (distinct env.hostname;
// a guest's and its host's traces read together are two: docs/clocks.md).
size_t machines(const std::vector<std::string> &dirs);

// The reference machine of the sub-traces `dirs` (docs/clocks.md): the host
// name of the first one that follows no clock link (its env has no
// sync_peer), else of the first with a host name; "" when none has one.
std::string reference_machine(const std::vector<std::string> &dirs);

// Whether the trace directories `dirs` are read by Strata's own reader
// (processor/ctf/trace_reader.h): every one of them written by Strata,
// unless STRATA_READER=babeltrace2 asks for babeltrace2 (the tests compare
// the two).  Traces another tracer wrote go to babeltrace2.
bool use_native_reader(const std::vector<std::string> &dirs);

// Called for each message in time order; the message is borrowed for the
// duration of the call.  Return false to stop reading (not an error).
using TraceMessageFn = std::function<bool(const bt_message *)>;

// Read the traces under `root`.  True when the end (or a stop) was reached.
// False with *why (babeltrace2's error causes included) when the traces
// cannot be read.  babeltrace2 2.0 sometimes leaves an error on the thread
// while reporting success (e.g. a packet whose content_size covers trailing
// padding); such an error is taken, so that later calls do not abort, and
// the causes of the first one are left in *warnings.
bool read_ctf_traces(const std::string &root, const TraceMessageFn &fn, std::string *why,
		     std::string *warnings);
// The same for the trace directories `dirs` (from find_ctf_traces()).
bool read_ctf_trace_dirs(const std::vector<std::string> &dirs, const TraceMessageFn &fn, std::string *why,
			 std::string *warnings);

} // namespace strata
#endif
