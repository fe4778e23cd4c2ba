/*
 * daemon.cpp - the Daemon's life (daemon_impl.h): its parts made, its
 * sockets and signals opened, the event loop run, everything flushed and
 * closed at the end.  The threading contract is daemon.h's.
 */
#include "daemon_impl.h"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/signalfd.h>

#include "proto/sock.h"
#include "reader.h"
#include "strata_abi.h"
#include <cstdio>

namespace strata {
namespace daemon_impl {

// The first line of a small file, "" if none.
static std::string first_line(const char *path)
{
	char buf[256] = {};
	FILE *f = fopen(path, "re");
	if (!f)
		return "";
	const bool ok = fgets(buf, sizeof buf, f) != nullptr;
	fclose(f);
	std::string s = ok ? buf : "";
	while (!s.empty() && (s.back() == '\n' || s.back() == ' '))
		s.pop_back();
	return s;
}

// This daemon's machine's name (its sub-traces' env.hostname, its links'
// HELLO).  A machine with no name (the kernel's "(none)", as in a guest
// booted without one) gets /etc/hostname's, else "unnamed-" and the start
// of its boot id: two such guests in one merged view stay apart, and the
// name says why it is not a host name.  Tests only: STRATA_TEST_HOSTNAME
// names it, so that a second daemon on this machine can stand for another
// one (docs/clocks.md).
std::string hostname()
{
	if (const char *h = getenv("STRATA_TEST_HOSTNAME"); h && *h)
		return h;
	char buf[256] = {};
	gethostname(buf, sizeof(buf) - 1);
	std::string name = buf;
	if (!name.empty() && name != "(none)")
		return name;
	name = first_line("/etc/hostname");
	if (!name.empty())
		return name;
	const std::string boot = first_line("/proc/sys/kernel/random/boot_id");
	return "unnamed-" + (boot.size() >= 8 ? boot.substr(0, 8) : std::string("machine"));
}

namespace {
// Run ids name a session's run to the processes; a process outliving this
// daemon must not mistake a new daemon's run for its old one.
uint64_t first_run_id()
{
	uint64_t id;
	if (getrandom(&id, sizeof(id), 0) != sizeof(id))
		id = static_cast<uint64_t>(time(nullptr)) << 20;
	return (id >> 16 << 16) | 1; // never 0 ("not joined")
}
} // namespace

Daemon::Daemon(const DaemonOptions &opt)
    : opt_(opt), path_(opt.socket_path.empty() ? proto::server_socket_path() : opt.socket_path),
      hostname_(hostname()), conns_(loop_, listener_, *this),
      procs_([this](int fd) { return loop_.add(fd, EPOLLIN, [this, fd] { processes_.on_exit(fd); }); },
	     [this](int fd) { loop_.remove(fd); }),
      acks_(procs_), tables_(path_), sessions_(*this, SessionTable::Config{path_, hostname_, first_run_id()}),
      listener_(loop_, conns_, path_),
      persist_(*this, loop_, sessions_, procs_, Persistence::Config{path_, hostname_}),
      commands_(*this, Commands::Parts{conns_, sessions_, procs_, acks_, tables_, persist_, sync_}),
      stopping_(*this, Stopping::Parts{conns_, sessions_, acks_, sync_, persist_, hostname_}),
      processes_(*this, Processes::Parts{conns_, sessions_, procs_, acks_, attacher_, tables_, persist_,
					 hostname_, opt.adopt_early})
{
}

// The signals, in the event loop (run() only: a test keeps its own).
bool Daemon::open_signals()
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	// Blocked before any drain thread exists, so they all inherit it.
	pthread_sigmask(SIG_BLOCK, &set, nullptr);
	signal(SIGPIPE, SIG_IGN);
	sigfd_ = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sigfd_ < 0 || !loop_.ok()) {
		logf("cannot receive signals: %s", strerror(errno));
		return false;
	}
	if (!loop_.add(sigfd_, EPOLLIN, [this] { on_signal(); })) {
		logf("cannot watch the signals: %s", strerror(errno));
		return false;
	}
	return true;
}

// The clock page (clock_page.h) and its refresh timer: first after 100 ms,
// then every period.  Without a usable TSC processes keep clock_gettime.
void Daemon::start_clock_page()
{
	std::string why;
	clock_page_ = ClockPage::create(&why);
	if (!clock_page_) {
		VLOG("no clock page: %s", why.c_str());
		return;
	}
	const uint64_t p = clock_page_->period_ns();
	if (loop_.add_timer(std::min<uint64_t>(p, 100000000), p, [this] { clock_page_->refresh(); }) < 0)
		logf("clock page refresh timer: %s (the page drifts)", strerror(errno));
	VLOG("clock page published (refresh every %llu ms)", static_cast<unsigned long long>(p / 1000000));
}

// The clock links (sync_link.h), each on its own thread, stamping with the
// clock the daemon's processes use (the page just started, if any).
bool Daemon::start_sync_links()
{
	ClockInfo me = measure_session_clock();
	// Restarted over a crashed daemon's sessions: the offset they keep
	// (Persistence::kept_clock), so that a guest that joins now and the
	// host's sessions still agree.
	if (!opt_.sync.empty() || !opt_.sync_guest.empty())
		persist_.kept_clock(me.uuid, &me);
	for (int follower = 1; follower >= 0; follower--)
		for (const std::string &a : follower ? opt_.sync : opt_.sync_guest) {
			SyncSpec spec;
			std::string err;
			if (!parse_sync(a, follower, &spec, &err)) {
				logf("clock link: %s", err.c_str());
				return false;
			}
			auto l = std::make_unique<SyncLink>(
				spec, hostname_, me, opt_.sync_period_ms * 1000000ull, consumer_page_now);
			if (!l->start(&err)) {
				logf("clock link %s: %s", spec.name.c_str(), err.c_str());
				return false;
			}
			INFO("clock link %s: %s (%s)", spec.name.c_str(), spec.text.c_str(),
			     follower ? "this machine's traces go onto its clock"
				      : "its clock mapped onto this one");
			sync_.add(std::move(l));
		}
	// The links' HELLO tells each peer `me`'s offset, with which a follower
	// puts its traces on this machine's REALTIME; this machine's own traces
	// must use the same one, else a wall clock stepped between the daemon's
	// start and a session's (NTP, a VM's resume) shifts one side against
	// the other (docs/clocks.md, "One offset per daemon").
	if (!sync_.empty())
		sessions_.use_clock(me);
	return true;
}

void Daemon::on_signal()
{
	struct signalfd_siginfo si;
	while (read(sigfd_, &si, sizeof(si)) == sizeof(si)) {
		INFO("signal %u: flushing and exiting", si.ssi_signo);
		quit_ = true;
	}
}

// SessionTable::Host: the trigger timer.
bool Daemon::watch_triggers(bool on)
{
	if (!on) {
		loop_.close_timer(trigger_tfd_);
		trigger_tfd_ = -1;
		return false;
	}
	const uint64_t ns = SessionTable::kTriggerLookMs * 1000000ull;
	trigger_tfd_ = loop_.add_timer(ns, ns, [this] {
		sessions_.check_triggers();
		tables_.dirty(); // a companion may have started or stopped
	});
	return trigger_tfd_ >= 0;
}

// SessionTable::Host: a relayed session's clocks (docs/clocks.md,
// "Relayed followers").  A follower's link keeps the sub-traces' metadata
// texts, which go out first saying their clock is not mapped yet.
void Daemon::relay_opened(Session &s)
{
	if (sync_.follows() && s.aggregate.empty())
		s.relay->keep_metadata([env = sync_.relay_pending_env()](const std::string &t) {
			return rewrite_metadata_env(t, env);
		});
	if (s.live_timer_us)
		open_gate(s);
}

// A live session's gate (relay.h, docs/relay.md "The gate"): a sub-trace of
// no events on the session's clock, its first packet stamped now, and the
// barriers that move it, every kGateMs while a gated link exists.  Without
// it (the relay refused it) live readers are not held back: said, not fatal.
void Daemon::open_gate(Session &s)
{
	uint8_t uuid[16];
	if (getrandom(uuid, sizeof uuid, 0) != sizeof uuid)
		return logf("session %s: no gate for live readers: no random uuid", s.name.c_str());
	TraceEnv env;
	env.procname = "strata-live-gate";
	env.hostname = hostname_;
	env.record_format = STRATA_REC_WIDE;
	strata_packet_header h{};
	h.magic = STRATA_CTF_MAGIC;
	memcpy(h.uuid, uuid, sizeof uuid);
	// WIDE leaves the header's last word unnamed: the content ends at
	// lane_id (as Reader::header_only_content says of kernel packets).
	h.content_size = (STRATA_PACKET_HEADER_SIZE - 4) * 8;
	h.packet_size = STRATA_PACKET_HEADER_SIZE * 8;
	std::string err;
	if (!s.relay->open_gate(ctf_metadata(uuid, s.clock, env, 0, {}), h, gate_now(), err))
		return logf("session %s: no gate for live readers: %s", s.name.c_str(), err.c_str());
	if (gate_tfd_ < 0)
		gate_tfd_ = loop_.add_timer(kGateMs * 1000000ull, kGateMs * 1000000ull,
					    [this] { gate_barrier(); });
}

// The records' clock: the daemon's clock page when it has one (what its
// processes stamp with), else CLOCK_MONOTONIC (what the others' clocks
// give), less a margin for their conversions.
uint64_t Daemon::gate_now()
{
	const uint64_t ns = consumer_page_now();
	return ns > kGateMarginNs ? ns - kGateMarginNs : 0;
}

// The clock read, then every hand-over already sent read (its output made:
// a publication begun), then each gated link's barrier at that reading.
void Daemon::gate_barrier()
{
	const uint64_t ts = gate_now();
	bool any = false;
	for (const auto &s : sessions_.all())
		any = any || (s->relay && s->relay->gated());
	if (!any) {
		loop_.close_timer(gate_tfd_);
		gate_tfd_ = -1;
		return;
	}
	processes_.serve_pending();
	for (const auto &s : sessions_.all())
		if (s->relay && s->relay->gated())
			s->relay->barrier(ts);
}

// ... and at its end they go out again onto the reference's clock, with
// clocks.json beside them.
void Daemon::relay_ending(Session &s)
{
	if (s.aggregate.empty())
		sync_.relay_ending(*s.relay, s.clock, hostname_);
}

// A serial session's line: the same at each stop, sent on the line for
// its receiver to write (docs/clocks.md, "Serial followers").
void Daemon::serial_opened(Session &s)
{
	if (s.aggregate.empty())
		sync_.serial_opened(*s.serial);
}

void Daemon::serial_stopped(Session &s)
{
	if (s.aggregate.empty())
		sync_.serial_stopped(*s.serial, s.clock, hostname_);
}

void Daemon::publish_tables()
{
	tables_.publish(sessions_, procs_, clock_page_ ? clock_page_->fd() : -1);
}

// The parts started and a dead predecessor's sessions taken up; the
// sockets are open already (run) or never (in-process).
bool Daemon::start()
{
	g_verbose = opt_.verbose;
	g_quiet = opt_.quiet;
	if (!loop_.ok()) {
		logf("no event loop: %s", strerror(errno));
		return false;
	}
	start_clock_page();
	persist_.load(); // kept_clock, for the links
	if (!start_sync_links())
		return false;
	// Else BUFFERs are attached on the main thread.
	if (attacher_.start() &&
	    !loop_.add(attacher_.efd(), EPOLLIN, [this] { processes_.collect_attaches(true); })) {
		logf("cannot watch the attacher thread: %s: BUFFERs are attached on the main thread",
		     strerror(errno));
		attacher_.stop();
	}
	// Else the module's WAITs are not used (processes acknowledge on their
	// connections only).
	if (acks_.start() && !loop_.add(acks_.efd(), EPOLLIN, [this] { acks_.on_wait_done(); })) {
		logf("cannot watch the module's WAIT results: %s: acknowledgements through the module are "
		     "not awaited",
		     strerror(errno));
		acks_.stop();
	}
	if (listener_.listening())
		INFO("listening on %s (protocol %u, buffer ABI %u.%u)", path_.c_str(), proto::kVersion,
		     STRATA_ABI_MAJOR, STRATA_ABI_MINOR);
	sessions_.repair_after_crash();
	persist_.restore(); // persistence.h: a crashed daemon's active sessions, taken up
	tables_.remove();   // a crashed daemon's: their runs are gone
	publish_tables();
	return true;
}

int Daemon::turn(int timeout_ms)
{
	const int r = loop_.turn(timeout_ms);
	if (r < 0) {
		logf("epoll_wait: %s", strerror(-r));
		return r;
	}
	processes_.collect_attaches(); // drains whose process did not wait (attacher.h)
	commands_.deliver(acks_.due(false));
	publish_tables();
	persist_.save_later();
	return 0;
}

int Daemon::run()
{
	g_verbose = opt_.verbose;
	g_quiet = opt_.quiet;
	if (!open_signals() || !listener_.open() || !start())
		return 1;
	Reader::file_reading_wanted(); // its probe now, not at a first attach
	if (opt_.ready_fd >= 0) {
		ssize_t w = write(opt_.ready_fd, "ready\n", 6);
		(void)w;
		close(opt_.ready_fd);
	}
	for (;;) {
		if (quit_ && !leaving_) {
			leaving_ = true;
			stopping_.leave(); // the processes told, one bounded wait
		}
		if (leaving_ && stopping_.idle()) // every stop's wait is over (leave()'s too)
			break;
		if (turn(acks_.timeout_ms()) < 0)
			break;
	}
	shut_down();
	return 0;
}

void Daemon::shut_down()
{
	conns_.serve_quiet();         // every process that joined from the table is known
	processes_.settle_attaches(); // every buffer handed over joins its session
	attacher_.stop();
	acks_.stop();
	commands_.deliver(acks_.due(true));
	// The active disk sessions' clocks.json and metadata clocks, as at a
	// stop (sync_link.h), once stop_all finished their drains.
	std::vector<std::pair<std::string, ClockInfo>> synced;
	proto::StatusReply all;
	Answer none;
	if (!sync_.empty() && sessions_.status(Caller{}, "", all, none))
		for (const proto::SessionStatus &st : all.sessions)
			if (const Session *x = sessions_.find(Caller{}, st.name, none);
			    x && x->state == proto::SessionState::Active && !x->streamed() &&
			    x->aggregate.empty())
				synced.emplace_back(x->out, x->clock);
	sessions_.stop_all();
	for (const auto &o : synced)
		sync_.session_stopped(o.first, o.second, hostname_);
	persist_.save(); // none left: a clean exit ends them (persistence.h)
	persist_.remove_store();
	tables_.remove();
	conns_.clear();
	listener_.close();
	if (sigfd_ >= 0) {
		loop_.remove(sigfd_);
		close(sigfd_);
		sigfd_ = -1;
	}
	INFO("served %llu state queries and %llu joins from the grant table (%llu by the quiet socket); %llu "
	     "hand-offs and announcements from processes the kernel module answers",
	     static_cast<unsigned long long>(processes_.queries()),
	     static_cast<unsigned long long>(tables_.joins()),
	     static_cast<unsigned long long>(tables_.quiet_joins()),
	     static_cast<unsigned long long>(processes_.handoffs()));
	INFO("exited cleanly");
}

} // namespace daemon_impl

int run_daemon(const DaemonOptions &opt)
{
	daemon_impl::Daemon d(opt);
	return d.run();
}

} // namespace strata
