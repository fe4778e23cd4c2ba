// analyze_monitor.h - `strata analyze monitor`: Java monitor contention from
// the JVM agent's jvm:* events (docs/jvm.md), as `analyze mutex` reports
// pthread locks.  One row per monitor (process, class, identity hash):
// contended enters, total/mean/p99/max wait, the threads that waited, the
// threads that held it when they did (agent option owner=1), and the Java
// call sites that waited most.
#ifndef STRATA_CLI_ANALYZE_MONITOR_H
#define STRATA_CLI_ANALYZE_MONITOR_H

#include <cstddef>
#include <string>
#include <vector>

namespace strata {
namespace analyze {

// Reads the trace directories `roots` as one and writes the report; a CLI
// exit status.
int analyze_monitor(const std::vector<std::string> &roots, const std::string &format, const std::string &html,
		    size_t top);

} // namespace analyze
} // namespace strata
#endif
