/*
 * persistence.cpp - the sessions kept across a crash of the daemon
 * (persistence.h; docs/crash.md, "The daemon dies").  A buffer that cannot
 * be taken back is marked lost in its sub-trace (lost_buffer; docs/crash.md,
 * "Limits").
 */
#include "persistence.h"

#include <cerrno>
#include <cstring>
#include <set>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "control/names.h"
#include "kernel_source.h"
#include "log.h"
#include "reattach.h"
#include "state_store.h"

namespace strata {
namespace daemon_impl {

namespace {

bool kept(const Session &s)
{
	return s.state == proto::SessionState::Active && !s.streamed() && !s.companion_of;
}

// An active session that a restarted daemon does not take up, but names
// (restore): why, "" for the others.  A trigger's hidden
// companion is its session's business (SessionRecord::trigger).
std::string unkept_why(const Session &s)
{
	if (!s.lost.empty())
		return s.lost; // named again after another restart, until destroyed
	if (s.state != proto::SessionState::Active || s.companion_of || !s.streamed())
		return "";
	return "it streamed to " + trace_place(s) +
	       ", whose state is on the other side: its trace ends at the restart";
}

// A restored session owned by `strata record` is owned by record's pid
// (its connection died with the daemon): the Daemon's end_owned ends it
// with this stand-in connection id when that pid exits.  Real connection
// ids count up from 1 and never reach the bit.
constexpr uint64_t kPidOwner = uint64_t(1) << 63;

constexpr long kPersistDelayNs = 20000000; // save_later

// The session's definition, as the state file keeps it (r.unkept set).
void fill_definition(const Session &s, SessionRecord &r)
{
	r.name = s.name;
	r.id = s.id;
	r.run_id = s.run_id;
	r.slot = s.slot;
	r.uid = s.uid;
	r.owner_uid = s.owner.uid;
	r.owner_gid = s.owner.gid;
	r.out = s.out;
	if (!r.unkept.empty() && (r.out.empty() || r.out[0] != '/'))
		r.out = "/"; // named only: the state file wants an absolute output
	r.channel = s.channel;
	r.rules = s.rules;
	for (const Target &t : s.targets)
		r.targets.push_back({t.pids, t.names});
	r.clock = s.clock;
	r.aggregate = s.aggregate;
	r.agg_filter = s.agg_filter;
	r.tree = s.tree > 0 ? static_cast<uint32_t>(s.tree) : 0;
	if (s.trigger)
		r.trigger = s.trigger->pattern;
}

// The session's kernel buffer being drained (not the boot one): the last
// such drain, as kernel_apply starts a new buffer's drain after the old.
void kernel_record(const Session &s, SessionRecord &r)
{
	for (auto &d : s.drains)
		if (d->from_kernel() && !d->finished() && d->comm() != "kernel-boot") {
			r.kernel = true;
			memcpy(r.kernel_uuid, d->uuid(), 16);
			r.kernel_dir = d->dir();
		}
}

} // namespace

Persistence::~Persistence()
{
	if (timer_fd_ >= 0) {
		loop_.remove(timer_fd_);
		close(timer_fd_);
	}
}

// Per buffer of `s` being drained of a live process (`holder`): what takes
// it back (r.buffers).
void Persistence::keep_buffers(const Session &s, const std::map<const Drain *, const Proc *> &holder,
			       SessionRecord &r)
{
	for (auto &d : s.drains) {
		auto h = holder.find(d.get());
		if (h == holder.end() || d->finished() || !d->buffer_ino())
			continue;
		const Proc &p = *h->second;
		BufferRecord b;
		b.pid = static_cast<uint32_t>(p.pid);
		auto st = start_times_.find(p.pid);
		if (st == start_times_.end())
			st = start_times_.emplace(p.pid, proc_start_time(static_cast<uint32_t>(p.pid))).first;
		b.start_time = st->second;
		b.dev = d->buffer_dev();
		b.ino = d->buffer_ino();
		memcpy(b.uuid, d->uuid(), 16);
		b.signo = p.kmod ? 0 : p.signo; // a module process is the module's to signal
		b.kmod = p.kmod;
		b.uid = p.uid;
		b.comm = p.comm;
		b.dir = d->dir();
		r.buffers.push_back(b);
	}
}

void Persistence::save()
{
	changed_ = false;
	if (!store_)
		return;
	// Which live process holds each drain's buffer.
	std::map<const Drain *, const Proc *> holder;
	for (auto &kv : procs_.all())
		if (!kv.second.gone)
			for (const Drain *d : kv.second.drains)
				holder[d] = &kv.second;
	std::set<std::string> names;
	for (auto &sp : sessions_.all()) {
		const Session &s = *sp;
		SessionRecord r;
		r.unkept = unkept_why(s);
		if (!kept(s) && r.unkept.empty())
			continue;
		fill_definition(s, r);
		if (s.owner_conn & kPidOwner)
			r.owner_pid = static_cast<uint32_t>(s.owner_conn & ~kPidOwner);
		else if (s.owner_conn)
			r.owner_pid = static_cast<uint32_t>(host_.conn_pid(s.owner_conn));
		if (r.unkept.empty())
			keep_buffers(s, holder, r);
		kernel_record(s, r);
		names.insert(s.name);
		if (!store_->save(r))
			logf("session %s: cannot keep its state in %s (%s): a crash of this daemon would end "
			     "it",
			     s.name.c_str(), store_->dir().c_str(), strerror(errno));
	}
	for (const std::string &n : store_->names())
		if (!names.count(n))
			store_->remove(n);
	// Start times of processes gone: a pid may come back as another.
	for (auto it = start_times_.begin(); it != start_times_.end();)
		it = procs_.find(it->first) ? std::next(it) : start_times_.erase(it);
}

void Persistence::remove_store()
{
	if (store_ && rmdir(store_->dir().c_str()) != 0 && errno != ENOENT)
		INFO("%s kept: it holds files of sessions this daemon could not take up (%s)",
		     store_->dir().c_str(), strerror(errno));
}

// End of an event-loop turn: what changed is kept kPersistDelayNs later,
// in one write for a burst of hand-overs (persistence.h).  A controller's
// answer does not wait for it (save_if_changed).
void Persistence::save_later()
{
	if (!changed_ || armed_)
		return;
	struct itimerspec its = {};
	its.it_value.tv_nsec = kPersistDelayNs;
	if (timer_fd_ >= 0 && timerfd_settime(timer_fd_, 0, &its, nullptr) == 0)
		armed_ = true;
	else
		save();
}

// A buffer of a restored session that cannot be taken back (`why`): its
// process exited, or closed the slot, while no daemon ran, and the memfd
// went with it.  How much it held is unknowable; the sub-trace's lanes end
// with a discarded-packets mark (mark_lost_tail), and `strata status`
// and the log name the process (docs/crash.md, "Limits").
void Persistence::lost_buffer(Session &s, const BufferRecord &b, const std::string &why)
{
	std::string err;
	const unsigned lanes = mark_lost_tail(b.dir, b.uuid, err);
	const bool gone = why.compare(0, 6, "exited") == 0 || why.compare(0, 9, "no longer") == 0;
	std::string line = "pid " + std::to_string(b.pid) + " (" + b.comm + ") " + why +
			   (gone ? " while no daemon ran" : "") + ": what its buffer held beyond " + b.dir +
			   " is lost, not counted; ";
	line += lanes         ? std::to_string(lanes) + " lane(s) end with a discarded-packets mark"
		: err.empty() ? "no lane had a packet on disk"
			      : "not marked in the trace: " + err;
	logf("session %s: %s", s.name.c_str(), line.c_str());
	if (s.restart_losses.size() < 64)
		s.restart_losses.push_back("lost at a daemon restart: " + line);
}

// One buffer of a restored session: taken back from its process and
// drained on from where its sub-trace ends.
bool Persistence::restore_buffer(Session &s, const BufferRecord &b)
{
	std::string err;
	const int fd = reclaim_memfd(b.pid, b.start_time, b.dev, b.ino, err);
	if (fd < 0) {
		lost_buffer(s, b, err);
		return false;
	}
	TraceEnv env;
	env.procname = b.comm;
	env.pid = b.pid;
	env.hostname = cfg_.hostname;
	std::unique_ptr<Drain> d = Drain::create(fd, b.uuid, b.dir, s.clock, env, s.owner, err);
	if (!d || !d->resume(err)) {
		lost_buffer(s, b, "its buffer cannot be taken up (" + err + ")");
		return false;
	}
	Proc &p = procs_.get(static_cast<pid_t>(b.pid), static_cast<uid_t>(b.uid));
	if (p.gone) { // exited between the two looks: its buffer is ours, read to its end
		if (p.drains.empty())
			procs_.erase(p.pidfd);
		d->start();
		d->finish(true);
		s.drains.push_back(std::move(d));
		return true;
	}
	p.comm = b.comm;
	p.kmod = p.kmod || b.kmod;
	if (b.signo && !p.signo)
		p.signo = b.signo;
	if (p.date.empty())
		p.date = local_timestamp();
	start_times_[p.pid] = b.start_time;
	d->start();
	p.drains.push_back(d.get());
	s.drains.push_back(std::move(d));
	return true;
}

void Persistence::load()
{
	if (store_)
		return;
	store_ = std::make_unique<StateStore>(cfg_.socket_path + ".state");
	std::vector<std::string> errors;
	loaded_ = store_->load(errors);
	for (const std::string &e : errors)
		logf("previous daemon's state: %s: ignored", e.c_str());
}

bool Persistence::kept_clock(const std::string &boot_id, ClockInfo *c) const
{
	for (const SessionRecord &r : loaded_)
		if (r.unkept.empty() && !boot_id.empty() && r.clock.uuid == boot_id &&
		    r.clock.name == "monotonic" && r.clock.freq == 1000000000u) {
			*c = r.clock;
			return true;
		}
	return false;
}

void Persistence::restore()
{
	load();
	timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (timer_fd_ >= 0 && !loop_.add(timer_fd_, EPOLLIN, [this] {
		    uint64_t n;
		    if (read(timer_fd_, &n, sizeof n) < 0 && errno != EAGAIN)
			    return;
		    armed_ = false;
		    save_if_changed();
	    })) {
		logf("cannot watch the state's save timer: %s: every change is saved at once",
		     strerror(errno));
		close(timer_fd_);
		timer_fd_ = -1; // then save_later saves at once
	}
	const std::vector<SessionRecord> recs = std::move(loaded_);
	loaded_.clear();
	std::vector<std::pair<uint32_t, uid_t>> owners;
	for (const SessionRecord &r : recs) {
		auto s = std::make_unique<Session>();
		s->run_id = r.run_id;
		s->name = r.name;
		s->slot = r.slot;
		s->uid = r.uid;
		s->owner.uid = r.owner_uid;
		s->owner.gid = r.owner_gid;
		s->out = r.out;
		s->channel = r.channel;
		s->rules = r.rules;
		for (const TargetRecord &t : r.targets)
			s->targets.push_back({t.pids, t.names});
		s->targets.resize(s->rules.size());
		s->clock = r.clock;
		s->aggregate = r.aggregate;
		s->agg_filter = r.agg_filter;
		s->tree = static_cast<pid_t>(r.tree);
		if (r.owner_pid)
			s->owner_conn = kPidOwner | r.owner_pid;
		Session &ref = *s;
		if (!r.unkept.empty()) {
			logf("previous daemon's session %s was not taken up: %s", r.name.c_str(),
			     r.unkept.c_str());
			s->lost = r.unkept;
			s->out.clear(); // nothing of it is ours to repair or write
			if (!sessions_.adopt(std::move(s), false))
				logf("previous daemon's session %s: its name or slot %u is taken",
				     r.name.c_str(), r.slot);
			continue;
		}
		if (!r.trigger.empty())
			s->restart_losses.push_back("lost at a daemon restart: its snapshot trigger on " +
						    r.trigger + " (strata snapshot --on " + r.trigger + " " +
						    r.name + " sets it again)");
		if (r.kernel)
			kernel_resume(r.slot, r.kernel_uuid, r.kernel_dir);
		if (!sessions_.adopt(std::move(s))) {
			logf("previous daemon's session %s: its name or slot %u is taken: ignored",
			     r.name.c_str(), r.slot);
			continue;
		}
		unsigned n = 0;
		for (const BufferRecord &b : r.buffers)
			n += restore_buffer(ref, b) ? 1 : 0;
		if (r.owner_pid)
			owners.push_back({r.owner_pid, ref.uid});
		INFO("previous daemon ended with session %s active: taken up, %u of %zu buffer(s) "
		     "re-attached",
		     r.name.c_str(), n, r.buffers.size());
	}
	changed_ = true;
	// An owner (strata record) watched as a process: its exit ends its
	// session (on_exit); one that ended while no daemon ran, at once.
	for (auto &o : owners)
		if (procs_.get(static_cast<pid_t>(o.first), o.second).gone)
			owner_exited(static_cast<pid_t>(o.first));
}

void Persistence::owner_exited(pid_t pid)
{
	changed_ = true;
	if (pid <= 0)
		return;
	host_.end_owned(kPidOwner | static_cast<uint32_t>(pid), pid);
	if (Proc *p = procs_.find(pid))
		if (p->gone && p->drains.empty())
			procs_.erase(p->pidfd); // a stand-in made only to watch it
}

} // namespace daemon_impl
} // namespace strata
