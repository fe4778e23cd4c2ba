// export_timeline.cpp - the converter's per-event path (export_timeline.h):
// what each event class becomes on the timeline (scheduling, syscalls,
// spans, lock operations, JVM monitors, instants and their arguments), and
// the passes that read a trace into it.  Defined here, where the passes
// instantiate them, so that the per-event calls stay inlined.
#include "export_timeline.h"

#include <algorithm>
#include <charconv>
#include <cstring>

#include "java_names.h"
#include "view_graph.h"

namespace strata {
namespace timeline {

template <class E> inline void Converter::learn(const E &ev)
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

template <class E> inline __attribute__((always_inline)) TraceInfo &Converter::trace_of(const E &ev)
{
	const void *key = ev.stream_key();
	StreamSlot &s = stream_slots_[reinterpret_cast<uintptr_t>(key) * 0x9e3779b97f4a7c15ull >> 60];
	if (__builtin_expect(s.key == key && key, 1))
		return *s.info;
	return trace_of_slow(ev, s);
}

template <class E> __attribute__((noinline)) TraceInfo &Converter::trace_of_slow(const E &ev, StreamSlot &s)
{
	TraceInfo &t = trace_info(ev.trace());
	s = StreamSlot{ev.stream_key(), &t};
	return t;
}

template <class E> inline ClassInfo &Converter::class_of(const E &ev, const TraceInfo &tr)
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
__attribute__((noinline)) ClassInfo &Converter::class_of_slow(const E &ev, const TraceInfo &tr, ClassSlot &cs)
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

template <class E> inline void Converter::sched_event(int64_t ts, uint32_t m, const ClassInfo &c, const E &pl)
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
		sink_.sched_switch(ts, m, cpu, pc, prev, c.i64(pl, "prev_prio"), c.i64(pl, "prev_state"), nc,
				   next, c.i64(pl, "next_prio"));
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

template <class E>
inline void Converter::syscall_event(int64_t ts, int64_t tid, const TraceInfo &tr, const ClassInfo &c,
				     const E &pl)
{
	if (c.kind == Kind::SyscallEntry) {
		// With named syscall events (syscall_entry_NAME) the raw
		// sys_enter that feeds them would give each call twice.
		if (c.raw && named_syscalls_)
			return;
		named_syscalls_ = named_syscalls_ || !c.raw;
		fields(pl, c);
		thread_begin(ts, tid, tr, c.raw ? "syscall " + std::to_string(c.i64(pl, "id")) : c.name);
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

template <class E>
inline void Converter::monitor_event(int64_t ts, int64_t tid, const TraceInfo &tr, const ClassInfo &c,
				     const E &pl)
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
			args_.push_back(a);
			args_.layout = 0; // not the class's fields alone
			monitor_owned(tr, mon, it->second, ts);
		}
		entering_[tid] = {monitor_key(tr, mon), ts};
	}
	thread_begin(ts, tid, tr, (c.kind == Kind::MonitorEnter ? "monitor enter " : "Object.wait ") + mon);
	threads[tid].monitor++;
}

template <class E>
inline void Converter::span_event(int64_t ts, int64_t tid, const TraceInfo &tr, const ClassInfo &c,
				  const E &pl)
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

template <class E> inline __attribute__((always_inline)) void Converter::on_event(const E &pl)
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

template <class E> inline std::string Converter::monitor_name(const ClassInfo &c, const E &pl)
{
	char hash[16];
	std::snprintf(hash, sizeof hash, "@%08" PRIx64, c.u64(pl, "hash") & 0xffffffffu);
	return java_class_name(std::string(c.str(pl, "class"))) + hash;
}

template <class E>
inline void Converter::jvm_thread(const E &pl, const ClassInfo &c, const TraceInfo &tr, bool live)
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
inline void Converter::instant(int64_t ts, int64_t tid, const TraceInfo &tr, const ClassInfo &c, const E &pl)
{
	const uint64_t track = thread_track(tid, &tr);
	fields(pl, c);
	sink_.instant(ts, track, c.name, args_); // never a span's class: their names are cut
}

template <class E> inline void Converter::fields(const E &pl, const ClassInfo &c)
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

template <class E> inline void Converter::fixed_plan(const E &pl, const ClassInfo &c)
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
		if (!x.ok || x.is_signed != (a.kind == Arg::Int) || (!fx.empty() && x.off <= fx.back().off))
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

template <class E> inline void Converter::fields_decoded(const E &pl, const ClassInfo &c)
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

template <class E> inline uint32_t Converter::cpu_of(const E &ev)
{
	const int64_t c = ev.cpu();
	return c >= 0 ? static_cast<uint32_t>(c) : 0;
}

template <class E>
__attribute__((noinline)) void Converter::pthread_event(int64_t ts, int64_t tid, const TraceInfo &tr,
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

template <class E>
inline const rd::FieldSlot &Converter::op_slot(const ClassInfo &c, const E &pl, ClassInfo::OpSlot &s,
					       const char *name)
{
	if (__builtin_expect(!s.known, 0)) {
		s.slot = c.get(pl, name);
		s.known = true;
	}
	return s.slot;
}

template <class E>
inline __attribute__((always_inline)) void
Converter::compact_hold(int64_t ts, int64_t tid, const TraceInfo &tr, ClassInfo &c, const E &pl)
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

template <class E>
inline uint64_t Converter::field_u64(const E &pl, const rd::FieldSlot &s, const rd::FixedInt &x)
{
	if (E::kFixed && x.ok)
		return static_cast<uint64_t>(pl.fixed(x));
	return pl.u64(s);
}

template <class E>
inline void Converter::cond_wait(int64_t ts, int64_t tid, const TraceInfo &tr, const ClassInfo &c,
				 const E &pl, uint64_t lock)
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

template <class E>
inline void Converter::acquisition(int64_t ts, int64_t tid, const TraceInfo &tr, const ClassInfo &c,
				   const E &pl, const char *kind, uint64_t lock, uint64_t lock_key)
{
	LockState &ls = lock_state(lock_key);
	const int64_t ret = pl.i64(op_slot(c, pl, c.s_ret, "ret"));
	const int64_t wait = static_cast<int64_t>(pl.u64(op_slot(c, pl, c.s_wait, "wait_ns")));
	const bool acquired = ret == 0 || ret == 130; // EOWNERDEAD: acquired
	if (wait > 0) {
		const WaitNames &wn = wait_names(kind, lock, acquired);
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
			sink_.complete(ls.release_ts, ls.release_ts, thread_track(ls.released_by, &tr),
				       wn.release, args_, 0, flow);
		}
		clear_args();
		if (ret) // only a failure's: speedscope shows a slice's args in its name
			args_.push_back(int_arg("ret", ret));
		sink_.complete(nested_begin(tid, ts - wait), ts, thread_track(tid, &tr), wn.wait, args_, flow,
			       0);
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

namespace {

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

// The pass's read loop, a function of its own, the per-event path inlined
// into it (inlined in turn into convert_timeline(), the loop's message
// handler is not: callgrind's counts rise by 2 to 3 %).
__attribute__((noinline)) bool read_pass(rd::Source &src, Pass &pass)
{
	return src.read(pass);
}

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

} // namespace

bool convert_timeline(rd::Source &src, exp::Sink &sink, const std::string &dir, Progress &progress,
		      TimelineCounts *counts)
{
	const std::vector<std::string> &dirs = src.dirs();
	Converter conv(sink);
	conv.name_machines(machines(dirs) > 1, reference_machine(dirs));
	learn_processes(conv, dirs, dir);
	conv.new_pass();
	Pass pass{conv, progress};
	const bool ok = read_pass(src, pass);
	counts->events = conv.events;
	counts->discarded = conv.discarded;
	counts->unmatched_ends = conv.unmatched_ends;
	counts->counted_pairs = conv.counted_pairs;
	counts->machines_over = conv.machines_over;
	return ok;
}

} // namespace timeline
} // namespace strata
