/*
 * kernel_source.h - kernel events of a session: the daemon's side of the
 * Strata kernel module (docs/kernel-module.md).
 *
 * Contract:
 *   - roles: only the daemon's main thread calls these functions (they keep
 *     per-slot state without a lock); the kernel buffer is then read by an
 *     ordinary Drain (drain.h) on its own thread, like a process's buffer:
 *     the module's probes are its producers (hostile shared memory, as
 *     always), the drain its only reader;
 *   - the module never does a futex wake (its probes run inside the
 *     scheduler); it wakes the wait fd of KBUF_OPEN from irq_work when a
 *     sub-buffer completes, and the drain waits in poll() on it, with
 *     drain.cpp's kWaitMs (50 ms) as the safety net (and the cadence with
 *     a module too old to give a wait fd);
 *   - when /dev/strata exists, every active session's rules are mirrored
 *     into the module's slot of the same number: the module signals the
 *     tp-async processes registered with it, which acknowledge to it
 *     (libtrace/control/kmod_link.h); for a session whose rules name
 *     `kernel:<tracepoint>` (the module ignores every other provider) the
 *     slot also gets a kernel buffer, drained into <out>/kernel/ (stream files kernel_<cpu>)
 *     with the session's ClockInfo, so babeltrace2 merges it with the user
 *     sub-traces;
 *   - without /dev/strata, or without CAP_SYS_ADMIN, the session records
 *     user events only and the daemon says so once per session start.
 */
#ifndef STRATA_CONSUMERD_KERNEL_SOURCE_H
#define STRATA_CONSUMERD_KERNEL_SOURCE_H

#include <cstdint>
#include <memory>
#include <string>
#include <vector>
#include <sys/types.h>

#include "drain.h"
#include "metadata.h"
#include "proto/proto.h"

namespace strata {

// The session `slot` started, or its rules changed while it is active:
// set the module's slot to `rules` (targets: processes of `uid`, every uid
// for root) and, when the slot has a kernel buffer that no drain reads yet,
// start a drain for it and append it to `drains`.  A kernel buffer created
// here takes the session channel's sub-buffer size and count (0: the
// module's defaults; the module bounds them).  No-op without the module
// (with one warning if kernel events were asked for).
void kernel_apply(uint32_t slot, uid_t uid, const std::vector<proto::Rule> &rules,
		  const proto::ChannelConfig &channel, const std::string &out,
		  const ClockInfo &clock, const Owner &owner, const std::string &hostname,
		  std::vector<std::unique_ptr<Drain>> &drains);

// The session stops or is destroyed: clear the module's slot (the probes
// stop writing) before the session's drains flush and finish.
void kernel_stop(uint32_t slot);

} // namespace strata
#endif
