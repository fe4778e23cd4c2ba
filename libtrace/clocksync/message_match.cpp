// Traced messages matched by sender's machine and key (message_match.h).
#include "message_match.h"

namespace strata {
namespace clocksync {

void MessageMatcher::add(Table *t, const std::string &key, const MessageEnd &e)
{
	std::vector<End> &ends = (*t)[key];
	for (End &x : ends)
		if (x.e.machine == e.machine) {
			x.seen++;
			return;
		}
	ends.push_back({e, 1});
}

std::vector<MatchedMessage> MessageMatcher::match(MatchCounts *counts) const
{
	MatchCounts c;
	std::vector<MatchedMessage> out;
	static const std::vector<End> kNone;
	std::vector<std::vector<const End *>> claims;
	for (const auto &kv : sends_) {
		const auto r = recvs_.find(kv.first);
		const std::vector<End> &recvs = r == recvs_.end() ? kNone : r->second;
		claims.assign(recvs.size(), {});
		for (const End &s : kv.second) {
			if (s.seen > 1) { // which of its sends a receive answers is unknown
				c.ambiguous += s.seen;
				continue;
			}
			size_t cand = SIZE_MAX, n = 0;
			bool here = false;
			for (size_t j = 0; j < recvs.size(); j++) {
				if (recvs[j].e.machine == s.e.machine) {
					here = true;
					continue;
				}
				cand = j;
				n++;
			}
			if (n == 0)
				(here ? c.same_machine : c.unmatched)++;
			else if (n > 1 || recvs[cand].seen > 1)
				c.ambiguous++;
			else
				claims[cand].push_back(&s);
		}
		for (size_t j = 0; j < recvs.size(); j++) {
			if (claims[j].size() == 1)
				out.push_back({kv.first, claims[j][0]->e, recvs[j].e});
			else if (claims[j].size() > 1) // two senders, one receive
				c.ambiguous += claims[j].size();
		}
	}
	// Receives of a key nobody sent (one sent on the same machine only was
	// counted at its send).
	for (const auto &kv : recvs_)
		if (!sends_.count(kv.first))
			for (const End &v : kv.second)
				c.unmatched += v.seen;
	*counts = c;
	return out;
}

} // namespace clocksync
} // namespace strata
