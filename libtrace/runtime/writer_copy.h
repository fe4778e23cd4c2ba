/*
 * writer_copy.h - strata_write's copy of a payload into its record, by size
 * class (writer.cpp's fast path; one role of its own: which moves, never a
 * byte past the record).
 *
 * Always inlined: the point is that the fast path makes no call.
 * Contract: no state; called by the writer between its reservation and its
 * commit, on the writing thread (a signal handler's record may lie right
 * after the one copied into, hence exact ends).
 */
#ifndef STRATA_RUNTIME_WRITER_COPY_H
#define STRATA_RUNTIME_WRITER_COPY_H

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace strata {

// strata_write's payload into the record: n bytes copied exactly, never
// past the record's end (a signal handler's record may follow it), in
// overlapping moves of n's size class, so that one call site's constant n
// takes the same branches every time.  No call (a memcpy would make every
// value the commit needs live across it): 33 to 64 bytes (STRATA_WRITE_MAX)
// as the first and the last 32; past 64 (a one-field event's string or
// array, which may be of any size) the first 64, then 64 at a time, then
// the last 16, 32 or 64 for the rest.  (16 at a time beyond 32 took
// bench:mixed's 35 bytes 10 instructions more; a loop of 32 bench:str's
// 65, 9 more than reserve and commit; its last 64, 5 more than its last 16.)
// The moves' widths as vector types: a 16-byte load or store, and 32
// bytes as two of them in registers (a 32-byte struct went through the
// stack: four stores nobody read, in bench:mixed's path), 64 as four.
typedef char Bytes16 __attribute__((vector_size(16), aligned(1)));
struct Bytes32 {
	Bytes16 lo, hi;
};
// Bytes [0, sizeof W) and [n - sizeof W, n) of s into d (they overlap when
// n < 2 * sizeof W), both loaded before either is stored.
template <typename W> __attribute__((always_inline)) inline void copy_ends(char *d, const char *s, size_t n)
{
	W a, b;
	memcpy(&a, s, sizeof a);
	memcpy(&b, s + n - sizeof b, sizeof b);
	memcpy(d, &a, sizeof a);
	memcpy(d + n - sizeof b, &b, sizeof b);
}
template <> __attribute__((always_inline)) inline void copy_ends<Bytes32>(char *d, const char *s, size_t n)
{
	Bytes16 a0, a1, b0, b1;
	memcpy(&a0, s, 16);
	memcpy(&a1, s + 16, 16);
	memcpy(&b0, s + n - 32, 16);
	memcpy(&b1, s + n - 16, 16);
	memcpy(d, &a0, 16);
	memcpy(d + 16, &a1, 16);
	memcpy(d + n - 32, &b0, 16);
	memcpy(d + n - 16, &b1, 16);
}
__attribute__((always_inline)) inline void copy_payload(char *d, const char *s, size_t n)
{
	if (n >= 16) {
		if (__builtin_expect(n > 32, 0)) {
			if (__builtin_expect(n > 64, 0)) {
				copy_ends<Bytes32>(d, s, 64);
				size_t o = 64;
				for (; __builtin_expect(o < n - 64, 0); o += 64)
					copy_ends<Bytes32>(d + o, s + o, 64);
				// The rest, 1 to 64 bytes past o: the last 16, 32 or 64.
				if (n - o <= 16)
					copy_ends<Bytes16>(d + n - 16, s + n - 16, 16);
				else if (n - o <= 32)
					copy_ends<Bytes32>(d + n - 32, s + n - 32, 32);
				else
					copy_ends<Bytes32>(d + n - 64, s + n - 64, 64);
			} else {
				copy_ends<Bytes32>(d, s, n);
			}
		} else {
			copy_ends<Bytes16>(d, s, n);
		}
	} else if (n >= 8) {
		copy_ends<uint64_t>(d, s, n);
	} else if (n >= 4) {
		copy_ends<uint32_t>(d, s, n);
	} else if (n) {
		d[0] = s[0];
		d[n / 2] = s[n / 2];
		d[n - 1] = s[n - 1];
	}
}

} // namespace strata

#endif
