/*
 * access.cpp - who may do what on this daemon (access.h's contract).
 */
#include "access.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77 // Linux 6.5
#endif

namespace strata {
namespace daemon_impl {

bool serves_all_users()
{
	return geteuid() == 0;
}

unsigned socket_dir_mode()
{
	return serves_all_users() ? 0755 : 0700;
}

unsigned socket_mode()
{
	return serves_all_users() ? 0666 : 0600;
}

void open_socket_dir(const std::string &dir, bool made)
{
	if (!serves_all_users())
		return;
	struct stat st;
	const bool system_dir = dir == "/run/strata";
	if ((made || system_dir) && lstat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == 0 &&
	    (st.st_mode & 07777) != 0755)
		chmod(dir.c_str(), 0755);
}

int slot_share(uid_t uid, const std::vector<uid_t> &owners, uint32_t foreign_busy, std::string &why)
{
	if (uid == 0 || !serves_all_users())
		return 0;
	// Slots users hold in the module directly leave no room here either:
	// counted with theirs, so that root keeps kSlotsForRoot free in both.
	unsigned mine = 0, users = static_cast<unsigned>(__builtin_popcount(foreign_busy));
	for (uid_t o : owners) {
		users += o != 0;
		mine += o == uid;
	}
	if (mine >= kSlotsPerUser) {
		why = "you hold " + std::to_string(mine) +
		      " sessions, a user's share of this daemon's 16 slots; destroy one first";
		return -EDQUOT;
	}
	if (users >= 16 - kSlotsForRoot) {
		why = "users hold " + std::to_string(users) +
		      " of the 16 session slots (this daemon's and the kernel module's), the rest is kept "
		      "for root";
		return -EDQUOT;
	}
	return 0;
}

int user_may_create(uid_t uid, const std::string &path, std::string &why)
{
	std::string anc = path;
	struct stat st;
	while (anc.size() > 1 && lstat(anc.c_str(), &st) != 0)
		anc = anc.substr(0, std::max<size_t>(anc.rfind('/'), 1));
	if (lstat(anc.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == uid)
		return 0;
	why = "the output directory must be inside a directory you own (" + anc + " is not)";
	return -EACCES;
}

int rule_allowed(uid_t uid, const std::string &pattern, bool enable, std::string &why)
{
	if (uid == 0 || !serves_all_users() || !enable || pattern.compare(0, 7, "kernel:") != 0)
		return 0;
	why = "kernel events show every process: only root's sessions record them on root's daemon (" +
	      pattern + ")";
	return -EPERM;
}

namespace {

// 1: the same file, 0: not, -1: `a` may not be looked at (a daemon that is
// not root and a peer of another uid: /proc/PID/ns needs ptrace access).
int same_file(const char *a, const struct stat &sb)
{
	struct stat sa;
	if (stat(a, &sa) != 0)
		return errno == EACCES || errno == EPERM ? -1 : 0;
	return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

// The peer's own pidfd (SO_PEERPIDFD: the process that connected, whatever
// became of its pid), else one opened by pid (a kernel before 6.5: the pid
// may have been reused between its connect and now); -1 if it is gone.
int peer_pidfd(int fd, pid_t pid)
{
	int pidfd = -1;
	socklen_t l = sizeof pidfd;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &l) == 0 && pidfd >= 0)
		return pidfd;
	return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
}

} // namespace

bool peer_in_our_pidns(int fd, const struct ucred &cred, std::string &why)
{
	if (cred.pid <= 0) { // not visible from here: an outer or a sibling namespace
		why = "its pid is not visible in the daemon's pid namespace";
		return false;
	}
	struct stat self;
	if (stat("/proc/self/ns/pid", &self) != 0)
		return true; // no /proc: nothing tells namespaces apart (docs/security.md)
	const int pidfd = peer_pidfd(fd, cred.pid);
	if (pidfd < 0) {
		why = "it exited";
		return false;
	}
	const std::string ns = "/proc/" + std::to_string(cred.pid) + "/ns/pid";
	// A daemon that is not root serves its own user only (its socket is
	// 0600): a peer it may not look at is root, let through.
	const int cmp = same_file(ns.c_str(), self);
	const bool same = cmp == 1 || (cmp < 0 && !serves_all_users());
	// Read after the namespace: the process is alive (0, or EPERM for a
	// process we may not signal), so the pid read above was still its own.
	const bool alive = syscall(SYS_pidfd_send_signal, pidfd, 0, nullptr, 0) == 0 || errno == EPERM;
	close(pidfd);
	if (!alive) {
		why = "it exited";
		return false;
	}
	if (!same)
		why = "it is in another pid namespace (a container)";
	return same;
}

} // namespace daemon_impl
} // namespace strata
