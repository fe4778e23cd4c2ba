// export_classes.cpp - what an event class means to the export's converter
// (export_classes.h).
#include "export_classes.h"

#include <cstring>

namespace strata {
namespace timeline {
namespace {

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

} // namespace

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

} // namespace timeline
} // namespace strata
