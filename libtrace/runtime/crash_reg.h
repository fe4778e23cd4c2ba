/*
 * crash_reg.h - a traced process puts its buffers into the kernel module's
 * crash descriptor (abi/strata_crash.h, docs/crash.md), so that a
 * dump of physical memory after a panic holds what they recorded.
 *
 * Contract: called with the control lock held, outside the per-event path
 * (once when a buffer is made, once when it is retired).  Without the
 * module, or with one too old or refusing, nothing happens: the buffer
 * works as before, it is only not described.  A forked child opens its own
 * file of the device (the inherited one stays its parent's).
 */
#ifndef STRATA_LIBTRACE_CRASH_REG_H
#define STRATA_LIBTRACE_CRASH_REG_H

#include <cstdint>

namespace strata {

// Pin [base, base + size) (the whole buffer of session slot `slot`) and
// describe it.  True if the module did.
bool crash_register(unsigned slot, void *base, uint64_t size);
// The buffer at `base` is retired: unpin it (no-op if not registered).
void crash_unregister(void *base);

} // namespace strata
#endif
