/*
 * packet_file.h - what the trace reader's two halves (trace_index.cpp,
 * which opens a trace and indexes its packets, and trace_reader.cpp, which
 * reads them) both know of a stream file: the packet header's checks and
 * a whole read at an offset.  Internal to processor/ctf.
 */
#ifndef STRATA_CTF_PACKET_FILE_H
#define STRATA_CTF_PACKET_FILE_H

#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "strata_abi.h"
#include "trace_meta.h"

namespace strata {

// What the last whole header of a stream tells the next one.
struct HeaderContext {
	bool have = false;
	uint32_t stream_id = 0;
	uint64_t instance = 0;
	uint64_t ts_begin = 0;
};

namespace packet_file {

constexpr uint64_t kHdr = STRATA_PACKET_HEADER_SIZE;

inline bool read_at(int fd, void *buf, size_t n, uint64_t off)
{
	size_t done = 0;
	while (done < n) {
		const ssize_t r = pread(fd, (uint8_t *)buf + done, n - done, (off_t)(off + done));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return false;
		done += (size_t)r;
	}
	return true;
}

// Why the header at `off` is not a packet of this stream, or null.
inline const char *check_header(const strata_packet_header &h, const TraceMeta &m, const HeaderContext &ctx,
				uint64_t off, uint64_t file_size)
{
	if (h.magic != STRATA_CTF_MAGIC)
		return "bad magic";
	if (m.has_uuid && memcmp(h.uuid, m.uuid, 16) != 0)
		return "uuid of another trace";
	if (!m.known_stream(h.stream_id))
		return "unknown stream class";
	if (ctx.have && (h.stream_id != ctx.stream_id || h.stream_instance_id != ctx.instance))
		return "another stream's packet";
	const uint64_t min_content =
		m.record_format == STRATA_REC_COMPACT
			? kHdr
			: offsetof(strata_packet_header, vtid); // WIDE leaves 84..88 unnamed
	if (h.packet_size % 8 || h.content_size % 8)
		return "sizes not whole bytes";
	if (h.content_size > h.packet_size || h.content_size / 8 < min_content || h.packet_size / 8 < kHdr)
		return "bad content or packet size";
	if (h.packet_size / 8 > STRATA_MAX_SUBBUF_SIZE)
		return "packet larger than any sub-buffer";
	if (h.packet_size / 8 > file_size - off)
		return "packet runs past the end of the file";
	if (h.timestamp_begin > h.timestamp_end)
		return "timestamp_begin after timestamp_end";
	if (ctx.have && h.timestamp_begin < ctx.ts_begin)
		return "timestamp_begin before the previous packet's";
	return nullptr;
}

// A path's last component.
inline std::string base_name(const std::string &path)
{
	const size_t slash = path.rfind('/');
	return slash == std::string::npos ? path : path.substr(slash + 1);
}

} // namespace packet_file
} // namespace strata
#endif
