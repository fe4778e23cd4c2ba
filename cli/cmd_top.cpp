/*
 * cmd_top.cpp - `strata top --pid PID`: a live view of a process's
 * aggregation regions (libtrace/agg_layout.h, docs/probes.md
 * "Aggregation"), found among its descriptors (memfds named "strata-agg")
 * and mapped read-only: the process is never stopped, and once it exits
 * its last values stay on screen (the mapping outlives it).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
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
#include "proc_memfd.h"

using namespace strata;

namespace {

enum class Sort { kCount, kSum, kMax, kKey };

struct Options {
	uint32_t pid = 0;
	bool once = false, json = false;
	uint32_t interval_ms = 1000;
	uint32_t limit = 10;
	Sort sort = Sort::kCount;
	std::string filter;
};

std::string key_name(const AggSnapshot &s, const AggKey &k)
{
	if (!k.text.empty())
		return k.text;
	char b[32];
	if (s.key_kind == STRATA_AGG_KEY_NONE)
		return "(all)";
	if (s.key_kind == STRATA_AGG_KEY_TID)
		snprintf(b, sizeof b, "tid %llu", (unsigned long long)k.key);
	else
		snprintf(b, sizeof b, "0x%llx", (unsigned long long)k.key);
	return b;
}

std::vector<const AggKey *> chosen(const AggSnapshot &s, const Options &o)
{
	std::vector<const AggKey *> v;
	for (const AggKey &k : s.keys)
		if (o.filter.empty() || key_name(s, k).find(o.filter) != std::string::npos)
			v.push_back(&k);
	std::stable_sort(v.begin(), v.end(), [&](const AggKey *a, const AggKey *b) {
		switch (o.sort) {
		case Sort::kSum: return a->sum > b->sum;
		case Sort::kMax: return a->max > b->max;
		case Sort::kKey: return key_name(s, *a) < key_name(s, *b);
		default: return a->count > b->count;
		}
	});
	return v;
}

std::string json_str(const std::string &s)
{
	std::string o = "\"";
	for (unsigned char c : s) {
		if (c == '"' || c == '\\') {
			o += '\\';
			o += (char)c;
		} else if (c < 0x20) {
			char b[8];
			snprintf(b, sizeof b, "\\u%04x", c);
			o += b;
		} else {
			o += (char)c;
		}
	}
	return o + "\"";
}

void print_json(const Options &o, const std::vector<AggSnapshot> &snaps, bool alive)
{
	printf("{\"pid\": %u, \"alive\": %s, \"regions\": [", o.pid, alive ? "true" : "false");
	for (size_t r = 0; r < snaps.size(); r++) {
		const AggSnapshot &s = snaps[r];
		printf("%s\n {\"pattern\": %s, \"value\": %s, \"key\": %s, \"hits\": %llu, \"overflow\": %llu, "
		       "\"no_value\": %llu, \"keys\": [",
		       r ? "," : "", json_str(s.pattern).c_str(), json_str(s.value_field).c_str(),
		       json_str(s.key_field).c_str(), (unsigned long long)s.hits, (unsigned long long)s.overflow,
		       (unsigned long long)s.no_value);
		std::vector<const AggKey *> keys = chosen(s, o);
		for (size_t i = 0; i < keys.size(); i++) {
			const AggKey &k = *keys[i];
			printf("%s\n  {\"key\": %llu, \"name\": %s, \"count\": %llu", i ? "," : "",
			       (unsigned long long)k.key, json_str(key_name(s, k)).c_str(), (unsigned long long)k.count);
			if (s.has_value && k.count) {
				printf(", \"sum\": %lld, \"min\": %lld, \"max\": %lld, \"hist\": {", (long long)k.sum,
				       (long long)k.min, (long long)k.max);
				bool first = true;
				for (unsigned b = 0; b < STRATA_AGG_BUCKETS; b++)
					if (k.hist[b]) {
						printf("%s\"%u\": %llu", first ? "" : ", ", b, (unsigned long long)k.hist[b]);
						first = false;
					}
				printf("}");
			}
			printf("}");
		}
		printf("]}");
	}
	printf("]}\n");
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

void print_text(const Options &o, const std::vector<AggSnapshot> &snaps,
		std::map<std::pair<size_t, std::string>, uint64_t> &last, double dt, bool alive)
{
	printf("strata top: pid %u%s   sort: %s%s%s   (%u ms)\n", o.pid, alive ? "" : " (exited: last values)",
	       o.sort == Sort::kCount ? "count" : o.sort == Sort::kSum ? "sum" : o.sort == Sort::kMax ? "max" : "key",
	       o.filter.empty() ? "" : "   filter: ", o.filter.c_str(), o.interval_ms);
	if (snaps.empty())
		printf("\nNo aggregation in this process (STRATA_AGGREGATE='provider:event[:field] [by key]').\n");
	for (size_t r = 0; r < snaps.size(); r++) {
		const AggSnapshot &s = snaps[r];
		printf("\n%s%s%s%s%s: %llu hits", s.pattern.c_str(), s.value_field.empty() ? "" : ":",
		       s.value_field.c_str(), s.key_field.empty() ? "" : " by ", s.key_field.c_str(),
		       (unsigned long long)s.hits);
		if (s.overflow)
			printf(", %llu over the key limit", (unsigned long long)s.overflow);
		if (s.no_value)
			printf(", %llu without the field", (unsigned long long)s.no_value);
		printf("\n  %-28s %12s %10s", "KEY", "COUNT", "PER SEC");
		if (s.has_value)
			printf(" %14s %12s %12s %12s", "SUM", "MIN", "AVG", "MAX");
		printf("\n");
		std::vector<const AggKey *> keys = chosen(s, o);
		for (size_t i = 0; i < keys.size() && i < o.limit; i++) {
			const AggKey &k = *keys[i];
			const std::string name = key_name(s, k);
			uint64_t &prev = last[{r, name}];
			const double rate = dt > 0 && k.count >= prev ? (double)(k.count - prev) / dt : 0;
			prev = k.count;
			printf("  %-28.28s %12llu %10.0f", name.c_str(), (unsigned long long)k.count, rate);
			if (s.has_value && k.count)
				printf(" %14lld %12lld %12lld %12lld", (long long)k.sum, (long long)k.min,
				       (long long)(k.sum / (int64_t)k.count), (long long)k.max);
			printf("\n");
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
		printf("  %s of %s (log2):\n", s.value_field.c_str(), key_name(s, k).c_str());
		for (unsigned b = lo; b <= hi && lo < STRATA_AGG_BUCKETS; b++) {
			const int w = (int)(40 * k.hist[b] / peak);
			printf("  %22s %10llu |%.*s\n", bucket_range(b).c_str(), (unsigned long long)k.hist[b], w,
			       "########################################");
		}
	}
	fflush(stdout);
}

volatile sig_atomic_t g_stop;
void on_sigint(int)
{
	g_stop = 1;
}

int usage(const char *cmd, const std::string &msg)
{
	return cli::usage_error(cmd, msg);
}

} // namespace

int strata_cmd_top(int argc, char **argv)
{
	const char *cmd = "top";
	Options o;
	for (int i = 1; i < argc; i++) {
		const std::string a = argv[i];
		auto value = [&](const char **v) {
			if (i + 1 >= argc)
				return false;
			*v = argv[++i];
			return true;
		};
		const char *v = nullptr;
		if (cli::is_help(argv[i])) {
			printf("Usage: strata top --pid PID [--once] [--json] [--interval MS] [--sort count|sum|max|key]\n"
			       "                  [--limit N] [--filter TEXT]\n\n"
			       "Show the aggregates of a running process live, refreshing: per key its count,\n"
			       "its rate, and the sum, min, average and max of the aggregated field, with the\n"
			       "first key's log2 histogram drawn.  The process aggregates what it was started\n"
			       "with in STRATA_AGGREGATE, e.g.\n"
			       "    STRATA_AGGREGATE='pthread:mutex_lock:wait_ns by lock' prog\n"
			       "(';' between several; 'by $tid' per thread, 'by $event' per event, 'limit N'\n"
			       "keys, default 256).  Keys: q quits, c s m k sort by count, sum, max, key.\n"
			       "--once prints one snapshot and exits; --json prints it as JSON.\n\n"
			       "Exit status: 0 ok, 1 runtime failure, 2 usage error.\n");
			return cli::kOk;
		} else if (a == "--pid") {
			if (!value(&v) || !cli::parse_u32(v, o.pid) || o.pid == 0)
				return usage(cmd, "--pid needs a process id");
		} else if (a == "--once") {
			o.once = true;
		} else if (a == "--json") {
			o.json = true;
		} else if (a == "--interval") {
			if (!value(&v) || !cli::parse_u32(v, o.interval_ms) || o.interval_ms < 50)
				return usage(cmd, "--interval needs milliseconds (at least 50)");
		} else if (a == "--limit") {
			if (!value(&v) || !cli::parse_u32(v, o.limit) || o.limit == 0)
				return usage(cmd, "--limit needs a positive count");
		} else if (a == "--filter") {
			if (!value(&v))
				return usage(cmd, "--filter needs a text");
			o.filter = v;
		} else if (a == "--sort") {
			if (!value(&v))
				return usage(cmd, "--sort needs count, sum, max or key");
			const std::string s = v;
			if (s == "count")
				o.sort = Sort::kCount;
			else if (s == "sum")
				o.sort = Sort::kSum;
			else if (s == "max")
				o.sort = Sort::kMax;
			else if (s == "key")
				o.sort = Sort::kKey;
			else
				return usage(cmd, "--sort needs count, sum, max or key");
		} else {
			return usage(cmd, "unexpected argument '" + a + "'");
		}
	}
	if (!o.pid)
		return usage(cmd, "--pid is needed");
	if (o.json)
		o.once = true;
	std::string err;
	std::vector<Region> regions = find_memfds(o.pid, "strata-agg", &err);
	if (!err.empty()) {
		fprintf(stderr, "strata top: %s\n", err.c_str());
		return cli::kFail;
	}
	auto snapshot = [&](std::vector<AggSnapshot> *out) {
		out->clear();
		for (const Region &r : regions) {
			AggSnapshot s;
			std::string why;
			if (agg_read(r.map, r.len, &s, &why))
				out->push_back(std::move(s));
			else
				fprintf(stderr, "strata top: %s: %s\n", r.fd_path.c_str(), why.c_str());
		}
	};
	auto alive = [&] { return kill((pid_t)o.pid, 0) == 0 || errno == EPERM; };
	std::vector<AggSnapshot> snaps;
	std::map<std::pair<size_t, std::string>, uint64_t> last;
	if (o.once) {
		snapshot(&snaps);
		if (o.json)
			print_json(o, snaps, alive());
		else
			print_text(o, snaps, last, 0, alive());
		return cli::kOk;
	}
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
		snapshot(&snaps);
		printf("\033[H\033[2J");
		print_text(o, snaps, last, dt, alive());
		pollfd p{0, POLLIN, 0};
		if (poll(&p, tty ? 1 : 0, (int)o.interval_ms) > 0) {
			char c = 0;
			if (read(0, &c, 1) == 1) {
				if (c == 'q')
					break;
				o.sort = c == 's' ? Sort::kSum : c == 'm' ? Sort::kMax : c == 'k' ? Sort::kKey
					 : c == 'c' ? Sort::kCount : o.sort;
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
