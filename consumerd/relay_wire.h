/*
 * relay_wire.h - the byte level of the lttng-relayd protocol subset
 * (relay.h, docs/relay.md) that the link's parts share: relay.cpp (the
 * connection, streams, packets) and relay_live.cpp (empty packets and
 * beacons for live readers).  Every field is big-endian; command codes are
 * lttng-tools' (2.x).  Private to consumerd.
 */
#ifndef STRATA_CONSUMERD_RELAY_WIRE_H
#define STRATA_CONSUMERD_RELAY_WIRE_H

#include <cstdint>
#include <cstring>
#include <ctime>
#include <string>
#include <endian.h>

namespace strata {
namespace relay_wire {

enum : uint32_t {
	kAddStream = 1,
	kCreateSession = 2,
	kVersion = 5,
	kSendMetadata = 6,
	kCloseStream = 7,
	kDataPending = 8,
	kSendIndex = 13,
	kStreamsSent = 16,
};

inline void put64(std::string &s, uint64_t v)
{
	v = htobe64(v);
	s.append(reinterpret_cast<const char *>(&v), 8);
}
inline void put32(std::string &s, uint32_t v)
{
	v = htobe32(v);
	s.append(reinterpret_cast<const char *>(&v), 4);
}
inline uint64_t get64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return be64toh(v);
}
inline uint32_t get32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return be32toh(v);
}

// CLOCK_MONOTONIC in ms: the link's deadlines and rate limits.
inline int64_t now_ms()
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

} // namespace relay_wire
} // namespace strata

#endif
