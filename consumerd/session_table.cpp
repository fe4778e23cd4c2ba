/*
 * session_table.cpp - the session table (session_table.h): sessions and
 * their outputs.
 *
 * A session owns its drains (one per attached buffer, drain.h);
 * stop_session finishes them, and the session's directories are in
 * "<socket>.active" while it is active.  A session made with a relay
 * (CREATE version 3) streams instead of writing its directory: its link to
 * lttng-relayd is opened at CREATE (an absent relay is CREATE's error) and
 * each drain gets a relay output (attach_output); docs/relay.md.  A
 * session made with a serial line (the relay field "serial:DEVICE[,BAUD]")
 * streams the same way over its SerialLink (serial.h, docs/serial.md).
 */
#include "session_table.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access.h"
#include "filter_check.h"
#include "fs.h"
#include "log.h"
#include "process_registry.h"
#include "repair.h"
#include "strata_abi.h"

namespace strata {
namespace daemon_impl {

namespace {
constexpr uint32_t kLiveTimerUs = 1000000; // relay sessions: beacon period of quiet streams (docs/relay.md)
} // namespace

// A change that reaches the processes `s` targets (rule >= 0: that rule's),
// with the module generation it made.
Answer SessionTable::changed(const Session &s, std::string text, int rule)
{
	Answer a;
	a.text = std::move(text);
	a.notify = true;
	a.who = s;
	a.rule = rule;
	a.kgen = take_kgen();
	return a;
}

// Names are unique per uid (access.h): a controller finds its own session
// of that name; root, its own first, else another user's.  A session the
// controller may not see answers as a name that does not exist.
Session *SessionTable::find(const Caller &c, const std::string &name, Answer &err)
{
	Session *found = nullptr;
	for (auto &s : sessions_)
		if (s->name == name && !s->companion_of && visible(c, *s) && (!found || s->uid == c.uid))
			found = s.get();
	if (!found)
		err = answer(-ENOENT, "no session named '" + name + "'");
	return found;
}

Session *SessionTable::by_run(uint64_t run_id)
{
	Session *s = nullptr;
	for (auto &x : sessions_)
		if (x->run_id == run_id)
			s = x.get();
	return s;
}

// A BUFFER from a process the module answers names its slot: the session
// is ours in that slot, active, visible to the peer and set in the module.
Session *SessionTable::active_in_slot(uint32_t slot, uid_t uid)
{
	for (auto &x : sessions_)
		if (x->slot == slot && x->state == proto::SessionState::Active &&
		    (x->uid == 0 || x->uid == uid) && kernel_grants(slot))
			return x.get();
	return nullptr;
}

// The first slot from `from` on that neither another daemon's sessions in
// the module nor ours (but `except`) use; kMaxSlots if none.
uint32_t SessionTable::free_slot(uint32_t from, const Session *except) const
{
	uint32_t used = kernel_busy_slots();
	for (auto &x : sessions_)
		if (x.get() != except)
			used |= 1u << x->slot;
	uint32_t slot = from;
	while (slot < proto::kMaxSlots && (used & (1u << slot)))
		slot++;
	return slot;
}

// One more slot for `uid` within its share (access.h): 0, or -EDQUOT with
// `why`.
int SessionTable::share(uid_t uid, std::string &why) const
{
	std::vector<uid_t> owners;
	for (auto &x : sessions_)
		owners.push_back(x->uid);
	return slot_share(uid, owners, kernel_busy_slots(), why);
}

// CREATE's link to its relay or serial line, if it names one.
Answer SessionTable::open_links(const Caller &c, const proto::Create &m, std::shared_ptr<RelayLink> &link,
				std::shared_ptr<SerialLink> &line)
{
	std::string err;
	if (is_serial_target(m.relay)) {
		SerialTarget t;
		if (!parse_serial_target(m.relay, t, err))
			return answer(-EINVAL, err);
		const bool for_user = c.uid != 0 && geteuid() == 0;
		line = SerialLink::open(t, for_user ? static_cast<int64_t>(c.uid) : -1,
					m.channel.subbuf_size ? m.channel.subbuf_size : serial_subbuf_size(t),
					err);
		if (!line)
			return answer(-EIO, err);
	} else if (!m.relay.empty()) {
		RelayTarget t;
		if (!parse_relay_target(m.relay, t, err))
			return answer(-EINVAL, err);
		link = RelayLink::open(t, m.session, m.hostname.empty() ? cfg_.hostname : m.hostname,
				       kLiveTimerUs, err);
		if (!link)
			return answer(-ECONNREFUSED, err);
	}
	return Answer();
}

// CREATE's output directory: made (not for a streamed session; `made`
// says whether this made it), and for a root daemon working for a user,
// only where that user could write.
Answer SessionTable::check_output(const Caller &c, const proto::Create &m, bool streamed, Owner &owner,
				  bool &made)
{
	struct stat st;
	const bool existed = stat(m.output_dir.c_str(), &st) == 0;
	made = !existed && !streamed;
	if (c.uid != 0 && geteuid() == 0) {
		// A root daemon writes for a user only where that user could:
		// under a directory the user owns.
		std::string why;
		if (int e = user_may_create(c.uid, m.output_dir, why))
			return answer(e, why);
		owner.uid = c.uid;
		owner.gid = c.gid;
	}
	const int r = streamed ? 0 : make_dirs(m.output_dir, 0750, owner);
	if (r < 0)
		return answer(r, "cannot create " + m.output_dir + ": " + strerror(-r));
	if (existed && !streamed) {
		AsOwner as(owner); // the user's files, with the user's rights
		RepairStats rs = as.ok() ? repair_tree(m.output_dir) : RepairStats();
		if (rs.repaired)
			INFO("repaired %llu torn stream file(s) under %s",
			     static_cast<unsigned long long>(rs.repaired), m.output_dir.c_str());
		if (rs.damaged)
			INFO("%llu stream file(s) under %s damaged inside, left as they are",
			     static_cast<unsigned long long>(rs.damaged), m.output_dir.c_str());
	}
	return Answer();
}

Answer SessionTable::create(const Caller &c, const proto::Create &m)
{
	for (auto &s : sessions_)
		if (s->name == m.session && s->uid == c.uid && !s->companion_of)
			return answer(-EEXIST, "a session named '" + m.session + "' already exists");
	if ((m.flags & proto::kCreateTree) && c.pid <= 0)
		return answer(-EINVAL, "a process-tree session needs the caller's pid, which is unknown");
	std::string why;
	if (int e = share(c.uid, why))
		return answer(e, why);
	const uint32_t slot = free_slot(0);
	if (slot == proto::kMaxSlots)
		return answer(-ENOSPC, "all 16 session slots are in use");
	std::shared_ptr<RelayLink> link;
	std::shared_ptr<SerialLink> line;
	Answer a = open_links(c, m, link, line);
	Owner owner;
	bool made = false;
	if (a.status == 0)
		a = check_output(c, m, link || line, owner, made);
	if (a.status != 0)
		return a;
	auto s = std::make_unique<Session>();
	s->id = next_session_id_++;
	s->name = m.session;
	s->slot = slot;
	s->uid = c.uid;
	s->out = m.output_dir;
	s->made_out = made;
	s->channel = m.channel;
	if (line && !s->channel.subbuf_size)
		s->channel.subbuf_size = serial_subbuf_size(line->target());
	s->clock = have_clock_ ? clock_ : measure_session_clock();
	s->owner = owner;
	if (m.flags & proto::kCreateOwned)
		s->owner_conn = c.conn_id;
	if (m.flags & proto::kCreateTree)
		s->tree = c.pid;
	s->aggregate = m.aggregate; // before the hooks below, which look at it
	s->agg_filter = m.agg_filter;
	if (link) {
		s->relay = std::move(link);
		s->live_timer_us = kLiveTimerUs;
		host_.relay_opened(*s);
	}
	s->serial = std::move(line);
	if (s->serial)
		host_.serial_opened(*s);
	a.text = trace_place(*s);
	INFO("session %s created (slot %u, %s mode, blocking %u ms) -> %s", s->name.c_str(), slot,
	     m.channel.mode == STRATA_MODE_OVERWRITE ? "overwrite" : "discard",
	     STRATA_MODE_BLOCK_MS(m.channel.mode), a.text.c_str());
	sessions_.push_back(std::move(s));
	return a;
}

std::string trace_place(const Session &s)
{
	if (s.serial)
		return "serial line " + s.serial->target().device + " at " +
		       std::to_string(s.serial->target().baud) + " baud (" +
		       std::to_string(s.serial->line_bytes_per_s()) + " B/s)";
	if (!s.relay)
		return s.out;
	const RelayTarget &t = s.relay->target();
	return "lttng-relayd " + t.host + ":" + std::to_string(t.ctrl_port) + ":" +
	       std::to_string(t.data_port) + ", trace " + s.relay->base();
}

// A drain of a relay session sends its sub-trace (the same relative path
// as on disk: ust/pid/..., kernel) to the relay instead of writing it.
// Before d.start().  The disk output makes a directory unique by looking
// at the disk; nothing of a relay session is on our disk, so the session
// remembers the paths it gave: a second sub-trace with the same path (a
// process's exec'd image of the same name: one Proc per pid, so the same
// comm, pid and date; a reused pid within the second; the kernel buffer of
// a second START) gets ".1", ".2"... as on disk.
void attach_output(Session &s, Drain &d)
{
	if (!s.streamed())
		return;
	const std::string &dir = d.dir();
	const std::string rel =
		dir.compare(0, s.out.size(), s.out) == 0 ? dir.substr(s.out.size()) : "/" + dir;
	std::string path = rel;
	for (int n = 1; !s.relay_paths.insert(path).second; n++)
		path = rel + "." + std::to_string(n);
	if (s.serial)
		d.set_output(serial_output(s.serial, path, d.channel(), d.n_lanes()));
	else
		d.set_output(relay_output(s.relay, path, d.channel(), d.n_lanes(), s.live_timer_us));
}

Answer SessionTable::rule(const Caller &c, const std::string &name, proto::Rule r, Target t)
{
	Answer a;
	Session *s = find(c, name, a);
	if (!s)
		return a;
	std::string denied;
	if (int e = rule_allowed(s->uid, r.pattern, r.enable != 0, denied))
		return answer(e, denied);
	if (!r.filter.empty()) { // a filter no known matching event can take: refused
		std::vector<const Session *> mine;
		for (auto &x : sessions_)
			if (visible(c, *x))
				mine.push_back(x.get());
		std::string why = filter_refusal(r, mine);
		if (!why.empty())
			return answer(-EINVAL, std::move(why));
	}
	// An earlier rule that matches exactly what this one matches (same
	// pattern, level, filter and targets) can never decide anything: later
	// rules win.  Dropping it keeps enable/disable toggles from filling
	// the 32 rules.
	for (size_t i = s->rules.size(); i-- > 0;) {
		const proto::Rule &o = s->rules[i];
		const Target &ot = s->targets[i];
		if (o.pattern == r.pattern && o.loglevel_max == r.loglevel_max && o.filter == r.filter &&
		    ot.pids == t.pids && ot.names == t.names) {
			s->rules.erase(s->rules.begin() + static_cast<long>(i));
			s->targets.erase(s->targets.begin() + static_cast<long>(i));
		}
	}
	if (s->rules.size() >= proto::kMaxRules)
		return answer(-ENOSPC, "session '" + name + "' already has " +
					       std::to_string(proto::kMaxRules) + " rules");
	s->rules.push_back(r);
	const bool all = t.pids.empty() && t.names.empty();
	s->targets.push_back(std::move(t));
	std::string text =
		std::string(r.enable ? "enabled " : "disabled ") + r.pattern + " in session '" + name + "'";
	if (!all)
		text += " for the chosen processes";
	if (s->state != proto::SessionState::Active || s->stopping) // kept for a restart
		return answer(0, text);
	apply_kernel(*s);
	return changed(*s, text, static_cast<int>(s->rules.size() - 1));
}

// START: a new run (the id grants name), a free slot in the module, the
// module's rules, early buffers adopted, the trigger's companion.
Answer SessionTable::start(const Caller &c, const std::string &name)
{
	Answer a;
	Session *s = find(c, name, a);
	if (!s)
		return a;
	if (s->stopping)
		return answer(-EBUSY, "session '" + s->name + "' is stopping: start it once stopped");
	if (s->state == proto::SessionState::Active)
		return answer(-EALREADY, "session '" + s->name + "' is already started");
	if (!s->lost.empty())
		return answer(-EINVAL, "session '" + s->name + "' was not taken up after a daemon restart (" +
					       s->lost + "): destroy it and create it again");
	s->state = proto::SessionState::Active;
	s->run_id = next_run_id_++;
	s->regions.clear();  // a new run aggregates from zero
	s->unjoined.clear(); // and is joined from zero
	s->unjoined_more = 0;
	move_off_busy_slot(*s);
	INFO("session %s started (slot %u)", s->name.c_str(), s->slot);
	apply_kernel(*s);
	host_.adopt_early(*s);
	std::string text = "session '" + s->name + "' started", err;
	if (s->trigger && !start_trigger(*s, err))
		text += "; no snapshots on " + s->trigger->pattern + ": " + err;
	save_active();
	Answer started = changed(*s, text);
	started.started_run = s->run_id;
	return started;
}

Session *SessionTable::by_id(uint64_t id)
{
	for (auto &x : sessions_)
		if (x->id == id)
			return x.get();
	return nullptr;
}

std::vector<uint64_t> SessionTable::disown(uint64_t owner)
{
	std::vector<uint64_t> ids;
	for (auto &x : sessions_)
		if (x->owner_conn == owner && owner) {
			x->owner_conn = 0;
			ids.push_back(x->id);
		}
	return ids;
}

bool SessionTable::status(const Caller &c, const std::string &name, proto::StatusReply &sr, Answer &err) const
{
	for (auto &s : sessions_) {
		if (!visible(c, *s) || s->companion_of || (!name.empty() && name != s->name))
			continue;
		proto::SessionStatus st;
		st.name = s->name;
		st.slot = s->slot;
		st.state = static_cast<uint32_t>(s->state);
		st.uid = s->uid;
		st.output_dir = s->out;
		st.channel = s->channel;
		st.rules = s->rules;
		st.n_buffers = static_cast<uint32_t>(s->drains.size());
		st.joined = s->joined;
		st.declared.assign(s->declared.begin(), s->declared.end());
		if (s->relay) {
			const RelayTarget &t = s->relay->target();
			st.relay = t.host + ":" + std::to_string(t.ctrl_port) + ":" +
				   std::to_string(t.data_port) + " " + s->relay->base();
			if (s->relay->broken())
				st.relay += " (link down: " + s->relay->why_broken() + ")";
		}
		if (s->serial)
			st.relay = s->serial->describe();
		for (auto &d : s->drains) {
			st.packets += d->counters().packets.load(std::memory_order_relaxed);
			st.bytes += d->counters().bytes.load(std::memory_order_relaxed);
			st.errors += d->counters().errors.load(std::memory_order_relaxed);
		}
		st.problems = session_problems(*s);
		st.aggregate = s->aggregate;
		st.agg_filter = s->agg_filter;
		st.agg_regions = static_cast<uint32_t>(s->regions.size());
		sr.sessions.push_back(std::move(st));
	}
	if (!name.empty() && sr.sessions.empty()) {
		const_cast<SessionTable *>(this)->find(c, name, err); // ENOENT (another user's: the same)
		return false;
	}
	return true;
}

std::string session_problems(const Session &s)
{
	std::string out;
	for (auto &d : s.drains) {
		if (out.size() > 4096) { // bounded: a status fits its message
			out += "...\n";
			break;
		}
		const uint64_t bad = d->counters().malformed.load(std::memory_order_relaxed);
		if (const uint64_t n = d->counters().block_timeouts.load(std::memory_order_relaxed))
			out += "process " + d->comm() + " (pid " + std::to_string(d->pid()) +
			       "): " + std::to_string(n) +
			       " blocking wait(s) ran to the --blocking timeout (" +
			       std::to_string(STRATA_MODE_BLOCK_MS(s.channel.mode)) +
			       " ms: the daemon did not drain in time); its writers discarded from each "
			       "until a sub-buffer was free again\n";
		if (bad)
			out += "process " + d->comm() + " (pid " + std::to_string(d->pid()) +
			       ") wrote malformed data into its buffer: " + std::to_string(bad) +
			       " packet(s) cut or skipped (daemon log)\n";
		const std::string p = d->problem(); // names its file
		if (!p.empty())
			out += p + "\n";
	}
	for (const std::string &l : s.restart_losses)
		out += l + "\n";
	for (auto &u : s.unjoined)
		out += "process " + u.second + "\n";
	if (s.unjoined_more)
		out += "and " + std::to_string(s.unjoined_more) +
		       " more process(es) that did not join (daemon log)\n";
	if (!s.lost.empty())
		out += "not taken up after a daemon restart: " + s.lost + "\n";
	return out + filter_problems(s);
}

void note_unjoined(Session &s, pid_t pid, const std::string &comm, const std::string &why)
{
	auto it = s.unjoined.find(pid);
	const std::string line = comm + " (pid " + std::to_string(pid) + ") did not join: " + why;
	if (it != s.unjoined.end())
		it->second = line;
	else if (s.unjoined.size() < kMaxUnjoined)
		s.unjoined.emplace(pid, line);
	else
		s.unjoined_more++;
	VLOG("session %s: %s", s.name.c_str(), line.c_str());
}

void note_rejoined(Session &s, pid_t pid)
{
	if (s.unjoined.erase(pid))
		INFO("session %s: pid %d joined it after all", s.name.c_str(), pid);
}

void SessionTable::note_joined(const Proc &p)
{
	for (auto &s : sessions_) {
		if (s->state != proto::SessionState::Active || s->companion_of || !reaches(*s, p) ||
		    (!s->rules.empty() && rules_for(*s, p).empty()))
			continue;
		s->joined++;
		for (const proto::EventName &e : p.events)
			if (s->declared.size() < proto::kMaxDeclared)
				s->declared.insert(e.name);
	}
}

// The output directories of the active sessions, one per line, in
// "<socket>.active" (written whole, then renamed).  A daemon killed while
// sessions were active leaves the file behind; the next daemon on the same
// socket repairs those directories before anything else
// (repair_after_crash): a stream file cut inside a packet by the kill is
// trimmed to its last whole packet, so babeltrace2 reads the trace again.
bool SessionTable::adopt(std::unique_ptr<Session> s, bool active)
{
	for (auto &x : sessions_)
		if (x->name == s->name || x->slot == s->slot)
			return false;
	s->id = next_session_id_++;
	s->state = active ? proto::SessionState::Active : proto::SessionState::Stopped;
	next_run_id_ = std::max(next_run_id_, s->run_id + 1);
	sessions_.push_back(std::move(s));
	if (!active) {
		host_.changed();
		return true;
	}
	// The module's mirror again: a slot the module kept for us is taken
	// over (same session: no process is signalled), with its kernel
	// buffer (kernel_resume); otherwise set anew.
	apply_kernel(*sessions_.back());
	kgen_ = 0; // no controller waits for it
	save_active();
	host_.changed();
	return true;
}

// A line of <socket>.active: the output directory, preceded for a user's
// session on root's daemon by "uid gid " (the rights its repair runs with;
// an older daemon skips such lines: it reads only lines starting with '/').
static std::string active_line(const Session &s)
{
	if (s.owner.uid < 0)
		return s.out + "\n";
	return std::to_string(s.owner.uid) + " " + std::to_string(s.owner.gid) + " " + s.out + "\n";
}

void SessionTable::save_active()
{
	const std::string file = cfg_.socket_path + ".active", tmp = file + ".tmp";
	std::string text;
	for (auto &x : sessions_)
		if (x->state == proto::SessionState::Active)
			text += active_line(*x);
	if (text.empty()) {
		unlink(file.c_str());
		return;
	}
	int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	const bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
	close(fd);
	if (!ok || replace_file(tmp, file) != 0)
		unlink(tmp.c_str());
}

void SessionTable::repair_after_crash()
{
	const std::string file = cfg_.socket_path + ".active";
	FILE *f = fopen(file.c_str(), "re");
	if (!f)
		return;
	char line[4200];
	while (fgets(line, sizeof line, f)) {
		line[strcspn(line, "\n")] = 0;
		Owner owner;
		unsigned long long u = 0, g = 0;
		int at = 0;
		if (line[0] != '/' && sscanf(line, "%llu %llu %n", &u, &g, &at) == 2 && u < UINT32_MAX &&
		    g < UINT32_MAX) {
			owner.uid = static_cast<int64_t>(u);
			owner.gid = static_cast<int64_t>(g);
		}
		const char *dir = line + at;
		AsOwner as(owner); // a user's trace: repaired with the user's rights
		struct stat st;
		if (!as.ok() || dir[0] != '/' || stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
			continue;
		RepairStats rs = repair_tree(dir);
		INFO("previous daemon ended with session output %s active: %llu stream file(s) examined, "
		     "%llu "
		     "repaired",
		     dir, static_cast<unsigned long long>(rs.files),
		     static_cast<unsigned long long>(rs.repaired));
	}
	fclose(f);
	unlink(file.c_str());
}

// SNAPSHOT: every overwrite-mode buffer of the session, copied as it is
// now into a new trace directory with the session's layout (one sub-trace
// per buffer, kernel included).  Synchronous on the main thread: each
// buffer costs one consumer-side close per lane (bounded by the drain's
// flush timeout when a writer is stalled mid-record) and a copy of at
// most the ring's size.  docs/ring-buffer.md, "Snapshots".
Answer SessionTable::snapshot(const Caller &c, const proto::Snapshot &m)
{
	Answer a;
	Session *s = find(c, m.session, a);
	if (s)
		a.status = take_snapshot(*s, m.output_dir, a.text);
	return a;
}

int SessionTable::take_snapshot(Session &s, std::string root, std::string &text)
{
	host_.settle(); // a BUFFER already sent, or being attached, is in the snapshot too
	if (s.state != proto::SessionState::Active) {
		text = "session '" + s.name + "' is not started: nothing to snapshot";
		return -EALREADY;
	}
	if (s.channel.mode != STRATA_MODE_OVERWRITE) {
		text = "session '" + s.name + "' is not in overwrite mode: its trace is on disk already";
		return -EINVAL;
	}
	if (root.empty()) {
		char stamp[32];
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		struct tm tm;
		gmtime_r(&ts.tv_sec, &tm);
		strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
		root = s.out + "-snapshot-" + stamp;
		for (int k = 1; access(root.c_str(), F_OK) == 0; k++)
			root = s.out + "-snapshot-" + stamp + "." + std::to_string(k);
	} else if (access(root.c_str(), F_OK) == 0) {
		text = root + " exists: a snapshot goes to a new directory";
		return -EEXIST;
	}
	while (root.size() > 1 && root.back() == '/')
		root.pop_back();
	// A user's snapshot on root's daemon: where the user could write, as
	// CREATE's directory (access.h).
	if (s.uid != 0 && serves_all_users()) {
		if (int e = user_may_create(s.uid, root, text))
			return e;
	}
	int r = make_dirs(root, 0750, s.owner);
	if (r < 0) {
		text = "cannot create " + root + ": " + strerror(-r);
		return r;
	}
	size_t n = 0;
	uint64_t packets = 0;
	std::string errors;
	for (auto &d : s.drains) {
		const std::string &dir = d->dir();
		std::string sub =
			dir.compare(0, s.out.size(), s.out) == 0 ? dir.substr(s.out.size()) : "/" + dir;
		std::string err;
		uint64_t p = 0;
		int w = d->snapshot(root + sub, p, err);
		if (w < 0) {
			logf("session %s: snapshot of %s: %s", s.name.c_str(), dir.c_str(), err.c_str());
			errors += (errors.empty() ? "" : "; ") + sub + ": " + err;
		} else if (w > 0) {
			n++;
			packets += p;
		}
	}
	INFO("session %s: snapshot of %zu buffer(s), %llu packet(s) in %s", s.name.c_str(), n,
	     static_cast<unsigned long long>(packets), root.c_str());
	if (errors.empty() && packets == 0) {
		// Nothing recorded yet: no directory that holds no trace (made
		// above, new: it did not exist).
		std::error_code ec;
		std::filesystem::remove_all(root, ec);
		text = "session '" + s.name + "' has recorded nothing yet (" +
		       (n == 0 ? std::string("no process has handed it a buffer")
			       : std::to_string(n) + " buffer(s), no event in them") +
		       "): no snapshot written";
		return -ENODATA;
	}
	if (!errors.empty()) {
		text = "snapshot in " + root + " is incomplete: " + errors;
		return -EIO;
	}
	text = root;
	return 0;
}

// What the module hands a process with the session's rules (kernel_source.h).
KmodGrant SessionTable::grant_of(const Session &s) const
{
	KmodGrant g;
	g.session_id = s.run_id;
	g.channel = s.channel;
	g.sock_path = cfg_.socket_path;
	g.keep = !s.streamed() && !s.companion_of; // what a restarted daemon takes up
	g.tree = s.tree;
	for (const Target &t : s.targets)
		g.targets.emplace_back(t.pids, t.names);
	return g;
}

// The session's rules into the module's slot (START, a rule change): a
// kernel buffer it creates is drained with the session's output (a relay
// session streams it, attach_output).
void SessionTable::apply_kernel(Session &s)
{
	const KmodGrant g = grant_of(s);
	kernel_apply(s.slot, s.uid, s.rules, s.channel, s.out, s.clock, s.owner, cfg_.hostname, s.drains, &g,
		     &kgen_, [&](Drain &d) { attach_output(s, d); });
}

// START: a slot another daemon set in the module meanwhile would collide
// (-EBUSY): take one free in both.
void SessionTable::move_off_busy_slot(Session &s)
{
	if (!(kernel_busy_slots() & (1u << s.slot)))
		return;
	const uint32_t slot = free_slot(0, &s);
	if (slot >= proto::kMaxSlots)
		return;
	INFO("session %s: slot %u is taken in the kernel module, using slot %u", s.name.c_str(), s.slot,
	     slot);
	s.slot = slot;
}

} // namespace daemon_impl
} // namespace strata
