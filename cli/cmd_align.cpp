// strata align HOST_TRACE GUEST_TRACE... --match SEND,RECV,KEY[+KEY...]:
// a follower's stored clock map refined with the traced messages between
// it and its reference, each one a constraint as the probes' are
// (docs/clocks.md, "Traced messages as constraints").
//
// A SEND event in one machine's trace and the RECV event with the same key
// in the other's say that the send happened before the receive: a point
// that the map's line must pass above or below, as a probe's leg does.
// Each segment of the follower's clocks.json is fitted again from its
// probes' constraints (its stored hulls; in an older file its knots, a
// weaker but sound stand-in) with these points added (clocksync.h's
// refine_segment), and the result written back: clocks.json (the probes'
// map kept beside each refined segment, the refinement named at the link)
// and the follower's sub-traces' metadata clock blocks (one line, or one
// per piece across a step: trace_split.h), so that babeltrace2 and
// Strata's reader show the refined order.  Idempotent: a refinement
// always starts from the probes' map.
//
// A segment whose messages no line fits together with its probes keeps
// the probes' map: said, with the first contradicting keys, and exit 1.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <unistd.h>
#include <unordered_map>
#include <vector>

#include "clock_map.h"
#include "clocks_file.h"
#include "clocksync.h"
#include "message_match.h"
#include "commands.h"
#include "options.h"
#include "trace_reader.h"
#include "trace_split.h"

namespace {

using namespace strata;
namespace fs = std::filesystem;

const cli::Command kAlign = {
	"align", "HOST_TRACE GUEST_TRACE... --match SEND,RECV,KEY[+KEY...]",
	"Refine the clock map of each guest trace (a clock follower's, docs/clocks.md)\n"
	"with the messages traced between it and the host: a SEND event in one\n"
	"machine's trace and the RECV event with the same KEY fields in the other's say\n"
	"that the send came first, a constraint on the map like the daemons' own\n"
	"probes.  The map then orders every message (a message faster than any probe\n"
	"too) and its stated bound holds for each.  Writes the guest's clocks.json (the\n"
	"probes' map kept beside each refined segment) and its sub-traces' metadata\n"
	"clock blocks, so that babeltrace2 and `strata view` show the refined order;\n"
	"a second run with the same messages changes no byte.  Run it once the\n"
	"sessions stopped (a later stop writes the probes' map again): it refuses a\n"
	"trace a process still writes, --dry-run excepted.  Exits 1 when a segment's\n"
	"messages contradict its probes (that segment keeps the probes' map, said\n"
	"with the keys), a trace is being written or nothing could be written.",
	"Example: strata align host-trace guest-trace --match app:send,app:recv,seq+sender"};

struct Match {
	std::string send, recv;
	std::vector<std::string> keys;
};

// A message end's tag (clocksync::MessageEnd::tag): its first key field's
// parity, when that field is an integer (--hold-out even|odd).
constexpr uint32_t kParityKnown = 1, kOdd = 2;

// One event class's key fields' indices (SIZE_MAX: the class lacks it).
struct KeyFields {
	bool send = false;
	std::vector<size_t> idx;
};

struct Trace {
	std::string arg, root;
	std::vector<std::string> dirs;
	bool follower = false;
	std::string boot_id; // a host trace's clock uuid
	// A follower's: the clocks.json and its link.
	std::string json_path, link;
};

std::string field_text(const FieldValue &v)
{
	const FieldInfo &f = *v.info;
	switch (f.type) {
	case STRATA_FT_INTEGER:
	case STRATA_FT_ENUM:
		return f.is_signed ? std::to_string(v.i) : std::to_string(v.u);
	case STRATA_FT_STRING:
		return std::string(v.str, v.len);
	case STRATA_FT_FLOAT: {
		char b[64];
		snprintf(b, sizeof b, "%.17g", v.d);
		return b;
	}
	default: { // arrays, sequences: their bytes
		const unsigned b = f.elem_bits / 8 ? f.elem_bits / 8 : 1;
		return std::string(reinterpret_cast<const char *>(v.elems), static_cast<size_t>(v.count) * b);
	}
	}
}

bool read_file(const std::string &path, std::string *out)
{
	std::ifstream f(path, std::ios::binary);
	if (!f)
		return false;
	std::ostringstream s;
	s << f.rdbuf();
	*out = s.str();
	return static_cast<bool>(f) || f.eof();
}

bool write_file(const std::string &path, const std::string &text, std::string *err)
{
	const std::string tmp = path + ".align.tmp";
	{
		std::ofstream f(tmp, std::ios::trunc | std::ios::binary);
		f << text;
		f.flush();
		if (!f) {
			*err = "cannot write " + tmp;
			unlink(tmp.c_str());
			return false;
		}
	}
	if (rename(tmp.c_str(), path.c_str()) != 0) {
		*err = "cannot rename " + tmp + " over " + path + ": " + strerror(errno);
		unlink(tmp.c_str());
		return false;
	}
	return true;
}

// The median of v (0 when empty).
int64_t median(std::vector<int64_t> v)
{
	if (v.empty())
		return 0;
	std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
	return v[v.size() / 2];
}

// A follower's map as read, and what the refinement makes of it.
struct Follower {
	std::string text; // clocks.json
	clocksync::ClocksFile file;
	size_t link = 0; // the follower link's index in file.links
	std::vector<clocksync::Segment> segs;
	ClockMap before;
};

// A matched message as a constraint on one guest's map: between the host
// and the guest, or (via) between the guest and another guest, whose end
// stands as the host time its probes' bound allows (the latest a send, the
// earliest a receive: sound wherever that bound holds).
struct Msg {
	size_t guest = 0;
	bool guest_sent = false;
	int64_t x = 0, y = 0; // guest raw, host raw (via: the other end's bound)
	size_t via = 0;       // 0: with the host; else the other guest's trace
	bool held = false;
	std::string key; // shown as "k=1, from=0"
};

// The directions a report counts: guest to host, host to guest, with
// another guest.
enum Dir { kGuestToHost, kHostToGuest, kViaGuest, kDirs };
Dir dir_of(const Msg &m)
{
	return m.via ? kViaGuest : m.guest_sent ? kGuestToHost : kHostToGuest;
}

// One guest's messages by segment: "line above" (lo) and "line below" (up)
// points, and the messages they came from.
struct BySegment {
	std::vector<std::vector<clocksync::Point>> lo, up;
	std::vector<std::vector<const Msg *>> lo_m, up_m;
	uint64_t outside = 0, held = 0, used = 0, total = 0;
	uint64_t used_dir[kDirs] = {};
};

// One run of the command: each step a method, in the order run() calls them.
struct Align {
	const char *cmd = "align";
	std::string match_text;
	int hold_out = 0; // 0 none, 1 even, 2 odd, 3 alternate
	bool dry = false;
	Match mt;
	std::vector<Trace> traces; // the host's first
	std::vector<Follower> fol; // by trace (the host's unused)
	clocksync::MessageMatcher matcher;
	uint64_t bad_key = 0;
	std::vector<Msg> msgs;
	bool failed = false;

	int parse_match();
	int open_traces(const std::vector<char *> &operands);
	int find_link(size_t i);
	int load_follower(size_t i);
	int read_events(size_t i, bool *saw_send, bool *saw_recv);
	int key_fields(const MetaEvent &e, const std::string &dir, KeyFields *kf) const;
	void pair_messages();
	bool probes_bound(size_t g, int64_t x, int64_t *lo, int64_t *hi) const;
	void add_message(const clocksync::MatchedMessage &mm);
	BySegment by_segment(size_t g, const Follower &f) const;
	std::vector<clocksync::Segment> refine(size_t g, const Follower &f, const BySegment &b,
					       size_t *refined, size_t *kept);
	std::string refined_text(size_t g, const Follower &f, const std::vector<clocksync::Segment> &out,
				 const BySegment &b, size_t refined, size_t kept, ClockMap *after);
	void report(size_t g, const Follower &f, const std::vector<clocksync::Segment> &out,
		    const ClockMap &after, const BySegment &b, size_t refined, size_t kept);
	int write(size_t g, const Follower &f, const std::string &nt);
	int align_follower(size_t g);
};

int Align::parse_match()
{
	std::vector<std::string> parts;
	std::stringstream ss(match_text);
	for (std::string p; std::getline(ss, p, ',');)
		parts.push_back(p);
	if (parts.size() != 3 || parts[0].empty() || parts[1].empty() || parts[2].empty())
		return cli::usage_error(kAlign, "--match " + match_text +
							": expected SEND,RECV,KEY[+KEY...] (three parts)");
	mt.send = parts[0];
	mt.recv = parts[1];
	std::stringstream ks(parts[2]);
	for (std::string k; std::getline(ks, k, '+');) {
		if (k.empty())
			return cli::usage_error(kAlign, "--match " + match_text + ": an empty KEY field");
		mt.keys.push_back(k);
	}
	if (mt.send == mt.recv)
		return cli::usage_error(kAlign, "--match " + match_text + ": SEND and RECV are one event");
	return cli::kOk;
}

int Align::open_traces(const std::vector<char *> &operands)
{
	for (char *a : operands) {
		Trace t;
		t.arg = a;
		std::error_code ec;
		t.root = fs::absolute(a, ec).lexically_normal().string();
		std::string why;
		if (ec || !find_trace_dirs(t.root, &t.dirs, &why) || t.dirs.empty()) {
			fprintf(stderr, "strata %s: %s: %s\n", cmd, a,
				why.empty() ? "no trace (no directory holding a metadata file)"
					    : why.c_str());
			return cli::kFail;
		}
		// A daemon, relayd or receiver still writing would rewrite the
		// metadata and clocks.json under the refinement (cmd_split.cpp's
		// rule); a dry run writes nothing and may look.
		if (std::string who; !dry && cli::written_by_someone(t.root, &who)) {
			fprintf(stderr,
				"strata %s: %s is being written (process %s): align the traces once their "
				"sessions stopped (or look with --dry-run)\n",
				cmd, a, who.c_str());
			return cli::kFail;
		}
		traces.push_back(std::move(t));
	}
	for (size_t i = 0; i < traces.size(); i++)
		if (const int r = find_link(i); r != cli::kOk)
			return r;
	fol.resize(traces.size());
	for (size_t i = 1; i < traces.size(); i++)
		if (const int r = load_follower(i); r != cli::kOk)
			return r;
	return cli::kOk;
}

// Trace i's sub-traces: the host's must follow nobody (its clock uuid is
// its boot id); a guest's name their link and clocks.json.
int Align::find_link(size_t i)
{
	Trace &t = traces[i];
	for (const std::string &d : t.dirs) {
		std::string text, why;
		TraceMeta m;
		if (!read_file(d + "/metadata", &text) || !parse_trace_meta(text, &m, &why))
			continue;
		const bool corr = m.env_string("sync_state") == "correlated";
		if (i == 0 && corr) {
			fprintf(stderr,
				"strata %s: %s: %s is a clock follower's sub-trace: HOST_TRACE must be the "
				"reference's (the host's) trace\n",
				cmd, t.arg.c_str(), d.c_str());
			return cli::kFail;
		}
		if (i == 0 && t.boot_id.empty())
			t.boot_id = m.clock.uuid;
		const std::string cj = i && corr ? find_clocks_json(d) : std::string();
		if (cj.empty())
			continue;
		if (!t.json_path.empty() && (cj != t.json_path || m.env_string("sync_peer") != t.link)) {
			fprintf(stderr,
				"strata %s: %s holds sub-traces of two clock maps (%s, link '%s'; %s, link "
				"'%s'): name each follower's session directory apart\n",
				cmd, t.arg.c_str(), t.json_path.c_str(), t.link.c_str(), cj.c_str(),
				m.env_string("sync_peer").c_str());
			return cli::kFail;
		}
		t.json_path = cj;
		t.link = m.env_string("sync_peer");
		t.follower = true;
	}
	if (i > 0 && !t.follower) {
		fprintf(stderr,
			"strata %s: %s: no sub-trace put onto another machine's clock with a clocks.json "
			"(sync_state \"correlated\" in its metadata): not a clock follower's trace, or its "
			"session has not stopped yet\n",
			cmd, t.arg.c_str());
		return cli::kFail;
	}
	return cli::kOk;
}

// Guest i's map, and that it follows the host's trace.
int Align::load_follower(size_t i)
{
	Follower &f = fol[i];
	const Trace &t = traces[i];
	std::string why;
	if (!read_file(t.json_path, &f.text) || !clocksync::parse_clocks(f.text, &f.file, &why) ||
	    !parse_clock_map(f.text, t.link, &f.before, &why)) {
		fprintf(stderr, "strata %s: %s: %s\n", cmd, t.json_path.c_str(),
			why.empty() ? "cannot read it" : why.c_str());
		return cli::kFail;
	}
	// parse_clock_map found the follower link named t.link: the last such.
	for (size_t k = 0; k < f.file.links.size(); k++)
		if (f.file.links[k].name == t.link && f.file.links[k].follower)
			f.link = k;
	f.segs = f.file.links[f.link].segments;
	if (!traces[0].boot_id.empty() && f.before.names.peer_boot_id != traces[0].boot_id) {
		fprintf(stderr,
			"strata %s: %s follows the machine of boot %s (link '%s', host %s); %s is on the "
			"clock of boot %s: not its host's trace\n",
			cmd, t.arg.c_str(), f.before.names.peer_boot_id.c_str(), t.link.c_str(),
			f.before.names.peer_hostname.c_str(), traces[0].arg.c_str(),
			traces[0].boot_id.c_str());
		return cli::kFail;
	}
	return cli::kOk;
}

// Where event class e holds each KEY field; a usage error naming its
// fields when it lacks one.
int Align::key_fields(const MetaEvent &e, const std::string &dir, KeyFields *kf) const
{
	for (const std::string &k : mt.keys) {
		size_t at = SIZE_MAX;
		for (size_t j = 0; j < e.info.fields.size(); j++)
			if (e.info.fields[j].name == k)
				at = j;
		if (at == SIZE_MAX) {
			std::string have;
			for (const FieldInfo &fi : e.info.fields)
				have += (have.empty() ? "" : ", ") + fi.name;
			fprintf(stderr, "strata %s: --match: %s in %s has no field '%s' (its fields: %s)\n",
				cmd, e.full_name.c_str(), dir.c_str(), k.c_str(),
				have.empty() ? "none" : have.c_str());
			return cli::kUsage;
		}
		kf->idx.push_back(at);
	}
	return cli::kOk;
}

// Trace i's sends and receives, by key, with their raw clock values.
int Align::read_events(size_t i, bool *saw_send, bool *saw_recv)
{
	TraceReader rd;
	std::string why;
	if (!rd.open(traces[i].root, &why)) {
		fprintf(stderr, "strata %s: %s: %s\n", cmd, traces[i].arg.c_str(), why.c_str());
		return cli::kFail;
	}
	std::map<const MetaEvent *, KeyFields> classes;
	for (const auto &st : rd.traces())
		for (const auto &sc : st->meta.events)
			for (const auto &kv : sc.second) {
				if (!st->readable)
					break;
				const MetaEvent &e = kv.second;
				KeyFields kf;
				kf.send = e.full_name == mt.send;
				if (!kf.send && e.full_name != mt.recv)
					continue;
				(kf.send ? *saw_send : *saw_recv) = true;
				if (const int r = key_fields(e, st->dir, &kf); r != cli::kOk)
					return r;
				classes[&e] = kf;
			}
	if (classes.empty())
		return cli::kOk;
	std::vector<FieldValue> vals;
	rd.read_each([&](const TraceMsg &m) {
		auto c = m.kind == TraceMsgKind::Event ? classes.find(m.event->cls) : classes.end();
		if (c == classes.end())
			return true;
		m.event->decode(&vals);
		std::string key;
		clocksync::MessageEnd end;
		end.machine = i;
		end.ts = static_cast<int64_t>(m.event->ts);
		for (size_t j = 0; j < c->second.idx.size(); j++) {
			const size_t at = c->second.idx[j];
			if (at >= vals.size()) {
				bad_key++;
				return true;
			}
			key += field_text(vals[at]) + '\x1f';
			if (j == 0 && vals[at].info->type == STRATA_FT_INTEGER)
				end.tag = kParityKnown | (vals[at].u & 1 ? kOdd : 0);
		}
		if (c->second.send)
			matcher.add_send(key, end);
		else
			matcher.add_recv(key, end);
		return true;
	});
	return cli::kOk;
}

// The bound guest g's probes' map gives at its raw time x (that of the
// bounded segment covering x): false outside every one.
bool Align::probes_bound(size_t g, int64_t x, int64_t *lo, int64_t *hi) const
{
	for (const clocksync::Segment &s : fol[g].segs)
		if (s.bounded && x >= s.x_first && x <= s.x_last)
			return clocksync::segment_bound(s.probes.empty() ? s : s.probes.front(), x, lo, hi);
	return false;
}

// One matched message as the constraints it gives: on its guest's map when
// the host is the other end; between two guests, on each guest's map with
// the other end at the host time its probes' bound allows.
void Align::add_message(const clocksync::MatchedMessage &mm)
{
	const clocksync::MessageEnd &s = mm.send, &v = mm.recv;
	Msg m;
	m.held = (hold_out == 1 || hold_out == 2) && (s.tag & kParityKnown) &&
		 static_cast<bool>(s.tag & kOdd) == (hold_out == 2);
	size_t field = 0, at = 0;
	for (size_t e; (e = mm.key.find('\x1f', at)) != std::string::npos; at = e + 1, field++)
		m.key += (field ? ", " : "") + mt.keys[field] + "=" + mm.key.substr(at, e - at);
	if (!s.machine || !v.machine) {
		m.guest_sent = s.machine != 0;
		m.guest = m.guest_sent ? s.machine : v.machine;
		m.x = m.guest_sent ? s.ts : v.ts;
		m.y = m.guest_sent ? v.ts : s.ts;
		msgs.push_back(std::move(m));
		return;
	}
	int64_t lo, hi;
	Msg r = m; // the receiver's: the send happened at the earliest at lo
	if (probes_bound(s.machine, s.ts, &lo, &hi)) {
		r.guest = v.machine, r.guest_sent = false, r.x = v.ts, r.y = lo, r.via = s.machine;
		msgs.push_back(std::move(r));
	}
	if (probes_bound(v.machine, v.ts, &lo, &hi)) { // the sender's: received by hi
		m.guest = s.machine, m.guest_sent = true, m.x = s.ts, m.y = hi, m.via = v.machine;
		msgs.push_back(std::move(m));
	}
}

// The messages, in guest time order, held out as asked; what was not used.
void Align::pair_messages()
{
	clocksync::MatchCounts c;
	const std::vector<clocksync::MatchedMessage> mm = matcher.match(&c);
	uint64_t dir[kDirs] = {};
	for (const clocksync::MatchedMessage &m : mm) {
		dir[m.send.machine && m.recv.machine ? kViaGuest
		    : m.send.machine                 ? kGuestToHost
						     : kHostToGuest]++;
		add_message(m);
	}
	std::sort(msgs.begin(), msgs.end(), [](const Msg &a, const Msg &b) { return a.x < b.x; });
	if (hold_out == 3) { // every second one of each guest and direction
		std::map<std::pair<size_t, int>, uint64_t> nth;
		for (Msg &m : msgs)
			m.held = nth[{m.guest, dir_of(m)}]++ % 2 == 1;
	}
	printf("%zu message(s) between %s and its guest trace(s) matched by %s (by sender and key: %" PRIu64
	       " guest to host, %" PRIu64 " host to guest, %" PRIu64 " between two guests)",
	       mm.size(), traces[0].arg.c_str(), match_text.c_str(), dir[kGuestToHost], dir[kHostToGuest],
	       dir[kViaGuest]);
	if (c.ambiguous || c.unmatched || c.same_machine)
		printf(" (not used: %" PRIu64 " end(s) whose other end is not one (a key sent twice by one "
		       "machine or received twice), %" PRIu64
		       " send(s) or receive(s) without their other end, %" PRIu64 " within one machine)",
		       c.ambiguous, c.unmatched, c.same_machine);
	printf("\n");
}

// Guest g's messages to the segment that covers their guest time.
BySegment Align::by_segment(size_t g, const Follower &f) const
{
	BySegment b;
	const size_t n = f.segs.size();
	b.lo.resize(n), b.up.resize(n), b.lo_m.resize(n), b.up_m.resize(n);
	for (const Msg &m : msgs) {
		if (m.guest != g)
			continue;
		b.total++;
		if (m.held) {
			b.held++;
			continue;
		}
		size_t s = SIZE_MAX;
		for (size_t k = 0; k < n; k++)
			if (f.segs[k].bounded && m.x >= f.segs[k].x_first && m.x <= f.segs[k].x_last)
				s = k;
		if (s == SIZE_MAX) {
			b.outside++;
			continue;
		}
		b.used++;
		b.used_dir[dir_of(m)]++;
		// A guest's send: the line passes below (x_s, y_r); a host's:
		// above (x_r, y_s).
		if (m.guest_sent)
			b.up[s].push_back({m.x, m.y}), b.up_m[s].push_back(&m);
		else
			b.lo[s].push_back({m.x, m.y}), b.lo_m[s].push_back(&m);
	}
	return b;
}

// Each segment refined from its probes' map, or left as the probes gave it
// (said) when its messages contradict them.
std::vector<clocksync::Segment> Align::refine(size_t g, const Follower &f, const BySegment &b,
					      size_t *refined, size_t *kept)
{
	// The handovers the split used stay (the piece directories' ranges).
	std::vector<int64_t> handover(f.segs.size(), INT64_MIN);
	for (const SegmentLine &l : f.before.lines)
		if (l.index < f.segs.size())
			handover[l.index] = l.piece_from;
	std::vector<clocksync::Segment> out = f.segs;
	for (size_t k = 0; k < f.segs.size(); k++) {
		const clocksync::Segment &s = f.segs[k];
		clocksync::Segment probes = s.probes.empty() ? s : s.probes.front();
		probes.hull_lower = s.hull_lower;
		probes.hull_upper = s.hull_upper;
		probes.probes.clear();
		probes.matched = probes.contradicting = 0;
		std::vector<size_t> contra;
		clocksync::Segment r;
		out[k] = probes;
		out[k].piece_from = handover[k];
		if (!s.bounded || (b.lo[k].empty() && b.up[k].empty()))
			continue;
		if (clocksync::refine_segment(s, b.lo[k], b.up[k], &r, &contra)) {
			out[k] = std::move(r);
			out[k].piece_from = handover[k];
			++*refined;
			continue;
		}
		const size_t n = b.lo[k].size() + b.up[k].size();
		out[k].contradicting = contra.empty() ? n : contra.size();
		++*kept;
		failed = true;
		std::string keys;
		for (size_t c = 0; c < contra.size() && c < 5; c++) {
			const Msg *m = contra[c] < b.lo_m[k].size() ? b.lo_m[k][contra[c]]
								    : b.up_m[k][contra[c] - b.lo_m[k].size()];
			keys += std::string(c ? "; " : "") + m->key +
				(m->guest_sent ? " (guest to host)" : " (host to guest)");
		}
		fprintf(stderr,
			"strata %s: %s: link '%s', segment %zu (%s, %.3f s of the guest's time): %s of its "
			"%zu matched message(s) contradict its probes: no line fits %s and the probes (a "
			"step "
			"the probes did not see, or messages matched wrongly)%s%s; the segment keeps the "
			"probes' map\n",
			cmd, traces[g].arg.c_str(), traces[g].link.c_str(), k, clocksync::start_name(s.start),
			static_cast<double>(s.x_last - s.x_first) / 1e9,
			contra.empty() ? "together, all" : std::to_string(contra.size()).c_str(), n,
			contra.empty() ? "them all" : "each of these", keys.empty() ? "" : ": ",
			keys.c_str());
	}
	return out;
}

// clocks.json with the link's segments, its "refined" object and the
// root's "ctf" line replaced (the rest as read); *after: the map it gives.
// Empty when it does not read back.
std::string Align::refined_text(size_t g, const Follower &f, const std::vector<clocksync::Segment> &out,
				const BySegment &b, size_t refined, size_t kept, ClockMap *after)
{
	static const char *const kHold[] = {"none", "even", "odd", "alternate"};
	clocksync::ClocksFile file = f.file;
	clocksync::ClocksLink &link = file.links[f.link];
	link.segments = out;
	link.has_refined = true;
	link.refined = clocksync::Refinement{match_text, kHold[hold_out], b.total, b.used,
					     b.held,     b.outside,       refined, kept};
	std::string why;
	if (!parse_clock_map(clocksync::clocks_json(file), traces[g].link, after, &why)) {
		fprintf(stderr, "strata %s: %s: the refined map does not read back: %s\n", cmd,
			traces[g].json_path.c_str(), why.c_str());
		return std::string();
	}
	if (file.has_ctf) {
		// The one-line rewrite's line: the longest bounded segment's.
		const SegmentLine *best = nullptr;
		for (const SegmentLine &l : after->lines)
			if (!best || l.x_last - l.x_first > best->x_last - best->x_first)
				best = &l;
		ClockInfo c;
		std::string env;
		segment_clock(*best, after->n_segments, after->names, ClockInfo(), &c, &env);
		file.ctf = clocksync::CtfLine{traces[g].link, true, c.freq, c.offset_s, c.offset_ns};
	}
	return clocksync::clocks_json(file);
}

// What the refined map does with every message, used or held out, against
// the probes' map: inversions, the bound's width, the bound against each.
void Align::report(size_t g, const Follower &f, const std::vector<clocksync::Segment> &out,
		   const ClockMap &after, const BySegment &b, size_t refined, size_t kept)
{
	const auto place = [](const ClockMap &cm, int64_t x) {
		return cm.pieces[cm.piece_at(static_cast<uint64_t>(x))].at(x);
	};
	uint64_t inv_before = 0, inv_used = 0, inv_held = 0, bound_broken = 0;
	int64_t closest[2] = {INT64_MAX, INT64_MAX}; // held out: guest->host, host->guest
	std::vector<int64_t> w0, w1;
	for (const Msg &m : msgs) {
		if (m.guest != g)
			continue;
		const int64_t y0 = place(f.before, m.x), y1 = place(after, m.x);
		inv_before += m.guest_sent ? y0 >= m.y : y0 <= m.y;
		if (m.guest_sent ? y1 >= m.y : y1 <= m.y)
			(m.held ? inv_held : inv_used)++;
		if (m.held)
			closest[m.guest_sent ? 0 : 1] =
				std::min(closest[m.guest_sent ? 0 : 1], m.guest_sent ? m.y - y1 : y1 - m.y);
		for (const clocksync::Segment &s : out) {
			int64_t l0, h0, l1, h1;
			if (!s.bounded || m.x < s.x_first || m.x > s.x_last)
				continue;
			if (clocksync::segment_bound(s.probes.empty() ? s : s.probes.front(), m.x, &l0, &h0))
				w0.push_back(h0 - l0);
			if (!clocksync::segment_bound(s, m.x, &l1, &h1))
				continue;
			w1.push_back(h1 - l1);
			bound_broken += m.guest_sent ? l1 >= m.y : h1 <= m.y; // the bound must allow it
		}
	}
	const Trace &t = traces[g];
	printf("%s: link '%s' (%s): %" PRIu64 " message(s) with %s: %" PRIu64 " used, %" PRIu64
	       " held out, %" PRIu64 " outside the map's segments (not used); %zu of %zu segment(s) refined, "
	       "%zu kept the probes' map\n",
	       t.arg.c_str(), t.link.c_str(), t.json_path.c_str(), b.total, traces[0].arg.c_str(), b.used,
	       b.held, b.outside, refined, out.size(), kept);
	printf("%s: used by direction: %" PRIu64 " guest to host, %" PRIu64 " host to guest, %" PRIu64
	       " with another guest (its end at its probes' bound)\n",
	       t.arg.c_str(), b.used_dir[kGuestToHost], b.used_dir[kHostToGuest], b.used_dir[kViaGuest]);
	printf("%s: inverted: %" PRIu64 " of %" PRIu64
	       " under the probes' map; under the refined map %" PRIu64 " of %" PRIu64 " used, %" PRIu64
	       " of %" PRIu64 " held out; bound width at the messages (median) "
	       "%.1f us, was %.1f us; the bound excludes %" PRIu64 " message(s)\n",
	       t.arg.c_str(), inv_before, b.total, inv_used, b.used, inv_held, b.held,
	       static_cast<double>(median(w1)) / 1e3, static_cast<double>(median(w0)) / 1e3, bound_broken);
	const auto us = [](int64_t v) {
		char buf[32];
		snprintf(buf, sizeof buf, "%.1f us", static_cast<double>(v) / 1e3);
		return v == INT64_MAX ? std::string("-") : std::string(buf);
	};
	if (b.held)
		printf("%s: the held-out messages closest to an inversion took %s (guest to host) and %s "
		       "(host to "
		       "guest) once mapped by the refined map\n",
		       t.arg.c_str(), us(closest[0]).c_str(), us(closest[1]).c_str());
	failed |= bound_broken > 0;
}

// clocks.json, then the follower's sub-traces' metadata: one line, or one
// per piece (split).
int Align::write(size_t g, const Follower &f, const std::string &nt)
{
	const Trace &t = traces[g];
	std::string err;
	if (nt != f.text && !write_file(t.json_path, nt, &err)) {
		fprintf(stderr, "strata %s: %s\n", cmd, err.c_str());
		return cli::kFail;
	}
	TreeSplit ts;
	const std::string top = fs::path(t.json_path).parent_path().string();
	const bool ok = split_tree(top, &ts, &err, nullptr, true);
	for (const std::string &n : ts.notes)
		fprintf(stderr, "strata %s: %s\n", cmd, n.c_str());
	printf("%s: %s %s; %zu sub-trace(s) of the follower: %zu on one clock line (%zu rewritten), %zu "
	       "split by "
	       "piece (%zu packet(s) moved)\n",
	       t.arg.c_str(), t.json_path.c_str(), nt != f.text ? "written" : "unchanged", ts.subtraces,
	       ts.one_piece, ts.relined, ts.split, ts.st.packets_moved);
	if (!ok)
		fprintf(stderr, "strata %s: %s\n", cmd, err.c_str());
	failed |= !ok || ts.skipped;
	return cli::kOk;
}

int Align::align_follower(size_t g)
{
	const Follower &f = fol[g];
	const BySegment b = by_segment(g, f);
	size_t refined = 0, kept = 0;
	const std::vector<clocksync::Segment> out = refine(g, f, b, &refined, &kept);
	ClockMap after;
	const std::string nt = refined_text(g, f, out, b, refined, kept, &after);
	if (nt.empty())
		return cli::kFail;
	report(g, f, out, after, b, refined, kept);
	return dry ? cli::kOk : write(g, f, nt);
}

} // namespace

int strata_cmd_align(int argc, char **argv)
{
	Align a;
	const std::vector<cli::Option> opts = {
		cli::text("match", 'm', "SEND,RECV,KEY[+KEY...]", "a match",
			  "the events that send and receive a message (full names, e.g. app:send) "
			  "and the fields, joined by '+', whose values name a message in both",
			  a.match_text),
		cli::choice("hold-out", 0, "none|even|odd|alternate",
			    "do not use some messages as constraints, only check them against the "
			    "refined map (how well it orders messages it never saw): those whose "
			    "first KEY field is even (or odd), or every second one of each "
			    "direction in time order (alternate)",
			    a.hold_out, {"none", "even", "odd", "alternate"}),
		cli::flag("dry-run", 'n', "say what the refinement gives; write nothing", a.dry),
	};
	std::vector<char *> operands;
	if (const int r = cli::parse(kAlign, opts, argc, argv, operands); r != cli::kParsed)
		return r;
	if (a.match_text.empty())
		return cli::usage_error(kAlign, "--match is needed (SEND,RECV,KEY[+KEY...])");
	if (operands.size() < 2)
		return cli::usage_error(kAlign, operands.empty() ? "missing HOST_TRACE and GUEST_TRACE"
								 : "missing GUEST_TRACE");
	if (const int r = a.parse_match(); r != cli::kOk)
		return r;
	if (const int r = a.open_traces(operands); r != cli::kOk)
		return r;
	bool saw_send = false, saw_recv = false;
	for (size_t i = 0; i < a.traces.size(); i++)
		if (const int r = a.read_events(i, &saw_send, &saw_recv); r != cli::kOk)
			return r;
	if (!saw_send || !saw_recv) {
		fprintf(stderr,
			"strata %s: --match: no event named '%s' in any of the traces' metadata (full names, "
			"as "
			"`strata view` prints them: provider:event)\n",
			a.cmd, (!saw_send ? a.mt.send : a.mt.recv).c_str());
		return cli::kUsage;
	}
	a.pair_messages();
	for (size_t g = 1; g < a.traces.size(); g++)
		if (const int r = a.align_follower(g); r != cli::kOk)
			return r;
	if (a.bad_key)
		fprintf(stderr,
			"strata %s: %" PRIu64 " event(s) whose key fields could not be read: not used\n",
			a.cmd, a.bad_key);
	return a.failed ? cli::kFail : cli::kOk;
}
