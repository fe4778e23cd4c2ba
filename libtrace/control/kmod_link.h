/*
 * kmod_link.h - a tp-async process's registration with the Strata kernel
 * module (/dev/strata, docs/kernel-module.md), when the module is loaded.
 *
 * What goes through the module: the change signal and the acknowledgement.
 * strata-consumerd mirrors each session's rules into the module's slot of
 * the same number (consumerd/kernel_source.h); the module signals every
 * registered process the slot targets; the handler runs the usual daemon
 * query (buffers and rules still come from the daemon) and then ACKs the
 * module generation it read BEFORE that query, so a controller's WAIT on
 * the module returns only once the process has applied the change.
 *
 * Contract: kmod_link_register and kmod_link_fork_child in thread context
 * (constructor, fork-child hook); kmod_link_generation and kmod_link_ack
 * are async-signal-safe (one ioctl each) and called by the holder of the
 * query token only.  Without the device everything is a no-op.
 */
#ifndef STRATA_CONTROL_KMOD_LINK_H
#define STRATA_CONTROL_KMOD_LINK_H

#include <cstdint>

namespace strata {

// Open /dev/strata and REGISTER with `signo` (the tp-async signal).
void kmod_link_register(int signo);
// fork child: the inherited registration is the parent's; make our own.
void kmod_link_fork_child();
// The module's current generation; false when not registered.
bool kmod_link_generation(uint64_t *gen);
// Acknowledge `gen` (everything up to it is applied).
void kmod_link_ack(uint64_t gen);

} // namespace strata
#endif
