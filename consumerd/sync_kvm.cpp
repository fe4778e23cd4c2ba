/*
 * sync_kvm.cpp - KVM's facts watched and checked (sync_kvm.h).
 */
#include "sync_kvm.h"

#include <cinttypes>
#include <cstdio>
#include <cstdlib>

namespace strata {
namespace daemon_impl {

KvmWatch::KvmWatch(long pid) : pid_(pid)
{
	const char *r = getenv("STRATA_TEST_KVM_ROOT");
	root_ = r && *r ? r : "/sys/kernel/debug/kvm";
}

KvmReading KvmWatch::poll() const
{
	KvmReading r;
	const std::string dir = clocksync::kvm_vm_dir(root_, pid_);
	if (dir.empty()) {
		r.why = "no VM of process " + std::to_string(pid_) + " under " + root_ +
			" (is debugfs mounted, and is this qemu's pid?)";
		return r;
	}
	std::vector<clocksync::KvmTsc> v;
	if (!clocksync::read_kvm_tsc(dir, &v, &r.why))
		return r;
	if (v.empty()) {
		r.why = dir + ": no vCPU";
		return r;
	}
	r.ok = true;
	r.tsc = v[0];
	r.vcpus = v.size();
	r.why = clocksync::kvm_vcpus_disagree(v);
	return r;
}

std::string KvmWatch::apply(const KvmReading &r)
{
	std::string change;
	if (r.ok && have_ &&
	    (r.tsc.offset != last_.tsc.offset || r.tsc.ratio != last_.tsc.ratio ||
	     r.tsc.frac_bits != last_.tsc.frac_bits)) {
		char b[200];
		snprintf(b, sizeof b,
			 "KVM's TSC offset of the guest changed from %" PRId64 " to %" PRId64
			 " (ratio %" PRIu64 " to %" PRIu64 "): a TSC write or a migration",
			 last_.tsc.offset, r.tsc.offset, last_.tsc.ratio, r.tsc.ratio);
		change = b;
		changes_++;
	}
	if (r.ok)
		have_ = true;
	if (r.ok || !have_)
		last_ = r;
	else
		last_.why = r.why; // the last good facts kept, the failure said
	return change;
}

std::string KvmWatch::check(const std::vector<clocksync::Segment> &segs, const clocksync::TscLine *guest_page,
			    const clocksync::TscLine *host_page)
{
	checked_ = false;
	check_.clear();
	if (!have_)
		unchecked_why_ = last_.why.empty() ? "KVM's facts not read yet" : last_.why;
	else if (!last_.why.empty())
		unchecked_why_ = last_.why;
	else if (!guest_page)
		unchecked_why_ = "the guest sent no clock page parameters (its daemon has no TSC page)";
	else if (!host_page)
		unchecked_why_ = "this machine has no TSC clock page";
	else
		unchecked_why_.clear();
	if (!unchecked_why_.empty())
		return "";
	// Only the last segment: the facts are today's, and an earlier one
	// may have had other facts (the change that ended it).
	const clocksync::Segment *s = nullptr;
	for (const auto &g : segs)
		if (g.bounded)
			s = &g;
	if (!s) {
		unchecked_why_ = "no bounded map to check them against";
		return "";
	}
	// The two pages' own error over the segment: their rates are
	// calibrated to a few ppm, their lines taken at one moment.
	const int64_t span = s->x_last - s->x_first;
	const int64_t slack = 20000 + span / 50000; // 20 us + 20 ppm of the span
	checked_ = true;
	check_ = clocksync::kvm_check(*s, *guest_page, last_.tsc, *host_page, slack);
	return check_;
}

std::string KvmWatch::summary() const
{
	std::string s = "KVM (pid " + std::to_string(pid_) + "): ";
	if (!have_)
		return s + "unread (" + last_.why + ")";
	char b[160];
	snprintf(b, sizeof b, "offset %" PRId64 ", ratio %" PRIu64 "/2^%u on %zu vCPU(s)", last_.tsc.offset,
		 last_.tsc.ratio, last_.tsc.frac_bits, last_.vcpus);
	s += b;
	if (changes_)
		s += ", " + std::to_string(changes_) + " change(s)";
	if (!last_.why.empty())
		return s + "; " + last_.why;
	if (checked_)
		return s + (check_.empty() ? "; agrees with the map" : "; DISAGREES: " + check_);
	return s + "; not checked: " + unchecked_why_;
}

clocksync::KvmFacts KvmWatch::facts() const
{
	clocksync::KvmFacts k;
	k.pid = pid_;
	k.read = have_;
	if (have_) {
		k.tsc_offset = last_.tsc.offset;
		k.tsc_scaling_ratio = last_.tsc.ratio;
		k.tsc_scaling_frac_bits = last_.tsc.frac_bits;
		k.vcpus = last_.vcpus;
		k.changes = changes_;
		k.problem = last_.why;
	}
	k.checked = checked_;
	if (checked_)
		k.error = check_;
	else
		k.why_unchecked = unchecked_why_.empty() ? last_.why : unchecked_why_;
	return k;
}

} // namespace daemon_impl
} // namespace strata
