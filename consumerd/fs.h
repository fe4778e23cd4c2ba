/*
 * fs.h - the daemon's file-system helpers: who owns what it creates, whose
 * rights it creates them with, mkdir -p, and a write of all the bytes.
 *
 * Contract: no state; any thread (the main thread for sessions and
 * snapshots, drain threads for sub-trace directories).  AsOwner changes
 * the calling thread's file-system identity only (Linux keeps fsuid,
 * fsgid and the groups per thread; the raw syscalls, not glibc's
 * all-threads setgroups), for its own scope: a drain thread that serves
 * several users' sessions takes each one's identity in turn, never two.
 */
#ifndef STRATA_CONSUMERD_FS_H
#define STRATA_CONSUMERD_FS_H

#include <cstdint>
#include <string>
#include <sys/types.h>
#include <vector>

namespace strata {

// Who owns what the daemon creates: a root daemon working for another user
// hands that user the directories and files (uid -1: leave as created).
struct Owner {
	int64_t uid = -1, gid = -1;
	void apply(int fd) const;
	void apply(const std::string &path) const;
};

// Root's daemon working for a user does every path operation in that
// user's sessions with the user's rights (docs/security.md, "Whose
// files"): for the guard's life the calling thread's fsuid and fsgid are
// the owner's and it has no supplementary groups, so a path the user
// swapped for a link into root's tree (/etc) resolves with the user's
// rights and fails (EACCES) instead of writing there as root.  No-op for
// uid -1 (root's own sessions, a daemon that is not root's).
class AsOwner {
public:
	explicit AsOwner(const Owner &owner);
	~AsOwner();
	AsOwner(const AsOwner &) = delete;
	AsOwner &operator=(const AsOwner &) = delete;
	// False when the identity could not be taken: do nothing then.
	bool ok() const { return ok_; }

private:
	bool active_ = false, ok_ = true;
	uid_t uid_ = 0; // the thread's before
	gid_t gid_ = 0;
	std::vector<gid_t> groups_;
};

// mkdir -p with `mode` for the directories it creates, given to `owner`
// and made with `owner`'s rights (AsOwner).  0 or -errno.
int make_dirs(const std::string &path, unsigned mode, const Owner &owner = Owner());

// All n bytes at p written to fd (EINTR retried), or false with errno set
// (ENOSPC for a write that stored nothing and said nothing: a full disk).
bool write_all(int fd, const void *p, size_t n);

// rename(tmp, path) for a small file the daemon rewrites while it runs
// (its session files, its grant tables, <socket>.active): what must
// survive is the daemon's death, not a power loss.  Where path exists
// the two names are swapped (RENAME_EXCHANGE) and the old file, now at
// tmp, removed: a rename over an existing file makes ext4 start writing
// the new file's data out at once (auto_da_alloc), and the replaced file,
// written out by the last one, is then freed (a discard on a disk mounted
// so): 125 against 61 us of CPU a save on the test VM, 213 against 62 us
// of wall (docs/crash.md).  Killed between the two steps, the daemon
// leaves the old text at tmp, as a kill before the rename leaves the new
// one.  A plain rename where path does not exist or the file system
// cannot swap.  0 or -1 with errno set.
int replace_file(const std::string &tmp, const std::string &path);

} // namespace strata
#endif
