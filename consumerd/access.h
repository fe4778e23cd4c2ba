/*
 * access.h - who may do what on this daemon (docs/security.md).
 *
 * Contract: main thread only; every answer is computed from the peer's
 * credentials (SO_PEERCRED, SO_PEERPIDFD), never from a payload.
 *
 *   - A root daemon serves every user: its socket (and the quiet one) is
 *     0666 in a 0755 directory.  Another daemon serves its own user only:
 *     0600 in 0700.
 *   - A controller acts on its own uid's sessions; root on all.  A session
 *     of another user is never named to a controller: the same answer as a
 *     name that does not exist.  Names are unique per uid.
 *   - Sessions take slots (0..15, also the kernel module's); on a root
 *     daemon a user holds at most kSlotsPerUser and users together leave
 *     kSlotsForRoot to root, as the module does (strata_kabi.h).
 *   - A peer in another pid namespace than the daemon's (a container that
 *     reaches the socket by a bind mount) is a producer only: it registers
 *     and hands buffers over, it never controls, lists or reads sessions.
 */
#ifndef STRATA_CONSUMERD_ACCESS_H
#define STRATA_CONSUMERD_ACCESS_H

#include <cstdint>
#include <string>
#include <sys/socket.h>
#include <sys/types.h>
#include <vector>

namespace strata {
namespace daemon_impl {

constexpr unsigned kSlotsPerUser = 4; // = STRATA_KABI_SLOTS_PER_UID
constexpr unsigned kSlotsForRoot = 4; // = STRATA_KABI_SLOTS_ADMIN

// Does this daemon serve other users than its own (it runs as root)?
bool serves_all_users();

// The modes of the socket's directory (when made, or the system one) and
// of the socket, set by chmod after a bind under umask 077 (the umask is
// the process's: a wider one would reach files other threads create).
unsigned socket_dir_mode();
unsigned socket_mode();
// A root daemon's directory made 0700 by an older daemon: opened to 0755
// if it is root's and one of the default directories (never a directory
// given with --socket or $STRATA_CONSUMERD_SOCKET that we did not make).
void open_socket_dir(const std::string &dir, bool made);

// Root's daemon writes for user `uid` (a session's directory, a snapshot's)
// only where that user could: the nearest existing ancestor of `path` must
// be a real directory (not a link) the user owns.  0, or -EACCES with `why`.
int user_may_create(uid_t uid, const std::string &path, std::string &why);

// A new session (or a snapshot companion) of `uid`, given the owners of
// every session of the daemon and the module's slots set by others (bit n:
// slot n, kernel_busy_slots: counted as users', whoever set them): 0, or
// -EDQUOT with `why`.
int slot_share(uid_t uid, const std::vector<uid_t> &owners, uint32_t foreign_busy, std::string &why);

// A rule for a session of `uid`: 0, or -EPERM with `why`.  Kernel events
// show every process: on a root daemon (whose module slots are an admin's)
// only root's sessions may enable them.
int rule_allowed(uid_t uid, const std::string &pattern, bool enable, std::string &why);

// Is the peer on `fd` (credentials `cred`) in the daemon's pid namespace?
// False when it is not or when that cannot be told for sure (it exited, its
// pid was reused); `why` says which.
bool peer_in_our_pidns(int fd, const struct ucred &cred, std::string &why);

} // namespace daemon_impl
} // namespace strata
#endif
