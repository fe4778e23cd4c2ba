/*
 * cmd_top.cpp - `strata top --pid PID`: a live view of a process's
 * aggregation regions (libtrace/agg_layout.h, docs/probes.md
 * "Aggregation"), found among its descriptors (memfds named "strata-agg")
 * and mapped read-only: the process is never stopped, and once it exits
 * its last values stay on screen (the mapping outlives it).
 * `strata top -s SESSION`: the regions of an aggregation session, asked of
 * the daemon (AGG_FETCH: a read-only descriptor each, kept by the daemon
 * after their process exited), every process the session reached.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "agg_reader.h"
#include "commands.h"
#include "control/ctl_client.h"
#include "proc_memfd.h"
#include "top_json.h"

using namespace strata;
using strata::cli::ProcHits;
using strata::cli::Seen;

namespace {

enum class Sort { kCount, kSum, kMax, kKey };

struct Options {
	uint32_t pid = 0;           // --pid: one process (its header, its JSON "pid")
	std::vector<uint32_t> pids; // --pid given more than once
	std::string name;           // --name: every process of that command name
	std::string session;        // -s: an aggregation session's processes, from the daemon
	std::string socket;         // its daemon's socket ("" the usual one; record's own daemon)
	bool once = false, json = false;
	uint32_t interval_ms = 1000;
	uint32_t limit = 10;
	Sort sort = Sort::kCount;
	std::string filter;
};

std::vector<const AggKey *> chosen(const AggSnapshot &s, const Options &o)
{
	std::vector<const AggKey *> v;
	for (const AggKey &k : s.keys)
		if (o.filter.empty() || cli::agg_key_name(s, k).find(o.filter) != std::string::npos)
			v.push_back(&k);
	std::stable_sort(v.begin(), v.end(), [&](const AggKey *a, const AggKey *b) {
		switch (o.sort) {
		case Sort::kSum:
			return a->sum > b->sum;
		case Sort::kMax:
			return a->max > b->max;
		case Sort::kKey:
			return cli::agg_key_name(s, *a) < cli::agg_key_name(s, *b);
		default:
			return a->count > b->count;
		}
	});
	return v;
}

bool several(const Options &o)
{
	return o.pids.size() > 1 || !o.name.empty() || !o.session.empty();
}

void print_json(const Options &o, const std::vector<AggSnapshot> &snaps, const Seen &seen)
{
	cli::TopJson t;
	t.single = !several(o);
	t.pid = o.pid;
	t.session = o.session;
	t.keys = [&o](const AggSnapshot &s) { return chosen(s, o); };
	std::string out;
	cli::top_json(out, t, snaps, seen);
	fwrite(out.data(), 1, out.size(), stdout);
}

// A session's processes: hits and rate since the last refresh, alive or
// exited (last values).
void print_procs(FILE *out, const Seen &seen, std::map<std::pair<size_t, std::string>, uint64_t> &last,
		 double dt, uint32_t limit)
{
	fprintf(out, "\n  %-8s %-16s %12s %10s\n", "PID", "PROCESS", "HITS", "PER SEC");
	std::vector<ProcHits> v = seen.procs;
	std::stable_sort(v.begin(), v.end(),
			 [](const ProcHits &a, const ProcHits &b) { return a.hits > b.hits; });
	for (size_t i = 0; i < v.size() && i < limit; i++) {
		uint64_t &prev = last[{SIZE_MAX, std::to_string(v[i].pid)}];
		const double rate = dt > 0 && v[i].hits >= prev ? (double)(v[i].hits - prev) / dt : 0;
		prev = v[i].hits;
		fprintf(out, "  %-8u %-16.16s %12llu %10.0f%s\n", v[i].pid, v[i].comm.c_str(),
			(unsigned long long)v[i].hits, rate, v[i].alive ? "" : "  exited: last values");
	}
}

// "[lo, hi)" of log2 bucket b (agg_layout.h).
std::string bucket_range(unsigned b)
{
	if (b == 0)
		return "<= 0";
	char s[48];
	const unsigned long long lo = 1ull << (b - 1);
	snprintf(s, sizeof s, "%llu ..", lo);
	return s;
}

void print_text(FILE *out, const Options &o, const std::vector<AggSnapshot> &snaps,
		std::map<std::pair<size_t, std::string>, uint64_t> &last, double dt, const Seen &seen)
{
	std::string who =
		"pid " + std::to_string(o.pid) + (seen.exited.empty() ? "" : " (exited: last values)");
	if (several(o))
		who = (o.session.empty() ? "" : "session " + o.session + ": ") +
		      std::to_string(seen.pids.size()) + " process(es)" +
		      (o.name.empty() ? "" : " named " + o.name) +
		      (seen.exited.empty()
			       ? ""
			       : " (" + std::to_string(seen.exited.size()) + " exited: last values)");
	fprintf(out, "strata top: %s   sort: %s%s%s   (%u ms)\n", who.c_str(),
		o.sort == Sort::kCount ? "count"
		: o.sort == Sort::kSum ? "sum"
		: o.sort == Sort::kMax ? "max"
				       : "key",
		o.filter.empty() ? "" : "   filter: ", o.filter.c_str(), o.interval_ms);
	if (snaps.empty() && !o.session.empty())
		fprintf(out, "\nNo process of session %s has aggregated yet.\n", o.session.c_str());
	else if (snaps.empty())
		fprintf(out, "\nNo aggregation in %s (STRATA_AGGREGATE='provider:event[:field] [by key]').\n",
			several(o) ? "these processes" : "this process");
	if (!o.session.empty() && !seen.procs.empty())
		print_procs(out, seen, last, dt, o.limit);
	for (size_t r = 0; r < snaps.size(); r++) {
		const AggSnapshot &s = snaps[r];
		uint64_t &prev_hits = last[{r, "\n hits"}]; // not a key's name (names have no newline)
		const double hit_rate = dt > 0 && s.hits >= prev_hits ? (double)(s.hits - prev_hits) / dt : 0;
		prev_hits = s.hits;
		fprintf(out, "\n%s%s%s%s%s: %llu hits, %.0f/s", s.pattern.c_str(),
			s.value_field.empty() ? "" : ":", s.value_field.c_str(),
			s.key_field.empty() ? "" : " by ", s.key_field.c_str(), (unsigned long long)s.hits,
			hit_rate);
		if (s.overflow)
			fprintf(out, ", %llu over the key limit", (unsigned long long)s.overflow);
		if (s.no_value)
			fprintf(out, ", %llu without the field", (unsigned long long)s.no_value);
		fprintf(out, "\n  %-28s %12s %10s", "KEY", "COUNT", "PER SEC");
		if (s.has_value)
			fprintf(out, " %14s %12s %12s %12s", "SUM", "MIN", "AVG", "MAX");
		fprintf(out, "\n");
		std::vector<const AggKey *> keys = chosen(s, o);
		for (size_t i = 0; i < keys.size() && i < o.limit; i++) {
			const AggKey &k = *keys[i];
			const std::string name = cli::agg_key_name(s, k);
			uint64_t &prev = last[{r, name}];
			const double rate = dt > 0 && k.count >= prev ? (double)(k.count - prev) / dt : 0;
			prev = k.count;
			fprintf(out, "  %-28.28s %12llu %10.0f", name.c_str(), (unsigned long long)k.count,
				rate);
			if (s.has_value && k.count)
				fprintf(out, " %14lld %12lld %12lld %12lld", (long long)k.sum,
					(long long)k.min, (long long)(k.sum / (int64_t)k.count),
					(long long)k.max);
			fprintf(out, "\n");
		}
		if (!s.has_value || keys.empty() || !keys[0]->count)
			continue;
		// The first key's histogram, drawn.
		const AggKey &k = *keys[0];
		uint64_t peak = 1;
		unsigned lo = STRATA_AGG_BUCKETS, hi = 0;
		for (unsigned b = 0; b < STRATA_AGG_BUCKETS; b++)
			if (k.hist[b]) {
				peak = std::max(peak, k.hist[b]);
				lo = std::min(lo, b);
				hi = b;
			}
		fprintf(out, "  %s of %s (log2):\n", s.value_field.c_str(), cli::agg_key_name(s, k).c_str());
		for (unsigned b = lo; b <= hi && lo < STRATA_AGG_BUCKETS; b++) {
			const int w = (int)(40 * k.hist[b] / peak);
			fprintf(out, "  %22s %10llu |%.*s\n", bucket_range(b).c_str(),
				(unsigned long long)k.hist[b], w, "########################################");
		}
	}
	fflush(out);
}

// The regions of the processes shown, mapped as each is found and kept
// mapped: a process that exits keeps its last values on screen.
class Watch {
public:
	// Finds the processes (--pid, or every process named --name) and maps
	// the regions not mapped yet.  False with *err when a --pid process
	// cannot be read.
	bool scan(const Options &o, std::string *err)
	{
		if (!o.session.empty())
			return scan_session(o.socket, o.session, err);
		std::vector<uint32_t> want = o.pids;
		if (!o.name.empty())
			named(o.name, &want);
		for (uint32_t pid : want) {
			std::string e;
			for (Region &r : find_memfds(pid, "strata-agg", &e))
				if (!regions_.count({pid, r.fd_path}))
					regions_[{pid, r.fd_path}] = r;
			if (!e.empty() && o.name.empty()) { // a --name process may just have exited
				*err = e;
				return false;
			}
			if (std::find(pids_.begin(), pids_.end(), pid) == pids_.end())
				pids_.push_back(pid);
		}
		return true;
	}

	// Every region read, and merged across processes per spec.
	void snapshot(std::vector<AggSnapshot> *out) const
	{
		out->clear();
		for (const auto &kv : regions_) {
			AggSnapshot s;
			std::string why;
			if (!agg_read(kv.second.map, kv.second.len, &s, &why)) {
				fprintf(stderr, "strata top: %s: %s\n", kv.second.fd_path.c_str(),
					why.c_str());
				continue;
			}
			if (s.pid != kv.first.first && o_session_.empty())
				continue; // a forked child's inherited region: its parent's
			if (!o_session_.empty())
				hits_[kv.first.first] += s.hits; // reset by seen()
			merge_into(out, s);
		}
	}

	Seen seen() const
	{
		Seen s;
		s.pids = pids_;
		for (uint32_t p : pids_)
			if (kill((pid_t)p, 0) != 0 && errno != EPERM)
				s.exited.push_back(p);
		for (uint32_t p : pids_) {
			if (o_session_.empty())
				break;
			ProcHits h;
			h.pid = p;
			h.comm = comm_.count(p) ? comm_.at(p) : "";
			h.hits = hits_.count(p) ? hits_.at(p) : 0;
			h.alive = std::find(s.exited.begin(), s.exited.end(), p) == s.exited.end();
			s.procs.push_back(h);
		}
		hits_.clear();
		return s;
	}

private:
	// -s: the daemon's connection, and how many of the session's regions
	// are mapped already (the daemon's list only grows during a run).
	std::string o_session_;
	CtlClient ctl_;
	uint32_t fetched_ = 0;
	std::map<uint32_t, std::string> comm_;
	mutable std::map<uint32_t, uint64_t> hits_;

	// The session's regions not mapped yet, each from its read-only
	// descriptor (AGG_FETCH), mapped and the descriptor closed.
	bool scan_session(const std::string &socket, const std::string &session, std::string *err)
	{
		o_session_ = session;
		if (!ctl_.is_open()) {
			if (ctl_.open(socket, *err) < 0)
				return false;
			if (ctl_.version() < proto::kAggVersion) {
				*err = "the running strata-consumerd speaks protocol " +
				       std::to_string(ctl_.version()) + ", aggregation sessions need " +
				       std::to_string(proto::kAggVersion);
				return false;
			}
		}
		for (;;) {
			proto::AggFetch m;
			m.session = session;
			m.index = fetched_;
			std::string text;
			int fd = -1;
			const int r = ctl_.command_fd(m, text, &fd);
			if (r == -ENODATA) // no more regions (yet)
				return true;
			if (r < 0 || fd < 0) {
				*err = r < 0 ? "session " + session + ": " + text
					     : "the daemon sent no region";
				return false;
			}
			fetched_++;
			struct stat st;
			void *map = MAP_FAILED;
			if (fstat(fd, &st) == 0 && st.st_size > 0)
				map = mmap(nullptr, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
			close(fd);
			unsigned long pid = strtoul(text.c_str(), nullptr, 10);
			const size_t sp = text.find(' ', text.find(' ') + 1);
			if (map == MAP_FAILED || pid == 0 || pid > UINT32_MAX)
				continue; // said nothing: the next refresh shows the rest
			Region reg;
			reg.fd_path = "region " + std::to_string(fetched_ - 1);
			reg.map = map;
			reg.len = (size_t)st.st_size;
			regions_[{(uint32_t)pid, reg.fd_path}] = reg;
			comm_[(uint32_t)pid] = sp == std::string::npos ? "" : text.substr(sp + 1);
			if (std::find(pids_.begin(), pids_.end(), (uint32_t)pid) == pids_.end())
				pids_.push_back((uint32_t)pid);
		}
	}

	std::map<std::pair<uint32_t, std::string>, Region> regions_;
	std::vector<uint32_t> pids_; // in the order found

	// The processes whose command name (/proc/PID/comm, 15 bytes) is name's.
	static void named(const std::string &name, std::vector<uint32_t> *out)
	{
		DIR *d = opendir("/proc");
		if (!d)
			return;
		while (dirent *e = readdir(d)) {
			uint32_t pid = 0;
			if (!cli::parse_u32(e->d_name, pid) || !pid)
				continue;
			char comm[64] = {};
			FILE *f = fopen(("/proc/" + std::string(e->d_name) + "/comm").c_str(), "re");
			if (!f)
				continue;
			const bool got = fgets(comm, sizeof comm, f) != nullptr;
			fclose(f);
			comm[strcspn(comm, "\n")] = 0;
			if (got && name.compare(0, 15, comm) == 0 &&
			    (name.size() <= 15 || strlen(comm) == 15))
				out->push_back(pid);
		}
		closedir(d);
		std::sort(out->begin(), out->end());
	}

	// Adds s to the snapshot of the same spec in *out (counts, sums and
	// histograms added, min and max kept), or appends it.
	static void merge_into(std::vector<AggSnapshot> *out, const AggSnapshot &s)
	{
		for (AggSnapshot &m : *out) {
			if (m.pattern != s.pattern || m.value_field != s.value_field ||
			    m.key_field != s.key_field || m.key_kind != s.key_kind)
				continue;
			m.hits += s.hits;
			m.overflow += s.overflow;
			m.no_value += s.no_value;
			for (const AggKey &k : s.keys) {
				auto it = std::find_if(m.keys.begin(), m.keys.end(), [&](const AggKey &x) {
					return x.key == k.key && x.text == k.text;
				});
				if (it == m.keys.end()) {
					m.keys.push_back(k);
					continue;
				}
				it->count += k.count;
				it->sum += k.sum;
				it->min = std::min(it->min, k.min);
				it->max = std::max(it->max, k.max);
				for (unsigned b = 0; b < STRATA_AGG_BUCKETS; b++)
					it->hist[b] += k.hist[b];
			}
			return;
		}
		out->push_back(s);
	}
};

volatile sig_atomic_t g_stop;
// One refresh of the live view: the screen cleared, then as many lines of
// the text view as the terminal has rows, each cut to its width, the last
// saying how many did not fit.  Printing them all, or letting the terminal
// wrap them, would scroll the title and the first keys off a small one.
void draw(const Options &o, const std::vector<AggSnapshot> &snaps,
	  std::map<std::pair<size_t, std::string>, uint64_t> &last, double dt, const Seen &seen)
{
	char *buf = nullptr;
	size_t len = 0;
	FILE *mem = open_memstream(&buf, &len);
	if (!mem) {
		printf("\033[H\033[2J");
		print_text(stdout, o, snaps, last, dt, seen);
		return;
	}
	print_text(mem, o, snaps, last, dt, seen);
	fclose(mem);
	winsize ws{};
	const bool known = ioctl(1, TIOCGWINSZ, &ws) == 0;
	const size_t rows = known && ws.ws_row > 1 ? ws.ws_row : SIZE_MAX;
	const size_t cols = known && ws.ws_col > 0 ? ws.ws_col : SIZE_MAX;
	// Each line cut to the window's width (a UTF-8 continuation byte takes
	// no column): a line the terminal wrapped would take two rows.
	std::string text;
	size_t n = 0, col = 0;
	for (size_t i = 0; i < len; i++) {
		const unsigned char ch = (unsigned char)buf[i];
		if (ch == '\n') {
			text += '\n';
			n++;
			col = 0;
		} else if ((ch & 0xc0) == 0x80 ? col <= cols : col < cols) {
			col += (ch & 0xc0) != 0x80;
			text += (char)ch;
		}
	}
	std::string screen = "\033[H\033[2J";
	if (n < rows) {
		screen += text;
	} else {
		size_t shown = 0, end = 0;
		while (end < text.size() && shown < rows - 1)
			if (text[end++] == '\n')
				shown++;
		screen.append(text, 0, end);
		const std::string more = "  ... " + std::to_string(n - shown) +
					 " more lines: a taller window, --limit or --filter";
		screen += more.substr(0, std::min(more.size(), cols));
	}
	free(buf);
	fwrite(screen.data(), 1, screen.size(), stdout);
	fflush(stdout);
}

void on_sigint(int)
{
	g_stop = 1;
}

} // namespace

// The first look for the processes or the session: false once said why not.
bool first_scan(Watch &w, const Options &o)
{
	std::string err;
	if (w.scan(o, &err))
		return true;
	fprintf(stderr, "strata top: %s\n", err.c_str());
	return false;
}

// One snapshot, printed (--once, --json).
int print_once(const Options &o)
{
	Watch w;
	if (!first_scan(w, o))
		return cli::kFail;
	std::vector<AggSnapshot> snaps;
	std::map<std::pair<size_t, std::string>, uint64_t> last;
	w.snapshot(&snaps);
	if (o.json)
		print_json(o, snaps, w.seen());
	else
		print_text(stdout, o, snaps, last, 0, w.seen());
	return cli::kOk;
}

int cli::top_session_once(const std::string &socket, const std::string &session, bool json)
{
	Options o;
	o.socket = socket;
	o.session = session;
	o.once = true;
	o.json = json;
	o.limit = 20;
	return print_once(o);
}

namespace {

const cli::Command kTop = {"top",
			   "(--pid PID... | --name COMMAND | -s SESSION) [--once] [--json]\n"
			   " [--interval MS] [--sort count|sum|max|key] [--limit N] [--filter TEXT]",
			   "Show the aggregates of running processes live, refreshing: per key its count,\n"
			   "its rate, and the sum, min, average and max of the aggregated field, with the\n"
			   "first key's log2 histogram drawn.  Several processes (--pid more than once, or\n"
			   "--name: every process of that command name, the ones started later found at\n"
			   "each refresh) are merged per spec; one that exits keeps its last values.\n"
			   "A process aggregates what it was started with in STRATA_AGGREGATE, e.g.\n"
			   "    STRATA_AGGREGATE='pthread:mutex_lock:wait_ns by lock' prog\n"
			   "(';' between several; 'by $tid' per thread, 'by $event' per event, 'limit N'\n"
			   "keys, default 256), or what the session -s SESSION asks every process it\n"
			   "reaches for (strata create SESSION --aggregate SPEC): then the processes are\n"
			   "listed too, with their hits and rates, and those that exited keep their last\n"
			   "values.  Keys: q quits, c s m k sort by count, sum, max, key."};

// The command line into o: kParsed to go on, else the exit status.
int parse_args(int argc, char **argv, Options &o)
{
	Options *op = &o;
	int sort = 0;
	const std::vector<cli::Option> opts = {
		cli::custom("pid", 0, "PID", "a process id", "a process to watch (repeatable)",
			    [op](const char *v) {
				    if (!cli::parse_u32(v, op->pid) || op->pid == 0)
					    return std::string("--pid needs a process id");
				    op->pids.push_back(op->pid);
				    return std::string();
			    }),
		cli::custom("name", 0, "COMMAND", "a command name",
			    "every process of that command name, and those started later",
			    [op](const char *v) {
				    if (!*v || strlen(v) > 64)
					    return std::string("--name needs a command name");
				    op->name = v;
				    return std::string();
			    }),
		cli::custom("session", 's', "SESSION", "a session name",
			    "the processes of an aggregation session (strata create --aggregate)",
			    [op](const char *v) {
				    if (!proto::valid_session_name(v))
					    return std::string("-s needs a session name");
				    op->session = v;
				    return std::string();
			    }),
		cli::flag("once", 0, "print one snapshot and exit", o.once),
		cli::flag("json", 0, "print one snapshot as JSON and exit", o.json),
		cli::number("interval", 0, "MS", "milliseconds (at least 50)",
			    "refresh every MS ms (default 1000)", o.interval_ms, 50u, UINT32_MAX),
		cli::choice("sort", 0, "count|sum|max|key", "the keys' order (default count)", sort,
			    {"count", "sum", "max", "key"}),
		cli::number("limit", 0, "N", "a positive count", "keys shown per spec (default 10)", o.limit,
			    1u, UINT32_MAX),
		cli::text("filter", 0, "TEXT", "a text", "only the keys whose name holds TEXT", o.filter),
	};
	std::vector<char *> operands;
	if (const int r = cli::parse(kTop, opts, argc, argv, operands); r != cli::kParsed)
		return r;
	if (!operands.empty())
		return cli::usage_error(kTop, std::string("unexpected argument '") + operands[0] + "'");
	o.sort = static_cast<Sort>(sort);
	return cli::kParsed;
}

} // namespace

int strata_cmd_top(int argc, char **argv)
{
	Options o;
	if (const int r = parse_args(argc, argv, o); r != cli::kParsed)
		return r;
	if ((o.pids.empty() && o.name.empty()) == o.session.empty())
		return cli::usage_error(kTop, "--pid, --name or (alone) -s is needed");
	if (o.json)
		o.once = true;
	if (o.once)
		return print_once(o);
	Watch w;
	if (!first_scan(w, o))
		return cli::kFail;
	std::string err;
	std::vector<AggSnapshot> snaps;
	std::map<std::pair<size_t, std::string>, uint64_t> last;
	signal(SIGINT, on_sigint);
	signal(SIGTERM, on_sigint);
	termios saved{};
	const bool tty = isatty(0) && tcgetattr(0, &saved) == 0;
	if (tty) {
		termios raw = saved;
		raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
		raw.c_cc[VMIN] = 0;
		raw.c_cc[VTIME] = 0;
		tcsetattr(0, TCSANOW, &raw);
	}
	timespec prev{};
	clock_gettime(CLOCK_MONOTONIC, &prev);
	double dt = 0;
	while (!g_stop) {
		w.scan(o, &err); // processes that started since (--name); errors said at start
		w.snapshot(&snaps);
		draw(o, snaps, last, dt, w.seen());
		pollfd p{0, POLLIN, 0};
		if (poll(&p, tty ? 1 : 0, (int)o.interval_ms) > 0) {
			char c = 0;
			if (read(0, &c, 1) == 1) {
				if (c == 'q')
					break;
				o.sort = c == 's'   ? Sort::kSum
					 : c == 'm' ? Sort::kMax
					 : c == 'k' ? Sort::kKey
					 : c == 'c' ? Sort::kCount
						    : o.sort;
			}
		}
		timespec now{};
		clock_gettime(CLOCK_MONOTONIC, &now);
		dt = (double)(now.tv_sec - prev.tv_sec) + (double)(now.tv_nsec - prev.tv_nsec) / 1e9;
		prev = now;
	}
	if (tty)
		tcsetattr(0, TCSANOW, &saved);
	return cli::kOk;
}
