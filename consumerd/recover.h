/*
 * recover.h - `strata-consumerd --recover IMAGE -o DIR` (`strata recover`):
 * the buffers a panicked kernel's crash descriptor describes
 * (abi/strata_crash.h), read out of an ELF core of its physical
 * memory (kdump's /proc/vmcore, qemu's dump-guest-memory), written as CTF
 * traces, one per session slot: DIR/slot<N>/kernel and
 * DIR/slot<N>/ust/pid/<comm>-<pid>.  Design: docs/crash.md.
 *
 * Contract:
 *   - the image is hostile: every offset, size and count read from it is
 *     bounds-checked before use; a bad buffer is reported and skipped, the
 *     others recovered;
 *   - each buffer is rebuilt in a sealed memfd and drained by an ordinary
 *     Drain (drain.h) whose producer is dead: the same validation, packet
 *     copy, torn-packet handling and loss accounting as a live session;
 *     a discard-mode buffer from the oldest sub-buffer its ring still
 *     holds, not from where the daemon got to (what it took last may not
 *     have reached its disk): the two traces may overlap;
 *   - prints one line per buffer (packets written, events the writers
 *     discarded, packets dropped) and a total; exit status 0 when at least
 *     one buffer was recovered, 1 otherwise, 2 usage error.
 */
#ifndef STRATA_CONSUMERD_RECOVER_H
#define STRATA_CONSUMERD_RECOVER_H

namespace strata {

// argv[0] is "--recover".
int recover_main(int argc, char **argv);

} // namespace strata
#endif
