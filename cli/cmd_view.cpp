// cmd_view.cpp - `strata view [DIR]`: pretty-print a trace, one line per
// event: the command (its options, the reader chosen, what is told at the
// end).  The lines: view_sink.h (the filters, Strata's own reader's events
// in view_lines.cpp, babeltrace2's messages in view_bt.cpp through
// view_graph.cpp), their text in view_text.h.  Single-threaded.
#include <babeltrace2/babeltrace.h>

#include <sys/stat.h>

#include <cctype>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "bt_fields.h"
#include "commands.h"
#include "read_event.h"
#include "trace_reader.h"
#include "view_graph.h"
#include "view_sink.h"

namespace strata {
namespace view {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;

// --pid with a kernel sub-trace: the kernel names threads, not their
// processes.  Read the other sub-traces once first to learn which process
// each of their threads is in, so that a kernel event of such a thread is
// shown from its first one (strata export does the same).
void learn_threads(ViewSink &s, const std::vector<std::string> &dirs, bool native)
{
	std::vector<std::string> user;
	std::string why, warnings;
	if (s.pids.empty())
		return;
	for (const std::string &d : dirs)
		if (!is_kernel_trace(d))
			user.push_back(d);
	if (user.empty() || user.size() == dirs.size())
		return;
	if (native) {
		TraceReader r;
		if (!r.open_dirs(user, &why))
			return;
		r.read([&s](const TraceMsg &m) {
			if (m.kind == TraceMsgKind::Event && m.event->tid >= 0)
				s.tid_pid.emplace(m.event->tid, m.event->trace().vpid);
			return true;
		});
		return;
	}
	std::map<const bt_trace *, int64_t> pid_of; // this graph's own traces
	read_ctf_trace_dirs(
		user,
		[&s, &pid_of](const bt_message *msg) {
			if (bt_message_get_type(msg) != BT_MESSAGE_TYPE_EVENT)
				return true;
			const bt_event *ev = bt_message_event_borrow_event_const(msg);
			const bt_trace *tr = bt_stream_borrow_trace_const(bt_event_borrow_stream_const(ev));
			auto it = pid_of.find(tr);
			if (it == pid_of.end()) {
				int64_t pid = -1;
				env_int(tr, "vpid", &pid);
				it = pid_of.emplace(tr, pid).first;
			}
			int64_t tid = 0;
			if (event_tid(ev, &tid))
				s.tid_pid.emplace(tid, it->second);
			return true;
		},
		&why, &warnings);
}

// The mappings recorded before `since` (pthread:mapping, of the sub-traces
// in `maps`), in the order the whole read gives them: what names an
// address from the window's first line on.  A pass of its own over those
// sub-traces' packets before the window, nothing printed; the main pass
// takes again those it reads (a straddling packet's), which changes no
// name: a mapping of an object already mapped is ignored (the first one
// places it, analyze_symbols.h).
void learn_mappings_before(ViewSink &s, const TraceReader &r, const std::set<const SubTrace *> &maps,
			   int64_t since)
{
	TraceReader pre;
	pre.share_index(r);
	pre.set_stream_filter([&maps](const StreamInfo &st) { return maps.count(st.trace) != 0; });
	pre.set_window(INT64_MIN, since - 1);
	const MetaEvent *cls = nullptr;
	bool mapping = false;
	pre.read_each([&](const TraceMsg &m) {
		if (m.kind != TraceMsgKind::Event || m.event->ns >= since)
			return true;
		if (m.event->cls != cls) {
			cls = m.event->cls;
			mapping = cls->full_name == "pthread:mapping";
		}
		if (mapping)
			learn_mapping(s, *m.event);
		return true;
	});
}

// --since/--until as the reader's window (docs/reading.md, "Merging and
// messages"): the packets wholly outside are not read.  The bounds are
// resolved first from the trace's first event, as filter_event() would
// resolve them (a pass of its own, which reads one packet per stream).
// Not with --pid (the threads' processes are learnt from the events read
// before).  Where a sub-trace records mappings, those before the window
// are read first (learn_mappings_before): an address's symbol needs them.
void window_pushdown(ViewSink &s, TraceReader &r)
{
	if ((!s.since.set && !s.until.set) || !s.pids.empty())
		return;
	std::set<const SubTrace *> maps;
	for (const auto &t : r.traces())
		for (const auto &cls : t->meta.events)
			for (const auto &kv : cls.second)
				if (kv.second.full_name == "pthread:mapping")
					maps.insert(t.get());
	TraceReader first;
	first.share_index(r);
	first.start();
	TraceMsg m;
	while (first.next(&m)) {
		if (m.kind != TraceMsgKind::Event)
			continue;
		s.first_seen = true;
		resolve(s.since, m.event->ns);
		resolve(s.until, m.event->ns);
		if (s.since.set && s.since.at > INT64_MIN && !maps.empty())
			learn_mappings_before(s, r, maps, s.since.at);
		r.set_window(s.since.set ? s.since.at : INT64_MIN, s.until.set ? s.until.at : INT64_MAX);
		return;
	}
}

int run_view(const std::vector<std::string> &roots, ViewSink &sink)
{
	std::string why, warnings;
	struct stat st;
	for (const std::string &root : roots)
		if (stat(root.c_str(), &st) != 0) { // plainly, before any reader or repair check
			std::fprintf(stderr, "strata view: no such trace '%s': %s\n", root.c_str(),
				     std::strerror(errno));
			return kExitFailure;
		}
	const std::string dir = roots_label(roots);
	std::vector<std::string> dirs;
	if (!find_trace_dirs(roots, &dirs, &why)) {
		std::fprintf(stderr, "strata view: %s\n", why.c_str());
		return kExitFailure;
	}
	const bool native = use_native_reader(dirs);
	sink.show_host = machines(dirs) > 1;
	learn_threads(sink, dirs, native);
	bool ok, skipped = false, none = false;
	if (native) {
		TraceReader r;
		ok = r.open_dirs(dirs, &why);
		if (ok)
			window_pushdown(sink, r);
		ok = ok && read_native(r, sink);
		std::string unread;
		if (!rd::native_after_read(r, "view", dir, false, &warnings, &unread) && ok) {
			ok = false;
			why = unread;
		}
		skipped = ok && rd::native_skipped(r, &none);
		none = none && !sink.first_seen; // the window's pass read one
	} else {
		ok = read_ctf_trace_dirs(
			dirs, [&sink](const bt_message *msg) { return on_bt_message(sink, msg); }, &why,
			&warnings);
	}
	flush_line(sink);
	const bool flushed = std::fflush(stdout) == 0;
	if (!warnings.empty())
		std::fprintf(stderr, "strata view: warning: %s", warnings.c_str());
	if (skipped && none)
		rd::tell_none_read("view", dir);
	if (!ok) {
		std::fprintf(stderr, "strata view: %s\n", why.c_str());
		if (!native)
			cli::hint_torn("view", dir);
		return kExitFailure;
	}
	if (!flushed || sink.write_failed) {
		std::fprintf(stderr, "strata view: cannot write the output: %s\n", std::strerror(errno));
		return kExitFailure;
	}
	if (!sink.events && !skipped) // an empty answer is told, not silent
		std::fprintf(stderr, "strata view: %s\n",
			     sink.pids.empty() && sink.tids.empty() && sink.patterns.empty() &&
					     !sink.since.set && !sink.until.set
				     ? "the trace holds no event"
				     : "no event matched the filters (--pid, --tid, -e, --since, --until)");
	return skipped ? kExitFailure : kExitOk; // everything readable printed, damage skipped
}

bool parse_limit(const char *s, uint64_t *out)
{
	if (!s || !*s || *s == '-')
		return false;
	char *end = nullptr;
	errno = 0;
	const unsigned long long v = std::strtoull(s, &end, 10);
	if (errno || *end)
		return false;
	*out = v;
	return true;
}

bool parse_i64(const char *s, int64_t *out)
{
	if (!s || !*s)
		return false;
	char *end = nullptr;
	errno = 0;
	const long long v = std::strtoll(s, &end, 10);
	if (errno || *end)
		return false;
	*out = v;
	return true;
}

// Seconds with up to nine decimals ("1", "1.5", "0.000000250") -> ns.
bool parse_seconds(const char *s, int64_t *ns)
{
	int64_t sec = 0, frac = 0;
	int digits = 0;
	const char *p = s;
	if (!std::isdigit(static_cast<unsigned char>(*p)))
		return false;
	for (; std::isdigit(static_cast<unsigned char>(*p)); p++)
		sec = sec * 10 + (*p - '0');
	if (*p == '.') {
		for (p++; std::isdigit(static_cast<unsigned char>(*p)); p++)
			if (digits < 9) {
				frac = frac * 10 + (*p - '0');
				digits++;
			}
	}
	if (*p || sec > 1000000000)
		return false;
	for (; digits < 9; digits++)
		frac *= 10;
	*ns = sec * 1000000000 + frac;
	return true;
}

// "+SECONDS" or "HH:MM:SS[.frac]".
bool parse_time(const char *s, TimeBound *b)
{
	b->set = true;
	if (*s == '+') {
		b->relative = true;
		return parse_seconds(s + 1, &b->ns);
	}
	int h = 0, m = 0, n = 0;
	if (std::sscanf(s, "%2d:%2d:%n", &h, &m, &n) != 2 || n == 0 || h > 23 || m > 59)
		return false;
	int64_t sec = 0;
	if (!parse_seconds(s + n, &sec) || sec >= 61 * 1000000000LL)
		return false;
	b->ns = (static_cast<int64_t>(h) * 3600 + m * 60) * 1000000000 + sec;
	return true;
}

const cli::Command kView = {
	"view", "[-n N] [--pid PID] [--tid TID] [-e PATTERN] [--since T] [--until T] [--repair] [DIR...]",
	"Print the events of the trace(s) under DIR (default: the current directory),\n"
	"merged by time, one line per event.  Several DIRs are read as one trace (a\n"
	"host's and its guests', each placed by the clock map found in or above it):\n"
	"\n"
	"  [HH:MM:SS.nnnnnnnnn] PROCNAME[PID] tid=TID cpu=CPU PROVIDER:EVENT: { FIELD = VALUE, ... }\n"
	"\n"
	"Times are absolute, in local time (set TZ=UTC for UTC).  Enumerations print as\n"
	"'label (value)', strings quoted, arrays and sequences in [ ].  Lost data prints as\n"
	"'*** N events discarded ...' and '*** N packets discarded ...' lines.\n"
	"Every directory under DIR that holds a CTF 'metadata' file is read.",
	"",
	"Exit status: 0 ok (also when no event matched the filters, which is said on\n"
	"stderr), 1 the trace cannot be read or does not exist (the reason is printed),\n"
	"or damage was skipped (every readable event is printed first; 'strata check'\n"
	"names the damage), 2 usage error."};

// --pid PID or --tid TID (repeatable): into `ids`.
cli::Option id_option(const char *name, const char *arg, const char *help, std::set<int64_t> &ids)
{
	const std::string why = std::string("--") + name + " needs a number";
	return cli::custom(name, 0, arg, "a number", help, [&ids, why](const char *v) {
		int64_t n = 0;
		if (!parse_i64(v, &n) || n < 0)
			return why;
		ids.insert(n);
		return std::string();
	});
}

// --since T or --until T.
cli::Option time_option(const char *name, const char *help, TimeBound &bound)
{
	const std::string why = std::string("--") + name + " needs a time: +SECONDS or HH:MM:SS[.frac]";
	return cli::custom(name, 0, "T", "a time", help, [&bound, why](const char *v) {
		return parse_time(v, &bound) ? std::string() : why;
	});
}

// The command line into sink, dir and repair: kParsed to go on, else the
// exit status.
int parse_view_args(int argc, char **argv, ViewSink &sink, std::vector<std::string> &roots, bool &repair)
{
	ViewSink *sp = &sink;
	const std::vector<cli::Option> opts = {
		cli::custom("limit", 'n', "N", "a number of events",
			    "stop after N events (those the filters below let through)",
			    [sp](const char *v) {
				    return parse_limit(v, &sp->limit)
						   ? std::string()
						   : std::string("-n needs a number of events");
			    }),
		id_option("pid", "PID",
			  "only process PID: its sub-trace's events and losses, and kernel events of its "
			  "threads (the tid PID, and the threads its sub-trace's events name)",
			  sink.pids),
		id_option("tid", "TID", "only events of thread TID (repeat --pid/--tid for several)",
			  sink.tids),
		cli::texts(nullptr, 'e', "PATTERN", "a pattern",
			   "only events whose name matches the glob PATTERN ('pthread:mutex_*'; kernel "
			   "events as 'kernel:NAME' or 'NAME'); repeat for several",
			   sink.patterns),
		time_option("since",
			    "only events at or after T: '+SECONDS' after the trace's first event "
			    "('+1.5'), or a time of day as printed ('12:03:04.5', local time, on the "
			    "day of the first event)",
			    sink.since),
		time_option("until", "only events at or before T (as --since)", sink.until),
		cli::flag("repair", 0,
			  "first cut every stream file that ends inside a packet (a consumer daemon killed "
			  "while writing) back to its last whole packet (strata-consumerd --repair); changes "
			  "DIR",
			  repair),
	};
	std::vector<char *> operands;
	if (const int r = cli::parse(kView, opts, argc, argv, operands); r != cli::kParsed)
		return r;
	roots.assign(operands.begin(), operands.end());
	if (roots.empty())
		roots.push_back(".");
	return cli::kParsed;
}

} // namespace
} // namespace view
} // namespace strata

int strata_cmd_view(int argc, char **argv)
{
	using namespace strata;
	using namespace strata::view;
	ViewSink sink;
	std::vector<std::string> roots;
	bool repair = false;

	if (const int r = parse_view_args(argc, argv, sink, roots, repair); r != cli::kParsed)
		return r;
	if (sink.limit == 0)
		return kExitOk;
	for (const std::string &root : roots)
		if (repair && cli::run_consumerd_repair(root, false) != 0) {
			std::fprintf(stderr, "strata view: could not repair '%s'\n", root.c_str());
			return kExitFailure;
		}
	return run_view(roots, sink);
}
