// sync_rate.cpp - a clock link's probe rate (sync_rate.h), and how long
// its end spins for an answer and what it says when the bound stays above
// its target (SyncLink's, sync_link.h; docs/clocks.md, "The link").
#include "sync_rate.h"

#include <algorithm>
#include <cstdio>

#include "log.h"
#include "sync_link.h"

namespace strata {
namespace daemon_impl {

bool ProbeRate::update(int64_t t, uint64_t segments, int64_t width, int64_t min_rtt)
{
	if (!started_ || segments != segments_) {
		// The link's start, or a new segment: the map is learnt anew.
		started_ = true;
		segments_ = segments;
		stuck_ = false;
		dense_again(t, width);
		return false;
	}
	if (width < 0) {
		// No bounded map yet (a peer not answering, one direction only):
		// nothing to judge; dense, its time counted from the first bound.
		dense_again(t, width);
		return false;
	}
	const bool met = within_target(width, min_rtt);
	if (!dense_) {
		if (met)
			stuck_ = false;
		else if (!stuck_)
			dense_again(t, width); // widened past the target
		return false;
	}
	if (window_width_ < 0)
		window_width_ = width;
	if (t - window_from_ >= kDenseMinNs) {
		// Still learning while a window of dense probes narrowed the
		// bound by a tenth or more: faster legs are still being found.
		const bool narrowing = static_cast<double>(width) < kNarrowing * window_width_;
		window_from_ = t;
		window_width_ = width;
		if (!narrowing && met) {
			dense_ = false;
			return false;
		}
	}
	if (t - dense_from_ < kDenseMaxNs)
		return false;
	dense_ = false;
	stuck_ = !met;
	return stuck_;
}

void ProbeRate::dense_again(int64_t t, int64_t width)
{
	dense_ = true;
	dense_from_ = window_from_ = t;
	window_width_ = width;
}

namespace {
// A spin's longest: the answers that tighten the map come early, and a
// guest's vCPU spinning is a host CPU taken.
constexpr int64_t kSpinMaxNs = 1000000;
} // namespace

// A ping's: until its answer, at most 4 least waits for one + 50 us (the
// peer's turnaround is part of the wait, and on a loaded machine it varies:
// a spin that ends before the answer leaves its leg to a halted vCPU's
// wake-up), kSpinMaxNs before one is known.  min_wait_ is written by the
// link's thread only, as is rate_.
int64_t SyncLink::spin_cap() const
{
	const int64_t want = min_wait_ < 0 ? kSpinMaxNs : 4 * min_wait_ + 50000;
	return std::min(want, kSpinMaxNs);
}

// A train's, from its first ping: never more than kSpinMaxNs nor a quarter
// period, as one probe's was before trains, so that a train costs no more
// CPU than that probe did (its later pings sleep for their answers).
int64_t SyncLink::train_spin_cap() const
{
	return std::min(kSpinMaxNs, rate_.period() / 4);
}

void SyncLink::rate_update(int64_t t)
{
	std::lock_guard<std::mutex> g(mu_);
	if (!rate_.update(t, breaks_, est_.width_behind(ProbeRate::kJudgeLagNs), min_rtt_)) {
		if (!rate_.stuck())
			stuck_.clear();
		return;
	}
	stuck_ = stuck_words();
	logf("clock link %s: %s", spec_.name.c_str(), stuck_.c_str());
}

// mu_ held: the bound above its target after the dense probing, in words
// a user can act on: what it means, and what to change.
std::string SyncLink::stuck_words() const
{
	char b[512];
	snprintf(b, sizeof b,
		 "the bound stays %.1f us wide (a second behind the latest probe), above its target of "
		 "%.1f x the fastest probe round trip (%.1f us), after %lld s of dense probing; probing "
		 "every %lld ms from now on.  The bound "
		 "holds, but a program's messages faster than the probes' fastest legs may be shown "
		 "inverted (`strata align` orders them with the messages themselves)",
		 static_cast<double>(est_.width_behind(ProbeRate::kJudgeLagNs)) / 1e3,
		 ProbeRate::kTargetRatio, static_cast<double>(min_rtt_) / 1e3,
		 static_cast<long long>(ProbeRate::kDenseMaxNs / 1000000000),
		 static_cast<long long>(rate_.period() / 1000000));
	std::string s = b;
	if (spec_.spin && spun_for_ && caught_ * 2 < spun_for_)
		s += ". Only " + std::to_string(caught_) + " of the " + std::to_string(spun_for_) +
		     " answers this end spun for came within its spin: the peer answers late (its "
		     "machine loaded, its daemon descheduled)";
	else if (spec_.follower && !spec_.spin)
		s += ". This end sleeps while its probes' answers are in flight: on a virtual machine "
		     "add `,spin=on` to the link's SPEC";
	else if (!spec_.follower)
		s += ". The follower's end should spin for its answers (`,spin=on`, its default on "
		     "virtio: and vsock: links), and its host be less loaded";
	return s;
}

} // namespace daemon_impl
} // namespace strata
