/*
 * sync_kvm.h - KVM's exact facts about a guest's TSC, watched by the host's
 * end of that guest's clock link (`--sync-guest NAME=SPEC,kvm=PID`,
 * docs/clocks.md "Under KVM").
 *
 * The host reads its debugfs (/sys/kernel/debug/kvm/<PID>-<fd>/vcpuN/: the
 * TSC offset and scaling of each vCPU) about once a second: a change of
 * offset or ratio is a step the guest's TSC took (a TSC write, a
 * migration), which the link's map starts a new segment at; vCPUs that
 * disagree, or a tree that cannot be read, are said.  At each stop and in
 * `strata status` the facts are put to the test of the map the exchanges
 * estimated (clocksync::kvm_check, through the guest's clock page, which
 * its daemon sends over the link, and the host's): a disagreement beyond
 * the bound is an error the user sees.
 *
 * Contract: plain data, used by one SyncLink under its lock, except poll(),
 * which reads files and is called by the link's thread only, outside the
 * lock; apply() then takes its result under the lock.  Nothing here reads a
 * clock.  STRATA_TEST_KVM_ROOT (tests only) replaces /sys/kernel/debug/kvm:
 * these machines have no hardware virtualisation.
 */
#ifndef STRATA_CONSUMERD_SYNC_KVM_H
#define STRATA_CONSUMERD_SYNC_KVM_H

#include <string>
#include <vector>

#include "clocks_file.h"
#include "clocksync.h"
#include "kvm_tsc.h"

namespace strata {
namespace daemon_impl {

// One reading of the tree.
struct KvmReading {
	bool ok = false;
	std::string why; // !ok: what could not be read; ok: "" or why the vCPUs disagree
	clocksync::KvmTsc tsc;
	size_t vcpus = 0;
};

class KvmWatch {
public:
	explicit KvmWatch(long pid);
	long pid() const { return pid_; }
	// Reads the tree (the link's thread, no lock held).
	KvmReading poll() const;
	// Takes a reading: "" or, when the offset or ratio changed since the
	// last good one, the words of that change (the caller breaks its map).
	std::string apply(const KvmReading &r);
	// The facts against each bounded segment: "" if they agree (or
	// cannot be checked: see checked()), else the first disagreement.
	std::string check(const std::vector<clocksync::Segment> &segs, const clocksync::TscLine *guest_page,
			  const clocksync::TscLine *host_page);
	bool checked() const { return checked_; }
	// One phrase for `strata status`, and the "kvm" object of clocks.json
	// (clocks_file.h writes it).
	std::string summary() const;
	clocksync::KvmFacts facts() const;

private:
	long pid_;
	std::string root_;
	KvmReading last_;
	bool have_ = false;
	unsigned changes_ = 0;
	bool checked_ = false;
	std::string check_; // the last check's result
	std::string unchecked_why_;
};

} // namespace daemon_impl
} // namespace strata
#endif
