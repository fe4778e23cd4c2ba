/*
 * madv_populate.h - the two madvise advices that map a range of pages in
 * one system call (Linux 5.14), for the writers' first lap and the consumer
 * that makes and maps their pages ahead.  glibc 2.36's headers (Debian 12)
 * lack them: the uapi values then.  An older kernel answers EINVAL, which
 * only leaves the page faults where they were: every caller's populate is
 * a hint.
 */
#ifndef STRATA_MADV_POPULATE_H
#define STRATA_MADV_POPULATE_H

#include <sys/mman.h>

namespace strata {

#ifdef MADV_POPULATE_READ
constexpr int kMadvPopulateRead = MADV_POPULATE_READ;
#else
constexpr int kMadvPopulateRead = 22;
#endif
#ifdef MADV_POPULATE_WRITE
constexpr int kMadvPopulateWrite = MADV_POPULATE_WRITE;
#else
constexpr int kMadvPopulateWrite = 23;
#endif

} // namespace strata

#endif
