/*
 * sync_rate.h - how often a clock link probes (docs/clocks.md, "Probe
 * rate"), so that no user tunes a period: dense while the map is being
 * learnt, sparse once it holds.
 *
 * The hulls keep only the fastest exchanges (docs/clocks.md, "The
 * method"), so the bound narrows as more probes explore the least delays
 * of each direction; once it is within its target, further probes mostly
 * follow the clocks' drift, for which a few a second suffice.  Hence:
 *
 *   - dense (kDenseNs) from the link's start and from each new segment (a
 *     step, a lost link, a restart: the map is learnt again) while the
 *     probes still find faster legs (each kDenseMinNs of dense probing
 *     narrowed the bound to kNarrowing of its width or less) or the bound
 *     is above its target, for at most kDenseMaxNs;
 *   - sparse (kSparseNs) once the bound has settled within its target;
 *   - dense again when the bound widens past its target, up to kDenseMaxNs
 *     of dense probing without reaching it; then sparse, and the link says
 *     once that it cannot reach its target (stuck()), until it does or a
 *     new segment begins (the caller words it: it knows the link).
 *
 * The target: a width of at most kTargetRatio x the link's least probe
 * round trip (the width tends to the least round trip with the number of
 * probes), judged kJudgeLagNs behind the latest exchange: at the latest
 * one the slopes' spread widens the bound until later probes come.  A period given by --sync-period holds throughout, and the
 * target is still watched and said.
 *
 * Not thread-safe: the link's thread owns it, under the link's mutex
 * (the status reads stuck()).
 */
#ifndef STRATA_CONSUMERD_SYNC_RATE_H
#define STRATA_CONSUMERD_SYNC_RATE_H

#include <cstdint>

namespace strata {
namespace daemon_impl {

class ProbeRate {
public:
	static constexpr int64_t kDenseNs = 4000000;        // 4 ms
	static constexpr int64_t kSparseNs = 100000000;     // 100 ms
	static constexpr int64_t kDenseMinNs = 2000000000;  // 2 s
	static constexpr int64_t kDenseMaxNs = 30000000000; // 30 s
	static constexpr double kTargetRatio = 1.5;
	static constexpr double kNarrowing = 0.9;
	static constexpr int64_t kJudgeLagNs = 1000000000; // 1 s

	// fixed_ns: --sync-period (0: adaptive).
	explicit ProbeRate(int64_t fixed_ns) : fixed_ns_(fixed_ns) {}

	// Decided at t, after a probe: segments, how many segments the map
	// has begun (a change: a new one, learnt anew); width, the bound's
	// width now (-1: no bounded map); min_rtt, the link's least probe
	// round trip (-1: none yet).  True when the link has just given up
	// reaching its target (once per episode: the caller says so).
	bool update(int64_t t, uint64_t segments, int64_t width, int64_t min_rtt);
	static bool within_target(int64_t width, int64_t min_rtt)
	{
		return width >= 0 && min_rtt > 0 && static_cast<double>(width) <= kTargetRatio * min_rtt;
	}

	int64_t period() const { return fixed_ns_ ? fixed_ns_ : (dense_ ? kDenseNs : kSparseNs); }
	bool dense() const { return !fixed_ns_ && dense_; }
	bool adaptive() const { return fixed_ns_ == 0; }
	// True while the link has given up reaching its target.
	bool stuck() const { return stuck_; }

private:
	void dense_again(int64_t t, int64_t width);

	const int64_t fixed_ns_;
	bool started_ = false;
	bool dense_ = true;
	int64_t dense_from_ = 0;
	int64_t window_from_ = 0, window_width_ = -1; // the current window of dense probes
	uint64_t segments_ = 0;
	bool stuck_ = false;
};

} // namespace daemon_impl
} // namespace strata
#endif
