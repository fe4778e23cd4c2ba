// ctf_index.cpp - see ctf_index.h.
#include "ctf_index.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace strata {

namespace {

void put_be32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = static_cast<uint8_t>(v >> (24 - 8 * i));
}

void put_be64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = static_cast<uint8_t>(v >> (56 - 8 * i));
}

uint32_t get_be32(const char *p)
{
	uint32_t v = 0;
	for (int i = 0; i < 4; i++)
		v = v << 8 | static_cast<uint8_t>(p[i]);
	return v;
}

uint64_t get_be64(const char *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v = v << 8 | static_cast<uint8_t>(p[i]);
	return v;
}

// The entries of the whole packets at the start of `fd`'s first `size`
// bytes, appended to *out.
void index_headers(int fd, uint64_t size, std::string *out)
{
	const uint64_t min_bits = 8ull * offsetof(strata_packet_header, vtid);
	for (uint64_t off = 0; size - off >= sizeof(strata_packet_header);) {
		strata_packet_header h;
		if (pread(fd, &h, sizeof h, static_cast<off_t>(off)) != static_cast<ssize_t>(sizeof h))
			return;
		const uint64_t bits = h.packet_size;
		if (h.magic != STRATA_CTF_MAGIC || bits % 8 || bits < min_bits ||
		    bits > 8ull * STRATA_MAX_SUBBUF_SIZE || h.content_size > bits ||
		    h.content_size < min_bits || bits / 8 > size - off)
			return;
		uint8_t e[kCtfIndexEntrySize];
		ctf_index_entry(h, off, e);
		out->append(reinterpret_cast<const char *>(e), sizeof e);
		off += bits / 8;
	}
}

} // namespace

bool write_whole(int fd, const void *p, size_t n)
{
	const char *c = static_cast<const char *>(p);
	while (n) {
		const ssize_t w = write(fd, c, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			if (w == 0)
				errno = ENOSPC;
			return false;
		}
		c += w;
		n -= static_cast<size_t>(w);
	}
	return true;
}

std::string ctf_index_path(const std::string &stream_path)
{
	const size_t slash = stream_path.rfind('/');
	const std::string dir = slash == std::string::npos ? "." : stream_path.substr(0, slash);
	const std::string name = slash == std::string::npos ? stream_path : stream_path.substr(slash + 1);
	return dir + "/index/" + name + ".idx";
}

void ctf_index_header(uint8_t out[kCtfIndexHeaderSize])
{
	put_be32(out, kCtfIndexMagic);
	put_be32(out + 4, 1);
	put_be32(out + 8, 1);
	put_be32(out + 12, kCtfIndexEntrySize);
}

void ctf_index_entry(const strata_packet_header &h, uint64_t offset, uint8_t out[kCtfIndexEntrySize])
{
	const uint64_t v[9] = {offset,          h.packet_size,      h.content_size, h.timestamp_begin,
			       h.timestamp_end, h.events_discarded, h.stream_id,    h.stream_instance_id,
			       h.packet_seq_num};
	for (int i = 0; i < 9; i++)
		put_be64(out + 8 * i, v[i]);
	put_be32(out + 72, h.lane_id);
	put_be32(out + 76, static_cast<uint32_t>(h.vtid));
}

bool parse_ctf_index(const std::string &bytes, std::vector<CtfIndexEntry> *out, std::string *why)
{
	out->clear();
	if (bytes.size() < kCtfIndexHeaderSize) {
		*why = "shorter than its header (" + std::to_string(bytes.size()) + " bytes)";
		return false;
	}
	const char *p = bytes.data();
	const uint32_t magic = get_be32(p), major = get_be32(p + 4), minor = get_be32(p + 8);
	const uint32_t len = get_be32(p + 12);
	if (magic != kCtfIndexMagic) {
		*why = "bad magic";
		return false;
	}
	if (major != 1 || len < kCtfIndexEntry10Size || (minor >= 1 && len < kCtfIndexEntry11Size)) {
		*why = "unknown version " + std::to_string(major) + "." + std::to_string(minor) +
		       " or entry length " + std::to_string(len);
		return false;
	}
	const size_t body = bytes.size() - kCtfIndexHeaderSize;
	if (body % len) {
		*why = "its " + std::to_string(body) + " bytes of entries are not a whole number of " +
		       std::to_string(len) + "-byte entries (torn)";
		return false;
	}
	uint64_t end = 0;
	for (size_t o = kCtfIndexHeaderSize; o < bytes.size(); o += len) {
		CtfIndexEntry e;
		const char *q = p + o;
		e.offset = get_be64(q);
		e.packet_size = get_be64(q + 8);
		e.content_size = get_be64(q + 16);
		e.ts_begin = get_be64(q + 24);
		e.ts_end = get_be64(q + 32);
		e.discarded = get_be64(q + 40);
		e.stream_id = get_be64(q + 48);
		if (minor >= 1) {
			e.instance = get_be64(q + 56);
			e.seq = get_be64(q + 64);
		}
		if (minor == 1 && len == kCtfIndexEntrySize) { // Strata's
			e.lane = get_be32(q + 72);
			e.vtid = static_cast<int32_t>(get_be32(q + 76));
			e.has_thread = true;
		}
		const size_t k = out->size();
		if (e.packet_size == 0 || e.packet_size % 8 || e.content_size > e.packet_size ||
		    e.packet_size > 8ull * STRATA_MAX_SUBBUF_SIZE) {
			*why = "entry " + std::to_string(k) + ": bad packet size";
			return false;
		}
		if (e.offset != end) {
			*why = "entry " + std::to_string(k) + ": offset " + std::to_string(e.offset) +
			       " where the entries before end at " + std::to_string(end);
			return false;
		}
		if (e.ts_end < e.ts_begin) {
			*why = "entry " + std::to_string(k) + ": ends before it begins";
			return false;
		}
		end = e.offset + e.packet_size / 8;
		out->push_back(e);
	}
	return true;
}

int rebuild_ctf_index(const std::string &stream_path, uint64_t size)
{
	const std::string path = ctf_index_path(stream_path);
	const std::string dir = path.substr(0, path.rfind('/'));
	const std::string tmp = dir + "/." + path.substr(path.rfind('/') + 1) + ".new";
	if (mkdir(dir.c_str(), 0750) != 0 && errno != EEXIST)
		return -errno;
	const int in = open(stream_path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (in < 0)
		return -errno;
	std::string text(kCtfIndexHeaderSize, '\0');
	ctf_index_header(reinterpret_cast<uint8_t *>(&text[0]));
	index_headers(in, size, &text);
	close(in);
	const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0640);
	if (fd < 0)
		return -errno;
	if (!write_whole(fd, text.data(), text.size()) || rename(tmp.c_str(), path.c_str()) != 0) {
		const int e = errno;
		close(fd);
		unlink(tmp.c_str());
		return -e;
	}
	close(fd);
	return 0;
}

int sync_ctf_index(const std::string &stream_path, uint64_t size)
{
	const std::string path = ctf_index_path(stream_path);
	const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	struct stat st;
	std::string bytes;
	if (fstat(fd, &st) == 0 && st.st_size > 0) {
		bytes.resize(static_cast<size_t>(st.st_size));
		if (pread(fd, &bytes[0], bytes.size(), 0) != static_cast<ssize_t>(bytes.size()))
			bytes.clear();
	}
	close(fd);
	std::vector<CtfIndexEntry> entries;
	std::string why;
	if (parse_ctf_index(bytes, &entries, &why) &&
	    (entries.empty() ? 0 : entries.back().offset + entries.back().packet_size / 8) == size)
		return 0;
	const int r = rebuild_ctf_index(stream_path, size);
	return r < 0 ? r : 1;
}

} // namespace strata
