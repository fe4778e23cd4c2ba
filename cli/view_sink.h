// view_sink.h - what `strata view` keeps while it prints: the filters, the
// names of sub-traces, the line being built (ViewSink), and the steps both
// readers share (view_lines.cpp); babeltrace2's messages in view_bt.cpp,
// Strata's own reader's in view_lines.cpp.  Single-threaded.
#ifndef STRATA_CLI_VIEW_SINK_H
#define STRATA_CLI_VIEW_SINK_H

#include <babeltrace2/babeltrace.h>

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "analyze_symbols.h"
#include "trace_reader.h"
#include "view_text.h"

namespace strata {
namespace view {

/*
 * Symbols beside addresses, as `strata analyze mutex` and `strata query`
 * name them (docs/viewing.md): the mappings a process's pthread preload
 * records (pthread:mapping, written before the process's first lock
 * event) name the hex integers of that process's later events,
 * "lock = 0x55d1c1a4b040 hot, caller = 0x55d1c1a4b2c4 worker+0x24".  A
 * sub-trace is a process; both readers key it by their own pointer.
 */
class ViewSymbols {
public:
	bool any() const { return table_ != nullptr; }
	void add(const void *trace, uint64_t start, uint64_t end, uint64_t offset, const char *path)
	{
		auto it = procs_.emplace(trace, (uint32_t)procs_.size()).first;
		if (it->second >= names_.size())
			names_.resize(it->second + 1);
		names_[it->second].clear(); // a new mapping may name an address anew
		analyze::Mapping m;
		m.proc = it->second;
		m.start = start;
		m.end = end;
		m.offset = offset;
		m.path = path ? path : "";
		if (!table_)
			table_.reset(new analyze::SymbolTable({}));
		table_->add(m);
	}
	// " name" when the sub-trace's mappings name addr, else "".
	const std::string &beside(const void *trace, uint64_t addr)
	{
		auto p = procs_.find(trace);
		if (p == procs_.end())
			return none_;
		auto &names = names_[p->second];
		auto it = names.find(addr);
		if (it == names.end()) {
			const std::string f = table_->lookup(p->second, addr, false).function;
			it = names.emplace(addr, f.empty() ? f : " " + f).first;
		}
		return it->second;
	}

private:
	std::unique_ptr<analyze::SymbolTable> table_;
	std::unordered_map<const void *, uint32_t> procs_;
	std::vector<std::unordered_map<uint64_t, std::string>> names_; // per process: its addresses' " name"
	const std::string none_;
};

// The root members' hex integers named (babeltrace2's reader).
struct Namer {
	ViewSymbols *syms;
	const void *trace;
};

// A time bound of --since/--until: `+SECONDS` from the first event, or a
// time of day (local) on the first event's day; resolved at the first
// event.
struct TimeBound {
	bool set = false, relative = false;
	int64_t ns = 0; // relative: from the first event; else: from local midnight
	int64_t at = 0; // resolved: ns from the clock's origin
};

// What the filters and the line's prefix need of an event, from either
// reader (babeltrace2's messages or Strata's own, trace_reader.h).
struct Ev {
	const void *trace = nullptr; // the sub-trace (a key)
	bool timed = false;
	int64_t ns = 0;
	bool has_tid = false;
	int64_t tid = -1;
	int64_t cpu = -1;
	const char *name = "";
};

// A sub-trace as the view names it: "procname[pid]", kernel or not, vpid.
struct TraceWho {
	std::string who;
	bool kernel = false;
	int64_t vpid = -1;
};

struct ViewSink {
	uint64_t limit = UINT64_MAX;
	uint64_t events = 0;
	// Filters (all must pass; an empty set lets everything through).
	std::set<int64_t> pids, tids;
	std::vector<std::string> patterns;
	TimeBound since, until;
	bool first_seen = false;
	std::unordered_map<int64_t, int64_t> tid_pid; // threads seen in user sub-traces
	std::map<const void *, TraceWho> traces;      // sub-trace -> its name (filled by the pump)
	const void *last_trace = nullptr;             // traces' last look-up
	const TraceWho *last_who = nullptr;
	LineBuf line;
	bool write_failed = false;
	uint64_t damaged = 0;   // Strata's reader: damage named
	bool show_host = false; // sub-traces of several machines: "host:procname[pid]"
	// Strata's reader: each event class's field labels, and the last one's.
	std::unordered_map<const MetaEvent *, std::vector<std::string>> labels;
	const MetaEvent *label_class = nullptr;
	const std::vector<std::string> *class_labels = nullptr;
	// The symbols beside addresses; Strata's reader: whether the last
	// event's class, sym_class, is pthread:mapping.
	ViewSymbols syms;
	const MetaEvent *sym_class = nullptr;
	bool sym_mapping = false;
	// The last event's line after its time (" who tid=T cpu=C name"), and
	// what it was made of: successive events of one thread share it.
	struct {
		const void *trace = nullptr;
		bool has_tid = false;
		int64_t tid = 0, cpu = 0;
		std::string name, text;
	} prefix;
};

inline const TraceWho &who_of(ViewSink &s, const void *trace)
{
	if (trace != s.last_trace) {
		s.last_trace = trace;
		s.last_who = &s.traces[trace];
	}
	return *s.last_who;
}

enum class Verdict { Show, Skip, Stop };

// A loss, from either reader.
struct Loss {
	const void *trace = nullptr;
	bool events = true;
	bool known = true;
	uint64_t count = 0;
	bool times = false;
	int64_t b = 0, e = 0;
	uint64_t stream = 0;
};

// A --since/--until bound made absolute from the trace's first event.
void resolve(TimeBound &b, int64_t first);
// The filters of `strata view` for one event (--pid, --tid, -e, --since,
// --until).
Verdict filter_event(ViewSink &s, const Ev &ev);
// The line's prefix: time, who, thread, CPU, name.
void format_prefix(ViewSink &s, const Ev &ev);
bool show_discarded(ViewSink &s, const Loss &l);
void format_discarded(ViewSink &s, const Loss &l);
// The line buffer to stdout; false once a write failed.
bool flush_line(ViewSink &s);
// After a message: false to stop (limit reached or output failed).
bool after_message(ViewSink &s, bool more);

// One babeltrace2 message printed (view_bt.cpp); false to stop.
bool on_bt_message(ViewSink &s, const bt_message *msg);
// Every message of Strata's reader printed (r opened); false when the
// read failed.
bool read_native(TraceReader &r, ViewSink &s);
// A pthread:mapping event of Strata's reader into s.syms, as read_native()
// takes one (shown or not).
void learn_mapping(ViewSink &s, const TraceEvent &e);

} // namespace view
} // namespace strata

#endif
