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
 *
 * Both `strata recover` (cli/cmd_recover.cpp) and the daemon's --recover
 * take the same arguments through one option table (recover_parse) and
 * call recover() in their own process.
 */
#ifndef STRATA_CONSUMERD_RECOVER_H
#define STRATA_CONSUMERD_RECOVER_H

#include <cstdint>
#include <string>

#include "options.h"

namespace strata {

struct RecoverArgs {
	std::string image, out;
	uint64_t at = 0; // with have_at: the crash descriptor's physical address
	bool have_at = false;
};

// The command whose help and usage errors recover_parse prints: `strata
// recover` (daemon false) or `strata-consumerd --recover`.
const cli::Command &recover_command(bool daemon);
// IMAGE -o DIR [--at PADDR] from argv[1..argc) by cmd: cli::kParsed to go
// on, else the exit status (help printed, or a usage error told).
int recover_parse(const cli::Command &cmd, int argc, char **argv, RecoverArgs *a);
// The recovery; its exit status.
int recover(const RecoverArgs &a);

} // namespace strata
#endif
