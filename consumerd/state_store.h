/*
 * state_store.h - the daemon's sessions kept where its own crash cannot
 * lose them: one small file per session in `<socket>.state/`, replaced
 * atomically (a new file renamed over the old one; no fsync: state_store.cpp) whenever what
 * it says changed.  A daemon that starts after one that died reads them
 * back and takes the sessions up again (reattach.h, docs/crash.md, "The
 * daemon dies").
 *
 * Contract: main thread only (no locking).  The files are the daemon's own
 * (directory 0700, files 0600), but read back as hostile text: every line
 * is parsed with bounds, a file that does not parse whole is ignored and
 * named in the errors.
 */
#ifndef STRATA_CONSUMERD_STATE_STORE_H
#define STRATA_CONSUMERD_STATE_STORE_H

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "metadata.h"
#include "proto/proto.h"

namespace strata {

// One buffer being drained: the process that holds it and where its
// sub-trace is.
struct BufferRecord {
	uint32_t pid = 0;
	uint64_t start_time = 0;   // /proc/PID/stat field 22: a reused pid is not ours
	uint64_t dev = 0, ino = 0; // the memfd (Drain::buffer_dev/ino)
	uint8_t uuid[16] = {};
	int32_t signo = 0; // its update signal (tp-async), 0 if none
	bool kmod = false; // it joined through the kernel module (Proc::kmod)
	uint32_t uid = 0;
	std::string comm;
	std::string dir;
};

struct TargetRecord {
	std::vector<uint32_t> pids;
	std::vector<std::string> names;
};

struct SessionRecord {
	std::string name;
	uint64_t id = 0, run_id = 0;
	uint32_t slot = 0;
	uint32_t uid = 0;
	int64_t owner_uid = -1, owner_gid = -1; // Session::owner
	std::string out;
	proto::ChannelConfig channel;
	std::vector<proto::Rule> rules;
	std::vector<TargetRecord> targets; // one per rule
	ClockInfo clock;
	// An aggregation session's spec and filter ("" none; line "aggregate",
	// written only for one).  Its regions are not kept: the processes'
	// descriptors die with the daemon.
	std::string aggregate, agg_filter;
	// Owned by a controller's connection (kCreateOwned): the controller's
	// pid, which a restarted daemon watches instead of the lost connection.
	uint32_t owner_pid = 0;
	// A process-tree session (kCreateTree): its root's pid (line "tree",
	// written only for one), 0 for none.
	uint32_t tree = 0;
	std::vector<BufferRecord> buffers;
	// The session's kernel buffer (kernel_source.h), when one was drained:
	// its trace uuid and sub-trace, which a restarted daemon continues if
	// the module kept the slot (kernel_resume).
	bool kernel = false;
	uint8_t kernel_uuid[16] = {};
	std::string kernel_dir;
	// Not taken up by a restarted daemon, which only names it (`strata
	// status`): why ("streamed to ..."); "" for a session it takes up.
	std::string unkept;
	// The session's snapshot trigger (its pattern), which is not kept.
	std::string trigger;
};

class StateStore {
public:
	// `dir`: "<socket>.state"; made (0700) at the first save.
	explicit StateStore(std::string dir) : dir_(std::move(dir)) {}
	const std::string &dir() const { return dir_; }
	// Written only if it differs from what this store last wrote.
	// False (errno) if it could not be written.
	bool save(const SessionRecord &r);
	void remove(const std::string &name);
	// Every session file, parsed (and then this store's: a later save
	// without that session removes it); unreadable ones named in `errors`
	// and renamed to `<file>.ignored`, so that they are read only once.
	std::vector<SessionRecord> load(std::vector<std::string> &errors);
	// Forget what was written (the files stay): the next save writes.
	void forget() { written_.clear(); }
	// Names of the sessions this store wrote and still has.
	std::vector<std::string> names() const;

	static std::string encode(const SessionRecord &r);
	static bool decode(const std::string &text, SessionRecord &r, std::string &err);

private:
	std::string dir_;
	std::map<std::string, std::string> written_; // name -> text on disk
};

} // namespace strata
#endif
