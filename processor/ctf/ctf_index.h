/*
 * ctf_index.h - LTTng's CTF packet index, `index/<stream>.idx` beside each
 * stream file: what the stream file should hold, written by the consumer
 * as it writes packets (consumerd/output_disk.cpp) and checked by the
 * reader against the file (trace_reader.cpp).  docs/reading.md, "The
 * packet index".
 *
 * Format (lttng-tools src/common/index/ctf-index.h, version 1.1), all
 * big-endian: a 16-byte header of four u32 (magic 0xC1F1DCC1, major 1,
 * minor 1, entry length), then one entry per packet, in file
 * order: offset (bytes), packet_size and content_size (bits),
 * timestamp_begin, timestamp_end, events_discarded, stream_id,
 * stream_instance_id, packet_seq_num (u64 each, copied from the packet's
 * header).  Strata's entries are 80 bytes: LTTng's 72, then the packet's
 * lane_id (u32) and vtid (s32), big-endian too, so that a reader can find
 * each packet's thread without its header.  The header's entry length
 * says where each entry starts: babeltrace2 and lttng-tools step by it
 * and read the fields they know.  babeltrace2 uses an index whose packets
 * add up to the file's size and walks the headers otherwise; an index of
 * entries 1.0 (56 bytes), LTTng's 1.1 (72) or longer ones (a later minor
 * version) is read too; only a 1.1 index of 80-byte entries gives the
 * threads.
 *
 * The index is never trusted: parse_ctf_index() checks every entry (sizes,
 * offsets contiguous from 0), and the reader compares it with the headers
 * it walked.
 */
#ifndef STRATA_LIBTRACE_CTF_INDEX_H
#define STRATA_LIBTRACE_CTF_INDEX_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "strata_abi.h"

namespace strata {

constexpr uint32_t kCtfIndexMagic = 0xC1F1DCC1u;
constexpr size_t kCtfIndexHeaderSize = 16;
constexpr size_t kCtfIndexEntrySize = 80;   // version 1.1 with Strata's lane and thread
constexpr size_t kCtfIndexEntry11Size = 72; // LTTng's version 1.1
constexpr size_t kCtfIndexEntry10Size = 56; // version 1.0: no instance id, no sequence number

struct CtfIndexEntry {
	uint64_t offset = 0;                   // bytes
	uint64_t packet_size = 0;              // bits
	uint64_t content_size = 0;             // bits
	uint64_t ts_begin = 0, ts_end = 0;     // the stream's clock
	uint64_t discarded = 0, stream_id = 0; //
	uint64_t instance = 0, seq = 0;        // 1.1 only (0 in a 1.0 index)
	uint32_t lane = 0;                     // Strata's 80-byte entries only
	int32_t vtid = 0;                      // (has_thread)
	bool has_thread = false;
};

// The stream file `stream_path`'s index path: <its dir>/index/<its name>.idx.
std::string ctf_index_path(const std::string &stream_path);

// The 16-byte header of a 1.1 index.
void ctf_index_header(uint8_t out[kCtfIndexHeaderSize]);

// The entry of the packet whose header is `h`, at `offset` of its file.
void ctf_index_entry(const strata_packet_header &h, uint64_t offset, uint8_t out[kCtfIndexEntrySize]);

// The entries of an index file's bytes; false with *why when it is not a
// valid index (bad header, a size not a whole number of entries, a size
// not whole bytes or content past the packet, offsets not contiguous from
// 0).
bool parse_ctf_index(const std::string &bytes, std::vector<CtfIndexEntry> *out, std::string *why);

// Writes the index of the stream file `stream_path` afresh from its first
// `size` bytes (its whole packets from the start, each header checked for
// the magic and sizes; the walk stops at the first that is not one): a
// file beside it renamed over it, so that a kill leaves one or the other
// whole.  0, or -errno.  Used where a stream file's packets change without
// their index being written as they are (a resumed or repaired file, a
// split's rewrite).
int rebuild_ctf_index(const std::string &stream_path, uint64_t size);

// The index of `stream_path`, when it has one, brought to its first `size`
// bytes: left alone when it is valid and ends there, made again
// (rebuild_ctf_index) otherwise.  0 (nothing to do), 1 (made again) or
// -errno.
int sync_ctf_index(const std::string &stream_path, uint64_t size);

// All n bytes at p written to fd (EINTR retried), or false with errno set
// (ENOSPC for a write that stored nothing): the index's writes, and the
// split's (trace_split.cpp).
bool write_whole(int fd, const void *p, size_t n);

} // namespace strata
#endif
