// export_sink.h - the two output formats of `strata export`
// (cli/cmd_export.cpp): Perfetto's protobuf trace and Chrome's JSON trace
// events, behind one interface of timeline primitives.  The converter
// decides what a Strata event means (a slice, an instant, a flow, a CPU's
// scheduling); a sink only encodes it.  Both write through a bounded buffer
// (flushed at 1 MiB): memory does not grow with the trace.
#ifndef STRATA_CLI_EXPORT_SINK_H
#define STRATA_CLI_EXPORT_SINK_H

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace strata {
namespace exp {

// A named value attached to a slice or an instant (a debug annotation in
// Perfetto, an "args" member in JSON).
struct Arg {
	enum Kind { Int, Uint, Str, Real } kind = Int;
	const char *name = "";
	int64_t i = 0;
	uint64_t u = 0;
	double d = 0;
	std::string s;
};
using Args = std::vector<Arg>;

class Sink {
public:
	virtual ~Sink() = default;
	// Tracks.  uuid: unique in the trace.  A thread track's events are the
	// thread's own nested slices; a child track (parent: a thread or
	// process track) holds slices that need not nest with the thread's
	// (lock waits and holds); a counter track holds values.
	virtual void process(uint64_t uuid, int64_t pid, const std::string &name) = 0;
	virtual void thread(uint64_t uuid, uint64_t parent, int64_t pid, int64_t tid,
			    const std::string &name) = 0;
	virtual void child_track(uint64_t uuid, uint64_t parent, int64_t pid, int64_t tid,
				 const std::string &name, bool counter) = 0;
	// Events; ts in ns from the clock's origin.  flow_out: a flow starts at
	// this slice (0: none); flow_in: a flow started elsewhere ends here.
	virtual void begin(int64_t ts, uint64_t track, const std::string &name, const Args &args,
			   uint64_t flow_in) = 0;
	virtual void end(int64_t ts, uint64_t track, const Args &args, uint64_t flow_out) = 0;
	// A slice from ts to end known whole (a lock wait, stamped at its end):
	// it may come after events of its track later than ts (the reader
	// sorts), so it must nest with them.  JSON: one X event, which viewers
	// that draw only per-thread slices (speedscope) show.
	virtual void complete(int64_t ts, int64_t end, uint64_t track, const std::string &name,
			      const Args &args, uint64_t flow_in, uint64_t flow_out)
	{
		begin(ts, track, name, args, flow_in);
		this->end(end, track, Args(), flow_out);
	}
	virtual void instant(int64_t ts, uint64_t track, const std::string &name, const Args &args) = 0;
	virtual void counter(int64_t ts, uint64_t track, int64_t value) = 0;
	// Kernel scheduling (per-CPU tracks and thread states in Perfetto).
	virtual void sched_switch(int64_t ts, uint32_t cpu, const std::string &prev_comm, int64_t prev_tid,
				  int64_t prev_prio, int64_t prev_state, const std::string &next_comm,
				  int64_t next_tid, int64_t next_prio) = 0;
	// kind: 0 sched_waking, 1 sched_wakeup, 2 sched_wakeup_new.
	virtual void wakeup(int64_t ts, uint32_t cpu, int kind, const std::string &comm, int64_t tid,
			    int64_t prio, int64_t target_cpu) = 0;
	// Ends the output; false when it could not be written.
	virtual bool finish() = 0;
	bool failed() const { return failed_; }

protected:
	bool failed_ = false;
};

// out: the open output file (owned by the caller).  t0: the trace's first
// time (JSON times are microseconds after it).
std::unique_ptr<Sink> make_perfetto_sink(FILE *out);
std::unique_ptr<Sink> make_json_sink(FILE *out, int64_t t0);

} // namespace exp
} // namespace strata
#endif
