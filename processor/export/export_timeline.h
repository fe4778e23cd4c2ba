// export_timeline.h - `strata export`'s converter: every sub-trace's events
// (user, kernel, JVM; several processes and machines), merged by time, as
// one timeline of tracks, slices, flows and counters written through a
// sink (export_sink.h: Perfetto's protobuf or Chrome's JSON).  What each
// event becomes: docs/viewing.md.
//
// Streaming: what is kept is per thread, per lock, per CPU and per event
// class, never per event.  When a kernel sub-trace is present the other
// sub-traces are read once before (learn_processes: tids -> process, Java
// thread names), so that a kernel thread track knows its process from its
// first event.  The per-event path (the event templates) is defined in
// export_timeline.cpp, where the pass reads, and inlined into its loop
// (always_inline: else a call per event remains); the tracks, processes,
// machines and losses made on first sight are in export_tracks.cpp.
// Single-threaded.
#ifndef STRATA_PROCESSOR_EXPORT_TIMELINE_H
#define STRATA_PROCESSOR_EXPORT_TIMELINE_H

#include <charconv>
#include <cinttypes>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "export_classes.h"
#include "read_event.h"
#include "read_progress.h"

namespace strata {
namespace timeline {

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
	template <class E> __attribute__((always_inline)) bool event(const E &ev)
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
	template <class E> __attribute__((always_inline)) void learn(const E &ev);

	// Between the pre-pass and the pass: the first reader's objects are
	// gone, and their addresses may come back.
	void new_pass();

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
	uint32_t machine_index(const std::string &host);
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
	// "NAME (tid N)", or "tid N" for a thread of no known name (a user
	// space trace names none of its threads).
	std::string tid_label(int64_t tid)
	{
		const std::string &name = threads[tid].name();
		const std::string id = "tid " + std::to_string(real_id(tid));
		return name.empty() ? id : name + " (" + id + ")";
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
	// The names of a wait on a lock and of the release to its waiter
	// ("wait KIND 0xADDR", "release KIND 0xADDR"; a failed wait's "wait
	// (failed) KIND 0xADDR"), kept for the locks waited on last: made once
	// per lock, not per contended acquisition (a tenth of a contended
	// pthread trace's JSON export).  kind: a literal (compared by address).
	struct WaitNames {
		uint64_t lock = 0;
		const char *kind = nullptr;
		bool acquired = false;
		std::string wait, release;
	};
	const WaitNames &wait_names(const char *kind, uint64_t lock, bool acquired)
	{
		WaitNames &w = wait_names_[analyze::cache_place(lock, acquired)];
		if (w.kind != kind || w.lock != lock || w.acquired != acquired) {
			w.wait.assign(acquired ? "wait " : "wait (failed) ");
			w.wait += kind;
			append_hex(w.wait, lock);
			w.release.assign("release ");
			w.release.append(w.wait, 5, std::string::npos);
			w.lock = lock;
			w.kind = kind;
			w.acquired = acquired;
		}
		return w;
	}
	WaitNames wait_names_[analyze::kCachePlaces];
	std::unordered_map<uint64_t, LockState> locks_;
	// The locks looked up, by key (analyze::cache_place()): locks_'s
	// elements, never erased, do not move.
	static constexpr size_t kCached = analyze::kCachePlaces;
	struct RecentLock {
		uint64_t key = 0;
		LockState *ls = nullptr;
	} recent_locks_[kCached];
	__attribute__((always_inline)) LockState &lock_state(uint64_t key)
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
	template <class E> __attribute__((always_inline)) TraceInfo &trace_of(const E &ev);
	template <class E> __attribute__((noinline)) TraceInfo &trace_of_slow(const E &ev, StreamSlot &s);
	// The last sub-trace's inline (most events follow one of theirs), the
	// others' looked up out of line.
	TraceInfo &trace_info(const rd::TraceIdent &id)
	{
		if (__builtin_expect(&id == last_trace_, 1))
			return *last_info_;
		return trace_info_slow(id);
	}
	__attribute__((noinline)) TraceInfo &trace_info_slow(const rd::TraceIdent &id);
	template <class E>
	__attribute__((always_inline)) ClassInfo &class_of(const E &ev, const TraceInfo &tr);
	template <class E>
	__attribute__((noinline)) ClassInfo &class_of_slow(const E &ev, const TraceInfo &tr, ClassSlot &cs);

	// ---- tracks ----
	// pid: a machine_id(), which says the machine (named only when the
	// trace holds several; the real pid then in the name).
	void ensure_process(int64_t pid, const std::string &name);
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
	__attribute__((always_inline)) uint64_t thread_track(int64_t tid, const TraceInfo *tr)
	{
		const LastThread &l = last_threads_[thread_place(tid)];
		if (__builtin_expect(l.valid && l.tid == tid && l.tr == tr && l.gen == names_gen_, 1))
			return kThreadTrack | static_cast<uint32_t>(tid);
		return thread_track_slow(tid, tr);
	}
	__attribute__((noinline)) uint64_t thread_track_slow(int64_t tid, const TraceInfo *tr);
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
	__attribute__((always_inline)) uint32_t *cached_holds(int64_t tid, const TraceInfo &tr, uint64_t lock)
	{
		const LastLockTrack &l = last_lt_[analyze::cache_place(static_cast<uint64_t>(tid), lock)];
		return l.tr == &tr && l.tid == tid && l.lock == lock ? l.holds : nullptr;
	}
	uint64_t names_gen_ = 0; // bumped at each change of a thread's comm or Java name
	__attribute__((always_inline)) uint64_t lock_track(int64_t tid, const TraceInfo &tr, uint64_t lock,
							   const char *kind)
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
							   uint64_t lock, const char *kind);

	// threads[tid], the last one's kept (threads' elements do not move,
	// none is erased): a look-up per contended wait was 2 % of an export.
	int64_t last_tid_ = 0;
	Thread *last_tid_thread_ = nullptr;
	__attribute__((always_inline)) Thread &thread_of(int64_t tid)
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
	template <class E>
	__attribute__((always_inline)) void sched_event(int64_t ts, uint32_t m, const ClassInfo &c,
							const E &pl);
	// A thread's system call: its entry begins a slice of the thread's
	// track, its exit ends it (an exit whose entry came before the trace
	// is left out, and counted).
	template <class E>
	__attribute__((always_inline)) void syscall_event(int64_t ts, int64_t tid, const TraceInfo &tr,
							  const ClassInfo &c, const E &pl);
	// A Java monitor's contended enter or Object.wait() (a slice of the
	// thread's track begins; the holder named when known) and its end
	// (entered: with the flow from the thread that released it).
	template <class E>
	__attribute__((always_inline)) void monitor_event(int64_t ts, int64_t tid, const TraceInfo &tr,
							  const ClassInfo &c, const E &pl);

	// A span of the thread's own (span_begin/span_end): a slice of its
	// track; an end that does not close the innermost span is an instant.
	template <class E>
	__attribute__((always_inline)) void span_event(int64_t ts, int64_t tid, const TraceInfo &tr,
						       const ClassInfo &c, const E &pl);

	// ---- events ----
	template <class E> __attribute__((always_inline)) void on_event(const E &pl);

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

	template <class E>
	__attribute__((always_inline)) std::string monitor_name(const ClassInfo &c, const E &pl);

	static std::string monitor_key(const TraceInfo &tr, const std::string &mon)
	{
		return std::to_string(tr.pid) + "/" + mon;
	}

	void monitor_owned(const TraceInfo &tr, const std::string &mon, int64_t tid, int64_t ts)
	{
		monitors_[monitor_key(tr, mon)] = {tid, ts};
	}

	void monitor_entered(int64_t ts, int64_t tid, const TraceInfo &tr, const std::string &mon);

	template <class E>
	__attribute__((always_inline)) void jvm_thread(const E &pl, const ClassInfo &c, const TraceInfo &tr,
						       bool live);

	template <class E>
	__attribute__((always_inline)) void instant(int64_t ts, int64_t tid, const TraceInfo &tr,
						    const ClassInfo &c, const E &pl);

	// A process's own track, else its machine's kernel track (one
	// machine: a global one).
	uint64_t no_thread_track(const TraceInfo &tr);

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
	template <class E> void fields(const E &pl, const ClassInfo &c);
	// Whether c's fields, as fields_decoded() just gave them (args_), are
	// all integers at fixed offsets: c.fixed 1 (and their FixedInts) or 2.
	template <class E> __attribute__((always_inline)) void fixed_plan(const E &pl, const ClassInfo &c);
	template <class E>
	__attribute__((always_inline)) void fields_decoded(const E &pl, const ClassInfo &c);

	template <class E> static uint32_t cpu_of(const E &ev);

	// pthread: a wait is a slice on the waiting thread's own track (a
	// thread waits for one lock at a time, so its waits nest with its other
	// slices); holds are on a track per (thread, lock), as holds of several
	// locks need not nest.  A flow goes from the release that a waiter
	// received (a zero-length "release" slice on the releaser's track) to
	// that waiter's wait.  Meaning of the fields: docs/pthread.md.
	template <class E>
	__attribute__((noinline)) void pthread_event(int64_t ts, int64_t tid, const TraceInfo &tr,
						     ClassInfo &c, const E &pl);

	// c's slot of a field (name: a literal), SlotCache's copied into s at
	// the first read (not a pointer: SlotCache's vector grows).
	template <class E>
	static const rd::FieldSlot &op_slot(const ClassInfo &c, const E &pl, ClassInfo::OpSlot &s,
					    const char *name);
	// A compact record (uncontended): a hold from its acquisition, no
	// wait; the per-event path of a pthread trace.
	template <class E>
	__attribute__((always_inline)) void compact_hold(int64_t ts, int64_t tid, const TraceInfo &tr,
							 ClassInfo &c, const E &pl);
	// A field of slot s, by its FixedInt x when the reader has those.
	template <class E>
	static uint64_t field_u64(const E &pl, const rd::FieldSlot &s, const rd::FixedInt &x);

	// A condition wait: the mutex is released for the wait and taken again
	// at its end; the wait itself is on the thread's track.
	template <class E>
	__attribute__((always_inline)) void cond_wait(int64_t ts, int64_t tid, const TraceInfo &tr,
						      const ClassInfo &c, const E &pl, uint64_t lock);

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
	__attribute__((always_inline)) void acquisition(int64_t ts, int64_t tid, const TraceInfo &tr,
							const ClassInfo &c, const E &pl, const char *kind,
							uint64_t lock, uint64_t lock_key);

	// A loss: a marker on the process (kernel: the kernel track) and a
	// counter of events lost so far.
	void on_discarded(const rd::Loss &l);
};

// What a conversion put in and left out, for its closing report.
struct TimelineCounts {
	uint64_t events = 0, discarded = 0;
	uint64_t unmatched_ends = 0; // syscall exits or unlocks whose beginning the trace lacks
	uint64_t counted_pairs = 0;  // lock holds counted, not recorded one by one: not drawn
	uint32_t machines_over = 0;  // machines past exp::kMaxMachine (sharing its ids)
};

// src's sub-traces (dir: how messages name them) as one timeline written
// into sink: the machines named when there are several, the pre-pass over
// the user sub-traces when a kernel one is present, then the pass, the
// progress bar drawn as it goes.  False when the read failed (src.why());
// *counts in any case.
bool convert_timeline(rd::Source &src, exp::Sink &sink, const std::string &dir, Progress &progress,
		      TimelineCounts *counts);

} // namespace timeline
} // namespace strata

#endif
