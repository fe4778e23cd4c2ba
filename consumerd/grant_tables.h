/*
 * grant_tables.h - the grant tables: what a state query would grant, in a
 * file per uid, so that a starting process joins with no round trip
 * (docs/control-protocol.md, "The grant table"; the layout is proto.h's,
 * kTableMagic).
 *
 * Contract:
 *   - owns the table files ("<socket>" kTableSuffix uid), what each holds
 *     and its generation, the dirty mark and the join counters;
 *   - main thread only.  Anything that may change what a REGISTER would
 *     grant (a controller's command, a trigger's tick, a session's stop, a
 *     process of a uid not seen yet) marks the tables dirty; publish()
 *     rewrites the files whose content changed, before the controller's
 *     answer leaves and at the end of each turn of the event loop;
 *   - it reads the session table and the process registry, never changes
 *     them.  A file is replaced whole (write, then rename), so a reader
 *     sees one table or the next, never a mix.  Its generation is this
 *     daemon's counter at the write; a REGISTER(kRegisterTable) naming an
 *     older one is stale (fresh() is false: the process read the table just
 *     before a change), and its BUFFERs are checked one by one against the
 *     sessions that are active now (grant).
 */
#ifndef STRATA_CONSUMERD_GRANT_TABLES_H
#define STRATA_CONSUMERD_GRANT_TABLES_H

#include <cstdint>
#include <map>
#include <string>
#include <sys/types.h>
#include <vector>

#include "proto/proto.h"

namespace strata {
namespace daemon_impl {

class SessionTable;
class ProcessRegistry;

// What a process was granted for a slot: the session's run id and the
// trace uuid of its buffer.
struct Grant {
	uint64_t session_id = 0;
	uint8_t uuid[16] = {};
};
// A grant the process made itself (the module's, the grant table's): the
// session's run id and the trace uuid in the buffer's header.
bool grant_of_buffer(uint64_t run_id, int fd, Grant &grant);

class GrantTables {
public:
	explicit GrantTables(std::string socket_path) : path_(std::move(socket_path)) {}

	void dirty() { dirty_ = true; }
	// A process of `uid` is known: a uid with no table yet gets one.
	void saw_uid(uid_t uid)
	{
		if (!tables_.count(uid))
			dirty_ = true;
	}
	// The files brought up to date, if dirty.
	void publish(const SessionTable &sessions, const ProcessRegistry &procs, int clock_fd);
	// Every file of this socket's (at start: a crashed daemon's; at exit).
	void remove();
	// REGISTER(kRegisterTable) at generation `gen` from a process of
	// `uid` (counted; quiet: from the quiet socket): is that table current?
	bool joined(uid_t uid, uint64_t gen, bool quiet);
	// BUFFER on a table connection: the session it names must be active
	// in that slot now, open to `uid` and grantable from a table.
	static bool grant(const SessionTable &sessions, uid_t uid, const proto::Buffer &m, int fd,
			  Grant &grant);

	uint64_t joins() const { return n_joins_; }
	uint64_t quiet_joins() const { return n_quiet_joins_; }

private:
	std::string table_path(uid_t uid) const;
	struct Table {
		std::vector<uint8_t> content; // flags + message, as last written
		uint64_t gen = 0;
		bool written = false;
	};
	std::string path_;
	std::map<uid_t, Table> tables_;
	uint64_t gen_ = 0;
	bool dirty_ = true;
	uint64_t n_joins_ = 0;
	uint64_t n_quiet_joins_ = 0; // of those, sent to the quiet socket
};

} // namespace daemon_impl
} // namespace strata
#endif
