// sink_bytes.h - what both sinks of export_sink.h share on their
// per-event paths: the size at which their bounded output buffer is
// written out, and an inlined comparison of a name with the bytes kept of
// the previous one.  Private to processor/export/.
#ifndef STRATA_EXPORT_SINK_BYTES_H
#define STRATA_EXPORT_SINK_BYTES_H

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace strata {
namespace exp {

constexpr size_t kFlushAt = 1u << 20;

// Whether the s.size() bytes at p are s, without a call (the names of
// successive events mostly are): 8 bytes at a time, the last 8 (4, 1 for
// shorter ones) overlapping.
__attribute__((always_inline)) inline bool same_bytes(const char *p, std::string_view s)
{
	const size_t n = s.size();
	const char *q = s.data();
	if (n >= 8) {
		uint64_t a, b;
		// Up to 32 (a slice name most often): 2 or 4 words, overlapping,
		// their differences or'ed: one branch.
		const auto diff = [p, q](size_t k) {
			uint64_t x, y;
			std::memcpy(&x, p + k, 8);
			std::memcpy(&y, q + k, 8);
			return x ^ y;
		};
		if (n <= 16)
			return (diff(0) | diff(n - 8)) == 0;
		if (n <= 32)
			return (diff(0) | diff(8) | diff(n - 16) | diff(n - 8)) == 0;
		for (size_t k = 0; k + 8 <= n; k += 8) {
			std::memcpy(&a, p + k, 8);
			std::memcpy(&b, q + k, 8);
			if (a != b)
				return false;
		}
		std::memcpy(&a, p + n - 8, 8);
		std::memcpy(&b, q + n - 8, 8);
		return a == b;
	}
	if (n >= 4) {
		uint32_t a, b, c, d;
		std::memcpy(&a, p, 4);
		std::memcpy(&b, q, 4);
		std::memcpy(&c, p + n - 4, 4);
		std::memcpy(&d, q + n - 4, 4);
		return a == b && c == d;
	}
	for (size_t k = 0; k < n; k++)
		if (p[k] != q[k])
			return false;
	return true;
}

} // namespace exp
} // namespace strata

#endif
