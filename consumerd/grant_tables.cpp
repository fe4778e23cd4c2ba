/*
 * grant_tables.cpp - the grant tables (grant_tables.h).
 */
#include "grant_tables.h"

#include <cerrno>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <set>
#include <unistd.h>

#include "fs.h"
#include "log.h"
#include "process_registry.h"
#include "session_table.h"
#include "strata_abi.h"

namespace strata {
namespace daemon_impl {

namespace {

void put_le(std::vector<uint8_t> &v, uint64_t x, int n)
{
	for (int i = 0; i < n; i++)
		v.push_back(static_cast<uint8_t>(x >> (8 * i)));
}

// A session whose rules target pids or names, or scoped to a process tree:
// what it grants depends on the process (reaches, rules_for), so no table
// can say it.
bool targeted(const Session &s)
{
	if (s.tree > 0) // the process tree: the daemon looks at each process
		return true;
	for (const Target &t : s.targets)
		if (!t.pids.empty() || !t.names.empty())
			return true;
	return false;
}

} // namespace

std::string GrantTables::table_path(uid_t uid) const
{
	return path_ + proto::kTableSuffix + std::to_string(uid);
}

// The table's content for `uid`, without its generation: flags, then the
// REGISTER_REPLY message a process of that uid would get now (uuids zero).
static std::vector<uint8_t> table_content(const SessionTable &sessions, uid_t uid)
{
	uint16_t flags = 0;
	proto::RegisterReply rr;
	for (const auto &s : sessions.all()) {
		if (s->state != proto::SessionState::Active || s->stopping || !(s->uid == 0 || s->uid == uid))
			continue;
		// Targeted rules: the answer depends on the process.  An
		// aggregation: the table's version 1 message cannot carry it,
		// and its region is handed over on a round trip's connection.
		if (targeted(*s) || !s->aggregate.empty())
			flags |= proto::kTableAsk;
		proto::SessionGrant g;
		g.slot = s->slot;
		g.session_id = s->run_id;
		g.channel = s->channel;
		g.rules = s->rules;
		rr.sessions.push_back(std::move(g));
	}
	proto::Message m;
	m.version = proto::kProcessVersion;
	m.body = std::move(rr);
	std::vector<uint8_t> v;
	put_le(v, flags, 2);
	const std::vector<uint8_t> msg = proto::encode(m);
	v.insert(v.end(), msg.begin(), msg.end());
	return v;
}

void GrantTables::publish(const SessionTable &sessions, const ProcessRegistry &procs, int clock_fd)
{
	if (!dirty_)
		return;
	dirty_ = false;
	const uid_t me = geteuid();
	std::set<uid_t> uids{me};
	for (const auto &s : sessions.all())
		uids.insert(s->uid);
	for (const auto &p : procs.all())
		uids.insert(p.second.uid);
	for (const auto &t : tables_)
		uids.insert(t.first);
	for (uid_t uid : uids) {
		// Only a file its reader can trust: owned by that uid (or by us
		// as root); an unprivileged daemon writes its own uid's only.
		if (me != 0 && uid != me)
			continue;
		std::vector<uint8_t> content = table_content(sessions, uid);
		Table &t = tables_[uid];
		if (t.written && t.content == content)
			continue;
		const uint64_t gen = ++gen_;
		std::vector<uint8_t> file;
		put_le(file, proto::kTableMagic, 4);
		put_le(file, proto::kVersion, 2);
		file.insert(file.end(), content.begin(), content.begin() + 2); // flags
		put_le(file, STRATA_ABI_MAJOR, 4);
		put_le(file, static_cast<uint32_t>(getpid()), 4);
		put_le(file, gen, 8);
		put_le(file, static_cast<uint32_t>(clock_fd), 4);
		put_le(file, 0, 4);
		file.insert(file.end(), content.begin() + 2, content.end());
		const std::string path = table_path(uid), tmp = path + ".tmp";
		unlink(tmp.c_str());
		int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0400);
		bool ok = fd >= 0 && (me != 0 || uid == 0 || fchown(fd, uid, static_cast<gid_t>(-1)) == 0) &&
			  write_all(fd, file.data(), file.size());
		if (fd >= 0)
			close(fd);
		ok = ok && replace_file(tmp, path) == 0;
		if (!ok) {
			// Processes of this uid ask with a round trip instead.
			logf("cannot publish the grant table %s: %s", path.c_str(), strerror(errno));
			unlink(tmp.c_str());
			unlink(path.c_str());
			t.written = false;
			continue;
		}
		t.content = std::move(content);
		t.gen = gen;
		t.written = true;
	}
}

// At start (a crashed daemon's tables name runs that are gone) and at exit.
void GrantTables::remove()
{
	const size_t slash = path_.rfind('/');
	const std::string dir = slash == std::string::npos ? "." : path_.substr(0, slash);
	const std::string prefix =
		(slash == std::string::npos ? path_ : path_.substr(slash + 1)) + proto::kTableSuffix;
	if (DIR *d = opendir(dir.c_str())) {
		while (struct dirent *e = readdir(d))
			if (strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0)
				unlinkat(dirfd(d), e->d_name, 0);
		closedir(d);
	}
	tables_.clear();
}

bool GrantTables::joined(uid_t uid, uint64_t gen, bool quiet)
{
	n_joins_++;
	n_quiet_joins_ += quiet;
	auto t = tables_.find(uid);
	return !dirty_ && t != tables_.end() && t->second.written && t->second.gen == gen;
}

// BUFFER on a table connection: the session it names must be active in
// that slot now, open to the peer's uid and grantable from a table (no
// targets); the trace uuid is the buffer's own.
bool GrantTables::grant(const SessionTable &sessions, uid_t uid, const proto::Buffer &m, int fd, Grant &grant)
{
	for (const auto &s : sessions.all()) {
		if (s->slot != m.slot || s->run_id != m.session_id ||
		    s->state != proto::SessionState::Active || !(s->uid == 0 || s->uid == uid))
			continue;
		if (targeted(*s))
			return false;
		return grant_of_buffer(s->run_id, fd, grant);
	}
	return false;
}

bool grant_of_buffer(uint64_t run_id, int fd, Grant &grant)
{
	grant.session_id = run_id;
	strata_buffer_header h;
	if (fd >= 0) {
		if (pread(fd, &h, sizeof h, 0) != static_cast<ssize_t>(sizeof h))
			return false;
		memcpy(grant.uuid, h.trace_uuid, 16);
	}
	return true;
}

} // namespace daemon_impl
} // namespace strata
