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
#include <string_view>
#include <vector>

namespace strata {
namespace exp {

// A named value attached to a slice or an instant (a debug annotation in
// Perfetto, an "args" member in JSON).  Views, not copies (an Args is
// built per event): name and s must outlive the sink's call (a field's
// name and value live as long as the event; the converter keeps the
// strings it makes).
struct Arg {
	enum Kind { Int, Uint, Str, Real } kind = Int;
	std::string_view name = "";
	int64_t i = 0;
	uint64_t u = 0;
	double d = 0;
	std::string_view s = "";
};
// layout: nonzero when the arguments are an event class's fields, as
// Converter::fields() made them: every Args of one layout has the same
// names (the same views, of the class) in the same order, and no Args of
// another class has its layout (never reused in an export).  A sink may
// keep what it makes of the names by it (JSON: the text around the values).
// 0 (any Args built otherwise): nothing promised.
struct Args : std::vector<Arg> {
	using std::vector<Arg>::vector;
	uint64_t layout = 0;
};

// Several machines in one export (docs/viewing.md, "Several machines"):
// machine m (1, 2, ... in the order first met; 0 when the trace is of one
// machine) gets its own range of pids and tids, so that a host's and a
// guest's pid 500 are two processes, and of CPU numbers in Perfetto.  A
// Linux pid or tid is below 2^22 (PID_MAX_LIMIT); machine 511 ends below
// 2^31, Perfetto's int32 pids.  Id 0 (the idle task) and negative ids are
// kept as they are.
constexpr int kMachineShift = 22;
constexpr uint32_t kMaxMachine = 511;
constexpr uint32_t kCpuSpan = 1000; // Perfetto: CPU c of machine m is m * 1000 + c
inline int64_t machine_id(uint32_t m, int64_t id)
{
	if (m == 0 || id <= 0)
		return id;
	return static_cast<int64_t>(m) << kMachineShift | (id & ((int64_t(1) << kMachineShift) - 1));
}
// The id of machine m itself (its own process in JSON: its CPUs, its
// kernel's events); 0 with one machine.
inline int64_t machine_pid(uint32_t m)
{
	return static_cast<int64_t>(m) << kMachineShift;
}

// Perfetto's number of machine m (TracePacket.machine_id; docs/viewing.md,
// "Several machines"): 0, the field left out, for machine 1 (the reference
// machine, the host of the clock links) and for a trace of one machine
// (m 0); m for every other machine.  Every packet of a machine carries it:
// its tracks' descriptors, its events, its sched events.
inline uint32_t perfetto_machine(uint32_t m)
{
	return m <= 1 ? 0 : m > kMaxMachine ? kMaxMachine : m;
}

class Sink {
public:
	virtual ~Sink() = default;
	// A machine of several (m >= 1): its group, named by its host name
	// (Perfetto: a top-level track, the parent of its machine-wide tracks;
	// JSON: the process machine_pid(m), holding its CPUs and kernel events).
	// Declared before anything of that machine.  Perfetto: a process's or
	// thread's machine is that of its pid (machine_id()), a child track's
	// that of its parent, an event's that of its track.
	virtual void machine(uint32_t m, uint64_t uuid, const std::string &name) = 0;
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
	// A slice begun at ts and ended at end (>= ts), with no arguments nor
	// flows, written at once (a lock's uncontended hold of the compact
	// records, the per-event path of a pthread trace): byte for byte a
	// begin() and an end() with no arguments, without building any.
	virtual void pair(int64_t ts, int64_t end, uint64_t track, const std::string &name)
	{
		const Args none;
		begin(ts, track, name, none, 0);
		this->end(end, track, none, 0);
	}
	virtual void instant(int64_t ts, uint64_t track, const std::string &name, const Args &args) = 0;
	virtual void counter(int64_t ts, uint64_t track, int64_t value) = 0;
	// Kernel scheduling (per-CPU tracks and thread states in Perfetto), on
	// CPU `cpu` of machine m (0: the only one); tids already machine_id()s.
	virtual void sched_switch(int64_t ts, uint32_t m, uint32_t cpu, const std::string &prev_comm,
				  int64_t prev_tid, int64_t prev_prio, int64_t prev_state,
				  const std::string &next_comm, int64_t next_tid, int64_t next_prio) = 0;
	// kind: 0 sched_waking, 1 sched_wakeup, 2 sched_wakeup_new.
	virtual void wakeup(int64_t ts, uint32_t m, uint32_t cpu, int kind, const std::string &comm,
			    int64_t tid, int64_t prio, int64_t target_cpu) = 0;
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
