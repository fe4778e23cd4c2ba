/*
 * sched_policy.cpp - the scheduling policy of the drain threads (sched_policy.h).
 */
#include "sched_policy.h"

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace strata {

namespace {
// Scheduler slice asked for the daemon's threads (short_slice).
constexpr long kSliceUs = 100;
// Nice of a streaming drain thread (streaming_weight).
constexpr long kDrainNice = -10;

// struct sched_attr of sched_setattr(2), declared here: <linux/sched/types.h>
// clashes with glibc's <sched.h>.
struct SchedAttr {
	uint32_t size, sched_policy;
	uint64_t sched_flags;
	int32_t sched_nice;
	uint32_t sched_priority;
	uint64_t sched_runtime, sched_deadline, sched_period;
	uint32_t sched_util_min, sched_util_max;
};

// Thread `tid`'s (0: the caller's) fair policy and EEVDF slice request
// (sched_runtime, ns; 0: the kernel's default; kernels before 6.12 have no
// per-task slice and ignore it), nice unchanged: one sched_setattr.  Only
// between SCHED_OTHER and SCHED_BATCH: a policy someone chose for us (real
// time, SCHED_IDLE) is left alone.  True if the thread now has them.
bool set_fair(pid_t tid, uint32_t policy, uint64_t runtime_ns)
{
	SchedAttr a;
	memset(&a, 0, sizeof a);
	if (syscall(SYS_sched_getattr, tid, &a, sizeof a, 0) != 0)
		return false;
	if (a.sched_policy != SCHED_OTHER && a.sched_policy != SCHED_BATCH)
		return false;
	// The kernel reads back its own slice where none was asked: only a
	// short slice already set is known to be ours.
	if (a.sched_policy == policy && runtime_ns != 0 && a.sched_runtime == runtime_ns)
		return true;
	a.size = sizeof a;
	a.sched_policy = policy;
	a.sched_flags = 0;
	a.sched_runtime = runtime_ns; // nice (read above) and weight unchanged
	return syscall(SYS_sched_setattr, tid, &a, 0) == 0;
}

// The calling thread's slice, its policy SCHED_OTHER only.
bool set_own_slice(uint64_t runtime_ns)
{
	SchedAttr a;
	memset(&a, 0, sizeof a);
	if (syscall(SYS_sched_getattr, 0, &a, sizeof a, 0) != 0 || a.sched_policy != SCHED_OTHER)
		return false;
	return set_fair(0, SCHED_OTHER, runtime_ns);
}

bool batch_enabled()
{
	static const bool enabled = [] {
		const char *e = getenv("STRATA_CONSUMERD_BATCH");
		return !(e && !strcmp(e, "0"));
	}();
	return enabled;
}

// The short slice asked (short_slice), in microseconds; 0: none.
long slice_us()
{
	static const long us = [] {
		const char *e = getenv("STRATA_CONSUMERD_SLICE_US");
		long v = e && *e ? strtol(e, nullptr, 10) : kSliceUs;
		return v < 0 ? 0 : v;
	}();
	return us;
}

bool quick_enabled()
{
	static const bool enabled = [] {
		const char *e = getenv("STRATA_CONSUMERD_QUICK");
		return !(e && !strcmp(e, "0"));
	}();
	return enabled && slice_us() != 0;
}
} // namespace

bool between_turns(pid_t tid, bool quick, bool may_batch)
{
	if (quick && quick_enabled())
		return set_fair(tid, SCHED_OTHER, static_cast<uint64_t>(slice_us()) * 1000);
	return set_fair(tid, may_batch && batch_enabled() ? SCHED_BATCH : SCHED_OTHER, 0);
}

bool short_slice()
{
	const long us = slice_us();
	return us != 0 && set_own_slice(static_cast<uint64_t>(us) * 1000);
}

// A drain thread that found packets (streaming) asks for nice -10
// (STRATA_CONSUMERD_DRAIN_NICE; 0 turns it off): with more CPU-bound
// producer threads than CPUs, a drain at the producers' weight gets a
// fair share that can be below what copying their events out needs, and
// the rings fill.  A higher weight costs the producers only the drain's
// actual work: it blocks whenever the rings are empty.  Only from the
// default nice 0 (an administrator's nice for the daemon is left alone)
// and only where permitted (CAP_SYS_NICE or RLIMIT_NICE; otherwise
// nothing changes).
bool streaming_weight()
{
	static const int nice_want = [] {
		const char *e = getenv("STRATA_CONSUMERD_DRAIN_NICE");
		long v = e && *e ? strtol(e, nullptr, 10) : kDrainNice;
		return static_cast<int>(v < -20 ? -20 : v > 0 ? 0 : v);
	}();
	if (nice_want == 0)
		return false;
	const id_t tid = static_cast<id_t>(syscall(SYS_gettid));
	errno = 0;
	const int cur = getpriority(PRIO_PROCESS, tid);
	if (errno != 0 || cur != 0)
		return false;
	return setpriority(PRIO_PROCESS, tid, nice_want) == 0; // best effort
}

bool step_off(const cpu_set_t &busy)
{
	static const bool enabled = [] {
		const char *e = getenv("STRATA_CONSUMERD_APART");
		return !(e && !strcmp(e, "0"));
	}();
	if (!enabled)
		return false;
	const int me = sched_getcpu(); // rseq's cpu_id or the vDSO: no system call
	if (me < 0 || me >= CPU_SETSIZE || !CPU_ISSET(me, &busy))
		return false;
	cpu_set_t allowed, apart;
	if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
		return false;
	CPU_AND(&apart, &allowed, &busy);
	CPU_XOR(&apart, &allowed, &apart); // allowed and not busy
	if (CPU_COUNT(&apart) == 0 || sched_setaffinity(0, sizeof apart, &apart) != 0)
		return false;
	// Returns on one of them (the kernel migrates the caller before).
	// Given back: the mask we read, else (a cpuset changed under us)
	// every CPU, which the kernel narrows to the cpuset's.
	if (sched_setaffinity(0, sizeof allowed, &allowed) != 0) {
		cpu_set_t all;
		memset(&all, 0xff, sizeof all);
		(void)sched_setaffinity(0, sizeof all, &all);
	}
	return true;
}

bool RecentWriters::before_turn(const cpu_set_t &busy, uint64_t now_ns)
{
	if (!any_ || now_ns - since_ > kWindowNs) {
		cpus_ = busy;
		since_ = now_ns;
		any_ = true;
	} else {
		CPU_OR(&cpus_, &cpus_, &busy);
	}
	return step_off(cpus_);
}

SchedChange stream_scheduling()
{
	SchedChange c;
	c.sliced = short_slice();
	c.reniced = streaming_weight();
	return c;
}

void default_scheduling(SchedChange c)
{
	if (c.sliced)
		(void)set_own_slice(0);
	if (c.reniced) // raising nice back to 0 needs no privilege
		(void)setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 0);
}

} // namespace strata
