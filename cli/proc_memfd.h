/*
 * proc_memfd.h - a running process's memfds of one name, found among its
 * descriptors (/proc/PID/fd, "/memfd:NAME (deleted)") and mapped read-only:
 * the aggregation regions `strata top` shows ("strata-agg") and the probe
 * report `strata list` reads ("strata-probes").  The process is never
 * stopped; the mapping outlives it.  What is mapped is the process's to
 * write: readers validate it (agg_reader.cpp, probe_report_read.cpp).
 */
#ifndef STRATA_CLI_PROC_MEMFD_H
#define STRATA_CLI_PROC_MEMFD_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace strata {

struct Region {
	std::string fd_path; // /proc/PID/fd/N
	const void *map = nullptr;
	size_t len = 0;
};

// Sorted by descriptor path; *err set if /proc/PID/fd cannot be read, or
// its descriptors cannot (EACCES, EPERM: the caller may not look into the
// process; what was mapped before is returned, and more may exist).
std::vector<Region> find_memfds(uint32_t pid, const char *name, std::string *err);

} // namespace strata
#endif
