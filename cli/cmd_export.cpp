// cmd_export.cpp - `strata export [--format perfetto|json] [-o FILE] [DIR]`:
// one timeline of every sub-trace under DIR (user, kernel, JVM, several
// processes) in Perfetto's protobuf trace format or Chrome's JSON trace
// events, for ui.perfetto.dev, chrome://tracing, speedscope and the like.
// What each Strata event becomes is documented in docs/viewing.md.
//
// Streaming: the messages come merged by time from view_graph.cpp and are
// written as they come; what is kept is per thread, per lock, per CPU and
// per event class, never per event.  When a kernel sub-trace is present the
// other sub-traces are read once before (tids -> process, Java thread
// names), so that a kernel thread track knows its process from its first
// event.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "analyze_model.h"
#include "commands.h"
#include "export_sink.h"
#include "java_names.h"
#include "read_event.h"
#include "read_progress.h"
#include "view_graph.h"

namespace strata {
namespace {

using exp::Arg;
using exp::Args;

// ---- track ids -------------------------------------------------------------
// One uuid space: the top byte says what the track is.
constexpr uint64_t kProcTrack = 1ULL << 56, kThreadTrack = 2ULL << 56, kLockTrack = 3ULL << 56,
		   kCounterTrack = 4ULL << 56, kKernelTrack = 5ULL << 56, kMachineTrack = 6ULL << 56;

uint64_t mix(uint64_t h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return h;
}

// ---- what an event class means ---------------------------------------------
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

// "app:work_begin" -> (SpanBegin, "app:work").
bool span_suffix(const std::string &n, Kind *kind, std::string *base)
{
	static const struct {
		const char *suffix;
		Kind kind;
	} kSuffixes[] = {{"_begin", Kind::SpanBegin}, {"_start", Kind::SpanBegin},
			 {"_entry", Kind::SpanBegin}, {"_enter", Kind::SpanBegin},
			 {"_end", Kind::SpanEnd},     {"_finish", Kind::SpanEnd},
			 {"_exit", Kind::SpanEnd}};
	for (const auto &s : kSuffixes) {
		const size_t len = std::strlen(s.suffix);
		if (n.size() > len && n.compare(n.size() - len, len, s.suffix) == 0) {
			*kind = s.kind;
			*base = n.substr(0, n.size() - len);
			return true;
		}
	}
	return false;
}

ClassInfo classify(const std::string &n, bool kernel)
{
	ClassInfo c;
	c.name = n;
	if (kernel) {
		if (n == "sched_switch") {
			c.kind = Kind::SchedSwitch;
		} else if (n == "sched_waking" || n == "sched_wakeup" || n == "sched_wakeup_new") {
			c.kind = Kind::Wakeup;
			c.wake_kind = n == "sched_waking" ? 0 : n == "sched_wakeup" ? 1 : 2;
		} else if (n == "sys_enter" || n == "sys_exit") {
			// The raw tracepoints (id, args): slices "syscall ID" while no
			// named syscall event has been seen (see Converter::on_event).
			c.kind = n == "sys_enter" ? Kind::SyscallEntry : Kind::SyscallExit;
			c.raw = true;
			c.name = "syscall";
		} else if (n.compare(0, 14, "syscall_entry_") == 0) {
			c.kind = Kind::SyscallEntry;
			c.name = n.substr(14);
		} else if (n.compare(0, 13, "syscall_exit_") == 0) {
			c.kind = Kind::SyscallExit;
			c.name = n.substr(13);
		}
		return c; // other kernel events: instants
	}
	if (n.compare(0, 8, "pthread:") == 0) {
		if (n == "pthread:mapping" || n == "pthread:site")
			c.kind = Kind::PthreadMapping; // not events of the timeline
		else if (n == "pthread:mutex_counts" || n == "pthread:mutex_counts_done")
			c.counts = true; // instants: counted pairs are no intervals
		else if (n == "pthread:mutex_held" || n == "pthread:mutex_acquired" ||
			 n == "pthread:mutex_tryheld" || n == "pthread:mutex_tryacquired") {
			c.kind = Kind::Pthread;
			c.compact = n == "pthread:mutex_held" || n == "pthread:mutex_tryheld" ? 1 : 2;
		} else if (analyze::op_from_name(n.substr(8), &c.op))
			c.kind = Kind::Pthread;
		return c;
	}
	static const struct {
		const char *name;
		Kind kind;
	} kJvm[] = {{"jvm:thread_start", Kind::JvmThread},
		    {"jvm:thread_exists", Kind::JvmThread},
		    {"jvm:monitor_contended_enter", Kind::MonitorEnter},
		    {"jvm:monitor_contended_entered", Kind::MonitorEntered},
		    {"jvm:monitor_wait", Kind::MonitorWait},
		    {"jvm:monitor_waited", Kind::MonitorWaited}};
	for (const auto &j : kJvm)
		if (n == j.name) {
			c.kind = j.kind;
			return c;
		}
	Kind k;
	std::string base;
	if (span_suffix(n, &k, &base)) {
		c.kind = k;
		c.name = base;
	}
	return c;
}

// ---- the converter -----------------------------------------------------------

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

class Converter {
public:
	explicit Converter(exp::Sink &sink) : sink_(sink) {}
	// Sub-traces of several machines (env.hostname): each machine is a
	// group of its own, its pids and tids kept apart from the others'
	// (exp::machine_id()), each process named "host: procname (pid N)".
	// The reference machine (reference_machine(): the host of the clock
	// links) is machine 1, Perfetto's machine 0 (exp::perfetto_machine()).
	void name_machines(bool on, const std::string &reference)
	{
		name_hosts_ = on;
		if (on)
			machine_index(reference);
	}

	uint64_t events = 0, discarded = 0, unmatched_ends = 0;
	uint64_t counted_pairs = 0;                  // in pthread:mutex_counts records: not drawn
	std::unordered_map<int64_t, Thread> threads; // by machine_id(tid)
	uint32_t machines_over = 0;                  // machines past kMaxMachine (sharing its ids)

	// A message of the pass (read_event.h).
	template <class E> bool event(const E &ev)
	{
		on_event(ev);
		return !sink_.failed();
	}
	bool loss(const rd::Loss &l)
	{
		on_discarded(l);
		return !sink_.failed();
	}

	// The pre-pass over the user sub-traces: which process each thread is
	// in, and Java threads' names.
	struct Learner {
		Converter &c;
		template <class E> bool event(const E &ev)
		{
			c.learn(ev);
			return true;
		}
		bool loss(const rd::Loss &) { return true; }
	};
	template <class E> void learn(const E &ev)
	{
		const TraceInfo &tr = trace_of(ev);
		int64_t tid = 0;
		if (!ev.tid(&tid))
			return;
		Thread &t = threads[exp::machine_id(tr.machine, tid)];
		if (t.pid < 0)
			t.pid = tr.pid;
		const ClassInfo &c = class_of(ev, tr);
		if (c.kind == Kind::JvmThread)
			jvm_thread(ev, c, tr, false);
	}

	// Between the pre-pass and the pass: the first reader's objects are
	// gone, and their addresses may come back.
	void new_pass()
	{
		traces_.clear();
		classes_.clear();
		last_trace_ = nullptr;
		last_info_ = nullptr;
		for (StreamSlot &s : stream_slots_)
			s = StreamSlot();
		last_class_ = nullptr;
		last_class_info_ = nullptr;
		for (ClassSlot &cs : class_slots_)
			cs = ClassSlot();
		for (LastLockTrack &l : last_lt_)
			l = LastLockTrack();
		for (LastThread &l : last_threads_)
			l = LastThread();
	}

	bool last_ts(int64_t *ts) const
	{
		*ts = last_ts_;
		return have_ts_;
	}

private:
	exp::Sink &sink_;
	std::unordered_map<const rd::TraceIdent *, TraceInfo> traces_;
	std::unordered_map<const void *, ClassInfo> classes_; // by class_key()
	const rd::TraceIdent *last_trace_ = nullptr;
	TraceInfo *last_info_ = nullptr;
	const void *last_class_ = nullptr;
	ClassInfo *last_class_info_ = nullptr;
	struct ClassSlot {
		const void *key = nullptr;
		ClassInfo *info = nullptr;
	} class_slots_[32];
	std::unordered_map<int64_t, bool> procs_; // pid -> descriptor out
	// pid -> its user sub-trace's procname (learnt in the pre-pass): a
	// process first seen in the kernel's events is named by it, not by the
	// comm its thread had then (a JVM's before its exec: "strata").
	std::unordered_map<int64_t, std::string> proc_names_;
	bool name_hosts_ = false; // the sub-traces come from several machines
	// Machines by host name ("" one too), numbered from 1: the reference
	// machine, then the others as first met (kept across the passes);
	// machine_names_[m - 1] is machine m's, machine_out_ says whether its
	// group is out.
	std::unordered_map<std::string, uint32_t> machine_of_;
	std::vector<std::string> machine_names_;
	std::vector<bool> machine_out_;
	uint32_t machine_index(const std::string &host)
	{
		auto it = machine_of_.find(host);
		if (it != machine_of_.end())
			return it->second;
		uint32_t m = static_cast<uint32_t>(machine_names_.size()) + 1;
		if (m > exp::kMaxMachine) {
			machines_over++;
			m = exp::kMaxMachine;
		} else {
			machine_names_.push_back(host.empty() ? "(unnamed)" : host);
			machine_out_.push_back(false);
		}
		machine_of_.emplace(host, m);
		return m;
	}
	// Machine m's group, before anything of it.
	uint64_t ensure_machine(uint32_t m)
	{
		if (!m)
			return 0;
		if (!machine_out_[m - 1]) {
			machine_out_[m - 1] = true;
			sink_.machine(m, kMachineTrack | m, machine_names_[m - 1]);
		}
		return kMachineTrack | m;
	}
	// An id of the trace as the user knows it (a machine_id() undone).
	int64_t real_id(int64_t id) const
	{
		return name_hosts_ && id > 0 ? id & ((int64_t(1) << exp::kMachineShift) - 1) : id;
	}
	std::string tid_label(int64_t tid)
	{
		return threads[tid].name() + " (tid " + std::to_string(real_id(tid)) + ")";
	}
	// tid_label(), kept while no thread was renamed (names_gen_): the
	// label of a lock handover's receiver, per contended acquisition.
	struct Label {
		int64_t tid = 0;
		uint64_t gen = UINT64_MAX;
		std::string text;
	} labels_[16];
	const std::string &cached_label(int64_t tid)
	{
		Label &l = labels_[static_cast<uint64_t>(tid) & 15];
		if (l.gen != names_gen_ || l.tid != tid) {
			l.text = tid_label(tid);
			l.tid = tid;
			l.gen = names_gen_;
		}
		return l.text;
	}
	std::string release_; // a release's slice name (its buffer kept)
	std::unordered_map<uint64_t, LockState> locks_;
	// The locks looked up, by key (analyze::cache_place()): locks_'s
	// elements, never erased, do not move.
	static constexpr size_t kCached = analyze::kCachePlaces;
	struct RecentLock {
		uint64_t key = 0;
		LockState *ls = nullptr;
	} recent_locks_[kCached];
	LockState &lock_state(uint64_t key)
	{
		RecentLock &r = recent_locks_[analyze::cache_place(key, 0)];
		if (!r.ls || r.key != key)
			r = RecentLock{key, &locks_[key]};
		return *r.ls;
	}
	std::unordered_map<HoldKey, uint32_t, HoldKeyHash> holds_; // open holds per (thread, lock)
	std::unordered_map<uint64_t, bool> child_tracks_;
	std::unordered_map<int64_t, uint64_t> discarded_by_pid_;
	uint64_t next_flow_ = 1;
	bool named_syscalls_ = false; // a syscall_entry_NAME was seen: raw sys_enter/exit are left out
	std::unordered_map<uint64_t, bool> kernel_tracks_; // a machine's kernel track is out
	int64_t last_ts_ = 0;
	bool have_ts_ = false;
	Args args_;
	void clear_args()
	{
		args_.clear();
		args_.layout = 0;
	}
	uint64_t layouts_ = 0;            // the last ClassInfo::layout given
	std::string label_;               // the string of an argument made here (args_ views it)
	std::string name_;                // a wait's slice name (its buffer kept)
	const std::string hold_ = "hold"; // a hold's slice name (not a string made per hold)
	// " 0x" and v in lowercase hex, as printf's " 0x%" PRIx64 (a call of
	// snprintf per contended lock acquisition was 3 % of an export).
	static void append_hex(std::string &s, uint64_t v)
	{
		char b[24] = {' ', '0', 'x'};
		s.append(b, static_cast<size_t>(std::to_chars(b + 3, b + sizeof b, v, 16).ptr - b));
	}

	// An event's sub-trace by its stream (stream_key(): the event's own
	// pointer, where trace() follows three, a chain that was a tenth of
	// an export's time), in a slot by the key's hash; else by trace().
	struct StreamSlot {
		const void *key = nullptr;
		TraceInfo *info = nullptr;
	} stream_slots_[16];
	template <class E> __attribute__((always_inline)) TraceInfo &trace_of(const E &ev)
	{
		const void *key = ev.stream_key();
		StreamSlot &s = stream_slots_[reinterpret_cast<uintptr_t>(key) * 0x9e3779b97f4a7c15ull >> 60];
		if (__builtin_expect(s.key == key && key, 1))
			return *s.info;
		return trace_of_slow(ev, s);
	}
	template <class E> __attribute__((noinline)) TraceInfo &trace_of_slow(const E &ev, StreamSlot &s)
	{
		TraceInfo &t = trace_info(ev.trace());
		s = StreamSlot{ev.stream_key(), &t};
		return t;
	}
	// The last sub-trace's inline (most events follow one of theirs), the
	// others' looked up out of line.
	TraceInfo &trace_info(const rd::TraceIdent &id)
	{
		if (__builtin_expect(&id == last_trace_, 1))
			return *last_info_;
		return trace_info_slow(id);
	}
	__attribute__((noinline)) TraceInfo &trace_info_slow(const rd::TraceIdent &id)
	{
		last_trace_ = &id;
		auto it = traces_.find(&id);
		if (it != traces_.end())
			return *(last_info_ = &it->second);
		TraceInfo t;
		t.kernel = id.kernel;
		t.procname = id.procname;
		t.hostname = id.hostname;
		t.machine = name_hosts_ ? machine_index(t.hostname) : 0;
		t.pid = id.has_vpid ? exp::machine_id(t.machine, id.vpid) : -1;
		t.lock_salt = mix(static_cast<uint64_t>(t.pid) * 1000003u);
		if (!t.kernel && t.pid >= 0 && !t.procname.empty())
			proc_names_.emplace(t.pid, t.procname);
		return *(last_info_ = &traces_.emplace(&id, t).first->second);
	}
	template <class E> ClassInfo &class_of(const E &ev, const TraceInfo &tr)
	{
		const void *key = ev.class_key();
		if (key == last_class_)
			return *last_class_info_;
		// A pthread trace alternates between a few classes (held,
		// acquired, lock, unlock): a slot per class by its key's hash
		// (a find per event was 3 % of an export).
		ClassSlot &cs = class_slots_[reinterpret_cast<uintptr_t>(key) * 0x9e3779b97f4a7c15ull >> 59];
		if (__builtin_expect(cs.key == key && key, 1)) {
			last_class_ = key;
			return *(last_class_info_ = cs.info);
		}
		return class_of_slow(ev, tr, cs);
	}
	template <class E>
	__attribute__((noinline)) ClassInfo &class_of_slow(const E &ev, const TraceInfo &tr, ClassSlot &cs)
	{
		const void *key = ev.class_key();
		auto it = classes_.find(key);
		if (it == classes_.end()) {
			it = classes_.emplace(key, classify(ev.name(), tr.kernel)).first;
			it->second.layout = ++layouts_;
		}
		last_class_ = key;
		cs = ClassSlot{key, &it->second};
		return *(last_class_info_ = &it->second);
	}

	// ---- tracks ----
	// pid: a machine_id(), which says the machine (named only when the
	// trace holds several; the real pid then in the name).
	void ensure_process(int64_t pid, const std::string &name)
	{
		auto it = procs_.find(pid);
		if (it != procs_.end())
			return;
		procs_[pid] = true;
		std::string shown = name;
		const uint32_t m = static_cast<uint32_t>(pid >> exp::kMachineShift);
		if (name_hosts_ && m >= 1 && m <= machine_names_.size()) {
			ensure_machine(m);
			const std::string real = "pid " + std::to_string(real_id(pid));
			shown = machine_names_[m - 1] + ": " +
				(name.empty() ? real : name + " (" + real + ")");
		}
		sink_.process(kProcTrack | static_cast<uint64_t>(pid), pid, shown);
	}
	// The threads whose tracks were looked up last, a slot per tid's
	// hash, each valid while no thread was renamed (names_gen_): then its
	// track is out and its pid known.
	struct LastThread {
		int64_t tid = 0;
		uint64_t gen = 0;
		const TraceInfo *tr = nullptr;
		bool valid = false;
	} last_threads_[16]; // by the tid's hash (a waiter's track and its releaser's in turn)
	static size_t thread_place(int64_t tid)
	{
		return static_cast<size_t>(static_cast<uint64_t>(tid) * 0x9e3779b97f4a7c15ull >> 60);
	}
	uint64_t thread_track(int64_t tid, const TraceInfo *tr)
	{
		const LastThread &l = last_threads_[thread_place(tid)];
		if (__builtin_expect(l.valid && l.tid == tid && l.tr == tr && l.gen == names_gen_, 1))
			return kThreadTrack | static_cast<uint32_t>(tid);
		return thread_track_slow(tid, tr);
	}
	__attribute__((noinline)) uint64_t thread_track_slow(int64_t tid, const TraceInfo *tr)
	{
		const uint64_t uuid = kThreadTrack | static_cast<uint32_t>(tid);
		Thread &t = threads[tid];
		if (tr && !tr->kernel && t.pid < 0)
			t.pid = tr->pid;
		if (!t.emitted || (t.emitted_name != t.name() && !t.name().empty())) {
			// A thread whose process nothing says (a kernel thread, or a
			// process not traced in user space) is its own process.
			const int64_t pid = t.pid >= 0 ? t.pid : tid;
			std::string pname;
			auto pn = proc_names_.find(pid);
			if (pn != proc_names_.end())
				pname = pn->second;
			else if (pid == tid)
				pname = t.name();
			ensure_process(pid, pname);
			sink_.thread(uuid, kProcTrack | static_cast<uint64_t>(pid), pid, tid,
				     !name_hosts_       ? t.name()
				     : t.name().empty() ? "tid " + std::to_string(real_id(tid))
							: tid_label(tid));
			t.emitted = true;
			t.emitted_name = t.name();
		}
		last_threads_[thread_place(tid)] = LastThread{tid, names_gen_, tr, true};
		return uuid;
	}
	// The (thread, lock)s' tracks looked up, by key (as recent_locks_),
	// each valid while no thread was renamed (names_gen_): then its
	// thread's track and its own are out.
	struct LastLockTrack {
		int64_t tid = 0;
		uint64_t lock = 0, uuid = 0, gen = 0;
		const TraceInfo *tr = nullptr;
		LockState *ls = nullptr;   // lock_state() of the lock (locks_'s elements do not move)
		uint32_t *holds = nullptr; // holds_'s count of (tid, lock) (its elements do not move)
	} last_lt_[kCached];
	// The (thread, lock)'s count of open holds when its place is cached,
	// else nullptr (no place made: a track of it not described).
	uint32_t *cached_holds(int64_t tid, const TraceInfo &tr, uint64_t lock)
	{
		const LastLockTrack &l = last_lt_[analyze::cache_place(static_cast<uint64_t>(tid), lock)];
		return l.tr == &tr && l.tid == tid && l.lock == lock ? l.holds : nullptr;
	}
	uint64_t names_gen_ = 0; // bumped at each change of a thread's comm or Java name
	uint64_t lock_track(int64_t tid, const TraceInfo &tr, uint64_t lock, const char *kind)
	{
		return lock_place(tid, tr, lock, kind).uuid;
	}
	// The (thread, lock)'s track and the lock's state at once.
	__attribute__((always_inline)) const LastLockTrack &lock_place(int64_t tid, const TraceInfo &tr,
								       uint64_t lock, const char *kind)
	{
		LastLockTrack &l = last_lt_[analyze::cache_place(static_cast<uint64_t>(tid), lock)];
		if (__builtin_expect(l.tr == &tr && l.tid == tid && l.lock == lock && l.gen == names_gen_, 1))
			return l;
		lock_track_slow(l, tid, tr, lock, kind);
		return l;
	}
	__attribute__((noinline)) uint64_t lock_track_slow(LastLockTrack &l, int64_t tid, const TraceInfo &tr,
							   uint64_t lock, const char *kind)
	{
		const uint64_t parent = thread_track(tid, &tr);
		const uint64_t uuid = kLockTrack | (mix(static_cast<uint64_t>(tid) ^ mix(lock)) >> 8);
		if (child_tracks_.find(uuid) == child_tracks_.end()) {
			child_tracks_.emplace(uuid, true);
			char name[64];
			std::snprintf(name, sizeof name, "%s 0x%" PRIx64, kind, lock);
			sink_.child_track(uuid, parent, threads[tid].pid >= 0 ? threads[tid].pid : tid, tid,
					  name, false);
		}
		l = LastLockTrack{tid,
				  lock,
				  uuid,
				  names_gen_,
				  &tr,
				  &lock_state(tr.lock_salt ^ lock),
				  &holds_[HoldKey{tid, tr.lock_salt ^ lock}]};
		return uuid;
	}

	// threads[tid], the last one's kept (threads' elements do not move,
	// none is erased): a look-up per contended wait was 2 % of an export.
	int64_t last_tid_ = 0;
	Thread *last_tid_thread_ = nullptr;
	Thread &thread_of(int64_t tid)
	{
		if (__builtin_expect(last_tid_thread_ && last_tid_ == tid, 1))
			return *last_tid_thread_;
		last_tid_ = tid;
		return *(last_tid_thread_ = &threads[tid]);
	}
	// Slices of a thread's own track (syscalls, spans, monitor waits), with
	// args_ as their arguments; their begin times are kept while open.
	void thread_begin(int64_t ts, int64_t tid, const TraceInfo &tr, const std::string &name)
	{
		sink_.begin(ts, thread_track(tid, &tr), name, args_, 0);
		thread_of(tid).open.push_back(ts);
	}
	void thread_end(int64_t ts, int64_t tid, const TraceInfo &tr)
	{
		Thread &t = thread_of(tid);
		if (!t.open.empty()) {
			t.closed_begin = t.open.back();
			t.closed_end = ts;
			t.open.pop_back();
		}
		sink_.end(ts, thread_track(tid, &tr), args_, 0);
	}

	// The machine's scheduling (a CPU's switches and wakeups, on its CPU
	// tracks) and the pthread preload's mapping events (nothing drawn).
	template <class E> void sched_event(int64_t ts, uint32_t m, const ClassInfo &c, const E &pl)
	{
		switch (c.kind) {
		case Kind::SchedSwitch: {
			const uint32_t cpu = cpu_of(pl);
			const int64_t prev = exp::machine_id(m, c.i64(pl, "prev_tid")),
				      next = exp::machine_id(m, c.i64(pl, "next_tid"));
			const std::string pc(c.str(pl, "prev_comm")), nc(c.str(pl, "next_comm"));
			note_comm(prev, pc);
			note_comm(next, nc);
			ensure_machine(m);
			sink_.sched_switch(ts, m, cpu, pc, prev, c.i64(pl, "prev_prio"),
					   c.i64(pl, "prev_state"), nc, next, c.i64(pl, "next_prio"));
			return;
		}
		case Kind::Wakeup: {
			const int64_t t = exp::machine_id(m, c.i64(pl, "tid"));
			const std::string comm(c.str(pl, "comm"));
			note_comm(t, comm);
			ensure_machine(m);
			sink_.wakeup(ts, m, cpu_of(pl), c.wake_kind, comm, t, c.i64(pl, "prio"),
				     c.i64(pl, "target_cpu"));
			return;
		}
		default: // Kind::PthreadMapping
			return;
		}
	}
	// A thread's system call: its entry begins a slice of the thread's
	// track, its exit ends it (an exit whose entry came before the trace
	// is left out, and counted).
	template <class E>
	void syscall_event(int64_t ts, int64_t tid, const TraceInfo &tr, const ClassInfo &c, const E &pl)
	{
		if (c.kind == Kind::SyscallEntry) {
			// With named syscall events (syscall_entry_NAME) the raw
			// sys_enter that feeds them would give each call twice.
			if (c.raw && named_syscalls_)
				return;
			named_syscalls_ = named_syscalls_ || !c.raw;
			fields(pl, c);
			thread_begin(ts, tid, tr,
				     c.raw ? "syscall " + std::to_string(c.i64(pl, "id")) : c.name);
			threads[tid].syscalls++;
			threads[tid].raw_syscalls += c.raw;
			return;
		}
		Thread &t = threads[tid];
		if (c.raw ? !t.raw_syscalls : t.syscalls <= t.raw_syscalls) {
			if (!c.raw || !named_syscalls_) // entered before the trace began
				unmatched_ends++;
			return;
		}
		t.syscalls--;
		t.raw_syscalls -= c.raw;
		fields(pl, c);
		thread_end(ts, tid, tr);
	}
	// A Java monitor's contended enter or Object.wait() (a slice of the
	// thread's track begins; the holder named when known) and its end
	// (entered: with the flow from the thread that released it).
	template <class E>
	void monitor_event(int64_t ts, int64_t tid, const TraceInfo &tr, const ClassInfo &c, const E &pl)
	{
		if (c.kind == Kind::MonitorEntered || c.kind == Kind::MonitorWaited) {
			Thread &t = threads[tid];
			if (!t.monitor) {
				instant(ts, tid, tr, c, pl);
				return;
			}
			t.monitor--;
			fields(pl, c);
			thread_end(ts, tid, tr);
			if (c.kind == Kind::MonitorEntered)
				monitor_entered(ts, tid, tr, monitor_name(c, pl));
			return;
		}
		fields(pl, c);
		const std::string mon = monitor_name(c, pl);
		if (c.kind == Kind::MonitorEnter) {
			const int64_t owner = c.i64(pl, "owner_java_tid");
			auto it = java_tids_.find({tr.pid, owner});
			if (it != java_tids_.end()) {
				Arg a;
				a.kind = Arg::Str;
				a.name = "holder";
				label_ = tid_label(it->second);
				a.s = label_;
				args_.push_back(std::move(a));
				args_.layout = 0; // not the class's fields alone
				monitor_owned(tr, mon, it->second, ts);
			}
			entering_[tid] = {monitor_key(tr, mon), ts};
		}
		thread_begin(ts, tid, tr,
			     (c.kind == Kind::MonitorEnter ? "monitor enter " : "Object.wait ") + mon);
		threads[tid].monitor++;
	}

	// A span of the thread's own (span_begin/span_end): a slice of its
	// track; an end that does not close the innermost span is an instant.
	template <class E>
	void span_event(int64_t ts, int64_t tid, const TraceInfo &tr, const ClassInfo &c, const E &pl)
	{
		fields(pl, c);
		if (c.kind == Kind::SpanBegin) {
			thread_begin(ts, tid, tr, c.name);
			threads[tid].spans.push_back(c.name);
			return;
		}
		Thread &t = threads[tid];
		if (t.spans.empty() || t.spans.back() != c.name) { // not a pair: an instant
			sink_.instant(ts, thread_track(tid, &tr), pl.name(), args_);
			return;
		}
		t.spans.pop_back();
		thread_end(ts, tid, tr);
	}

	// ---- events ----
	template <class E> __attribute__((always_inline)) void on_event(const E &pl)
	{
		TraceInfo &tr = trace_of(pl);
		ClassInfo &c = class_of(pl, tr);
		const int64_t ts = pl.ns();
		last_ts_ = ts;
		have_ts_ = true;
		events++;
		int64_t tid = 0;
		const bool has_tid = pl.tid(&tid);
		const uint32_t m = tr.machine;
		tid = exp::machine_id(m, tid);

		// The per-event path of a pthread trace first: a compact record
		// (Kind::Pthread, classify()) of a thread, as the switches below
		// would take it; their jumps by kind (4 classes in turn) were a
		// fifth of the converter's samples.
		if (__builtin_expect(c.compact && has_tid && !(m && tid == 0), 1)) {
			compact_hold(ts, tid, tr, c, pl);
			return;
		}
		switch (c.kind) {
		case Kind::SchedSwitch:
		case Kind::Wakeup:
		case Kind::PthreadMapping:
			sched_event(ts, m, c, pl);
			return;
		default:
			break;
		}
		// An event of no thread: on the process (or kernel) track; with
		// several machines, one of an idle task (tid 0) on its machine's.
		if (!has_tid || (m && tid == 0)) {
			fields(pl, c);
			sink_.instant(ts, no_thread_track(tr), c.name, args_);
			return;
		}
		switch (c.kind) {
		case Kind::SyscallEntry:
		case Kind::SyscallExit:
			syscall_event(ts, tid, tr, c, pl);
			return;
		case Kind::SpanBegin:
		case Kind::SpanEnd:
			span_event(ts, tid, tr, c, pl);
			return;
		case Kind::Pthread:
			// The compact records inline (the per-event path of a
			// pthread trace), the other pthread events out of line.
			if (c.compact)
				compact_hold(ts, tid, tr, c, pl);
			else
				pthread_event(ts, tid, tr, c, pl);
			return;
		case Kind::JvmThread:
			jvm_thread(pl, c, tr, true);
			instant(ts, tid, tr, c, pl);
			return;
		case Kind::MonitorEnter:
		case Kind::MonitorWait:
		case Kind::MonitorEntered:
		case Kind::MonitorWaited:
			monitor_event(ts, tid, tr, c, pl);
			return;
		default:
			if (c.counts)
				counted_pairs += c.u64(pl, "count");
			instant(ts, tid, tr, c, pl);
			return;
		}
	}

	std::map<std::pair<int64_t, int64_t>, int64_t> java_tids_; // (pid, java_tid) -> os tid

	/*
	 * JVM monitor flows.  JVMTI reports no monitor exit, so who released a
	 * monitor to the waiter that got it is inferred: the last thread known
	 * to own it before the waiter's monitor_contended_entered, if that
	 * knowledge is no older than the waiter's monitor_contended_enter.
	 * Known owners: the owner_java_tid of any thread's contended enter
	 * (agent option owner=1) and the thread of each contended entered.
	 * Exclusive ownership makes it the releaser, unless a thread took the
	 * monitor without contention in between (barging), which JVMTI does
	 * not report.  The flow goes from a zero-length "monitor released"
	 * slice on the releaser's track to a zero-length "monitor acquired"
	 * slice on the waiter's, both at the waiter's entry (the release came
	 * no later).
	 */
	struct MonitorOwner {
		int64_t tid = 0, since = 0;
	};
	std::unordered_map<std::string, MonitorOwner> monitors_;
	std::unordered_map<int64_t, std::pair<std::string, int64_t>> entering_; // tid -> (monitor, enter ts)

	template <class E> std::string monitor_name(const ClassInfo &c, const E &pl)
	{
		char hash[16];
		std::snprintf(hash, sizeof hash, "@%08" PRIx64, c.u64(pl, "hash") & 0xffffffffu);
		return java_class_name(std::string(c.str(pl, "class"))) + hash;
	}

	static std::string monitor_key(const TraceInfo &tr, const std::string &mon)
	{
		return std::to_string(tr.pid) + "/" + mon;
	}

	void monitor_owned(const TraceInfo &tr, const std::string &mon, int64_t tid, int64_t ts)
	{
		monitors_[monitor_key(tr, mon)] = {tid, ts};
	}

	void monitor_entered(int64_t ts, int64_t tid, const TraceInfo &tr, const std::string &mon)
	{
		const std::string key = monitor_key(tr, mon);
		auto en = entering_.find(tid);
		const bool entering = en != entering_.end() && en->second.first == key;
		const int64_t entered_at = entering ? en->second.second : ts;
		if (en != entering_.end())
			entering_.erase(en);
		MonitorOwner &o = monitors_[key];
		if (entering && o.tid > 0 && o.tid != tid && o.since >= entered_at) {
			const uint64_t flow = next_flow_++;
			clear_args();
			Arg a;
			a.kind = Arg::Str;
			a.name = "to";
			label_ = tid_label(tid);
			a.s = label_;
			args_.push_back(a);
			const uint64_t from = thread_track(o.tid, &tr);
			sink_.complete(ts, ts, from, "monitor released " + mon, args_, 0, flow);
			clear_args();
			a.name = "from";
			label_ = tid_label(o.tid);
			a.s = label_;
			args_.push_back(a);
			const uint64_t to = thread_track(tid, &tr);
			sink_.complete(ts, ts, to, "monitor acquired " + mon, args_, flow, 0);
			clear_args();
		}
		o = {tid, ts};
	}

	template <class E> void jvm_thread(const E &pl, const ClassInfo &c, const TraceInfo &tr, bool live)
	{
		const int64_t os_tid = exp::machine_id(tr.machine, c.i64(pl, "os_tid"));
		if (os_tid <= 0)
			return;
		Thread &t = threads[os_tid];
		t.java = c.str(pl, "name");
		names_gen_++;
		if (t.pid < 0)
			t.pid = tr.pid;
		java_tids_[{tr.pid, c.i64(pl, "java_tid")}] = os_tid;
		if (live && t.emitted)
			thread_track(os_tid, &tr); // renamed: the descriptor again
	}

	template <class E>
	void instant(int64_t ts, int64_t tid, const TraceInfo &tr, const ClassInfo &c, const E &pl)
	{
		const uint64_t track = thread_track(tid, &tr);
		fields(pl, c);
		sink_.instant(ts, track, c.name, args_); // never a span's class: their names are cut
	}

	// A process's own track, else its machine's kernel track (one
	// machine: a global one).
	uint64_t no_thread_track(const TraceInfo &tr)
	{
		if (!tr.kernel && tr.pid >= 0) {
			ensure_process(tr.pid, tr.procname);
			return kProcTrack | static_cast<uint64_t>(tr.pid);
		}
		const uint64_t uuid = kKernelTrack | tr.machine;
		if (kernel_tracks_.emplace(uuid, true).second)
			sink_.child_track(uuid, ensure_machine(tr.machine), exp::machine_pid(tr.machine), 0,
					  "kernel", false);
		return uuid;
	}

	void note_comm(int64_t tid, const std::string &comm)
	{
		if (tid <= 0 || comm.empty())
			return;
		Thread &t = threads[tid];
		if (t.comm.empty()) {
			t.comm = comm;
			names_gen_++;
		}
	}

	// The payload's top-level integers, reals and strings as arguments
	// (arrays and structures left out; a sequence's length member kept).
	// Written over the elements of args_ in place (no Arg constructed per
	// field: only the member of the field's kind is set, the others are
	// left as they were); args_.layout the class's (c.layout).
	template <class E> void fields(const E &pl, const ClassInfo &c)
	{
		if (E::kFixed && __builtin_expect(c.fixed == 1, 1)) {
			const size_t n = c.fx.size();
			if (__builtin_expect(args_.layout != c.layout || args_.size() != n, 0)) {
				args_.resize(n);
				for (size_t k = 0; k < n; k++) {
					args_[k].name = c.fx_names[k];
					args_[k].kind = c.fx[k].is_signed ? Arg::Int : Arg::Uint;
				}
				args_.layout = c.layout;
			}
			Arg *const a = args_.data();
			const rd::FixedInt *const x = c.fx.data();
			for (size_t k = 0; k < n; k++) {
				const int64_t v = pl.fixed(x[k]);
				if (x[k].is_signed)
					a[k].i = v;
				else
					a[k].u = static_cast<uint64_t>(v);
			}
			return;
		}
		fields_decoded(pl, c);
		if (E::kFixed && c.fixed == 0)
			fixed_plan(pl, c);
	}
	// Whether c's fields, as fields_decoded() just gave them (args_), are
	// all integers at fixed offsets: c.fixed 1 (and their FixedInts) or 2.
	template <class E> void fixed_plan(const E &pl, const ClassInfo &c)
	{
		c.fixed = 2;
		std::vector<std::string_view> names;
		std::vector<rd::FixedInt> fx;
		for (const Arg &a : args_) {
			if (a.kind != Arg::Int && a.kind != Arg::Uint)
				return;
			const rd::FieldSlot slot = pl.slot(std::string(a.name).c_str());
			const rd::FixedInt x = rd::FixedInt::of(slot);
			// Packed fields come at rising offsets (two fields of one
			// name would give the first's twice).
			if (!x.ok || x.is_signed != (a.kind == Arg::Int) ||
			    (!fx.empty() && x.off <= fx.back().off))
				return;
			// The value read the fixed way must be the one decoded.
			const int64_t v = pl.fixed(x);
			if (a.kind == Arg::Int ? v != a.i : static_cast<uint64_t>(v) != a.u)
				return;
			names.push_back(a.name);
			fx.push_back(x);
		}
		c.fx_names = std::move(names);
		c.fx = std::move(fx);
		c.fixed = 1;
	}
	template <class E> void fields_decoded(const E &pl, const ClassInfo &c)
	{
		size_t n = 0, have = args_.size();
		Arg *to = args_.data();
		pl.for_each_field([this, &n, &have, &to](const rd::Field &f) {
			if (__builtin_expect(n == have, 0)) {
				args_.emplace_back();
				have = args_.size();
				to = args_.data();
			}
			Arg &a = to[n++];
			a.name = f.name;
			switch (f.kind) {
			case rd::Field::Int:
				a.kind = Arg::Int;
				a.i = f.i;
				break;
			case rd::Field::Uint:
				a.kind = Arg::Uint;
				a.u = f.u;
				break;
			case rd::Field::Real:
				a.kind = Arg::Real;
				a.d = f.d;
				break;
			case rd::Field::Str:
				a.kind = Arg::Str;
				a.s = f.s;
				break;
			}
		});
		if (n < have)
			args_.erase(args_.begin() + static_cast<std::ptrdiff_t>(n), args_.end());
		args_.layout = c.layout;
	}

	template <class E> static uint32_t cpu_of(const E &ev)
	{
		const int64_t c = ev.cpu();
		return c >= 0 ? static_cast<uint32_t>(c) : 0;
	}

	// pthread: a wait is a slice on the waiting thread's own track (a
	// thread waits for one lock at a time, so its waits nest with its other
	// slices); holds are on a track per (thread, lock), as holds of several
	// locks need not nest.  A flow goes from the release that a waiter
	// received (a zero-length "release" slice on the releaser's track) to
	// that waiter's wait.  Meaning of the fields: docs/pthread.md.
	template <class E>
	__attribute__((noinline)) void pthread_event(int64_t ts, int64_t tid, const TraceInfo &tr,
						     ClassInfo &c, const E &pl)
	{
		using analyze::Op;
		const uint64_t lock = pl.u64(op_slot(c, pl, c.s_lock, "lock"));
		const bool rw = c.op == Op::RwRdlock || c.op == Op::RwWrlock || c.op == Op::RwTryrdlock ||
				c.op == Op::RwTrywrlock || c.op == Op::RwUnlock;
		const bool sem = c.op == Op::SemWait || c.op == Op::SemTimedwait || c.op == Op::SemTrywait ||
				 c.op == Op::SemPost;
		const char *kind = rw ? "rwlock" : sem ? "semaphore" : "mutex";
		const uint64_t lock_key = tr.lock_salt ^ lock;
		LockState &ls = lock_state(lock_key);
		clear_args();
		switch (c.op) {
		case Op::MutexLock:
		case Op::MutexTimedlock:
		case Op::RwRdlock:
		case Op::RwWrlock:
		case Op::MutexTrylock:
		case Op::RwTryrdlock:
		case Op::RwTrywrlock:
		case Op::SemWait:
		case Op::SemTimedwait:
		case Op::SemTrywait:
			acquisition(ts, tid, tr, c, pl, kind, lock, lock_key);
			return;
		case Op::MutexUnlock:
		case Op::RwUnlock:
		case Op::SemPost: {
			uint32_t *h = cached_holds(tid, tr, lock);
			if (!h) {
				auto it = holds_.find(HoldKey{tid, lock_key});
				h = it != holds_.end() ? &it->second : nullptr;
			}
			if (!h || *h == 0) { // taken before the trace began
				unmatched_ends++;
				return;
			}
			--*h; // a count of 0 kept (holds_'s elements do not go: LastLockTrack::holds)
			sink_.end(ts, lock_track(tid, tr, lock, kind), args_, 0);
			ls = LockState{true, ts, tid};
			return;
		}
		case Op::CondWait:
		case Op::CondTimedwait:
			cond_wait(ts, tid, tr, c, pl, lock);
			return;
		case Op::CondSignal:
		case Op::CondBroadcast:
		case Op::MutexCounts: // not from a class (ClassInfo::counts): no interval
		case Op::CountsDone:
			instant(ts, tid, tr, c, pl);
			return;
		}
	}

	// c's slot of a field (name: a literal), SlotCache's copied into s at
	// the first read (not a pointer: SlotCache's vector grows).
	template <class E>
	static const rd::FieldSlot &op_slot(const ClassInfo &c, const E &pl, ClassInfo::OpSlot &s,
					    const char *name)
	{
		if (__builtin_expect(!s.known, 0)) {
			s.slot = c.get(pl, name);
			s.known = true;
		}
		return s.slot;
	}
	// A compact record (uncontended): a hold from its acquisition, no
	// wait; the per-event path of a pthread trace.
	template <class E>
	__attribute__((always_inline)) void compact_hold(int64_t ts, int64_t tid, const TraceInfo &tr,
							 ClassInfo &c, const E &pl)
	{
		if (__builtin_expect(!c.resolved, 0)) {
			c.f_lock = c.get(pl, "lock");
			c.f_back = c.get(pl, c.compact == 1 ? "hold_ns" : "age_ns");
			c.x_lock = rd::FixedInt::of(c.f_lock);
			c.x_back = rd::FixedInt::of(c.f_back);
			c.resolved = true;
		}
		const uint64_t lock = field_u64(pl, c.f_lock, c.x_lock);
		const int64_t from = ts - static_cast<int64_t>(field_u64(pl, c.f_back, c.x_back));
		const LastLockTrack &l = lock_place(tid, tr, lock, "mutex");
		if (c.compact != 1) { // an acquisition, its unlock to come
			l.ls->released = false;
			clear_args();
			sink_.begin(from, l.uuid, hold_, args_, 0);
			(*l.holds)++;
			return;
		}
		sink_.pair(from, ts, l.uuid, hold_);
		*l.ls = LockState{true, ts, tid};
	}
	// A field of slot s, by its FixedInt x when the reader has those.
	template <class E>
	static uint64_t field_u64(const E &pl, const rd::FieldSlot &s, const rd::FixedInt &x)
	{
		if (E::kFixed && x.ok)
			return static_cast<uint64_t>(pl.fixed(x));
		return pl.u64(s);
	}

	// A condition wait: the mutex is released for the wait and taken again
	// at its end; the wait itself is on the thread's track.
	template <class E>
	void cond_wait(int64_t ts, int64_t tid, const TraceInfo &tr, const ClassInfo &c, const E &pl,
		       uint64_t lock)
	{
		const int64_t ret = pl.i64(op_slot(c, pl, c.s_ret, "ret"));
		const uint64_t wait = pl.u64(op_slot(c, pl, c.s_wait, "wait_ns"));
		const LastLockTrack &l = lock_place(tid, tr, lock, "mutex");
		const uint64_t track = l.uuid;
		const bool held = *l.holds > 0;
		const int64_t from = nested_begin(tid, ts - static_cast<int64_t>(wait));
		if (held)
			sink_.end(from, track, args_, 0);
		std::string &name = name_;
		name.assign("cond wait");
		append_hex(name, c.u64(pl, "cond"));
		if (ret) // only a failure's: speedscope shows a slice's args in its name
			args_.push_back(int_arg("ret", ret));
		sink_.complete(from, ts, thread_track(tid, &tr), name, args_, 0, 0);
		clear_args();
		if (held)
			sink_.begin(ts, track, hold_, args_, 0);
	}

	static Arg int_arg(const char *name, int64_t v)
	{
		Arg a;
		a.kind = Arg::Int;
		a.name = name;
		a.i = v;
		return a;
	}

	// Where a wait stamped at its end may begin on its thread's track: at
	// its start, unless that cuts the last slice closed there (a futex
	// syscall entered before the wrapper read the clock), which it then
	// encloses, beginning 1 ns before it so that no reader nests the two
	// the wrong way round.
	int64_t nested_begin(int64_t tid, int64_t from)
	{
		const Thread &t = thread_of(tid);
		return t.closed_end > from && t.closed_begin <= from ? t.closed_begin - 1 : from;
	}

	// A lock, rwlock or semaphore acquisition (or a failed attempt): its
	// wait on the thread's track, the hold that follows on the lock's.
	template <class E>
	void acquisition(int64_t ts, int64_t tid, const TraceInfo &tr, const ClassInfo &c, const E &pl,
			 const char *kind, uint64_t lock, uint64_t lock_key)
	{
		LockState &ls = lock_state(lock_key);
		const int64_t ret = pl.i64(op_slot(c, pl, c.s_ret, "ret"));
		const int64_t wait = static_cast<int64_t>(pl.u64(op_slot(c, pl, c.s_wait, "wait_ns")));
		const bool acquired = ret == 0 || ret == 130; // EOWNERDEAD: acquired
		if (wait > 0) {
			std::string &name = name_;
			name.assign(acquired ? "wait " : "wait (failed) ");
			name += kind;
			append_hex(name, lock);
			// The waiter received the lock from the last release if that
			// came while it waited.  (A release stamped after the
			// acquisition, its thread preempted before the event,
			// docs/pthread.md, gives no flow.)
			uint64_t flow = 0;
			if (acquired && ls.released && ls.released_by != tid && ls.release_ts >= ts - wait &&
			    ls.release_ts <= ts) {
				flow = next_flow_++;
				clear_args();
				Arg to;
				to.kind = Arg::Str;
				to.name = "to";
				label_.assign(cached_label(tid));
				to.s = label_;
				args_.push_back(to);
				release_.assign("release ");
				release_.append(name, 5, std::string::npos);
				sink_.complete(ls.release_ts, ls.release_ts,
					       thread_track(ls.released_by, &tr), release_, args_, 0, flow);
			}
			clear_args();
			if (ret) // only a failure's: speedscope shows a slice's args in its name
				args_.push_back(int_arg("ret", ret));
			sink_.complete(nested_begin(tid, ts - wait), ts, thread_track(tid, &tr), name, args_,
				       flow, 0);
			clear_args();
		}
		if (acquired) {
			ls.released = false;
			const LastLockTrack &l = lock_place(tid, tr, lock, kind);
			uint32_t *const h = l.holds;
			sink_.begin(ts, l.uuid, hold_, args_, 0);
			(*h)++;
		}
	}

	// A loss: a marker on the process (kernel: the kernel track) and a
	// counter of events lost so far.
	void on_discarded(const rd::Loss &l)
	{
		const bool ev = l.events;
		const uint64_t count = l.count;
		const bool known = l.known;
		const int64_t ts = l.times ? l.end : last_ts_;
		const TraceInfo &tr = trace_info(*l.trace);
		const uint64_t track = no_thread_track(tr);
		Args a(1);
		a[0].kind = Arg::Uint;
		a[0].name = "count";
		a[0].u = count;
		if (ev)
			discarded += count;
		sink_.instant(ts, track,
			      ev ? (known ? "events discarded" : "events discarded (count unknown)")
				 : "packets discarded",
			      a);
		if (!ev)
			return;
		const int64_t key = tr.kernel ? -1 - static_cast<int64_t>(tr.machine) : tr.pid;
		const uint64_t ctrack = kCounterTrack | static_cast<uint32_t>(key);
		uint64_t &total = discarded_by_pid_[key];
		if (total == 0 && child_tracks_.emplace(ctrack, true).second)
			sink_.child_track(ctrack, track, tr.kernel ? exp::machine_pid(tr.machine) : tr.pid, 0,
					  "discarded events", true);
		total += count;
		sink_.counter(ts, ctrack, static_cast<int64_t>(total));
	}
};

// The pass's handler: the converter, and the progress bar after each event.
struct Pass {
	Converter &conv;
	Progress &progress;
	template <class E> bool event(const E &ev)
	{
		const bool more = conv.event(ev);
		if (__builtin_expect(!(conv.events & 0xffff), 0)) // update() draws no more often
			progress.update(conv.events, ev.ns());
		return more;
	}
	bool loss(const rd::Loss &l) { return conv.loss(l); }
};

// Threads seen by the kernel belong to the processes of the user
// sub-traces: learn which first (only needed with a kernel sub-trace).
// Its damage is named by the pass that follows.
void learn_processes(Converter &conv, const std::vector<std::string> &dirs, const std::string &dir)
{
	std::vector<std::string> user;
	for (const std::string &d : dirs)
		if (!is_kernel_trace(d))
			user.push_back(d);
	if (user.empty() || user.size() == dirs.size())
		return;
	rd::Source pre("export");
	pre.open_dirs(user, dir);
	pre.set_quiet(true);
	Converter::Learner learner{conv};
	pre.read(learner);
}

// With the output in a file (stdout free for it): what went in, and what
// was left out and why.
void report_export(const Converter &conv, const std::string &out_path)
{
	std::fprintf(stderr, "strata export: %" PRIu64 " events (%" PRIu64 " discarded) -> %s\n", conv.events,
		     conv.discarded, out_path.c_str());
	if (conv.unmatched_ends)
		std::fprintf(stderr,
			     "strata export: %" PRIu64
			     " syscall exits or unlocks had no beginning in the trace"
			     " (begun before it): left out\n",
			     conv.unmatched_ends);
	if (conv.counted_pairs)
		std::fprintf(stderr,
			     "strata export: %" PRIu64
			     " uncontended lock holds were counted (the preload's default), not "
			     "recorded one by one: not drawn; their counts are the pthread:mutex_counts "
			     "instants (STRATA_PTHREAD_COUNT=0 records every pair)\n",
			     conv.counted_pairs);
}

int run_export(const std::vector<std::string> &roots, bool json, const std::string &out_path)
{
	rd::Source src("export");
	if (!src.open(roots))
		return cli::kFail;
	const std::string dir = roots_label(roots);
	const std::vector<std::string> &dirs = src.dirs();
	int64_t begin = 0, end = 0;
	const bool ranged = src.range(&begin, &end); // also the JSON's zero

	FILE *out = stdout;
	if (out_path != "-") {
		out = std::fopen(out_path.c_str(), "wb");
		if (!out) {
			std::fprintf(stderr, "strata export: cannot create '%s': %s\n", out_path.c_str(),
				     std::strerror(errno));
			return cli::kFail;
		}
	}
	std::unique_ptr<exp::Sink> sink =
		json ? exp::make_json_sink(out, ranged ? begin : 0) : exp::make_perfetto_sink(out);
	Converter conv(*sink);
	conv.name_machines(machines(dirs) > 1, reference_machine(dirs));

	learn_processes(conv, dirs, dir);
	conv.new_pass();
	Progress progress("export", ranged && isatty(STDERR_FILENO), begin, end);
	Pass pass{conv, progress};
	const bool ok = src.read(pass);
	progress.done();
	if (conv.machines_over)
		std::fprintf(
			stderr,
			"strata export: more than %u machines: the last %u share the ids of machine %u\n",
			exp::kMaxMachine, conv.machines_over + 1, exp::kMaxMachine);
	const bool written = sink->finish();
	const bool closed = out == stdout ? std::fflush(out) == 0 : std::fclose(out) == 0;
	const bool whole = src.finish();
	if (!ok) {
		std::fprintf(stderr, "strata export: %s\n", src.why().c_str());
		if (!src.native())
			cli::hint_torn("export", dir);
		return cli::kFail;
	}
	if (!written || !closed) {
		std::fprintf(stderr, "strata export: cannot write '%s': %s\n", out_path.c_str(),
			     std::strerror(errno));
		return cli::kFail;
	}
	if (out != stdout)
		report_export(conv, out_path);
	return whole ? cli::kOk : cli::kFail; // everything readable written, damage skipped
}

} // namespace
} // namespace strata

namespace {

const strata::cli::Command kExport = {
	"export", "[--format perfetto|json] [-o FILE] [DIR...]",
	"Write every trace under DIR (default: the current directory; user, kernel and\n"
	"JVM sub-traces, several processes, relay and snapshot outputs) as one timeline;\n"
	"several DIRs (a host's and its guests' traces) are read as one.",
	"Processes and threads are named (Java threads by their Java names); kernel\n"
	"scheduling gives per-CPU tracks and thread states; syscalls are slices on their\n"
	"threads; an event pair NAME_begin/NAME_end (also _start/_end, _start/_finish,\n"
	"_entry/_exit, _enter/_exit) on one thread is a slice NAME, any other event an\n"
	"instant; pthread lock waits and holds and JVM monitor waits are slices, with a\n"
	"flow from the thread that released a lock to the waiter that got it (for\n"
	"JVM monitors, inferred: docs/viewing.md); lost\n"
	"events are a counter and a marker.  docs/viewing.md says more.\n"
	"A progress bar is drawn on standard error when it is a terminal.",
	"Exit status: 0 ok, 1 the trace cannot be read or the output written, or damage was\n"
	"skipped (everything readable is written first; 'strata check' names it), 2 usage error."};

// The command line: kParsed to go on, else the exit status.
int parse_export_args(int argc, char **argv, std::vector<std::string> &roots, std::string &out, int &format)
{
	using namespace strata;
	const std::vector<cli::Option> opts = {
		cli::choice("format", 0, "perfetto|json",
			    "perfetto: Perfetto's protobuf trace (default; FILE: DIR.perfetto-trace, the "
			    "first DIR's name, or trace.perfetto-trace); open it in https://ui.perfetto.dev\n"
			    "json: Chrome's JSON trace events (FILE: DIR.json); for small traces and viewers "
			    "that read only that (chrome://tracing, speedscope)",
			    format, {"perfetto", "json"}),
		cli::text("output", 'o', "FILE", "a file name", "where to write ('-': standard output)", out),
	};
	std::vector<char *> operands;
	if (const int r = cli::parse(kExport, opts, argc, argv, operands); r != cli::kParsed)
		return r;
	roots.assign(operands.begin(), operands.end());
	if (roots.empty())
		roots.push_back(".");
	return cli::kParsed;
}

} // namespace

int strata_cmd_export(int argc, char **argv)
{
	using namespace strata;
	std::vector<std::string> roots;
	std::string out;
	int format = 0;
	if (const int r = parse_export_args(argc, argv, roots, out, format); r != cli::kParsed)
		return r;
	const bool json = format == 1;
	if (out.empty()) {
		std::string base = roots[0];
		while (base.size() > 1 && base.back() == '/')
			base.pop_back();
		if (base == "." || base == "/")
			base = "trace";
		out = base + (json ? ".json" : ".perfetto-trace");
	}
	return run_export(roots, json, out);
}
