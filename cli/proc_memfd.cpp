/*
 * proc_memfd.cpp - a process's memfds of one name, mapped read-only
 * (proc_memfd.h).
 */
#include "proc_memfd.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace strata {

std::vector<Region> find_memfds(uint32_t pid, const char *name, std::string *err)
{
	std::vector<Region> out;
	const std::string prefix = std::string("/memfd:") + name;
	const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
	DIR *d = opendir(dir.c_str());
	if (!d) {
		*err = "cannot read " + dir + ": " + strerror(errno);
		return out;
	}
	// Relative to the directory (readlinkat, openat): the kernel walks
	// /proc/PID/fd once, not once per descriptor (strata list reads every
	// live process's: 10,000 of them).
	const int dfd = dirfd(d);
	while (dirent *e = readdir(d)) {
		if (e->d_name[0] == '.')
			continue;
		char target[256];
		ssize_t n = readlinkat(dfd, e->d_name, target, sizeof target - 1);
		if (n < 0 && (errno == EACCES || errno == EPERM)) {
			// The directory lists, its links do not: a non-dumpable
			// process, to a reader without CAP_SYS_PTRACE (root in a
			// container, or one that dropped it).  Not "no region".
			*err = "cannot read " + dir + "/" + e->d_name + ": " + strerror(errno);
			break;
		}
		if (n <= 0)
			continue; // closed meanwhile
		target[n] = 0;
		if (strncmp(target, prefix.c_str(), prefix.size()) != 0 ||
		    (target[prefix.size()] != 0 && target[prefix.size()] != ' '))
			continue;
		const std::string path = dir + "/" + e->d_name;
		int fd = openat(dfd, e->d_name, O_RDONLY | O_CLOEXEC);
		struct stat st;
		if (fd < 0 && (errno == EACCES || errno == EPERM)) {
			*err = "cannot open " + path + ": " + strerror(errno);
			break;
		}
		if (fd < 0 || fstat(fd, &st) != 0 || st.st_size <= 0) {
			if (fd >= 0)
				close(fd);
			continue;
		}
		void *m = mmap(nullptr, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
		close(fd); // the mapping keeps the memory
		if (m == MAP_FAILED)
			continue;
		out.push_back(Region{path, m, (size_t)st.st_size});
	}
	closedir(d);
	std::sort(out.begin(), out.end(),
		  [](const Region &a, const Region &b) { return a.fd_path < b.fd_path; });
	return out;
}

} // namespace strata
