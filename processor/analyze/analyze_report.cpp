// analyze_report.cpp - see analyze_report.h.
#include "analyze_report.h"

#include "json_writer.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>

namespace strata {
namespace analyze {
namespace {

std::string hex(uint64_t v)
{
	char b[32];
	std::snprintf(b, sizeof b, "0x%" PRIx64, v);
	return b;
}

} // namespace

std::string html_esc(const std::string &s)
{
	std::string o;
	for (char c : s) {
		switch (c) {
		case '<':
			o += "&lt;";
			break;
		case '>':
			o += "&gt;";
			break;
		case '&':
			o += "&amp;";
			break;
		case '"':
			o += "&quot;";
			break;
		default:
			o += c;
		}
	}
	return o;
}

namespace {

std::string proc_label(const Report &r, uint32_t p)
{
	if (p >= r.procs.size())
		return "?";
	const Process &pr = r.procs[p];
	std::string n = pr.name.empty() ? "process" : pr.name;
	if (!pr.machine.empty())
		n = pr.machine + ": " + n;
	return pr.pid ? n + "[" + std::to_string(pr.pid) + "]" : n;
}

std::string lock_label(const LockStats &l)
{
	std::string s = hex(l.addr);
	if (!l.name.function.empty())
		s += " (" + l.name.function + ")";
	return s;
}

// A code address as the text shows it: the address, its symbol beside it
// when one was found ("0x55d0c0ffee10 worker_loop+0x24"), its line.
std::string code_label(uint64_t addr, const Symbol &sym)
{
	std::string o = hex(addr);
	if (!sym.function.empty())
		o += " " + sym.function;
	if (!sym.location.empty())
		o += " at " + sym.location;
	return o;
}

std::string site_label(const Site &s)
{
	return code_label(s.caller, s.sym);
}

double share(uint64_t a, uint64_t b)
{
	return b ? 100.0 * static_cast<double>(a) / static_cast<double>(b) : 0.0;
}

// Counting mode's notes (docs/pthread.md, "Counting mode"), one per line:
// what the figures hold, and every process whose counts end unflushed.
std::vector<std::string> counts_notes(const Report &r)
{
	std::vector<std::string> out;
	if (r.counted)
		out.push_back(
			std::to_string(r.counted) +
			" uncontended acquisitions were counted, not recorded one by one "
			"(the preload's default; STRATA_PTHREAD_COUNT=0 records every pair): they are in "
			"the acquisitions, holds, hold total and hold max, not in the timeline nor in any "
			"percentile (counted, not distributed)");
	if (r.untimed)
		out.push_back(
			std::to_string(r.untimed) +
			" of them were not timed (one in 16 is, by default; STRATA_PTHREAD_COUNT=N times "
			"one in N, =1 every one): hold totals "
			"count them at the mean of the timed holds of their lock and site, hold max is "
			"the longest timed hold");
	if (r.waited_untimed)
		out.push_back(std::to_string(r.waited_untimed) +
			      (r.waited_untimed == 1 ? " hold that others waited behind was not timed: the "
						       "blockers do not credit it"
						     : " holds that others waited behind were not timed: the "
						       "blockers do not credit them"));
	for (uint32_t p : r.counts_unfinished)
		out.push_back(
			"COUNTS INCOMPLETE: " + proc_label(r, p) +
			" has no final flush of its counted pairs in the trace (recording stopped while it "
			"ran, or it exec'd or was killed): the pairs it counted after its last "
			"pthread:mutex_counts records are missing");
	return out;
}

} // namespace

std::string format_ns(double ns)
{
	char b[64];
	if (ns < 1e3)
		std::snprintf(b, sizeof b, "%.0f ns", ns);
	else if (ns < 1e6)
		std::snprintf(b, sizeof b, "%.1f us", ns / 1e3);
	else if (ns < 1e9)
		std::snprintf(b, sizeof b, "%.2f ms", ns / 1e6);
	else
		std::snprintf(b, sizeof b, "%.3f s", ns / 1e9);
	return b;
}

namespace {

// The first lines: what the trace held, and notes on the figures.
void text_summary(std::ostream &o, const Report &r)
{
	o << "Lock contention: " << r.locks.size() << " locks, " << r.events << " lock events, "
	  << r.procs.size() << " process(es)";
	if (r.discarded)
		o << ", " << r.discarded << " events LOST (figures are lower bounds)";
	o << "\n";
	if (r.unmatched_unlocks)
		o << "(" << r.unmatched_unlocks << " unlocks without a traced acquisition)\n";
	if (r.blockers_partial)
		o << "(blockers are partial: some waits outlasted the holds kept for them, "
		     "docs/pthread.md)\n";
	for (const std::string &n : counts_notes(r))
		o << "(" << n << ")\n";
}

// For each contended lock shown: the call sites that waited most, and the
// holds that made them wait.
void text_sites(std::ostream &o, const Report &r, const Options &opt)
{
	char line[256];
	for (size_t i = 0; i < r.locks.size() && i < opt.top; i++) {
		const LockStats &l = r.locks[i];
		if (!l.contended)
			continue;
		o << "\n#" << i + 1 << " " << proc_label(r, l.proc) << " " << lock_label(l)
		  << ": top waiting call sites\n";
		for (const Site &s : l.sites) {
			if (!s.contended)
				continue;
			std::snprintf(line, sizeof line, "  %11s in %6" PRIu64 " waits  ",
				      format_ns(static_cast<double>(s.wait_total)).c_str(), s.contended);
			o << line << site_label(s) << "\n";
			for (size_t k = 1; k < s.stack_syms.size(); k++) {
				o << "        from " << code_label(s.stack[k], s.stack_syms[k]) << "\n";
			}
		}
		if (!l.blockers.empty())
			o << "  held, while others waited, by the holds taken at\n";
		for (const Site &b : l.blockers) {
			std::snprintf(line, sizeof line, "  %11s in %6" PRIu64 " waits  ",
				      format_ns(static_cast<double>(b.wait_total)).c_str(), b.contended);
			o << line << site_label(b) << "\n";
		}
	}
}

} // namespace

void write_text(std::ostream &o, const Report &r, const Options &opt)
{
	text_summary(o, r);
	char line[4096];
	// Names are shown whole: the name and process columns are as wide as
	// their longest entry (at least 34 and 7).
	const bool multi = r.procs.size() > 1; // a process column (addresses repeat across a fork)
	size_t pw = 7, nw = 34;
	auto cond_label = [](const CondStats &c) {
		return hex(c.addr) + (c.name.function.empty() ? "" : " (" + c.name.function + ")");
	};
	for (size_t i = 0; i < r.locks.size() && i < opt.top; i++) {
		nw = std::max(nw, lock_label(r.locks[i]).size());
		pw = std::max(pw, proc_label(r, r.locks[i].proc).size());
	}
	for (size_t i = 0; i < r.conds.size() && i < opt.top; i++) {
		nw = std::max(nw, cond_label(r.conds[i]).size());
		pw = std::max(pw, proc_label(r, r.conds[i].proc).size());
	}
	auto pcol = [&](const std::string &label) {
		return multi ? label + std::string(pw + 1 - label.size(), ' ') : std::string();
	};
	auto ncol = [&](const std::string &label) { return label + std::string(nw - label.size(), ' '); };
	std::snprintf(line, sizeof line, "%-4s %s %-10s %10s %10s %6s %11s %11s %11s %11s %11s\n", "#",
		      ncol("lock").c_str(), "kind", "acquired", "contended", "share", "wait total",
		      "wait mean", "wait p99", "wait max", "hold max");
	o << "\n" << pcol("process") << line;
	for (size_t i = 0; i < r.locks.size() && i < opt.top; i++) {
		const LockStats &l = r.locks[i];
		std::snprintf(line, sizeof line,
			      "%-4zu %s %-10s %10" PRIu64 " %10" PRIu64 " %5.1f%% %11s %11s %11s %11s %11s\n",
			      i + 1, ncol(lock_label(l)).c_str(), l.kind.c_str(), l.acquisitions, l.contended,
			      share(l.contended, l.acquisitions),
			      format_ns(static_cast<double>(l.wait_total)).c_str(),
			      format_ns(l.wait_mean).c_str(),
			      format_ns(static_cast<double>(l.wait_p99)).c_str(),
			      format_ns(static_cast<double>(l.wait_max)).c_str(),
			      format_ns(static_cast<double>(l.hold_max)).c_str());
		o << pcol(proc_label(r, l.proc)) << line;
	}
	if (!r.conds.empty()) {
		std::snprintf(line, sizeof line, "%-4s %s %8s %8s %8s %11s %11s\n", "#",
			      ncol("condition variable").c_str(), "waits", "timeouts", "wakeups",
			      "wait total", "wait max");
		o << "\n" << pcol("process") << line;
	}
	for (size_t i = 0; i < r.conds.size() && i < opt.top; i++) {
		const CondStats &c = r.conds[i];
		std::snprintf(line, sizeof line,
			      "%-4zu %s %8" PRIu64 " %8" PRIu64 " %8" PRIu64 " %11s %11s\n", i + 1,
			      ncol(cond_label(c)).c_str(), c.waits, c.timeouts, c.signals + c.broadcasts,
			      format_ns(static_cast<double>(c.wait_total)).c_str(),
			      format_ns(static_cast<double>(c.wait_max)).c_str());
		o << pcol(proc_label(r, c.proc)) << line;
	}
	text_sites(o, r, opt);
	const std::vector<std::string> hints = debug_hints(r, false);
	if (!hints.empty())
		o << "\n";
	for (const std::string &h : hints)
		o << h << "\n";
}

// How to get the symbols of the objects that had none (text and HTML).
std::vector<std::string> debug_hints(const Report &r, bool html)
{
	std::vector<std::string> out;
	for (const MissingDebug &m : r.missing_debug) {
		const std::string base = m.object.substr(m.object.rfind('/') + 1);
		std::string h = "no symbols for " + m.object + " (addresses show as " + base + "+0x...)";
		if (!m.libdw) {
			out.push_back(h + ": libdw is not installed (apt-get install libdw1)");
			continue;
		}
		if (m.build_id.empty()) {
			out.push_back(h + "; it has no build id: rebuild it with -g, or do not strip it");
			continue;
		}
		h += "; build id " + m.build_id + ", debug file " + m.debug_file +
		     (m.debug_file_present ? " (present, but without the symbols needed)" : " (absent)");
		std::string get = "to get it: ";
		if (!m.package.empty())
			// The page names no address: it is self-contained, links nowhere.
			get += "apt-get install " + m.package +
			       (html ? std::string(
					       "-dbgsym (from Debian's debug archive, bookworm-debug), or ")
				     : std::string(
					       "-dbgsym (from the Debian debug archive: 'deb "
					       "http://deb.debian.org/debian-debug bookworm-debug main' in "
					       "/etc/apt/sources.list.d/), or "));
		get += "set DEBUGINFOD_URLS=https://debuginfod.debian.net and run the analysis again";
		out.push_back(h);
		out.push_back("  " + get);
	}
	return out;
}

namespace {

// {"caller", "function", "location", ...}: a call site's name.
void site_name_json(JsonWriter &w, const Site &s)
{
	w.key("caller").str(hex(s.caller)).key("function").str(s.sym.function);
	w.key("location").str(s.sym.location);
}

void site_json(JsonWriter &w, const Site &s)
{
	w.begin_object();
	site_name_json(w, s);
	w.key("acquisitions").u64(s.acquisitions).key("contended").u64(s.contended);
	w.key("wait_total_ns").u64(s.wait_total).key("wait_max_ns").u64(s.wait_max);
	w.key("stack").begin_array();
	for (size_t f = 0; f < s.stack.size(); f++) {
		w.begin_object().key("address").str(hex(s.stack[f]));
		if (f < s.stack_syms.size())
			w.key("function")
				.str(s.stack_syms[f].function)
				.key("location")
				.str(s.stack_syms[f].location);
		w.end_object();
	}
	w.end_array().end_object();
}

void lock_json(JsonWriter &w, const LockStats &l)
{
	w.newline(4).begin_object();
	w.key("process").u64(l.proc).key("kind").str(l.kind);
	w.key("name").str(l.name.function.empty() ? hex(l.addr) : l.name.function);
	w.key("address").str(hex(l.addr)).key("symbol").str(l.name.function);
	w.key("acquisitions").u64(l.acquisitions).key("contended").u64(l.contended);
	w.key("contended_share").f64(share(l.contended, l.acquisitions) / 100.0);
	w.key("counted").u64(l.counted).key("untimed").u64(l.untimed);
	w.key("failed").u64(l.failed).key("failed_wait_ns").u64(l.failed_wait);
	w.key("wait_total_ns").u64(l.wait_total);
	w.key("wait_mean_ns").u64(static_cast<uint64_t>(std::llround(l.wait_mean)));
	w.key("wait_p99_ns").u64(l.wait_p99).key("wait_max_ns").u64(l.wait_max);
	w.key("holds").u64(l.holds).key("hold_total_ns").u64(l.hold_total);
	w.key("hold_max_ns").u64(l.hold_max).key("cond_waits").u64(l.cond_waits);
	w.newline(5).key("sites").begin_array();
	for (const Site &s : l.sites)
		site_json(w, s);
	w.end_array();
	w.newline(5).key("blockers").begin_array();
	for (const Site &b : l.blockers) {
		w.begin_object();
		site_name_json(w, b);
		w.key("waits").u64(b.contended).key("wait_total_ns").u64(b.wait_total);
		w.key("wait_max_ns").u64(b.wait_max).end_object();
	}
	w.end_array().end_object();
}

void cond_json(JsonWriter &w, const CondStats &c)
{
	w.newline(4).begin_object();
	w.key("process").u64(c.proc).key("address").str(hex(c.addr)).key("symbol").str(c.name.function);
	w.key("mutex").str(hex(c.mutex)).key("waits").u64(c.waits).key("timeouts").u64(c.timeouts);
	w.key("signals").u64(c.signals).key("broadcasts").u64(c.broadcasts);
	w.key("wait_total_ns").u64(c.wait_total).key("wait_max_ns").u64(c.wait_max);
	w.end_object();
}

// "analysis" .. "processes": what the trace held, and its processes.
void summary_json(JsonWriter &w, const Report &r)
{
	w.newline(2).key("analysis").str("mutex").newline(2).key("events").u64(r.events);
	w.newline(2).key("discarded").u64(r.discarded);
	w.newline(2).key("unmatched_unlocks").u64(r.unmatched_unlocks);
	w.newline(2).key("cond_waits").u64(r.cond_waits).newline(2).key("cond_signals").u64(r.cond_signals);
	w.newline(2).key("counted_pairs").u64(r.counted).newline(2).key("untimed_holds").u64(r.untimed);
	w.newline(2).key("untimed_waited").u64(r.waited_untimed);
	w.newline(2).key("counts_unfinished").begin_array();
	for (uint32_t p : r.counts_unfinished)
		w.u64(p);
	w.end_array();
	w.newline(2).key("processes").begin_array();
	for (size_t i = 0; i < r.procs.size(); i++) {
		w.begin_object().key("index").u64(i).key("name").str(r.procs[i].name);
		w.key("pid").i64(r.procs[i].pid);
		if (!r.procs[i].machine.empty())
			w.key("machine").str(r.procs[i].machine);
		w.end_object();
	}
	w.end_array();
}

} // namespace

void write_json(std::ostream &o, const Report &r, const Options &)
{
	std::string out;
	JsonWriter w(out);
	w.begin_object();
	summary_json(w, r);
	w.newline(2).key("locks").begin_array();
	for (const LockStats &l : r.locks)
		lock_json(w, l);
	w.end_array();
	w.newline(2).key("missing_debug").begin_array();
	for (const MissingDebug &m : r.missing_debug) {
		w.begin_object().key("object").str(m.object).key("build_id").str(m.build_id);
		w.key("debug_file").str(m.debug_file).key("debug_file_present").boolean(m.debug_file_present);
		w.key("package").str(m.package).end_object();
	}
	w.end_array();
	w.newline(2).key("conds").begin_array();
	for (const CondStats &c : r.conds)
		cond_json(w, c);
	w.end_array();
	w.end_object();
	o << out << "\n";
}

namespace {

const char *const palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b",
			       "#e377c2", "#17becf", "#bcbd22", "#7f7f7f", "#d62728"};

// Histogram of contended waits on log2 buckets from 1 us.
void svg_histogram(std::ostream &o, const LockStats &l, const char *color)
{
	const int nb = WaitDist::kUsBuckets; // [0,1us), [1,2us), ... up to ~8 s
	std::vector<uint64_t> b(l.waits.us_buckets(), l.waits.us_buckets() + nb);
	int lo = nb, hi = 0;
	for (int k = 0; k < nb; k++)
		if (b[static_cast<size_t>(k)]) {
			lo = std::min(lo, k);
			hi = std::max(hi, k);
		}
	if (lo > hi) {
		o << "<p class=note>No contended acquisition.</p>\n";
		return;
	}
	uint64_t mx = *std::max_element(b.begin(), b.end());
	// Bars at most 48 px wide (one bucket is not drawn across the page);
	// the box at least as wide as its caption.
	const int W = 560, H = 180, left = 50, bottom = 40;
	int n = hi - lo + 1, bw = std::min(48, std::max(8, (W - left - 10) / n));
	o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << std::max(left + bw * n + 10, 460)
	  << "' height='" << H + bottom << "' role='img'><title>wait distribution</title>\n";
	o << "<line x1='" << left << "' y1='" << H << "' x2='" << left + bw * n << "' y2='" << H
	  << "' stroke='#333'/>\n";
	o << "<text x='4' y='14' font-size='11'>" << mx << "</text><text x='4' y='" << H
	  << "' font-size='11'>0</text>\n";
	for (int k = lo; k <= hi; k++) {
		uint64_t c = b[static_cast<size_t>(k)];
		int h = static_cast<int>(static_cast<double>(H - 10) * static_cast<double>(c) /
					 static_cast<double>(mx));
		int x = left + (k - lo) * bw;
		double lo_ns = k ? 1000.0 * std::ldexp(1.0, k - 1) : 0.0;
		o << "<rect x='" << x + 1 << "' y='" << H - h << "' width='" << bw - 2 << "' height='" << h
		  << "' fill='" << color << "'><title>" << c << " waits &gt;= " << format_ns(lo_ns)
		  << "</title></rect>\n";
		if ((k - lo) % std::max(1, (60 + bw - 1) / bw) == 0) // a label per 60 px at most
			o << "<text x='" << x << "' y='" << H + 14 << "' font-size='10'>" << format_ns(lo_ns)
			  << "</text>\n";
	}
	o << "<text x='" << left << "' y='" << H + 32 << "' font-size='11'>wait time (log2 buckets), "
	  << l.waits.count() << " contended acquisitions</text></svg>\n";
}

// One block of timeline rows: thread labels in HTML (never clipped), the
// bars in an SVG stretched to the width of its scrolling box, whose width
// the zoom sets.
void timeline_rows(std::ostream &o, const Report &r, const std::vector<std::pair<uint32_t, int64_t>> &threads,
		   int64_t t0, double span)
{
	const int rowh = 22;
	std::map<std::pair<uint32_t, int64_t>, int> row;
	for (size_t i = 0; i < threads.size(); i++)
		row[threads[i]] = static_cast<int>(i);
	const int H = rowh * static_cast<int>(threads.size());
	o << "<div class=tl><div class=tln>";
	for (const auto &t : threads)
		o << "<div>" << html_esc(proc_label(r, t.first)) << " tid " << t.second << "</div>";
	o << "</div><div class=tls><div class=tlz>\n<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 "
	     "1000 "
	  << H << "' preserveAspectRatio='none' width='100%' height='" << H
	  << "' role='img'><title>per-thread timeline</title>\n";
	for (size_t i = 0; i < threads.size(); i++)
		o << "<rect x='0' y='" << static_cast<int>(i) * rowh + 2 << "' width='1000' height='"
		  << rowh - 4 << "' fill='#f4f4f4'/>\n";
	for (const Interval &iv : r.timeline) {
		auto it = row.find(std::make_pair(iv.proc, iv.tid));
		if (it == row.end())
			continue;
		const int y = it->second * rowh;
		const double x = 1000.0 * static_cast<double>(iv.start - t0) / span;
		const double w = std::max(0.15, 1000.0 * static_cast<double>(iv.end - iv.start) / span);
		const char *c = palette[iv.lock_index % (sizeof palette / sizeof *palette)];
		char b[200];
		if (iv.wait)
			std::snprintf(b, sizeof b,
				      "<rect x='%.3f' y='%d' width='%.3f' height='%d' fill='url(#hatch)' "
				      "stroke='%s' "
				      "stroke-width='0.5' vector-effect='non-scaling-stroke'>",
				      x, y + 3, w, rowh - 6, c);
		else
			std::snprintf(b, sizeof b,
				      "<rect x='%.3f' y='%d' width='%.3f' height='%d' fill='%s' "
				      "fill-opacity='0.85'>",
				      x, y + 6, w, rowh - 12, c);
		o << b << "<title>" << (iv.wait ? "wait " : "hold ") << "lock #" << iv.lock_index + 1 << ": "
		  << format_ns(static_cast<double>(iv.end - iv.start)) << "</title></rect>\n";
	}
	o << "</svg>\n<div class=tla>";
	// Tick labels in HTML (they keep their size when zoomed): 8 at 1x,
	// 32 from 4x, 64 from 16x (CSS).
	for (int k = 0; k < 64; k++)
		o << "<span class="
		  << (k % 8 == 0   ? "t1"
		      : k % 2 == 0 ? "t4"
				   : "t16")
		  << " style='left:" << 100.0 * k / 64 << "%'>+" << format_ns(span * k / 64.0) << "</span>";
	o << "</div></div></div></div>\n";
}

/*
 * The per-thread timeline of the top locks.  Readable on a busy program:
 * the threads that waited most come first, at most Options::top of them,
 * the others folded (<details>); zoom (1x to 64x, links to #zoomN: CSS
 * :target, no script) widens the bars' box, which scrolls to pan; labels
 * and axis ticks are HTML, so they are never clipped or stretched.
 */
void svg_timeline(std::ostream &o, const Report &r, const Options &opt)
{
	if (r.timeline.empty()) {
		o << "<p class=note>No interval to draw.</p>\n";
		return;
	}
	std::map<std::pair<uint32_t, int64_t>, int64_t> waited; // thread -> wait time in the timeline
	int64_t t0 = r.timeline.front().start, t1 = r.timeline.front().end;
	for (const Interval &iv : r.timeline) {
		waited[std::make_pair(iv.proc, iv.tid)] += iv.wait ? iv.end - iv.start : 0;
		t0 = std::min(t0, iv.start);
		t1 = std::max(t1, iv.end);
	}
	std::vector<std::pair<uint32_t, int64_t>> threads;
	for (const auto &kv : waited)
		threads.push_back(kv.first);
	std::stable_sort(threads.begin(), threads.end(),
			 [&](const auto &a, const auto &b) { return waited[a] > waited[b]; });
	const size_t shown = std::min(threads.size(), opt.top);
	const double span = static_cast<double>(std::max<int64_t>(1, t1 - t0));
	o << "<p class=zoom>zoom: <a href='#timeline'>1x</a>";
	for (int z : {4, 16, 64})
		o << " <a href='#zoom" << z << "'>" << z << "x</a>";
	o << " (scroll sideways to pan)</p>\n";
	for (int z : {4, 16, 64})
		o << "<span id='zoom" << z << "' class=zt></span>";
	o << "<div class=tlbox>\n<svg width='0' height='0' style='position:absolute'><defs><pattern "
	     "id='hatch' width='4' "
	     "height='4' patternUnits='userSpaceOnUse'><path d='M0,4 L4,0' stroke='#d62728' "
	     "stroke-width='1.2'/>"
	     "</pattern></defs></svg>\n";
	timeline_rows(o, r,
		      std::vector<std::pair<uint32_t, int64_t>>(threads.begin(), threads.begin() + shown), t0,
		      span);
	if (shown < threads.size()) {
		o << "<details><summary>" << threads.size() - shown
		  << " more thread(s), which waited less</summary>\n";
		timeline_rows(
			o, r,
			std::vector<std::pair<uint32_t, int64_t>>(threads.begin() + shown, threads.end()), t0,
			span);
		o << "</details>\n";
	}
	o << "</div>\n<p class=note>Solid bars: lock held; hatched bars: waiting for the lock. Threads by "
	     "time waited. Colors: ";
	for (size_t i = 0; i < r.locks.size() && i < opt.timeline_locks; i++)
		o << "<span style='color:" << palette[i % (sizeof palette / sizeof *palette)] << "'>&#9632; #"
		  << i + 1 << "</span> ";
	if (r.timeline_truncated)
		o << " (the " << opt.timeline_max << " longest intervals only, waits first)";
	o << "</p>\n";
}

} // namespace

namespace {

// The condition variables' table.
void html_conds(std::ostream &o, const Report &r, const Options &opt)
{
	if (r.conds.empty())
		return;
	o << "<h2>Condition variables</h2>\n<p class=note>Time threads spent waiting for a condition "
	     "(waiting for work, not slowed by a "
	     "lock).</p>\n<table><tr><th>process</th><th>condition "
	     "variable</th><th>mutex</th><th>waits</th><th>timeouts</th><th>signals</"
	     "th><th>broadcasts</th>"
	     "<th>wait total</th><th>wait max</th></tr>\n";
	for (size_t i = 0; i < r.conds.size() && i < opt.top; i++) {
		const CondStats &c = r.conds[i];
		o << "<tr><td>" << html_esc(proc_label(r, c.proc)) << "</td><td><code>" << hex(c.addr)
		  << (c.name.function.empty() ? "" : " (" + html_esc(c.name.function) + ")")
		  << "</code></td><td><code>" << hex(c.mutex) << "</code></td><td class=n>" << c.waits
		  << "</td><td class=n>" << c.timeouts << "</td><td class=n>" << c.signals
		  << "</td><td class=n>" << c.broadcasts << "</td><td class=n>"
		  << format_ns(static_cast<double>(c.wait_total)) << "</td><td class=n>"
		  << format_ns(static_cast<double>(c.wait_max)) << "</td></tr>\n";
	}
	o << "</table>\n";
}

// Lock i's section: its wait-time distribution, call sites and blockers.
void html_lock(std::ostream &o, const Report &r, size_t i)
{
	const LockStats &l = r.locks[i];
	o << "<h2>#" << i + 1 << " " << html_esc(proc_label(r, l.proc)) << " <code>"
	  << html_esc(lock_label(l)) << "</code></h2>\n<h3>Wait-time distribution</h3>\n";
	svg_histogram(o, l, palette[i % (sizeof palette / sizeof *palette)]);
	o << "<h3>Call sites</h3>\n<table><tr><th>site</th><th>acquired</th><th>contended</th>"
	     "<th>wait total</th><th>wait max</th><th>stack of the longest wait</th></tr>\n";
	for (const Site &s : l.sites) {
		o << "<tr><td><code>" << html_esc(site_label(s)) << "</code></td><td class=n>"
		  << s.acquisitions << "</td><td class=n>" << s.contended << "</td><td class=n>"
		  << format_ns(static_cast<double>(s.wait_total)) << "</td><td class=n>"
		  << format_ns(static_cast<double>(s.wait_max)) << "</td><td><code>";
		for (size_t k = 1; k < s.stack_syms.size(); k++)
			o << html_esc(s.stack_syms[k].function.empty() ? hex(s.stack[k])
								       : s.stack_syms[k].function)
			  << (s.stack_syms[k].location.empty() ? ""
							       : " at " + html_esc(s.stack_syms[k].location))
			  << "<br>";
		o << "</code></td></tr>\n";
	}
	o << "</table>\n";
	if (l.blockers.empty())
		return;
	o << "<h3>Holds that others waited behind (where they were "
	     "taken)</h3>\n<table><tr><th>site</th>"
	     "<th>waits caused</th><th>wait total</th><th>wait max</th></tr>\n";
	for (const Site &b : l.blockers)
		o << "<tr><td><code>" << html_esc(site_label(b)) << "</code></td><td class=n>" << b.contended
		  << "</td><td class=n>" << format_ns(static_cast<double>(b.wait_total))
		  << "</td><td class=n>" << format_ns(static_cast<double>(b.wait_max)) << "</td></tr>\n";
	o << "</table>\n";
}

} // namespace

void write_html(std::ostream &o, const Report &r, const Options &opt)
{
	o << "<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>strata: lock contention</title>\n"
	     "<style>body{font-family:sans-serif;margin:20px;color:#222}table{border-collapse:collapse}"
	     "td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}td.n{text-align:right}"
	     "th{background:#eee}.note{color:#666;font-size:12px}code{font-size:12px}"
	     ".tl{display:flex;align-items:flex-start}.tln{flex:none;font-size:11px;white-space:nowrap;"
	     "padding-right:6px}"
	     ".tln div{height:22px;line-height:22px}.tls{flex:1;overflow-x:auto;min-width:0}.tlz{width:100%}"
	     ".tla{position:relative;height:16px;font-size:10px;color:#444}.tla "
	     "span{position:absolute;white-space:nowrap}"
	     ".zt:target~.tlbox .tlz{width:400%}#zoom16:target~.tlbox .tlz{width:1600%}"
	     "#zoom64:target~.tlbox .tlz{width:6400%}.tla .t4,.tla .t16{display:none}"
	     ".zt:target~.tlbox .tla .t4{display:inline}#zoom16:target~.tlbox .tla .t16,"
	     "#zoom64:target~.tlbox .tla .t16{display:inline}</style></head><body>\n";
	o << "<h1>Lock contention</h1>\n<p>" << r.locks.size() << " locks, " << r.events << " lock events, "
	  << r.procs.size() << " process(es), " << format_ns(static_cast<double>(r.last_ts - r.first_ts))
	  << " traced.";
	if (r.discarded)
		o << " <b>" << r.discarded << " events were lost: figures are lower bounds.</b>";
	for (const std::string &n : counts_notes(r))
		o << (n.compare(0, 6, "COUNTS") == 0 ? " <b>" : " ") << html_esc(n) << "."
		  << (n.compare(0, 6, "COUNTS") == 0 ? "</b>" : "");
	o << "</p>\n<table><tr><th>#</th><th>process</th><th>lock</th><th>kind</th><th>acquired</th>"
	     "<th>contended</th><th>share</th><th>wait total</th><th>mean</th><th>p99</th><th>max</th>"
	     "<th>hold max</th></tr>\n";
	for (size_t i = 0; i < r.locks.size() && i < opt.top; i++) {
		const LockStats &l = r.locks[i];
		char sh[32];
		std::snprintf(sh, sizeof sh, "%.1f%%", share(l.contended, l.acquisitions));
		o << "<tr><td style='color:" << palette[i % (sizeof palette / sizeof *palette)] << "'>"
		  << i + 1 << "</td><td>" << html_esc(proc_label(r, l.proc)) << "</td><td><code>"
		  << html_esc(lock_label(l)) << "</code></td><td>" << l.kind << "</td><td class=n>"
		  << l.acquisitions << "</td><td class=n>" << l.contended << "</td><td class=n>" << sh
		  << "</td><td class=n>" << format_ns(static_cast<double>(l.wait_total))
		  << "</td><td class=n>" << format_ns(l.wait_mean) << "</td><td class=n>"
		  << format_ns(static_cast<double>(l.wait_p99)) << "</td><td class=n>"
		  << format_ns(static_cast<double>(l.wait_max)) << "</td><td class=n>"
		  << format_ns(static_cast<double>(l.hold_max)) << "</td></tr>\n";
	}
	o << "</table>\n";
	html_conds(o, r, opt);
	o << "<h2 id=timeline>Per-thread timeline of the top " << std::min(opt.timeline_locks, r.locks.size())
	  << (std::min(opt.timeline_locks, r.locks.size()) == 1 ? " lock" : " locks") << "</h2>\n";
	svg_timeline(o, r, opt);
	for (size_t i = 0; i < r.locks.size() && i < opt.timeline_locks; i++)
		html_lock(o, r, i);
	const std::vector<std::string> hints = debug_hints(r, true);
	if (!hints.empty()) {
		o << "<h2>Missing symbols</h2>\n<pre>";
		for (const std::string &h : hints)
			o << html_esc(h) << "\n";
		o << "</pre>\n";
	}
	o << "<p class=note>Generated by <code>strata analyze mutex</code>. Wait: time blocked in the lock "
	     "call "
	     "(0 when the lock was free); hold: from acquisition to the same thread's "
	     "unlock.</p>\n</body></html>\n";
}

} // namespace analyze
} // namespace strata
