// analyze_monitor.cpp - see analyze_monitor.h.
//
// Definitions (docs/jvm.md):
//   contended enter  a jvm:monitor_contended_enter; its wait is the wait_ns
//                    of the same thread's next jvm:monitor_contended_entered
//                    of that monitor (an enter with no entered, at the end of
//                    a killed run, counts with no wait).
//   waiter           the thread (name from jvm:thread_start or thread_exists) that entered.
//   holder           the thread that owned the monitor at the enter
//                    (owner_java_tid, recorded with the agent option owner=1).
//   site             the innermost frame of the enter's Java stack.
#include "analyze_monitor.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <unordered_map>
#include <vector>

#include "analyze_model.h"
#include "analyze_report.h"
#include "java_names.h"
#include "read_progress.h"
#include "commands.h"
#include "json_writer.h"
#include "read_event.h"

namespace strata {
namespace analyze {
namespace {

struct Site {
	uint64_t enters = 0, wait_ns = 0, max_wait_ns = 0;
	std::string stack; // of the longest wait
};

struct Monitor {
	size_t proc_index = 0;
	std::string proc, cls; // proc: "java (1234)"; cls: as Java writes it ("int[]")
	uint32_t hash = 0;
	uint64_t enters = 0, total_ns = 0, max_ns = 0;
	WaitDist waits; // bounded: the analysis streams
	std::map<std::string, uint64_t> waiters, holders;
	std::map<std::string, Site> sites;
};

struct Pending {
	std::string key, site, stack;
};

// What an event class is to the analysis, decided once per class.
struct ClassOf : rd::SlotCache {
	enum { Other, Jvm, Thread, Enter, Entered } what = Other;
};

struct Model {
	std::vector<Process> procs;                // the traced JVMs, by index
	std::map<const void *, size_t> proc_index; // sub-trace (trace_key()) -> index in procs
	std::map<std::string, Monitor> mons;       // key: proc/class@hash
	bool several_machines = false;             // the sub-traces' env.hostname differ
	std::map<std::pair<std::string, int64_t>, std::string> by_os_tid, by_java_tid;
	std::map<std::pair<std::string, int64_t>, Pending> pending; // (proc, tid)
	std::unordered_map<const void *, ClassOf> classes;          // by class_key()
	uint64_t jvm_events = 0, discarded = 0;

	template <class E> bool event(const E &ev);
	bool loss(const rd::Loss &l)
	{
		if (l.events && l.known)
			discarded += l.count;
		return true;
	}
};

// The event's process: its index in m.procs (from the trace's
// environment), and its label "java (1234)".
template <class E> size_t proc_of(Model &m, const E &ev, std::string *label)
{
	auto it = m.proc_index.find(ev.trace_key());
	if (it == m.proc_index.end()) {
		const rd::TraceIdent &id = ev.trace();
		Process p;
		p.name = id.procname.empty() ? "process" : id.procname;
		p.pid = id.has_vpid ? id.vpid : -1;
		if (m.several_machines)
			p.machine = id.hostname;
		it = m.proc_index.emplace(ev.trace_key(), m.procs.size()).first;
		m.procs.push_back(p);
	}
	// The label keys the process's threads and monitors: two machines'
	// JVMs of one pid stay two ("host: java (1234)").
	const Process &p = m.procs[it->second];
	*label = p.pid >= 0 ? p.name + " (" + std::to_string(p.pid) + ")" : p.name;
	if (!p.machine.empty())
		*label = p.machine + ": " + *label;
	return it->second;
}

std::string thread_name(const std::map<std::pair<std::string, int64_t>, std::string> &map,
			const std::string &proc, int64_t id, const char *what)
{
	auto it = map.find({proc, id});
	return it != map.end() ? it->second : std::string(what) + " " + std::to_string(id);
}

template <class E> bool Model::event(const E &ev)
{
	Model &m = *this;
	auto cit = classes.find(ev.class_key());
	if (cit == classes.end()) {
		ClassOf c;
		const std::string name = ev.name();
		if (name.compare(0, 4, "jvm:") == 0)
			c.what = name == "jvm:thread_start" || name == "jvm:thread_exists" ? ClassOf::Thread
				 : name == "jvm:monitor_contended_enter"                   ? ClassOf::Enter
				 : name == "jvm:monitor_contended_entered"                 ? ClassOf::Entered
											   : ClassOf::Jvm;
		cit = classes.emplace(ev.class_key(), c).first;
	}
	const ClassOf &c = cit->second;
	if (c.what == ClassOf::Other)
		return true;
	m.jvm_events++;
	std::string proc;
	const size_t proc_index = proc_of(m, ev, &proc);
	int64_t tid = 0;
	if (!ev.tid(&tid))
		tid = 0;
	if (c.what == ClassOf::Thread) {
		std::string n(c.str(ev, "name"));
		m.by_os_tid[{proc, c.i64(ev, "os_tid")}] = n;
		m.by_java_tid[{proc, c.i64(ev, "java_tid")}] = n;
		return true;
	}
	if (c.what != ClassOf::Enter && c.what != ClassOf::Entered)
		return true;
	std::string cls = java_class_name(std::string(c.str(ev, "class")));
	uint32_t hash = static_cast<uint32_t>(c.i64(ev, "hash"));
	char hx[16];
	std::snprintf(hx, sizeof hx, "%08" PRIx32, hash);
	std::string key = proc + "/" + cls + "@" + hx;
	Monitor &mon = m.mons[key];
	mon.proc = proc;
	mon.proc_index = proc_index;
	mon.cls = cls;
	mon.hash = hash;
	if (c.what == ClassOf::Enter) {
		mon.enters++;
		mon.waiters[thread_name(m.by_os_tid, proc, tid, "tid")]++;
		int64_t owner = c.i64(ev, "owner_java_tid");
		if (owner >= 0)
			mon.holders[thread_name(m.by_java_tid, proc, owner, "java tid")]++;
		Pending p;
		p.key = key;
		p.stack = c.str(ev, "stack");
		p.site = p.stack.substr(0, p.stack.find(';'));
		if (p.site.empty())
			p.site = "(no stack: agent option stack=0)";
		mon.sites[p.site].enters++;
		m.pending[{proc, tid}] = p;
		return true;
	}
	auto it = m.pending.find({proc, tid});
	if (it == m.pending.end() || it->second.key != key)
		return true;
	uint64_t w = c.u64(ev, "wait_ns");
	mon.total_ns += w;
	mon.max_ns = std::max(mon.max_ns, w);
	mon.waits.add(w);
	Site &s = mon.sites[it->second.site];
	s.wait_ns += w;
	if (w >= s.max_wait_ns) {
		s.max_wait_ns = w;
		s.stack = it->second.stack;
	}
	m.pending.erase(it);
	return true;
}

uint64_t p99(const WaitDist &v)
{
	return v.percentile(99.0); // nearest rank, as analyze mutex
}

uint64_t mean(const Monitor &mon)
{
	return mon.waits.count() ? mon.total_ns / mon.waits.count() : 0;
}

std::vector<const Monitor *> ranked(const Model &m)
{
	std::vector<const Monitor *> v;
	for (const auto &kv : m.mons)
		v.push_back(&kv.second);
	std::stable_sort(v.begin(), v.end(), [](const Monitor *a, const Monitor *b) {
		return a->total_ns != b->total_ns ? a->total_ns > b->total_ns : a->enters > b->enters;
	});
	return v;
}

std::vector<std::pair<std::string, const Site *>> ranked_sites(const Monitor &mon)
{
	std::vector<std::pair<std::string, const Site *>> v;
	for (const auto &kv : mon.sites)
		v.emplace_back(kv.first, &kv.second);
	std::stable_sort(v.begin(), v.end(),
			 [](const auto &a, const auto &b) { return a.second->wait_ns > b.second->wait_ns; });
	return v;
}

std::string counts(const std::map<std::string, uint64_t> &c)
{
	std::string s;
	for (const auto &kv : c)
		s += (s.empty() ? "" : ", ") + kv.first + " x" + std::to_string(kv.second);
	return s.empty() ? "-" : s;
}

void write_text(std::ostream &o, const Model &m, size_t top)
{
	auto mons = ranked(m);
	uint64_t enters = 0;
	for (const Monitor *mon : mons)
		enters += mon->enters;
	o << "Java monitor contention: " << enters << " contended enters on " << mons.size() << " monitors";
	if (m.discarded)
		o << " (" << m.discarded << " events discarded: counts are lower bounds)";
	o << "\n";
	size_t shown = 0;
	for (const Monitor *mon : mons) {
		if (shown++ >= top)
			break;
		char hx[16];
		std::snprintf(hx, sizeof hx, "%08" PRIx32, mon->hash);
		o << "\n"
		  << mon->cls << "@" << hx << "  in " << mon->proc << "\n"
		  << "  contended enters " << mon->enters << ", wait total "
		  << format_ns(double(mon->total_ns)) << ", mean " << format_ns(double(mean(*mon)))
		  << ", p99 " << format_ns(double(p99(mon->waits))) << ", max "
		  << format_ns(double(mon->max_ns)) << "\n"
		  << "  waiters: " << counts(mon->waiters) << "\n"
		  << "  holders: " << counts(mon->holders) << "\n";
		for (const auto &s : ranked_sites(*mon))
			o << "  site " << s.first << ": " << s.second->enters << " enters, wait "
			  << format_ns(double(s.second->wait_ns)) << "\n";
	}
}

void json_counts(JsonWriter &w, const std::map<std::string, uint64_t> &c)
{
	w.begin_object();
	for (const auto &kv : c)
		w.key(kv.first).u64(kv.second);
	w.end_object();
}

// A call site: its function, counts, and the longest wait's Java stack,
// innermost first.
void monitor_site_json(JsonWriter &w, const std::string &function, const Site &s)
{
	w.begin_object().key("function").str(function).key("location").str("");
	w.key("contended").u64(s.enters).key("wait_total_ns").u64(s.wait_ns);
	w.key("wait_max_ns").u64(s.max_wait_ns).key("stack").begin_array();
	const std::string &st = s.stack;
	for (size_t from = 0; !st.empty() && from <= st.size();) {
		size_t to = st.find(';', from);
		if (to == std::string::npos)
			to = st.size();
		w.begin_object().key("function").str(st.substr(from, to - from)).end_object();
		from = to + 1;
	}
	w.end_array().end_object();
}

void monitor_json(JsonWriter &w, const Monitor &mon)
{
	char hx[16];
	std::snprintf(hx, sizeof hx, "%08" PRIx32, mon.hash);
	w.newline(4).begin_object();
	w.key("process").u64(mon.proc_index).key("kind").str("monitor");
	w.key("name").str(mon.cls + "@" + hx).key("address").str(std::string("0x") + hx);
	w.key("class").str(mon.cls).key("hash").u64(mon.hash).key("contended").u64(mon.enters);
	w.key("wait_total_ns").u64(mon.total_ns).key("wait_mean_ns").u64(mean(mon));
	w.key("wait_p99_ns").u64(p99(mon.waits)).key("wait_max_ns").u64(mon.max_ns);
	w.key("waiters");
	json_counts(w, mon.waiters);
	w.key("holders");
	json_counts(w, mon.holders);
	w.newline(5).key("sites").begin_array();
	for (const auto &s : ranked_sites(mon))
		monitor_site_json(w, s.first, *s.second);
	w.end_array().end_object();
}

// The schema `analyze mutex` writes (docs/pthread.md, "JSON output"):
// the same top level and the same keys for what both measure; the
// monitor's own facts (class, hash, waiters, holders) besides.
void write_json(std::ostream &o, const Model &m)
{
	std::string out;
	JsonWriter w(out);
	w.begin_object().newline(2).key("analysis").str("monitor");
	w.newline(2).key("events").u64(m.jvm_events).newline(2).key("discarded").u64(m.discarded);
	w.newline(2).key("processes").begin_array();
	for (size_t i = 0; i < m.procs.size(); i++) {
		w.begin_object().key("index").u64(i).key("name").str(m.procs[i].name);
		w.key("pid").i64(m.procs[i].pid);
		if (!m.procs[i].machine.empty())
			w.key("machine").str(m.procs[i].machine);
		w.end_object();
	}
	w.end_array().newline(2).key("locks").begin_array();
	for (const Monitor *mon : ranked(m))
		monitor_json(w, *mon);
	w.end_array().end_object();
	o << out << "\n";
}

void write_html(std::ostream &o, const Model &m, size_t top)
{
	o << "<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>Java monitor contention</title>"
	     "<style>body{font-family:sans-serif}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
	     "padding:3px "
	     "6px;vertical-align:top}td.n{text-align:right}code{font-size:90%}</style></head><body>\n"
	     "<h1>Java monitor contention</h1>\n";
	if (m.discarded)
		o << "<p>" << m.discarded << " events discarded: counts are lower bounds.</p>\n";
	o << "<table><tr><th>monitor</th><th>process</th><th>contended</th><th>total wait</th><th>p99</th>"
	     "<th>max</th><th>waiters</th><th>holders</th><th>call sites (longest wait's stack)</th></tr>\n";
	size_t shown = 0;
	for (const Monitor *mon : ranked(m)) {
		if (shown++ >= top)
			break;
		char hx[16];
		std::snprintf(hx, sizeof hx, "%08" PRIx32, mon->hash);
		o << "<tr><td><code>" << html_esc(mon->cls) << "@" << hx << "</code></td><td>"
		  << html_esc(mon->proc) << "</td><td class=n>" << mon->enters << "</td><td class=n>"
		  << format_ns(double(mon->total_ns)) << "</td><td class=n>"
		  << format_ns(double(p99(mon->waits))) << "</td><td class=n>"
		  << format_ns(double(mon->max_ns)) << "</td><td>" << html_esc(counts(mon->waiters))
		  << "</td><td>" << html_esc(counts(mon->holders)) << "</td><td>";
		for (const auto &s : ranked_sites(*mon)) {
			std::string st = s.second->stack;
			std::replace(st.begin(), st.end(), ';', '\n');
			o << "<details><summary><code>" << html_esc(s.first)
			  << "</code>: " << s.second->enters << " enters, "
			  << format_ns(double(s.second->wait_ns)) << "</summary><pre>" << html_esc(st)
			  << "</pre></details>";
		}
		o << "</td></tr>\n";
	}
	o << "</table></body></html>\n";
}

// The model, with the progress bar's count.
struct Counted {
	Model &m;
	Progress &progress;
	uint64_t seen = 0;
	template <class E> bool event(const E &ev)
	{
		if (ev.timed())
			progress.update(++seen, ev.ns());
		return m.event(ev);
	}
	bool loss(const rd::Loss &l) { return m.loss(l); }
};

} // namespace

int analyze_monitor(const std::vector<std::string> &roots, const std::string &format, const std::string &html,
		    size_t top)
{
	Model m;
	rd::Source src("analyze");
	const std::string dir = roots_label(roots); // how messages name them
	if (!src.open(roots))
		return cli::kFail;
	m.several_machines = machines(src.dirs()) > 1;
	Progress progress = progress_for("analyze", src);
	Counted h{m, progress};
	const bool ok = src.read(h);
	progress.done();
	const bool whole = src.finish();
	if (!ok) {
		std::cerr << "strata analyze: " << src.why() << "\n";
		if (!src.native())
			cli::hint_torn("analyze", dir);
		return cli::kFail;
	}
	if (format == "json")
		write_json(std::cout, m);
	else
		write_text(std::cout, m, top);
	if (!m.jvm_events)
		std::cerr << "strata analyze: no jvm events in " << dir
			  << " (was the program run with strata record --jvm -e 'jvm:*'?)\n";
	if (!html.empty()) {
		std::ofstream f(html);
		write_html(f, m, top);
		f.close();
		if (!f) {
			std::cerr << "strata analyze: cannot write " << html << "\n";
			return cli::kFail;
		}
		if (format == "text")
			std::cout << "\nHTML report: " << html << "\n";
	}
	return whole ? 0 : cli::kFail; // the report of what was readable, damage skipped
}

} // namespace analyze
} // namespace strata
