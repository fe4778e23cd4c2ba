// export_tracks.cpp - the converter's tracks (export_timeline.h) made on
// first sight: machines, processes, threads, (thread, lock) pairs and the
// kernel's; a monitor's entry after a contended wait; a loss's marker and
// counter.  Out of the per-event path (each reached once per new track or
// per rare event).
#include "export_timeline.h"

#include <string>

namespace strata {
namespace timeline {

void Converter::new_pass()
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

uint32_t Converter::machine_index(const std::string &host)
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

__attribute__((noinline)) TraceInfo &Converter::trace_info_slow(const rd::TraceIdent &id)
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

void Converter::ensure_process(int64_t pid, const std::string &name)
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
		shown = machine_names_[m - 1] + ": " + (name.empty() ? real : name + " (" + real + ")");
	}
	sink_.process(kProcTrack | static_cast<uint64_t>(pid), pid, shown);
}

__attribute__((noinline)) uint64_t Converter::thread_track_slow(int64_t tid, const TraceInfo *tr)
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
			     name_hosts_ ? tid_label(tid) : t.name());
		t.emitted = true;
		t.emitted_name = t.name();
	}
	last_threads_[thread_place(tid)] = LastThread{tid, names_gen_, tr, true};
	return uuid;
}

__attribute__((noinline)) uint64_t Converter::lock_track_slow(LastLockTrack &l, int64_t tid,
							      const TraceInfo &tr, uint64_t lock,
							      const char *kind)
{
	const uint64_t parent = thread_track(tid, &tr);
	const uint64_t uuid = kLockTrack | (mix(static_cast<uint64_t>(tid) ^ mix(lock)) >> 8);
	if (child_tracks_.find(uuid) == child_tracks_.end()) {
		child_tracks_.emplace(uuid, true);
		char name[64];
		std::snprintf(name, sizeof name, "%s 0x%" PRIx64, kind, lock);
		sink_.child_track(uuid, parent, threads[tid].pid >= 0 ? threads[tid].pid : tid, tid, name,
				  false);
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

void Converter::monitor_entered(int64_t ts, int64_t tid, const TraceInfo &tr, const std::string &mon)
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

uint64_t Converter::no_thread_track(const TraceInfo &tr)
{
	if (!tr.kernel && tr.pid >= 0) {
		ensure_process(tr.pid, tr.procname);
		return kProcTrack | static_cast<uint64_t>(tr.pid);
	}
	const uint64_t uuid = kKernelTrack | tr.machine;
	if (kernel_tracks_.emplace(uuid, true).second)
		sink_.child_track(uuid, ensure_machine(tr.machine), exp::machine_pid(tr.machine), 0, "kernel",
				  false);
	return uuid;
}

void Converter::on_discarded(const rd::Loss &l)
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

} // namespace timeline
} // namespace strata
