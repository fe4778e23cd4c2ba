/*
 * fs.cpp - the daemon's file-system helpers (fs.h).
 */
#include "fs.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/syscall.h>
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

AsOwner::AsOwner(const Owner &owner)
{
	if (owner.uid < 0)
		return;
	active_ = true;
	const uid_t u = static_cast<uid_t>(owner.uid);
	const gid_t g = static_cast<gid_t>(owner.gid);
	int n = getgroups(0, nullptr);
	groups_.resize(n > 0 ? static_cast<size_t>(n) : 0);
	if (n > 0 && getgroups(n, groups_.data()) != n)
		groups_.clear();
	// CAP_SETGID and CAP_SETUID are not file-system capabilities: a
	// nonzero fsuid keeps them, so the destructor can come back.
	ok_ = syscall(SYS_setgroups, 0, nullptr) == 0;
	gid_ = static_cast<gid_t>(setfsgid(g));
	uid_ = static_cast<uid_t>(setfsuid(u));
	// setfsuid answers the previous value whatever happened: ask again.
	ok_ = ok_ && static_cast<uid_t>(setfsuid(u)) == u && static_cast<gid_t>(setfsgid(g)) == g;
}

AsOwner::~AsOwner()
{
	if (!active_)
		return;
	// Back to root's fsuid first: that gives the thread its file-system
	// capabilities back (capabilities(7), "Effect of user ID changes").
	setfsuid(uid_);
	setfsgid(gid_);
	if (syscall(SYS_setgroups, groups_.size(), groups_.data()) != 0)
		fprintf(stderr, "strata-consumerd: cannot restore this thread's groups: %s\n",
			strerror(errno));
}

int make_dirs(const std::string &path, unsigned mode, const Owner &owner)
{
	AsOwner as(owner);
	if (!as.ok())
		return -EPERM;
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

bool write_all(int fd, const void *p, size_t n)
{
	const char *c = static_cast<const char *>(p);
	while (n) {
		ssize_t w = write(fd, c, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w == 0)
			errno = ENOSPC; // stored nothing, said nothing: a full disk
		if (w <= 0)
			return false;
		c += w;
		n -= static_cast<size_t>(w);
	}
	return true;
}

int replace_file(const std::string &tmp, const std::string &path)
{
	if (renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_EXCHANGE) == 0) {
		unlink(tmp.c_str()); // the old text (a kill before this leaves it there)
		return 0;
	}
	// ENOENT: no path yet; EINVAL: a file system that cannot swap.
	return rename(tmp.c_str(), path.c_str());
}

} // namespace strata
