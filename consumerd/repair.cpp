/*
 * repair.cpp - see repair.h.  The file is read, never trusted: a header that
 * is not a Strata packet header ends the walk like a torn tail does; what
 * follows is cut only when no whole packet of the same trace follows it
 * (damage inside a file is left for the readers that skip it).
 */
#include "repair.h"

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctf_index.h"
#include "strata_abi.h"

namespace strata {

namespace {

// A plausible packet header at `off` of a file of `size` bytes: magic,
// sizes, the packet inside the file, and (when `uuid`) that trace's uuid.
bool packet_at(int fd, uint64_t off, uint64_t size, const uint8_t *uuid)
{
	struct strata_packet_header h;
	if (size - off < sizeof(h) ||
	    pread(fd, &h, sizeof(h), static_cast<off_t>(off)) != static_cast<ssize_t>(sizeof(h)))
		return false;
	const uint64_t bits = h.packet_size, min_bits = 8ull * offsetof(struct strata_packet_header, vtid);
	return h.magic == STRATA_CTF_MAGIC && (!uuid || memcmp(h.uuid, uuid, 16) == 0) && bits % 8 == 0 &&
	       bits >= min_bits && bits <= 8ull * STRATA_MAX_SUBBUF_SIZE && h.content_size <= bits &&
	       h.content_size >= min_bits && bits / 8 <= size - off;
}

// The first offset after `from` holding a plausible packet header, or
// `size`: each byte read once (64 KiB at a time), a header read where the
// magic's first byte is.
uint64_t next_packet(int fd, uint64_t from, uint64_t size, const uint8_t *uuid)
{
	static const uint32_t magic = STRATA_CTF_MAGIC;
	uint8_t buf[65536];
	for (uint64_t pos = from + 1; pos + sizeof(struct strata_packet_header) <= size;) {
		const size_t n = static_cast<size_t>(std::min<uint64_t>(sizeof buf, size - pos));
		if (pread(fd, buf, n, static_cast<off_t>(pos)) != static_cast<ssize_t>(n) || n < 4)
			return size;
		for (size_t i = 0; i + 4 <= n; i++)
			if (!memcmp(buf + i, &magic, 4) && packet_at(fd, pos + i, size, uuid))
				return pos + i;
		pos += n - 3;
	}
	return size;
}

// The end of the whole packets a stream file of `size` bytes starts with
// (size when all are): each header checked (magic, sizes), the first's
// uuid kept for next_packet(); why: what stopped the walk.
uint64_t whole_packets(int fd, uint64_t size, uint8_t uuid[16], std::string &why)
{
	uint64_t off = 0;
	while (off < size) {
		struct strata_packet_header h;
		if (size - off < sizeof(h)) {
			why = "packet header cut short";
			break;
		}
		if (pread(fd, &h, sizeof(h), static_cast<off_t>(off)) != static_cast<ssize_t>(sizeof(h))) {
			why = "read error";
			break;
		}
		const uint64_t bits = h.packet_size;
		if (h.magic != STRATA_CTF_MAGIC) {
			why = "bad packet magic";
			break;
		}
		// The smallest packet is a header-only one (the trailing-loss packet):
		// its content ends with the declared context, before `vtid` in the
		// kernel's format, after it in user streams.
		const uint64_t min_bits = 8ull * offsetof(struct strata_packet_header, vtid);
		if (bits % 8 || bits < min_bits || bits > 8ull * STRATA_MAX_SUBBUF_SIZE ||
		    h.content_size > bits || h.content_size < min_bits) {
			why = "bad packet size";
			break;
		}
		if (size - off < bits / 8) {
			why = "last packet torn";
			break;
		}
		if (!off)
			memcpy(uuid, h.uuid, 16);
		off += bits / 8;
	}
	return off;
}

} // namespace

// More blocks than the file's bytes take, by more than an extent tree's
// few (64 KiB): blocks allocated past its end (FALLOC_FL_KEEP_SIZE).
static bool blocks_past_end(const struct stat &st)
{
	const uint64_t bytes = static_cast<uint64_t>(st.st_size);
	return static_cast<uint64_t>(st.st_blocks) * 512 > ((bytes + 4095) & ~uint64_t{4095}) + (64 << 10);
}

int repair_stream_file(const std::string &path, uint64_t &bytes_cut, std::string &why, bool check_only)
{
	bytes_cut = 0;
	int fd = open(path.c_str(), (check_only ? O_RDONLY : O_RDWR) | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	struct stat st;
	if (fstat(fd, &st) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	const uint64_t size = static_cast<uint64_t>(st.st_size);
	uint8_t uuid[16];
	why.clear();
	const uint64_t off = whole_packets(fd, size, uuid, why);
	if (off < size && why != "read error") {
		const uint64_t next = next_packet(fd, off, size, off ? uuid : nullptr);
		if (next < size) {
			// Whole packets after the damage: cutting would lose them.
			why += " at byte " + std::to_string(off) + ", whole packets from byte " +
			       std::to_string(next) + " on";
			close(fd);
			return 2;
		}
	}
	int ret = 0;
	if (off < size && check_only) {
		bytes_cut = size - off;
		ret = 1;
	} else if (off < size) {
		if (ftruncate(fd, static_cast<off_t>(off)) < 0) {
			ret = -errno;
		} else {
			bytes_cut = size - off;
			ret = 1;
		}
	} else if (!check_only && blocks_past_end(st)) {
		// Whole, but with the blocks a killed daemon had allocated
		// ahead of it (output_disk.cpp): given back, the size kept.
		(void)ftruncate(fd, static_cast<off_t>(size)); // nothing to say: only space
	}
	close(fd);
	// Its index (when it has one) to the packets kept: an entry past the
	// cut goes, and one a kill kept from being written is added.
	if (!check_only && ret >= 0) {
		const int r = sync_ctf_index(path, off);
		if (r < 0)
			fprintf(stderr,
				"strata-consumerd: repair: cannot bring the index of %s up to date: %s\n",
				path.c_str(), strerror(-r));
	}
	return ret;
}

namespace {
void walk(const std::string &dir, RepairStats &s, int depth, bool check_only)
{
	if (depth > 16)
		return;
	DIR *d = opendir(dir.c_str());
	if (!d) {
		fprintf(stderr, "strata-consumerd: repair: cannot open %s: %s\n", dir.c_str(),
			strerror(errno));
		s.errors++;
		return;
	}
	bool is_trace = faccessat(dirfd(d), "metadata", F_OK, AT_SYMLINK_NOFOLLOW) == 0;
	while (struct dirent *e = readdir(d)) {
		std::string name = e->d_name;
		if (name == "." || name == "..")
			continue;
		std::string p = dir + "/" + name;
		struct stat st;
		if (lstat(p.c_str(), &st) < 0)
			continue;
		if (S_ISDIR(st.st_mode)) {
			walk(p, s, depth + 1, check_only);
		} else if (S_ISREG(st.st_mode) && is_trace && name != "metadata" && name[0] != '.') {
			s.files++;
			uint64_t cut = 0;
			std::string why;
			int r = repair_stream_file(p, cut, why, check_only);
			if (r < 0) {
				s.errors++;
				fprintf(stderr, "strata-consumerd: repair: %s: %s\n", p.c_str(),
					strerror(-r));
			} else if (r == 2) {
				s.damaged++;
				fprintf(stderr,
					"strata-consumerd: damaged %s: %s: left as it is (Strata's readers "
					"skip the damage; `strata check` names it and writes a clean copy)\n",
					p.c_str(), why.c_str());
			} else if (r > 0) {
				s.repaired++;
				s.bytes_cut += cut;
				fprintf(stderr, "strata-consumerd: %s %s: %s, %llu bytes %s\n",
					check_only ? "torn" : "repaired", p.c_str(), why.c_str(),
					static_cast<unsigned long long>(cut), check_only ? "to cut" : "cut");
			}
		}
	}
	closedir(d);
}
} // namespace

RepairStats repair_tree(const std::string &dir, bool check_only)
{
	RepairStats s;
	walk(dir, s, 0, check_only);
	return s;
}

} // namespace strata
