/*
 * sessions.cpp - sessions and their outputs.
 *
 * Contract: main thread only.  A session owns its drains (one per attached
 * buffer, each with its own thread, drain.h); stop_session finishes them
 * and the session's directories are in "<socket>.active" while active.
 * A session made with a relay (CREATE version 3) streams instead of
 * writing its directory: its link to lttng-relayd is opened at CREATE (an
 * absent relay is CREATE's error) and each drain gets a relay output
 * (attach_output); docs/relay.md.  A session made with a serial line
 * (the relay field "serial:DEVICE[,BAUD]") streams the same way over its
 * SerialLink (serial.h, docs/serial.md).
 */
#include "daemon_impl.h"
#include "filter_check.h"

namespace strata {
namespace daemon_impl {

void Daemon::do_create(Conn &c, uint32_t seq, const proto::Create &m)
{
	for (auto &s : sessions_)
		if (s->name == m.session) {
			reply(c, seq, -EEXIST, "a session named '" + m.session + "' already exists");
			return;
		}
	uint32_t used = kernel_busy_slots(); // another daemon's sessions in the module
	for (auto &s : sessions_)
		used |= 1u << s->slot;
	uint32_t slot = 0;
	while (slot < proto::kMaxSlots && (used & (1u << slot)))
		slot++;
	if (slot == proto::kMaxSlots) {
		reply(c, seq, -ENOSPC, "all 16 session slots are in use");
		return;
	}
	std::shared_ptr<RelayLink> link;
	std::shared_ptr<SerialLink> line;
	if (is_serial_target(m.relay)) {
		SerialTarget t;
		std::string err;
		if (!parse_serial_target(m.relay, t, err)) {
			reply(c, seq, -EINVAL, err);
			return;
		}
		const bool for_user = c.cred.uid != 0 && geteuid() == 0;
		line = SerialLink::open(t, for_user ? static_cast<int64_t>(c.cred.uid) : -1,
					m.channel.subbuf_size ? m.channel.subbuf_size : serial_subbuf_size(t), err);
		if (!line) {
			reply(c, seq, -EIO, err);
			return;
		}
	} else if (!m.relay.empty()) {
		RelayTarget t;
		std::string err;
		if (!parse_relay_target(m.relay, t, err)) {
			reply(c, seq, -EINVAL, err);
			return;
		}
		link = RelayLink::open(t, m.session, m.hostname.empty() ? hostname_ : m.hostname, kLiveTimerUs, err);
		if (!link) {
			reply(c, seq, -ECONNREFUSED, err);
			return;
		}
	}
	struct stat st;
	bool existed = stat(m.output_dir.c_str(), &st) == 0;
	Owner owner;
	if (c.cred.uid != 0 && geteuid() == 0) {
		// A root daemon writes for a user only where that user could:
		// under a directory the user owns.
		std::string anc = m.output_dir;
		while (anc.size() > 1 && lstat(anc.c_str(), &st) != 0)
			anc = anc.substr(0, std::max<size_t>(anc.rfind('/'), 1));
		if (lstat(anc.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != c.cred.uid) {
			reply(c, seq, -EACCES, "the output directory must be inside a directory you own (" + anc + " is not)");
			return;
		}
		owner.uid = c.cred.uid;
		owner.gid = c.cred.gid;
	}
	int r = link || line ? 0 : make_dirs(m.output_dir, 0750, owner);
	if (r < 0) {
		reply(c, seq, r, "cannot create " + m.output_dir + ": " + strerror(-r));
		return;
	}
	if (existed && !link && !line) {
		RepairStats rs = repair_tree(m.output_dir);
		if (rs.repaired)
			INFO("repaired %llu torn stream file(s) under %s", static_cast<unsigned long long>(rs.repaired),
			     m.output_dir.c_str());
	}
	auto s = std::make_unique<Session>();
	s->id = next_session_id_++;
	s->name = m.session;
	s->slot = slot;
	s->uid = c.cred.uid;
	s->out = m.output_dir;
	s->channel = m.channel;
	if (line && !s->channel.subbuf_size)
		s->channel.subbuf_size = serial_subbuf_size(line->target());
	s->clock = measure_session_clock();
	s->owner = owner;
	if (m.flags & proto::kCreateOwned)
		s->owner_conn = c.id;
	if (link) {
		s->relay = std::move(link);
		s->live_timer_us = kLiveTimerUs;
	}
	s->serial = std::move(line);
	const std::string where = trace_place(*s);
	INFO("session %s created (slot %u, %s mode, blocking %u ms) -> %s", s->name.c_str(), slot,
	     m.channel.mode == STRATA_MODE_OVERWRITE ? "overwrite" : "discard",
	     STRATA_MODE_BLOCK_MS(m.channel.mode), where.c_str());
	sessions_.push_back(std::move(s));
	reply(c, seq, 0, where);
	// After the reply: the controller goes on while a worker maps its
	// copy buffer for the session's first drain.
	if (m.channel.mode != STRATA_MODE_OVERWRITE)
		warm_drains(m.channel.subbuf_size ? m.channel.subbuf_size : proto::kDefaultSubbufSize);
}

std::string trace_place(const Session &s)
{
	if (s.serial)
		return "serial line " + s.serial->target().device + " at " + std::to_string(s.serial->target().baud) +
		       " baud (" + std::to_string(s.serial->line_bytes_per_s()) + " B/s)";
	if (!s.relay)
		return s.out;
	const RelayTarget &t = s.relay->target();
	return "lttng-relayd " + t.host + ":" + std::to_string(t.ctrl_port) + ":" + std::to_string(t.data_port) +
	       ", trace " + s.relay->base();
}

// A drain of a relay session sends its sub-trace (the same relative path
// as on disk: ust/pid/..., kernel) to the relay instead of writing it.
// Before d.start().  The disk output makes a directory unique by looking
// at the disk; nothing of a relay session is on our disk, so the session
// remembers the paths it gave: a second sub-trace with the same path (a
// process's exec'd image of the same name: one Proc per pid, so the same
// comm, pid and date; a reused pid within the second; the kernel buffer of
// a second START) gets ".1", ".2"... as on disk.
void Daemon::attach_output(Session &s, Drain &d)
{
	if (!s.streamed())
		return;
	const std::string &dir = d.dir();
	const std::string rel = dir.compare(0, s.out.size(), s.out) == 0 ? dir.substr(s.out.size()) : "/" + dir;
	std::string path = rel;
	for (int n = 1; !s.relay_paths.insert(path).second; n++)
		path = rel + "." + std::to_string(n);
	if (s.serial)
		d.set_output(serial_output(s.serial, path, d.channel(), d.n_lanes()));
	else
		d.set_output(relay_output(s.relay, path, d.channel(), d.n_lanes(), s.live_timer_us));
}

void Daemon::do_rule(Conn &c, uint32_t seq, const std::string &name, proto::Rule r, Target t)
{
	bool found;
	Session *s = find(c, name, seq, found);
	if (!s)
		return;
	if (!r.filter.empty()) { // a filter no known matching event can take: refused
		std::vector<const Session *> mine;
		for (auto &x : sessions_)
			if (visible(c, *x))
				mine.push_back(x.get());
		const std::string why = filter_refusal(r, mine);
		if (!why.empty()) {
			reply(c, seq, -EINVAL, why);
			return;
		}
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
	if (s->rules.size() >= proto::kMaxRules) {
		reply(c, seq, -ENOSPC, "session '" + name + "' already has " + std::to_string(proto::kMaxRules) + " rules");
		return;
	}
	s->rules.push_back(r);
	const bool all = t.pids.empty() && t.names.empty();
	s->targets.push_back(std::move(t));
	std::string text = std::string(r.enable ? "enabled " : "disabled ") + r.pattern + " in session '" + name + "'";
	if (!all)
		text += " for the chosen processes";
	if (s->state == proto::SessionState::Active)
		apply_kernel(*s);
	if (s->state == proto::SessionState::Active)
		notify_and_reply(c, seq, *s, text, static_cast<int>(s->rules.size() - 1));
	else
		reply(c, seq, 0, text);
}

void Daemon::do_status(Conn &c, uint32_t seq, const proto::Status &m)
{
	proto::StatusReply sr;
	for (auto &s : sessions_) {
		if (!visible(c, *s) || s->companion_of || (!m.session.empty() && m.session != s->name))
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
			st.relay = t.host + ":" + std::to_string(t.ctrl_port) + ":" + std::to_string(t.data_port) + " " +
				   s->relay->base();
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
		sr.sessions.push_back(std::move(st));
	}
	if (!m.session.empty() && sr.sessions.empty()) {
		bool found;
		find(c, m.session, seq, found); // answers ENOENT or EPERM
		return;
	}
	send(c, seq, sr);
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
		if (bad)
			out += "process " + d->comm() + " (pid " + std::to_string(d->pid()) +
			       ") wrote malformed data into its buffer: " + std::to_string(bad) +
			       " packet(s) cut or skipped (daemon log)\n";
		const std::string p = d->problem(); // names its file
		if (!p.empty())
			out += p + "\n";
	}
	return out + filter_problems(s);
}

void Daemon::do_list(Conn &c, uint32_t seq)
{
	proto::ListReply lr;
	for (auto &kv : procs_) {
		const Proc &p = kv.second;
		if (c.cred.uid != 0 && p.uid != c.cred.uid)
			continue;
		for (const auto &e : p.events)
			lr.entries.push_back({static_cast<uint32_t>(p.pid), p.comm, e.name, e.loglevel});
	}
	send(c, seq, lr);
}

// The output directories of the active sessions, one per line, in
// "<socket>.active" (written whole, then renamed).  A daemon killed while
// sessions were active leaves the file behind; the next daemon on the same
// socket repairs those directories before anything else
// (repair_after_crash): a stream file cut inside a packet by the kill is
// trimmed to its last whole packet, so babeltrace2 reads the trace again.
void Daemon::save_active()
{
	const std::string file = path_ + ".active", tmp = file + ".tmp";
	std::string text;
	for (auto &x : sessions_)
		if (x->state == proto::SessionState::Active)
			text += x->out + "\n";
	if (text.empty()) {
		unlink(file.c_str());
		return;
	}
	int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	const bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
	close(fd);
	if (!ok || rename(tmp.c_str(), file.c_str()) != 0)
		unlink(tmp.c_str());
}

void Daemon::repair_after_crash()
{
	const std::string file = path_ + ".active";
	FILE *f = fopen(file.c_str(), "re");
	if (!f)
		return;
	char line[4200];
	while (fgets(line, sizeof line, f)) {
		line[strcspn(line, "\n")] = 0;
		struct stat st;
		if (line[0] != '/' || stat(line, &st) != 0 || !S_ISDIR(st.st_mode))
			continue;
		RepairStats rs = repair_tree(line);
		INFO("previous daemon ended with session output %s active: %llu stream file(s) examined, %llu "
		     "repaired", line, static_cast<unsigned long long>(rs.files),
		     static_cast<unsigned long long>(rs.repaired));
	}
	fclose(f);
	unlink(file.c_str());
}

void Daemon::stop_session(Session &s)
{
	tables_dirty_ = true;
	if (s.state != proto::SessionState::Active)
		return;
	serve_pending(); // BUFFERs already sent join before the drains finish
	settle_attaches();
	if (s.state != proto::SessionState::Active)
		return;
	if (s.trigger)
		stop_trigger(s); // its last look may still snapshot this session
	kgen_ = kernel_stop(s.slot); // kernel probes stop before the drains flush
	for (auto &d : s.drains)
		d->finish(false);
	for (auto &d : s.drains)
		d->join();
	s.state = proto::SessionState::Stopped;
	save_active();
	uint64_t packets = 0;
	for (auto &d : s.drains)
		packets += d->counters().packets.load(std::memory_order_relaxed);
	INFO("session %s stopped: %zu buffer(s), %llu packet(s) written", s.name.c_str(), s.drains.size(),
	     static_cast<unsigned long long>(packets));
	if (s.serial)
		INFO("session %s: %s", s.name.c_str(), s.serial->describe().c_str());
	if (s.relay && s.relay->broken())
		logf("session %s: the relay link broke (%s); packets it could not send are counted as errors",
		     s.name.c_str(), s.relay->why_broken().c_str());
}

// SNAPSHOT: every overwrite-mode buffer of the session, copied as it is
// now into a new trace directory with the session's layout (one sub-trace
// per buffer, kernel included).  Synchronous on the main thread: each
// buffer costs one consumer-side close per lane (bounded by drain.cpp's
// flush timeout when a writer is stalled mid-record) and a copy of at
// most the ring's size.  docs/ring-buffer.md, "Snapshots".
void Daemon::do_snapshot(Conn &c, uint32_t seq, const proto::Snapshot &m)
{
	bool found = false;
	Session *s = find(c, m.session, seq, found);
	if (!s)
		return;
	std::string text;
	const int r = take_snapshot(*s, m.output_dir, text);
	reply(c, seq, r, text);
}

int Daemon::take_snapshot(Session &s, std::string root, std::string &text)
{
	serve_pending();   // a BUFFER already sent is in the snapshot too,
	settle_attaches(); // and so is a buffer being attached
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
		std::string sub = dir.compare(0, s.out.size(), s.out) == 0 ? dir.substr(s.out.size()) : "/" + dir;
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
	if (!errors.empty()) {
		text = "snapshot in " + root + " is incomplete: " + errors;
		return -EIO;
	}
	text = root;
	return 0;
}

void Daemon::destroy_session(Session &s, Conn *c, uint32_t seq)
{
	const bool was_active = s.state == proto::SessionState::Active;
	Session gone; // who to signal: the processes its rules targeted
	gone.uid = s.uid;
	gone.rules = s.rules;
	gone.targets = s.targets;
	stop_session(s);
	std::string out = trace_place(s), name = s.name;
	forget_drains(s); // the session's drains die with it
	sessions_.erase(std::find_if(sessions_.begin(), sessions_.end(),
				     [&](const std::unique_ptr<Session> &x) { return x.get() == &s; }));
	INFO("session %s destroyed", name.c_str());
	const std::string text = "session '" + name + "' destroyed; trace in " + out;
	if (was_active && c) // its processes close their slot
		notify_and_reply(*c, seq, gone, text);
	else if (was_active)
		signal_concerned(gone, -1);
	else if (c)
		reply(*c, seq, 0, text);
}

void Daemon::forget_drains(const Session &s)
{
	for (auto &p : procs_) {
		auto &v = p.second.drains;
		v.erase(std::remove_if(v.begin(), v.end(),
				       [&](Drain *d) {
					       for (auto &x : s.drains)
						       if (x.get() == d)
							       return true;
					       return false;
				       }),
			v.end());
	}
}

} // namespace daemon_impl
} // namespace strata
