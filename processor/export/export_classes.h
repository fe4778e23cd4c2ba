// export_classes.h - what `strata export`'s converter (export_timeline.h)
// knows of an event class (classify(): a span's end, a syscall, a lock
// operation, a JVM monitor, ...) and keeps per thread, per sub-trace and
// per lock; the uuids of its tracks.
#ifndef STRATA_PROCESSOR_EXPORT_CLASSES_H
#define STRATA_PROCESSOR_EXPORT_CLASSES_H

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "analyze_model.h"
#include "export_sink.h"
#include "read_event.h"

namespace strata {
namespace timeline {

using exp::Arg;
using exp::Args;

// Track uuids: one space, the top byte says what the track is.
// One uuid space: the top byte says what the track is.
constexpr uint64_t kProcTrack = 1ULL << 56, kThreadTrack = 2ULL << 56, kLockTrack = 3ULL << 56,
		   kCounterTrack = 4ULL << 56, kKernelTrack = 5ULL << 56, kMachineTrack = 6ULL << 56;

inline uint64_t mix(uint64_t h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return h;
}

// What an event class means.
enum class Kind : uint8_t {
	Instant,
	SpanBegin,
	SpanEnd,
	SchedSwitch,
	Wakeup,
	SyscallEntry,
	SyscallExit,
	Pthread,
	PthreadMapping,
	JvmThread, // thread_start, thread_exists
	MonitorEnter,
	MonitorEntered,
	MonitorWait,
	MonitorWaited,
};

struct ClassInfo : rd::SlotCache {
	Kind kind = Kind::Instant;
	std::string name; // shown name: "provider:event", a syscall's name, a span's base
	analyze::Op op = analyze::Op::MutexLock;
	// The preload's compact records (docs/pthread.md): 1 mutex_held or
	// mutex_tryheld (an uncontended hold, acquisition hold_ns before), 2
	// mutex_acquired or mutex_tryacquired (an acquisition age_ns before,
	// its unlock to come).
	int compact = 0;
	// Their fields' slots, resolved at the first record (the per-event
	// path: no look-up by name).
	bool resolved = false;
	rd::FieldSlot f_lock, f_back;
	rd::FixedInt x_lock, x_back; // the same read with one load (Strata's reader)
	// The other pthread events' lock, ret and wait_ns slots (op_slot()):
	// looked up by name once, not per event (SlotCache's list).
	struct OpSlot {
		rd::FieldSlot slot;
		bool known = false;
	};
	mutable OpSlot s_lock, s_ret, s_wait;
	// pthread:mutex_counts (counting mode): pairs with no interval, shown
	// as the instant of their record and counted for the closing note.
	bool counts = false;
	int wake_kind = 0;
	bool raw = false; // sys_enter / sys_exit
	// Args::layout of its fields (fields()): unique in the export.
	uint64_t layout = 0;
	// Its fields when they are all integers at fixed offsets (fields(),
	// Strata's reader's COMPACT records): each read with one load, the
	// Args' names and kinds written only when args_ held another class's.
	// fixed: 0 not known yet, 1 so (names, fx), 2 not.
	mutable int fixed = 0;
	mutable std::vector<std::string_view> fx_names;
	mutable std::vector<rd::FixedInt> fx;
};

// What the event class named n means (kernel: of a kernel sub-trace).
ClassInfo classify(const std::string &n, bool kernel);

struct Thread {
	int64_t pid = -1;
	std::string comm;     // from the kernel (sched_switch)
	std::string java;     // from jvm:thread_start / thread_exists
	bool emitted = false; // its track descriptor is out
	std::string emitted_name;
	uint32_t syscalls = 0;          // open syscall slices
	uint32_t raw_syscalls = 0;      // of which opened by a raw sys_enter
	std::vector<std::string> spans; // open user spans (their base names)
	uint32_t monitor = 0;           // open monitor waits
	std::vector<int64_t> open;      // begin times of the open slices of its track, innermost last
	int64_t closed_begin = 0, closed_end = INT64_MIN; // the last slice closed on its track
	const std::string &name() const { return !java.empty() ? java : comm; }
};

struct TraceInfo {
	bool kernel = false;
	uint32_t machine = 0; // 0: the trace is of one machine (exp::machine_id())
	int64_t pid = -1;     // a machine_id()
	std::string procname;
	std::string hostname;   // env.hostname ("" when the env has none)
	uint64_t lock_salt = 0; // mix(pid * 1000003): a lock's key is lock_salt ^ its address
};

// The last release of a lock not yet followed by an acquisition: a flow
// is drawn from it only when the next acquisition is a waiter that was
// blocked at that time (it received the lock), so flows pair exactly.
struct LockState {
	bool released = false;
	int64_t release_ts = 0, released_by = 0;
};

struct HoldKey {
	int64_t tid;
	uint64_t lock;
	bool operator==(const HoldKey &o) const { return tid == o.tid && lock == o.lock; }
};
struct HoldKeyHash {
	size_t operator()(const HoldKey &k) const { return mix(static_cast<uint64_t>(k.tid) * 31 + k.lock); }
};

} // namespace timeline
} // namespace strata

#endif
