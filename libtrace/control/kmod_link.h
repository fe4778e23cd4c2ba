/*
 * kmod_link.h - a traced process's registration with the Strata kernel
 * module (/dev/strata, docs/kernel-module.md), when the module is loaded.
 *
 * With a module that speaks kabi 2 (kmod_link_grants()), the module answers
 * the state query: sync_query.cpp QUERYs it for grants (session id, channel,
 * daemon socket, the rules that target this process), joins the granted
 * sessions (the buffer goes to the daemon named by the grant), quiesces and
 * ACKs the generation the QUERY returned.  The daemon is contacted only to
 * hand a buffer over or announce the process's events.
 * With a kabi 1 module only the signal and the acknowledgement go through
 * it: the handler runs the daemon's query and ACKs the module generation it
 * read BEFORE that query (kmod_link_generation).
 *
 * Contract: kmod_link_register and kmod_link_fork_child in thread context
 * (constructor, fork-child hook); the others are async-signal-safe (one
 * ioctl each) and called by the holder of the query token only.  Without
 * the device everything is a no-op and kmod_link_grants() is false.
 */
#ifndef STRATA_CONTROL_KMOD_LINK_H
#define STRATA_CONTROL_KMOD_LINK_H

#include <cstdint>

namespace strata {

// Open /dev/strata and REGISTER with `signo` (the tp-async signal; 0: never
// signalled, tp-sync).  Registered already: update the signal.
void kmod_link_register(int signo);
// fork child: the inherited registration is the parent's; make our own.
void kmod_link_fork_child();
// Registered with a module that answers the state query (kabi >= 2).
bool kmod_link_grants();
// QUERY the grants into buf (strata_kmod_query_grants): 0 or -errno.
int kmod_link_query(void *buf, uint32_t *size, uint64_t *gen, uint32_t *n_entries);
// The module's current generation; false when not registered.
bool kmod_link_generation(uint64_t *gen);
// Acknowledge `gen` (everything up to it is applied).
void kmod_link_ack(uint64_t gen);

} // namespace strata
#endif
