/*
 * kvm_tsc.h - KVM's exact facts about a guest's TSC, as the host's debugfs
 * shows them, and their check against a map estimated from exchanges
 * (docs/clocks.md, "Under KVM").
 *
 * For each vCPU, /sys/kernel/debug/kvm/<pid>-<fd>/vcpuN/ holds tsc-offset
 * (signed), tsc-scaling-ratio and tsc-scaling-ratio-frac-bits (x86: 48 on
 * Intel, 32 on AMD): guest_tsc = (host_tsc * ratio >> frac_bits) + offset.
 * A guest whose TSC was written, or that migrated, changes its offset (the
 * kvm_write_tsc_offset event says when).  Pure: reads files, computes;
 * tested against recorded trees (no hardware virtualisation on the test
 * machines).
 */
#ifndef STRATA_CLOCKSYNC_KVM_TSC_H
#define STRATA_CLOCKSYNC_KVM_TSC_H

#include <cstdint>
#include <string>
#include <vector>

#include "clocksync.h"

namespace strata {
namespace clocksync {

struct KvmTsc {
	unsigned vcpu = 0;
	int64_t offset = 0;
	uint64_t ratio = 1;
	unsigned frac_bits = 0; // ratio is 1.0 when ratio == 1 << frac_bits
};

// The VM folder of qemu process `pid` under a debugfs kvm folder
// (/sys/kernel/debug/kvm): "<pid>-<fd>"; "" if none.
std::string kvm_vm_dir(const std::string &kvm_root, long pid);
// Every vcpuN of a VM folder, in vCPU order.  False with *err (a missing or
// malformed file named).
bool read_kvm_tsc(const std::string &vm_dir, std::vector<KvmTsc> *out, std::string *err);
// "" if every vCPU has the same offset and ratio (one guest TSC), else why not.
std::string kvm_vcpus_disagree(const std::vector<KvmTsc> &v);

// The host TSC value at which the guest's TSC reads guest_tsc.
uint64_t kvm_host_tsc(const KvmTsc &k, uint64_t guest_tsc);

// A TSC -> ns map of a clock page (linear: ns = ns0 + (tsc - tsc0) * ns_per_cycle).
struct TscLine {
	uint64_t tsc0 = 0;
	int64_t ns0 = 0;
	double ns_per_cycle = 1.0;
};

// The KVM facts put to the test of a segment mapping the guest's trace
// clock onto the host's: at each of the segment's knots, the host time KVM
// predicts for that guest time (through the guest's page, KVM, the host's
// page) must lie within the knot's bound, widened by `slack_ns` (the two
// pages' own calibration error).  "" if it does, else the first knot where
// it does not, in words the user sees.
std::string kvm_check(const Segment &s, const TscLine &guest_page, const KvmTsc &k, const TscLine &host_page,
		      int64_t slack_ns);

} // namespace clocksync
} // namespace strata
#endif
