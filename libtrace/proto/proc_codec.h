/*
 * proc_codec.h - the process side of the control protocol, without
 * allocation: encode HELLO, REGISTER and BUFFER into a caller's buffer and
 * decode HELLO_REPLY, REGISTER_REPLY and REPLY into fixed-size structures.
 *
 * Why a second codec: the traced process re-queries its sessions from a
 * signal handler (asynchronous enablement, tp-async), where malloc, stdio
 * and locks are forbidden.  Everything here is async-signal-safe.  The wire
 * format is the one of proto.h (docs/control-protocol.md); tests check both
 * codecs against each other on the messages they share.
 */
#ifndef STRATA_PROTO_PROC_CODEC_H
#define STRATA_PROTO_PROC_CODEC_H

#include <cstddef>
#include <cstdint>

#include "proto.h"
#include "runtime.h"

namespace strata {
namespace proto {
namespace pc {

// Appends little-endian fields; `ok` turns false (and stays) on overflow.
struct Writer {
	uint8_t *p;
	size_t cap;
	size_t len = 0;
	bool ok = true;
	uint16_t version = kProcessVersion; // of the messages begin() starts

	Writer(uint8_t *buf, size_t c) : p(buf), cap(c) {}
	void put(uint64_t v, int n);
	void u16(uint16_t v) { put(v, 2); }
	void u32(uint32_t v) { put(v, 4); }
	void i32(int32_t v) { put(static_cast<uint32_t>(v), 4); }
	void u64(uint64_t v) { put(v, 8); }
	void str(const char *s); // strlen(s) bytes
	// Start a message (header with length 0); end() patches the length.
	void begin(Type t, uint32_t seq);
	bool end();
};

// HELLO as a process: versions w.version..kProcessMaxVersion when w.version
// is 1 (a state query: the daemon answers a version 6 one with the grants'
// aggregations, and a version 7 one knows the process tells its probe
// report), w.version only otherwise (4 or 7: a grant table's join, 7: a note).
bool encode_hello(Writer &w, uint32_t seq);
// REGISTER.  Events 0..n_events-1 are read through event_name (the
// signature of strata_rt_event_name); as many as fit are sent.  table_gen
// goes out in a version-4 message only.
bool encode_register(Writer &w, uint32_t seq, uint32_t pid, uint32_t uid, uint32_t flags, uint32_t signo,
		     const char *comm, int (*event_name)(uint32_t, char *, size_t, uint32_t *),
		     uint32_t n_events, uint64_t table_gen = 0);
// session_id goes out in a version-4 message only.
bool encode_buffer(Writer &w, uint32_t seq, uint32_t slot, int32_t status, uint64_t session_id = 0);
// AGG_REGION, in a version kAggVersion header whatever w.version says (only
// to a daemon that chose it); the memfd goes with it as SCM_RIGHTS.
bool encode_agg_region(Writer &w, uint32_t seq, uint32_t slot, uint64_t session_id);

// A checked header: magic, version 1..kProcessMaxVersion (what the daemon chose of
// our HELLO's range), type 1..16, length <= max_payload.
bool parse_header(const uint8_t h[kHeaderSize], size_t max_payload, Header *out);

struct Grant {
	uint32_t slot;
	uint64_t session_id;
	struct strata_channel_config cfg;
	uint8_t uuid[16];
	uint32_t n_rules;
	struct strata_rule rules[STRATA_MAX_RULES];
	char aggregate[kMaxAggregate + 1]; // version 6; "" none
	char agg_filter[kMaxFilter + 1];
};
struct Grants {
	uint32_t n;
	Grant g[kMaxSlots];
};
// Payload decoders: true only if the payload is valid and fully consumed.
// `version`: the header's (a grant's aggregation is read from version 6).
bool parse_register_reply(const uint8_t *payload, size_t n, uint16_t version, Grants *out);
bool parse_reply(const uint8_t *payload, size_t n, int32_t *status, char *text, size_t cap);
bool parse_hello_reply(const uint8_t *payload, size_t n, uint16_t *version, uint32_t *server_pid = nullptr);
// A grant table's bytes (proto.h, kTableMagic): true, with its generation,
// its writer's version and grants, only if it is whole, valid, of this buffer ABI, written by a
// daemon that speaks version 4, and answers without the daemon (no kTableAsk).
struct TableInfo {
	uint64_t gen;
	uint32_t daemon_pid;
	uint16_t version; // the daemon's protocol version
	int32_t clock_fd; // -1: no clock page
};
bool parse_table(const uint8_t *p, size_t n, TableInfo *info, Grants *out);

} // namespace pc
} // namespace proto
} // namespace strata
#endif
