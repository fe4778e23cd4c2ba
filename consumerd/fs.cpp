/*
 * fs.cpp - the daemon's file-system helpers (fs.h).
 */
#include "fs.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sys/stat.h>
#include <unistd.h>

namespace strata {

void Owner::apply(int fd) const
{
	if (uid >= 0 && fchown(fd, static_cast<uid_t>(uid), static_cast<gid_t>(gid)) < 0)
		fprintf(stderr, "strata-consumerd: fchown: %s\n", strerror(errno));
}

void Owner::apply(const std::string &path) const
{
	if (uid >= 0 && lchown(path.c_str(), static_cast<uid_t>(uid), static_cast<gid_t>(gid)) < 0)
		fprintf(stderr, "strata-consumerd: chown %s: %s\n", path.c_str(), strerror(errno));
}

int make_dirs(const std::string &path, unsigned mode, const Owner &owner)
{
	// The usual case, a sub-trace in an existing ust/pid/: one mkdir, not
	// one per component plus a stat (each a path walk on the daemon's
	// share of a process start).
	if (mkdir(path.c_str(), mode) == 0) {
		owner.apply(path);
		return 0;
	}
	if (errno != ENOENT && errno != EEXIST)
		return -errno;
	size_t pos = 0;
	while (pos != std::string::npos) {
		pos = path.find('/', pos + 1);
		std::string cur = path.substr(0, pos);
		if (cur.empty())
			continue;
		if (mkdir(cur.c_str(), mode) == 0)
			owner.apply(cur);
		else if (errno != EEXIST)
			return -errno;
	}
	struct stat st;
	if (stat(path.c_str(), &st) < 0)
		return -errno;
	return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

} // namespace strata
