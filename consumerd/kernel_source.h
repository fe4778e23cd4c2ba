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
 *     drain.cpp's wait_ms() (50 ms) as the safety net (and the cadence with
 *     a module too old to give a wait fd);
 *   - when /dev/strata exists, every active session's rules are mirrored
 *     into the module's slot of the same number: the module signals the
 *     tp-async processes registered with it, which acknowledge to it
 *     (libtrace/control/kmod_link.h); for a session whose rules name
 *     `kernel:<tracepoint>` (the module ignores every other provider) the
 *     slot also gets a kernel buffer, drained into <out>/kernel/ (stream files kernel_<cpu>)
 *     with the session's ClockInfo, so babeltrace2 merges it with the user
 *     sub-traces; a relay session streams it instead (`prepare` gives the
 *     drain the session's output before it starts);
 *   - without /dev/strata, or without CAP_SYS_ADMIN, the session records
 *     user events only and the daemon says so once per session start;
 *   - with a kabi 2 module the mirror carries a KmodGrant (session id,
 *     channel, our socket, per-rule targets): the module then answers the
 *     processes' state queries (docs/control-protocol.md, "The module
 *     answers the state query"); the module slot is owned by our open fd
 *     (our exit clears it, or, with a module that knows
 *     STRATA_KABI_SET_KEEP, keeps it a while for a restarted daemon:
 *     kernel_resume); kernel_wait is the one function another thread
 *     may call (one ioctl on the fd opened before that thread started).
 */
#ifndef STRATA_CONSUMERD_KERNEL_SOURCE_H
#define STRATA_CONSUMERD_KERNEL_SOURCE_H

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>
#include <sys/types.h>

#include "drain.h"
#include "metadata.h"
#include "proto/proto.h"

namespace strata {

// What a process needs to join the session through the module's QUERY.
struct KmodGrant {
	uint64_t session_id = 0; // the run id the daemon's grants name
	proto::ChannelConfig channel;
	std::string sock_path; // absolute: the daemon's socket
	// Per rule (same order as the rules): pids and process names, both
	// empty for "every process of the session's user".
	std::vector<std::pair<std::vector<uint32_t>, std::vector<std::string>>> targets;
	// The module keeps the slot for a restarted daemon (STRATA_KABI_SET_KEEP):
	// for a session that daemon takes up (persistence.cpp, kept()).
	bool keep = false;
	// A process-tree session's root (Session::tree): the module grants only
	// that process and its descendants (TARGET_TREE); 0: every process of
	// the session's user.
	pid_t tree = 0;
};

// The session `slot` started, or its rules changed while it is active:
// set the module's slot to `rules` (targets: processes of `uid`, every uid
// for root; with `grant`, the session processes join through the module)
// and, when the slot has a kernel buffer that no drain reads yet,
// start a drain for it and append it to `drains`.  A kernel buffer created
// here takes the session channel's sub-buffer size and count (0: the
// module's defaults; the module bounds them).  No-op without the module
// (with one warning if kernel events were asked for).  *gen: the module's
// generation of the change, 0 when the module was not set.  `prepare`,
// when set, is called on a new kernel drain before it starts (the session
// gives it its output: a relay session streams the kernel sub-trace).
using PrepareDrain = std::function<void(Drain &)>;
void kernel_apply(uint32_t slot, uid_t uid, const std::vector<proto::Rule> &rules,
		  const proto::ChannelConfig &channel, const std::string &out, const ClockInfo &clock,
		  const Owner &owner, const std::string &hostname,
		  std::vector<std::unique_ptr<Drain>> &drains, const KmodGrant *grant = nullptr,
		  uint64_t *gen = nullptr, const PrepareDrain &prepare = nullptr);

// A restarted daemon (docs/crash.md, "The daemon dies"): its predecessor
// drained the kernel buffer `uuid` of `slot` into `dir`.  Called before the
// session's first kernel_apply: when the module kept the slot for us
// (STRATA_KABI_SET_KEEP) that buffer is still there and `dir` continues
// (Drain::resume); else a new sub-trace starts, and the daemon's log says
// that kernel events were not recorded from the predecessor's end.
void kernel_resume(uint32_t slot, const uint8_t uuid[16], const std::string &dir);

// Kernel events from boot (kmod strata.boot_events, docs/boot.md): when the
// module recorded some into its boot slot before any consumer, drain that
// buffer into <out>/kernel-boot/ and stop the boot recording.  Quiet when
// there is none.  Called once, at the first session start of a daemon run
// with --adopt-early.  `prepare` as for kernel_apply.
void kernel_adopt_boot(const std::string &out, const ClockInfo &clock, const Owner &owner,
		       const std::string &hostname, std::vector<std::unique_ptr<Drain>> &drains,
		       const PrepareDrain &prepare = nullptr);

// The session stops or is destroyed: clear the module's slot (the probes
// stop writing) before the session's drains flush and finish.  Returns the
// module's generation of the change, 0 when there was nothing to clear.
uint64_t kernel_stop(uint32_t slot);

// Whether the module answers the state query for `slot` (kabi 2, our
// session with its grant is set there).
bool kernel_grants(uint32_t slot);
// ... and grants it to the session's process tree alone (TARGET_TREE).
bool kernel_tree_grants(uint32_t slot);
// Module slots set by someone else (another daemon): bit n = slot n.
uint32_t kernel_busy_slots();
// Whether `pid` still holds /dev/strata open (its registration): a program
// that closed all its descriptors lost it, and the module cannot reach it.
bool kernel_registered(pid_t pid);
// WAIT on the module until every process it signalled for `gen` or later
// acknowledged, at most timeout_ms: 0, or -ETIMEDOUT with the missing pids
// (up to 4096), or another -errno.  Callable from any thread.
int kernel_wait(uint64_t gen, uint32_t timeout_ms, std::vector<uint32_t> &missing);

} // namespace strata
#endif
