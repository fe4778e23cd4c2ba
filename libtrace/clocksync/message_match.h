/*
 * message_match.h - traced messages between machines, matched send to
 * receive by their sender's machine and their key (`strata align`,
 * docs/clocks.md "Traced messages as constraints").
 *
 * A message is named by the machine that sent it and its key (the values
 * of the fields the user names).  A request and its reply that carry the
 * same id are therefore two messages: the request sent by one machine, the
 * reply by the other.  The send (machine A, key K) is matched to the one
 * receive of K on a machine other than A; it is not used, and counted as
 * ambiguous, when A sent K more than once, when K was received on two
 * other machines, when that machine received K more than once, or when two
 * senders claim the same receive.
 *
 * Contract: plain data, one thread; nothing here reads a trace or a clock.
 */
#ifndef STRATA_CLOCKSYNC_MESSAGE_MATCH_H
#define STRATA_CLOCKSYNC_MESSAGE_MATCH_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace strata {
namespace clocksync {

// One end of a message as traced: which machine's trace, its raw clock
// value, and a tag the caller keeps (e.g. the key's parity for hold-out).
struct MessageEnd {
	size_t machine = 0;
	int64_t ts = 0;
	uint32_t tag = 0;
};

struct MatchedMessage {
	std::string key;
	MessageEnd send, recv;
};

// What was not used, and why.
struct MatchCounts {
	uint64_t ambiguous = 0;    // sends or receives whose other end is not one end
	uint64_t unmatched = 0;    // sends or receives with no other end at all
	uint64_t same_machine = 0; // sends received only on the machine that sent them
};

class MessageMatcher {
public:
	void add_send(const std::string &key, const MessageEnd &e) { add(&sends_, key, e); }
	void add_recv(const std::string &key, const MessageEnd &e) { add(&recvs_, key, e); }
	// The messages (in no particular order), and what could not be used.
	std::vector<MatchedMessage> match(MatchCounts *counts) const;

private:
	struct End {
		MessageEnd e;
		uint32_t seen = 0; // times this machine traced this end of the key
	};
	using Table = std::unordered_map<std::string, std::vector<End>>; // key -> one per machine
	static void add(Table *t, const std::string &key, const MessageEnd &e);
	Table sends_, recvs_;
};

} // namespace clocksync
} // namespace strata
#endif
