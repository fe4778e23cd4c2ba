// reader_lane.h - what reader.cpp (attach, validation, reading) and
// reader_flush.cpp (the flush at a stop, overwrite mode's collection)
// share about a lane: the packet header's size, a sub-buffer's committed
// count and the reader's clock.  Private to libtrace/shm_reader/.
#ifndef STRATA_SHM_READER_LANE_H
#define STRATA_SHM_READER_LANE_H

#include <time.h>

#include <cstdint>

#include "strata_abi.h"

namespace strata {
namespace reader_lane {

constexpr uint64_t kHdr = STRATA_PACKET_HEADER_SIZE;

inline uint64_t monotonic_now()
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

// A sub-buffer's committed bytes: what its producers added (commit[i]) and
// what consumers added closing packets themselves (ccommit[i], see
// strata_abi.h).  Acquire on both: pairs with the producers' release adds
// (commit_bytes in writer.cpp, the kernel's strata_commit_bytes) and with
// the release add of the consumer that closed (finish_close, maybe in
// another process): a complete count means every byte of the sub-buffer,
// closing fields included, is written.
inline uint64_t committed(const strata_lane_ctl *lc, uint64_t idx)
{
	return __atomic_load_n(&lc->commit[idx], __ATOMIC_ACQUIRE) +
	       __atomic_load_n(&lc->ccommit[idx], __ATOMIC_ACQUIRE);
}

} // namespace reader_lane
} // namespace strata

#endif
