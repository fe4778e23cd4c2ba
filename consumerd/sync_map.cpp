// sync_map.cpp - what a clock link's map becomes: its status line, its
// entry of clocks.json (clocks_file.h), the CTF clock that puts a
// follower's trace onto its reference's, and at a session's end the
// follower's sub-traces split by clock piece; see sync_link.h and
// docs/clocks.md.
#include "sync_link.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cinttypes>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "clock_page.h"
#include "fs.h"
#include "json_writer.h"
#include "log.h"
#include "relay.h"
#include "serial.h"

namespace strata {
namespace daemon_impl {
namespace {

std::string us(int64_t ns)
{
	char b[32];
	snprintf(b, sizeof b, "%.1f us", static_cast<double>(ns) / 1000.0);
	return b;
}

} // namespace

// KVM's facts checked against the map now, in words (mu_ held).
std::string SyncLink::kvm_checked() const
{
	clocksync::TscLine host;
	uint64_t tsc0;
	const bool have_host = consumer_page_line(&tsc0, &host.ns0, &host.ns_per_cycle);
	host.tsc0 = tsc0;
	kvm_->check(est_.segments(), have_peer_page_ ? &peer_page_ : nullptr, have_host ? &host : nullptr);
	return kvm_->summary();
}

std::string SyncLink::status_line() const
{
	std::lock_guard<std::mutex> g(mu_);
	std::string s = "clock link " + spec_.name + " (" +
			(spec_.follower ? "this machine follows" : "reference for") + ", " + spec_.text +
			"): " + state_;
	if (!peer_hostname_.empty())
		s += ", peer host " + peer_hostname_;
	s += "; " + std::to_string(answered_) + " of " + std::to_string(probes_) + " probe(s) answered" +
	     (late_ ? " (" + std::to_string(late_) + " late: after a new ping)" : "") +
	     (stale_ ? " (" + std::to_string(stale_) + " exchange(s) from before a step: dropped)" : "") +
	     ", " + std::to_string(used_) + " of both ends' used";
	if (min_rtt_ >= 0)
		s += ", min RTT " + us(min_rtt_);
	const int64_t w = est_.width_now();
	if (w >= 0)
		s += ", bound width " + us(w) + " now";
	else
		s += ", uncorrelated";
	if (silences_) {
		char b[120];
		snprintf(b, sizeof b, ", %llu silence(s), the longest %.1f s (no segment by itself)",
			 static_cast<unsigned long long>(silences_),
			 static_cast<double>(longest_silence()) / 1e9);
		s += b;
	}
	const size_t segs = est_.segment_count();
	if (segs > 1)
		s += ", " + std::to_string(segs) + " segments (" + std::to_string(segs - 1) +
		     " step(s) or break(s): lost link, pause, restart)";
	s += "; probing every " + std::to_string(rate_.period() / 1000000) + " ms" +
	     (!rate_.adaptive() ? " (--sync-period)"
	      : rate_.dense()   ? " (dense: learning the map)"
				: "");
	if (spec_.spin) {
		char b[160];
		snprintf(b, sizeof b,
			 "; %llu of %llu answers came while spinning; %.1f ms of CPU spent spinning for "
			 "answers",
			 static_cast<unsigned long long>(caught_), static_cast<unsigned long long>(spun_for_),
			 static_cast<double>(spun_ns_) / 1e6);
		s += b;
	}
	if (!stuck_.empty())
		s += "; BOUND ABOVE ITS TARGET: " + stuck_;
	if (kvm_)
		s += "; " + kvm_checked();
	return s;
}

clocksync::ClocksLink SyncLink::record(const ClockInfo *local, CtfLines *lines) const
{
	std::lock_guard<std::mutex> g(mu_);
	clocksync::ClocksLink l;
	l.segments = est_.segments();
	if (local && lines) { // the same state of the map as the record's
		lines->ok = ctf_clock_of(l.segments, *local, &lines->clock, &lines->env);
		lines->pieces = lines->ok ? ctf_pieces_of(l.segments, *local) : std::vector<CtfPiece>();
	}
	const std::string self = "(this machine)";
	l.name = spec_.name;
	l.spec = spec_.text;
	l.follower = spec_.follower;
	l.source = spec_.follower ? self : spec_.name;
	l.target = spec_.follower ? spec_.name : self;
	l.peer_hostname = peer_hostname_;
	l.peer_boot_id = peer_boot_id_;
	l.peer_clock_offset_ns = peer_offset_ns_;
	l.state = state_;
	l.correlated = !l.segments.empty() && l.segments.back().bounded;
	l.probes = probes_;
	l.answered = answered_;
	l.used = used_;
	l.min_rtt_ns = min_rtt_;
	l.width_now_ns = est_.width_now();
	l.garbage_bytes = garbage_;
	l.kernel_receive_stamps = kernel_stamps_;
	l.silences = silences_;
	l.longest_silence_ns = longest_silence();
	if (kvm_) {
		const std::string words = kvm_checked();
		if (kvm_->checked() && words.find("DISAGREES") != std::string::npos)
			logf("clock link %s: %s", spec_.name.c_str(), words.c_str());
		l.has_kvm = true;
		l.kvm = kvm_->facts();
	}
	return l;
}

// mu_ held: who maps onto whom, for the clock blocks and env lines of
// ctf_clock.h (shared with the CLI's split of a received or relayed trace).
namespace {

// Segment i of the map as ctf_clock.h's line.
SegmentLine line_of(const clocksync::Segment &seg, size_t i)
{
	SegmentLine l;
	l.index = i;
	l.x_first = seg.x_first;
	l.x_last = seg.x_last;
	l.x0 = seg.x0;
	l.y0 = seg.y0;
	l.slope = seg.slope;
	for (const auto &k : seg.knots)
		l.width = std::max(l.width, k.hi - k.lo);
	return l;
}

} // namespace

MapNames SyncLink::names() const
{
	MapNames n;
	n.link = spec_.name;
	n.hostname = hostname_;
	n.peer_hostname = peer_hostname_;
	n.peer_boot_id = peer_boot_id_;
	n.peer_offset_ns = peer_offset_ns_;
	return n;
}

bool SyncLink::ctf_clock(const ClockInfo &local, ClockInfo *out, std::string *env) const
{
	std::lock_guard<std::mutex> g(mu_);
	return ctf_clock_of(est_.segments(), local, out, env);
}

bool SyncLink::ctf_clock_of(const std::vector<clocksync::Segment> &segs, const ClockInfo &local,
			    ClockInfo *out, std::string *env) const
{
	// The longest bounded segment: babeltrace2 takes one line per trace.
	const clocksync::Segment *best = nullptr;
	for (const auto &s : segs)
		if (s.bounded && (!best || s.x_last - s.x_first > best->x_last - best->x_first))
			best = &s;
	*out = local;
	if (!best || peer_boot_id_.empty()) {
		*env = "\tsync_state = \"uncorrelated\";\n\tsync_peer = " + json_quoted(spec_.name) + ";\n";
		return false;
	}
	segment_clock(line_of(*best, static_cast<size_t>(best - segs.data())), segs.size(), names(), local,
		      out, env);
	return true;
}

// Every bounded segment as a piece (trace_split.h) with its own line, as
// clock_map.h makes them; empty without a bounded map.
std::vector<CtfPiece> SyncLink::ctf_pieces_of(const std::vector<clocksync::Segment> &segs,
					      const ClockInfo &local) const
{
	std::vector<SegmentLine> lines;
	for (size_t i = 0; i < segs.size(); i++)
		if (segs[i].bounded)
			lines.push_back(line_of(segs[i], i));
	return ctf_pieces(lines, segs.size(), names(), local);
}

std::string SyncLinks::status() const
{
	std::string s;
	for (const auto &l : links_)
		s += l->status_line() + "\n";
	return s;
}

namespace {

// trace_split.h's split with the sub-trace owner's rights (fs.h): a root
// daemon splitting a user's trace creates nothing the user could not, and
// hands what it creates to the user.
bool split_as_owner(const std::string &dir, const std::vector<CtfPiece> &pieces, SplitStats *st,
		    std::string *err)
{
	struct stat dst;
	if (lstat(dir.c_str(), &dst) != 0 || !S_ISDIR(dst.st_mode)) {
		*err = dir + ": not a directory";
		return false;
	}
	Owner own;
	if (geteuid() == 0 && dst.st_uid != 0)
		own.uid = dst.st_uid, own.gid = dst.st_gid;
	AsOwner as(own);
	if (!as.ok()) {
		*err = "cannot take the rights of uid " + std::to_string(own.uid);
		return false;
	}
	SplitOwner give;
	if (own.uid >= 0)
		give.give = [&own](int fd) { own.apply(fd); };
	const size_t whole = st->whole_files.size();
	const bool ok = split_subtrace(dir, pieces, st, err, give);
	for (size_t i = whole; i < st->whole_files.size(); i++)
		logf("clock links: %s: a packet header does not check; the file stays whole in its "
		     "directory (on one clock line)",
		     st->whole_files[i].c_str());
	return ok;
}

} // namespace

SyncLinks::Written SyncLinks::clocks_written(const ClockInfo &clock, const std::string &hostname) const
{
	Written w;
	clocksync::ClocksFile f;
	f.machine = hostname;
	f.boot_id = clock.uuid;
	f.clock_offset_ns = clock.offset_s * 1000000000LL + clock.offset_ns;
	SyncLink::CtfLines lines;
	for (const auto &l : links_) {
		const bool first_follower = l->spec().follower && !w.follow;
		if (first_follower)
			w.follow = l.get();
		f.links.push_back(
			l->record(first_follower ? &clock : nullptr, first_follower ? &lines : nullptr));
	}
	if (w.follow) {
		w.env = lines.env;
		w.pieces = std::move(lines.pieces);
		f.has_ctf = true;
		f.ctf.link = w.follow->spec().name;
		f.ctf.rewritten = lines.ok;
		f.ctf.freq = lines.clock.freq;
		f.ctf.offset_s = lines.clock.offset_s;
		f.ctf.offset = lines.clock.offset_ns;
		w.clock = lines.ok ? lines.clock : clock;
	}
	w.json = clocksync::clocks_json(f);
	return w;
}

void SyncLinks::session_stopped(const std::string &out, const ClockInfo &clock,
				const std::string &hostname) const
{
	if (links_.empty() || out.empty())
		return;
	std::error_code ec;
	if (!std::filesystem::is_directory(out, ec))
		return;
	const Written w = clocks_written(clock, hostname);
	const std::string path = out + "/clocks.json", tmp = path + ".tmp";
	{
		std::ofstream f(tmp, std::ios::trunc);
		f << w.json;
		if (!f)
			logf("clock links: cannot write %s", tmp.c_str());
	}
	if (rename(tmp.c_str(), path.c_str()) < 0)
		logf("clock links: cannot write %s: %s", path.c_str(), strerror(errno));
	if (!w.follow)
		return;
	// Every sub-trace's metadata (listed first: a split makes directories).
	std::vector<std::string> dirs;
	for (auto it = std::filesystem::recursive_directory_iterator(out, ec);
	     !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec))
		if (it->path().filename() == "metadata" && it->is_regular_file(ec) &&
		    !is_piece_dir(it->path().parent_path().string()))
			dirs.push_back(it->path().parent_path().string());
	// Across a step (two pieces or more): one CTF trace per piece, so that
	// babeltrace2 places every event as clocks.json does (trace_split.h).
	const std::vector<CtfPiece> &pieces = w.pieces; // of the map clocks.json holds
	size_t n = 0;
	SplitStats st;
	for (const std::string &d : dirs) {
		std::string text;
		{
			std::ifstream f(d + "/metadata");
			std::stringstream ss;
			ss << f.rdbuf();
			text = ss.str();
		}
		if (text.rfind("/* CTF 1.8 */", 0) != 0)
			continue;
		if (pieces.size() > 1) {
			std::string err;
			if (!split_as_owner(d, pieces, &st, &err))
				logf("clock links: %s: cannot split it by clock piece (%s): babeltrace2 "
				     "places it on "
				     "one clock line",
				     d.c_str(), err.c_str());
			else
				n++;
			continue;
		}
		// In place (the drains append with O_APPEND, so a later append
		// still lands at the end).
		const std::string nt = rewrite_metadata_clock(text, w.clock, w.env);
		if (nt == text)
			continue;
		const std::string path = d + "/metadata";
		const int fd = open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0 || write(fd, nt.data(), nt.size()) != static_cast<ssize_t>(nt.size()))
			logf("clock links: cannot rewrite %s: %s", path.c_str(), strerror(errno));
		if (fd >= 0)
			close(fd);
		n++;
	}
	if (pieces.size() > 1)
		INFO("clock links: %zu sub-trace(s) under %s split into %zu clock pieces (%zu piece "
		     "directories written, %zu packet(s) moved, %zu cut at a record boundary)",
		     n, out.c_str(), pieces.size(), st.dirs_made, st.packets_moved, st.packets_cut);
	else
		VLOG("clock links: %zu metadata file(s) under %s put onto %s's clock", n, out.c_str(),
		     w.follow->spec().name.c_str());
}

bool SyncLinks::follows() const
{
	for (const auto &l : links_)
		if (l->spec().follower)
			return true;
	return false;
}

namespace {

// The env lines of a streamed follower's metadata before the rewrite:
// `what` ("relay", "serial") and when the rewrite comes.
std::string pending_env(const std::string &peer, const char *what, const char *when)
{
	return "\tsync_state = \"uncorrelated\";\n\tsync_peer = " + json_quoted(peer) + ";\n\tsync_" + what +
	       " = \"this machine's clock; put onto the peer's when the session " + when + "\";\n";
}

} // namespace

std::string SyncLinks::relay_pending_env() const
{
	for (const auto &l : links_)
		if (l->spec().follower)
			return pending_env(l->spec().name, "relay", "ends");
	return "";
}

void SyncLinks::serial_opened(SerialLink &line) const
{
	for (const auto &l : links_)
		if (l->spec().follower) {
			line.set_opening_filter(
				[env = pending_env(l->spec().name, "serial", "stops")](const std::string &t) {
					return rewrite_metadata_env(t, env);
				});
			return;
		}
}

void SyncLinks::serial_stopped(SerialLink &line, const ClockInfo &clock, const std::string &hostname) const
{
	if (links_.empty())
		return;
	const std::string where = line.target().device;
	if (line.broken()) {
		logf("clock links: serial line %s is down (%s): the received trace stays on this machine's "
		     "clock, no clocks.json",
		     where.c_str(), line.why_broken().c_str());
		return;
	}
	const Written w = clocks_written(clock, hostname);
	const std::function<std::string(const std::string &)> rw = [&](const std::string &t) {
		return t.rfind("/* CTF 1.8 */", 0) == 0 ? rewrite_metadata_clock(t, w.clock, w.env)
							: std::string();
	};
	std::string err;
	size_t n = 0;
	if (!line.clock_rewrite("clocks.json", w.json, w.follow ? &rw : nullptr, &n, err))
		logf("clock links: serial line %s: clocks.json and the rewritten metadata not sent: %s",
		     where.c_str(), err.c_str());
	else if (w.follow)
		VLOG("clock links: %zu metadata of serial line %s sent onto %s's clock", n, where.c_str(),
		     w.follow->spec().name.c_str());
}

void SyncLinks::relay_ending(RelayLink &link, const ClockInfo &clock, const std::string &hostname) const
{
	if (links_.empty())
		return;
	if (link.broken()) {
		logf("clock links: relay trace %s: the link is down (%s): its clocks are not put onto the "
		     "reference's, no clocks.json",
		     link.base().c_str(), link.why_broken().c_str());
		return;
	}
	const Written w = clocks_written(clock, hostname);
	std::string err;
	if (w.follow) {
		const size_t n = link.rewrite_metadata(
			[&](const std::string &t) { return rewrite_metadata_clock(t, w.clock, w.env); }, err);
		if (!err.empty())
			logf("clock links: relay trace %s: %s", link.base().c_str(), err.c_str());
		VLOG("clock links: %zu relayed metadata of %s sent onto %s's clock", n, link.base().c_str(),
		     w.follow->spec().name.c_str());
	}
	if (!link.put_file("clocks.json", w.json, err))
		logf("clock links: relay trace %s: clocks.json not stored: %s", link.base().c_str(),
		     err.c_str());
}

} // namespace daemon_impl
} // namespace strata
