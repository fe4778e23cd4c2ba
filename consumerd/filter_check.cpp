/*
 * filter_check.cpp - a rule's field filter against the events the daemon
 * knows (filter_check.h).  The same compiler and binding as the traced
 * process's (libtrace/filter/filter.cpp), on a description rebuilt from the
 * validated copy of its descriptor (EventInfo): the daemon says what the
 * process will do with the rule.
 */
#include "filter_check.h"

#include <memory>
#include <set>

#include "drain.h"
#include "session.h"
#include "filter.h"
#include "strata_abi.h"

namespace strata {
namespace daemon_impl {
namespace {

const char *kind_name(uint8_t type)
{
	switch (type) {
	case STRATA_FT_INTEGER:
		return "integer";
	case STRATA_FT_FLOAT:
		return "float";
	case STRATA_FT_ENUM:
		return "enum";
	case STRATA_FT_STRING:
		return "string";
	default:
		return "array";
	}
}

// "pthread:mutex_lock has lock (integer), wait_ns (integer)".
std::string fields_of(const EventInfo &e)
{
	std::string s = e.provider + ":" + e.name + (e.fields.empty() ? " has no field" : " has ");
	for (size_t i = 0; i < e.fields.size(); i++) {
		if (i == 12) {
			s += ", ...";
			break;
		}
		s += (i ? ", " : "") + e.fields[i].name + " (" + kind_name(e.fields[i].type) + ")";
	}
	return s;
}

} // namespace

FilterFit filter_fit(const proto::Rule &r, const std::vector<EventInfo> &events)
{
	FilterFit fit;
	auto prog = std::make_unique<FilterProgram>();
	FilterError ferr{};
	if (!r.enable || r.filter.empty() || !filter_compile(r.filter.c_str(), prog.get(), &ferr))
		return fit; // nothing to check (the CLI refuses what does not compile)
	std::vector<strata_field_desc> fields;
	for (const EventInfo &e : events) {
		const std::string full = e.provider + ":" + e.name;
		if ((r.loglevel_max >= 0 && e.loglevel > static_cast<uint32_t>(r.loglevel_max)) ||
		    !glob_match(r.pattern.c_str(), full.c_str()))
			continue;
		fit.matched++;
		fit.example = fit.example ? fit.example : &e;
		fields.clear();
		for (const FieldInfo &f : e.fields) // the kinds are the ABI's field types
			fields.push_back({f.name.c_str(), f.type, static_cast<uint8_t>(f.elem_bits / 8),
					  f.is_signed, f.base, f.length, nullptr});
		const strata_event_desc d = {STRATA_API_VERSION,
					     e.loglevel,
					     e.provider.c_str(),
					     e.name.c_str(),
					     static_cast<uint32_t>(fields.size()),
					     fields.data()};
		fit.bound += filter_bind(*prog, &d);
	}
	return fit;
}

std::string filter_refusal(const proto::Rule &r, const std::vector<const Session *> &sessions)
{
	size_t matched = 0, procs = 0;
	std::string example;
	for (const Session *s : sessions)
		for (const auto &d : s->drains) {
			if (d->from_kernel())
				continue; // kernel events ignore filters: they decide nothing here
			const std::vector<EventInfo> events = d->known_events();
			const FilterFit fit = filter_fit(r, events);
			if (fit.bound)
				return ""; // it binds somewhere: the process decides per event
			if (!fit.matched)
				continue;
			matched += fit.matched;
			procs++;
			if (example.empty())
				example = fields_of(*fit.example) + "; " + d->comm() + ", pid " +
					  std::to_string(d->pid());
		}
	if (!matched)
		return ""; // no known event to check it against: STATUS says later
	return "filter '" + r.filter + "' names a field that none of the " + std::to_string(matched) +
	       " event(s) matching '" + r.pattern + "' in " + std::to_string(procs) +
	       " traced process(es) has, or compares it with another type (" + example +
	       "): the rule would record nothing; nothing changed";
}

// The events of s declared by its processes (REGISTER, names only) that
// no buffer of s describes: their processes recorded none of them (a
// buffer is made at the first event recorded).
static std::vector<std::string> never_described(const Session &s)
{
	std::set<std::string> described;
	for (const auto &d : s.drains)
		for (const EventInfo &e : d->known_events())
			described.insert(e.provider + ":" + e.name);
	std::vector<std::string> out;
	for (const std::string &name : s.declared)
		if (!described.count(name))
			out.push_back(name);
	return out;
}

// A filtered rule that binds to none of the matching events of some
// processes that recorded others: their buffers describe every event.
static std::string unbound_in_buffers(const Session &s, const proto::Rule &r)
{
	size_t procs = 0;
	std::string first;
	for (const auto &d : s.drains) {
		if (d->from_kernel())
			continue; // kernel events ignore filters
		const std::vector<EventInfo> events = d->known_events();
		const FilterFit fit = filter_fit(r, events);
		if (!fit.matched || fit.bound)
			continue;
		if (!procs++)
			first = d->comm() + " (pid " + std::to_string(d->pid()) + "; " +
				fields_of(*fit.example) + ")";
	}
	if (!procs)
		return "";
	return "filter '" + r.filter + "' of rule '" + r.pattern +
	       "' names a field none of the matching events has in " + std::to_string(procs) +
	       " process(es), first " + first + ": the rule records nothing there\n";
}

std::string filter_problems(const Session &s)
{
	std::string out;
	std::vector<std::string> silent; // computed once, for the first filtered rule
	bool silent_done = false;
	for (const proto::Rule &r : s.rules) {
		if (!r.enable || r.filter.empty())
			continue;
		out += unbound_in_buffers(s, r);
		if (!silent_done) {
			silent = never_described(s);
			silent_done = true;
		}
		// A process whose only matching rules are filtered, none binding,
		// records nothing and makes no buffer: the daemon never sees its
		// fields.  Its declared names still say that it has such events.
		std::string names;
		size_t n = 0;
		for (const std::string &e : silent)
			if (glob_match(r.pattern.c_str(), e.c_str()) && n++ < 4)
				names += (names.empty() ? "" : ", ") + e;
		if (n)
			out += "filter '" + r.filter + "' of rule '" + r.pattern + "': " + std::to_string(n) +
			       " matching event(s) declared by the session's processes (" + names +
			       (n > 4 ? ", ..." : "") +
			       ") were recorded by none: if the filter names a field they lack or compares "
			       "it with "
			       "another type, each process said which on its stderr\n";
	}
	return out;
}

} // namespace daemon_impl
} // namespace strata
