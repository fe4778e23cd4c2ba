/*
 * reattach.cpp - see reattach.h.
 */
#include "reattach.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <vector>

#include "ctf_index.h"
#include "repair.h"
#include "strata_abi.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

namespace strata {

uint64_t proc_start_time(uint32_t pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof path, "/proc/%u/stat", pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	// comm may hold spaces and parentheses: the fields follow the last ')'.
	const char *p = strrchr(buf, ')');
	if (!p)
		return 0;
	p++;
	for (int field = 3; field <= 22 && *p; field++) { // p at the space before `field`
		while (*p == ' ')
			p++;
		if (field == 22)
			return strtoull(p, nullptr, 10);
		while (*p && *p != ' ')
			p++;
	}
	return 0;
}

namespace {

// The fd number under which `pid` holds the file (dev, ino), -1 if none.
int find_fd(uint32_t pid, uint64_t dev, uint64_t ino)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%u/fd", pid);
	DIR *d = opendir(path);
	if (!d)
		return -1;
	int found = -1;
	while (struct dirent *e = readdir(d)) {
		char *end = nullptr;
		const long n = strtol(e->d_name, &end, 10);
		if (end == e->d_name || *end || n < 0 || n > INT32_MAX)
			continue;
		char link[96], target[64];
		snprintf(link, sizeof link, "%s/%ld", path, n);
		// Only memfds: stat() of any other link could block (a FIFO's
		// open is not done by stat, but a FUSE file's getattr could).
		const ssize_t len = readlink(link, target, sizeof target - 1);
		if (len <= 0)
			continue;
		target[len] = 0;
		if (strncmp(target, "/memfd:", 7) != 0)
			continue;
		struct stat st;
		if (stat(link, &st) == 0 && st.st_dev == dev && st.st_ino == ino) {
			found = static_cast<int>(n);
			break;
		}
	}
	closedir(d);
	return found;
}

} // namespace

int reclaim_memfd(uint32_t pid, uint64_t start_time, uint64_t dev, uint64_t ino, std::string &err)
{
	// The pidfd first: from here on it names one process, whatever
	// happens to the pid; the start time then says whether it is ours.
	const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
	if (pidfd < 0) {
		err = errno == ESRCH ? "exited" : std::string("pidfd_open: ") + strerror(errno);
		return -1;
	}
	int fd = -1;
	if (proc_start_time(pid) != start_time || start_time == 0) {
		err = "exited (its pid now names another process)";
	} else {
		const int target = find_fd(pid, dev, ino);
		if (target < 0) {
			err = "no longer holds the buffer (its session slot closed, or it exited)";
		} else {
			fd = static_cast<int>(syscall(SYS_pidfd_getfd, pidfd, target, 0));
			if (fd < 0)
				err = std::string("pidfd_getfd: ") + strerror(errno);
		}
	}
	close(pidfd);
	struct stat st;
	if (fd >= 0 && (fstat(fd, &st) != 0 || st.st_dev != dev || st.st_ino != ino)) {
		// It closed that fd and another file took its number in between.
		close(fd);
		fd = -1;
		err = "no longer holds the buffer (its descriptor changed)";
	}
	return fd;
}

bool stream_tail(const std::string &path, const uint8_t uuid[16], PacketTail &tail, std::string &err)
{
	tail = PacketTail();
	struct stat st;
	if (stat(path.c_str(), &st) != 0) {
		if (errno == ENOENT)
			return true;
		err = "cannot stat " + path + ": " + strerror(errno);
		return false;
	}
	uint64_t cut = 0;
	std::string why;
	const int r = repair_stream_file(path, cut, why);
	if (r < 0) {
		err = "cannot repair " + path + ": " + why;
		return false;
	}
	if (r == 2) { // left as it is: nothing is appended after damage
		err = path + ": damaged inside (" + why + "), not continued";
		return false;
	}
	int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		err = "cannot open " + path + ": " + strerror(errno);
		return false;
	}
	const off_t size = lseek(fd, 0, SEEK_END);
	uint64_t off = 0;
	bool ok = true;
	while (ok && off + STRATA_PACKET_HEADER_SIZE <= static_cast<uint64_t>(size)) {
		strata_packet_header ph;
		if (pread(fd, &ph, sizeof ph, static_cast<off_t>(off)) != static_cast<ssize_t>(sizeof ph)) {
			err = "cannot read " + path + ": " + strerror(errno);
			ok = false;
			break;
		}
		const uint64_t len = ph.packet_size / 8;
		if (ph.magic != STRATA_CTF_MAGIC || memcmp(ph.uuid, uuid, 16) != 0 || ph.packet_size % 8 ||
		    len < STRATA_PACKET_HEADER_SIZE || len > static_cast<uint64_t>(size) - off) {
			err = path + ": the packet at byte " + std::to_string(off) +
			      " is not of this buffer's trace";
			ok = false;
			break;
		}
		tail.packets++;
		tail.last_off = off;
		tail.seq = ph.packet_seq_num;
		tail.discarded = ph.events_discarded;
		tail.ts_end = ph.timestamp_end;
		off += len;
	}
	close(fd);
	return ok;
}

unsigned mark_lost_tail(const std::string &dir, const uint8_t uuid[16], std::string &err)
{
	DIR *d = opendir(dir.c_str());
	if (!d) {
		err = "cannot open " + dir + ": " + strerror(errno);
		return 0;
	}
	std::vector<std::string> files;
	while (struct dirent *e = readdir(d))
		if (e->d_type == DT_REG && e->d_name[0] != '.' && strcmp(e->d_name, "metadata") != 0 &&
		    strchr(e->d_name, '_'))
			files.push_back(dir + "/" + e->d_name);
	closedir(d);
	unsigned marked = 0;
	for (const std::string &path : files) {
		PacketTail t;
		if (!stream_tail(path, uuid, t, err))
			return 0;
		if (!t.packets)
			continue;
		const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
		strata_packet_header ph;
		bool ok = fd >= 0 && pread(fd, &ph, sizeof ph, static_cast<off_t>(t.last_off)) ==
					     static_cast<ssize_t>(sizeof ph);
		if (ok) {
			// An empty packet: no event, and the gap in sequence numbers
			// is the mark (a CTF reader's "discarded packets").
			ph.timestamp_begin = ph.timestamp_end;
			ph.content_size = ph.packet_size = uint64_t(STRATA_PACKET_HEADER_SIZE) * 8;
			ph.packet_seq_num += 2;
			const off_t end = lseek(fd, 0, SEEK_END);
			ok = end >= 0 && pwrite(fd, &ph, sizeof ph, end) == static_cast<ssize_t>(sizeof ph);
			if (!ok && end >= 0 && ftruncate(fd, end) != 0)
				ok = false; // torn: the next repair cuts it
			// Its index entry too: an index that ends short of the
			// file is one babeltrace2 calls invalid.
			if (ok) {
				const int r = sync_ctf_index(path, static_cast<uint64_t>(end) + sizeof ph);
				if (r < 0)
					fprintf(stderr,
						"strata-consumerd: cannot bring the index of %s up to date: "
						"%s\n",
						path.c_str(), strerror(-r));
			}
		}
		if (!ok)
			err = "cannot mark " + path + ": " + strerror(errno);
		if (fd >= 0)
			close(fd);
		if (!ok)
			return 0;
		marked++;
	}
	return marked;
}

namespace {
// The uuid of the sub-trace in `dir`: its first stream file's first
// packet's.  False where none has a packet.
bool subtrace_uuid(const std::string &dir, uint8_t uuid[16])
{
	DIR *d = opendir(dir.c_str());
	if (!d)
		return false;
	bool found = false;
	while (struct dirent *e = readdir(d)) {
		if (e->d_type != DT_REG || e->d_name[0] == '.' || !strchr(e->d_name, '_'))
			continue;
		const int fd = open((dir + "/" + e->d_name).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		strata_packet_header ph;
		found = fd >= 0 && pread(fd, &ph, sizeof ph, 0) == static_cast<ssize_t>(sizeof ph) &&
			ph.magic == STRATA_CTF_MAGIC;
		if (fd >= 0)
			close(fd);
		if (found) {
			memcpy(uuid, ph.uuid, 16);
			break;
		}
	}
	closedir(d);
	return found;
}
} // namespace

unsigned mark_lost_tree(const std::string &dir, std::string &err)
{
	unsigned marked = 0;
	struct stat st;
	uint8_t uuid[16];
	if (stat((dir + "/metadata").c_str(), &st) == 0 && subtrace_uuid(dir, uuid)) {
		std::string e;
		marked += mark_lost_tail(dir, uuid, e);
		if (!e.empty())
			err += e + "\n";
	}
	DIR *d = opendir(dir.c_str());
	if (!d)
		return marked;
	std::vector<std::string> subs;
	while (struct dirent *e = readdir(d))
		if (e->d_type == DT_DIR && e->d_name[0] != '.' && strcmp(e->d_name, "index") != 0)
			subs.push_back(dir + "/" + e->d_name);
	closedir(d);
	for (const std::string &s : subs)
		marked += mark_lost_tree(s, err);
	return marked;
}

} // namespace strata
