/*
 * drain_internal.h - what drain.cpp (a drain's life and policy) and
 * drain_write.cpp (what it writes) share; private to the two.
 */
#ifndef STRATA_CONSUMERD_DRAIN_INTERNAL_H
#define STRATA_CONSUMERD_DRAIN_INTERNAL_H

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <string>

namespace strata {
namespace drain_detail {

constexpr int kFlushTimeoutMs = 500; // in-flight commits of a live producer
constexpr unsigned kPacketsPerRound = 64;
constexpr unsigned kBatch = 16;           // packets per write (at most kBatchBytes, drain_pool.h)
constexpr size_t kHeldBytes = 256u << 10; // drain_once: one write while its sub-buffers are held

inline uint64_t mono_ns()
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

inline void warn(const std::string &dir, const std::string &what)
{
	fprintf(stderr, "strata-consumerd: %s: %s\n", dir.c_str(), what.c_str());
}

} // namespace drain_detail
} // namespace strata
#endif
