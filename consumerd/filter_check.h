/*
 * filter_check.h - a rule's field filter checked against the events the
 * daemon knows (issue 31): the events each traced process described in its
 * buffer (Drain::known_events).  A filter that names a field none of the
 * known matching events has (or compares it with another type) records
 * nothing: ENABLE refuses it when some known event matches the rule's
 * pattern, and STATUS names it for every process of the session in which
 * it binds to none of the events it matches (a rule given before its
 * processes started: `strata record`).  Main thread only.
 */
#ifndef STRATA_CONSUMERD_FILTER_CHECK_H
#define STRATA_CONSUMERD_FILTER_CHECK_H

#include <string>
#include <vector>

#include "event_info.h"
#include "proto/proto.h"

namespace strata {
namespace daemon_impl {

struct Session;

// How a rule's filter fits one process's events: how many of them the
// rule's pattern and level match, to how many of those the filter binds,
// and one matched event (for the message).
struct FilterFit {
	size_t matched = 0, bound = 0;
	const EventInfo *example = nullptr;
};
FilterFit filter_fit(const proto::Rule &r, const std::vector<EventInfo> &events);

// At ENABLE: "" or why the rule is refused (its filter binds to none of
// the matching events of the processes in `sessions`).
std::string filter_refusal(const proto::Rule &r, const std::vector<const Session *> &sessions);

// For STATUS's problems: one line per filtered rule of `s` that binds to
// none of the matching events of some of its processes.
std::string filter_problems(const Session &s);

} // namespace daemon_impl
} // namespace strata
#endif
