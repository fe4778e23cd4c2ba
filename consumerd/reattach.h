/*
 * reattach.h - a restarted daemon takes back the buffers of the live
 * processes its dead predecessor drained (docs/crash.md, "The daemon
 * dies"): the memfd out of the process with pidfd_getfd(2), checked to be
 * the very buffer recorded (inode), and the sub-trace's end found so that
 * the drain continues after its last whole packet.
 *
 * Contract: plain functions, no state; called on the main thread at start
 * (reclaim_memfd, proc_start_time) and on a drain's thread or the main
 * thread before a drain starts (stream_tail).  The process's memory and
 * the stream files are hostile: the memfd is only handed to Drain::create
 * (which validates it as any BUFFER), the stream files are walked with
 * bounds.
 */
#ifndef STRATA_CONSUMERD_REATTACH_H
#define STRATA_CONSUMERD_REATTACH_H

#include <cstdint>
#include <string>

namespace strata {

// The start time of `pid` (clock ticks since boot, /proc/PID/stat field
// 22), 0 if it cannot be read.
uint64_t proc_start_time(uint32_t pid);

// A descriptor of the memfd (dev, ino) that process `pid` (started at
// `start_time`) holds, duplicated into this process with pidfd_getfd
// (Linux >= 5.6; needs ptrace access to the process: same uid, or
// CAP_SYS_PTRACE); -1 with `err` ("exited", "not the same process", "no
// longer holds the buffer", "pidfd_getfd: Operation not permitted").
int reclaim_memfd(uint32_t pid, uint64_t start_time, uint64_t dev, uint64_t ino, std::string &err);

// The last whole packet of a stream file.
struct PacketTail {
	uint64_t packets = 0;                        // whole packets in the file (0: none, or no file)
	uint64_t seq = 0, discarded = 0, ts_end = 0; // of the last one
	uint64_t last_off = 0;                       // its offset in the file
};

// Cut `path` back to its last whole packet (repair.h) and read that
// packet's header.  A missing file is an empty stream (true, packets 0).
// False with `err` if it cannot be read, or holds a packet of another
// trace than `uuid`.
bool stream_tail(const std::string &path, const uint8_t uuid[16], PacketTail &tail, std::string &err);

// A buffer that could not be taken back (its process exited while no
// daemon ran): what it held beyond its sub-trace `dir` is gone, and no
// count of it exists.  Say so in the trace itself: each lane's stream file
// with a packet gets one more, empty, packet (88 bytes: the last one's
// header, sequence number + 2, its end time) so that babeltrace2 reports
// discarded packets where the sub-trace ends.  Returns the lanes marked
// (0 with `err` on a failure; files are repaired, never torn).
unsigned mark_lost_tail(const std::string &dir, const uint8_t uuid[16], std::string &err);

// mark_lost_tail for every sub-trace under `dir` (a directory that holds
// a metadata file), its uuid read from its first stream file's first
// packet: for a trace whose daemon died with no successor (`strata
// record`'s, `--repair DIR --mark-lost`).  The lanes marked; failures
// appended to `err`, one a line.
unsigned mark_lost_tree(const std::string &dir, std::string &err);

} // namespace strata
#endif
