/*
 * fs.h - the daemon's file-system helpers: who owns what it creates, and
 * mkdir -p.
 *
 * Contract: no state; any thread (the main thread for sessions and
 * snapshots, drain threads for sub-trace directories).
 */
#ifndef STRATA_CONSUMERD_FS_H
#define STRATA_CONSUMERD_FS_H

#include <cstdint>
#include <string>

namespace strata {

// Who owns what the daemon creates: a root daemon working for another user
// hands that user the directories and files (uid -1: leave as created).
struct Owner {
	int64_t uid = -1, gid = -1;
	void apply(int fd) const;
	void apply(const std::string &path) const;
};

// mkdir -p with `mode` for the directories it creates, given to `owner`.
// 0 or -errno.
int make_dirs(const std::string &path, unsigned mode, const Owner &owner = Owner());

} // namespace strata
#endif
