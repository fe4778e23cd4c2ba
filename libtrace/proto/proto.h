/*
 * proto.h - the control protocol spoken over strata-consumerd's Unix stream
 * socket, by traced processes (REGISTER, BUFFER) and by controllers (the
 * `strata` command).  Specification: docs/control-protocol.md.
 *
 * Every message is a 16-byte header { magic u32, version u16, type u16,
 * length u32 (payload bytes), seq u32 } followed by `length` bytes of
 * payload: fixed-width little-endian integers and length-prefixed strings
 * (u32 length, bytes, no NUL).  Nothing else.
 *
 * The decoder is the daemon's first line of defence: whatever bytes arrive,
 * it returns either a fully validated message or an error code with a text,
 * never reads outside the input and never allocates more than the input
 * justifies (every count is bounded by the bytes left).
 *
 * Internal to Strata (namespace strata::proto); compiled into libstrata
 * (hidden) for the process side and into strata_control for the rest.
 */
#ifndef STRATA_PROTO_PROTO_H
#define STRATA_PROTO_PROTO_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "strata_limits.h"

namespace strata {
namespace proto {

constexpr uint32_t kMagic = 0x4c435453u; // "STCL" little-endian
// Version 2 adds WAIT and TARGET_RULE (types 17, 18, valid only in version
// 2 headers) and answers changes at once on a version 2 connection (the
// controller WAITs explicitly); version 1 peers keep version 1 behaviour.
// Version 3 adds CREATE's relay and hostname (streaming to lttng-relayd).
// Version 4 adds REGISTER's table generation and BUFFER's session id, sent
// by a process that joined from the daemon's grant table (kRegisterTable,
// docs/control-protocol.md, "The grant table").
// Version 5 adds STATUS's problems (processes that wrote malformed data),
// CREATE's flags (kCreateOwned: the session lives as long as
// the connection that made it; `strata record`) and STATUS_REPLY's joined
// and declared (who registered, what they declared).
// Version 6 adds aggregation sessions (docs/probes.md, "Aggregation
// sessions"): CREATE's, STATUS_REPLY's and each grant's aggregate spec and
// filter, AGG_REGION (a process hands the daemon its region's memfd) and
// AGG_FETCH (a controller gets the regions of a session, one per request).
// Both new types are refused in a header below version 6.
// Version 7 adds the probe marks (docs/probes.md, "Who is on a
// tracepoint"): REGISTER's kRegisterProbes and kRegisterNote, and
// LIST_REPLY's per-entry probes mark, so that `strata list` reads the
// probe report only of the processes that have one.
// Version 8 changes no layout: it says that the daemon stops a session in
// two phases (docs/consumerd.md, "Stopping a session"), answering STOP and
// DESTROY once the processes applied them, so that a controller needs no
// step of its own for what they write then (the pthread preload's counts).
// Version 9 adds STATUS_REPLY's clock links (docs/clocks.md).
// Version 10 adds CREATE's kCreateTree: the session is scoped to the
// process tree of the connection that made it (`strata record`); and
// STATUS_REPLY's clock links once for the daemon, after the sessions, so
// that `strata status` shows a daemon's links when it has no session.
constexpr uint16_t kVersion = 10;
constexpr uint16_t kTreeVersion = 10; // what kCreateTree needs
constexpr uint16_t kClocksVersion = 9;
constexpr uint16_t kDaemonClocksVersion = 10;
constexpr uint16_t kStopsVersion = 8; // the daemon's stop waits for its processes
constexpr uint16_t kAggVersion = 6;   // what aggregation sessions need
constexpr uint16_t kMarksVersion = 7; // what the probe marks need
constexpr uint16_t kMinVersion = 1;
constexpr uint16_t kProcessVersion = 1;    // what libstrata speaks (proc_codec)
constexpr uint16_t kProcessMaxVersion = 7; // the newest libstrata offers and reads
constexpr size_t kHeaderSize = 16;
constexpr size_t kMaxPayload = 1u << 20; // 1 MiB: far above any real message
// A daemon's LIST and STATUS replies grow with the live processes (a LIST
// entry per process and event: 1.5 MB for 10,000 processes of 4 events):
// they alone may reach this.  Only clients take such a message; the daemon
// takes none above kMaxPayload (consumerd/connections.cpp, Connections::frame).
constexpr size_t kMaxReplyPayload = 64u << 20;
// The limits shared with the runtime and the module: strata_limits.h's.
constexpr size_t kMaxName = STRATA_LIMIT_NAME - 1; // session, channel, comm names
constexpr size_t kMaxPath = 4095;
constexpr size_t kMaxPattern = STRATA_LIMIT_PATTERN - 1;
constexpr size_t kMaxFilter = STRATA_LIMIT_FILTER - 1;
constexpr size_t kMaxText = 65535;
constexpr size_t kMaxRelay = 300;     // "HOST[:CTRL[:DATA]]"
constexpr size_t kMaxAggregate = 255; // "PROVIDER:EVENT[:FIELD] [by KEY] [limit N]"
constexpr uint32_t kMaxSlots = STRATA_LIMIT_SLOTS;
constexpr uint32_t kMaxRules = STRATA_LIMIT_RULES;
constexpr uint32_t kMaxEvents = 65536;

enum class Type : uint16_t {
	Hello = 1,
	HelloReply = 2,
	Register = 3,
	RegisterReply = 4,
	Buffer = 5,
	Create = 6,
	EnableEvent = 7,
	DisableEvent = 8,
	Start = 9,
	Stop = 10,
	Destroy = 11,
	List = 12,
	ListReply = 13,
	Status = 14,
	StatusReply = 15,
	Reply = 16,
	Wait = 17,       // version 2
	TargetRule = 18, // version 2
	Snapshot = 19,   // version 2
	SnapshotOn = 20, // version 2
	AggRegion = 21,  // version 6
	AggFetch = 22,   // version 6
};
constexpr uint16_t kTypeMax = 22;
constexpr uint16_t kTypeMinV6 = 21; // types from here need version 6
constexpr uint16_t kTypeMaxV1 = 16;
constexpr uint32_t kMaxTargetPids = STRATA_LIMIT_TARGET_PIDS;
constexpr uint32_t kMaxTargetNames = STRATA_LIMIT_TARGET_NAMES;
constexpr uint32_t kMaxWaitMs = 600000;

enum class Error : int {
	None = 0,
	BadMagic,
	BadVersion,
	BadType,
	Truncated,
	Oversized,
	TrailingGarbage,
	OutOfRange,
};
const char *error_name(Error e);

enum class Role : uint32_t { Process = 1, Controller = 2 };

// Little-endian load of k <= 8 bytes (both codecs; async-signal-safe).
inline uint64_t load_le(const uint8_t *p, int k)
{
	uint64_t v = 0;
	for (int i = 0; i < k; i++)
		v |= static_cast<uint64_t>(p[i]) << (8 * i);
	return v;
}

struct Header {
	uint32_t magic = kMagic;
	uint16_t version = kVersion;
	uint16_t type = 0;
	uint32_t length = 0;
	uint32_t seq = 0;
};

// What a ChannelConfig's 0s mean (the buffer's maker, libtrace/runtime/slots.cpp).
constexpr uint64_t kDefaultSubbufSize = 128 * 1024;
constexpr uint32_t kDefaultSubbufs = 8;

struct ChannelConfig {
	std::string name = "channel0";
	uint32_t stream_id = 0;
	uint32_t mode = 0;        // enum strata_channel_mode
	uint32_t n_lanes = 0;     // 0: default
	uint32_t n_subbuf = 0;    // 0: default; else power of two 2..64
	uint64_t subbuf_size = 0; // 0: default; else power of two 4 KiB..64 MiB
};

struct Rule {
	std::string pattern; // "provider:event" glob with '*'
	int32_t loglevel_max = -1;
	uint32_t enable = 1;
	std::string filter;
};

struct EventName {
	std::string name; // "provider:event"
	uint32_t loglevel = 0;
};

// ---- messages ------------------------------------------------------------
// HELLO's payload layout is frozen across versions, and a HELLO is accepted
// whatever version its header carries: that is what makes negotiation work.
struct Hello {
	uint16_t min_version = kMinVersion;
	uint16_t max_version = kVersion;
	uint32_t role = 0;  // enum Role
	std::string client; // free text for logs
};
struct HelloReply {
	uint16_t version = kVersion;
	uint32_t server_pid = 0;
};
constexpr uint32_t kRegisterAsync = 1; // Register.flags: signal me on changes
// Register.flags: my state comes from the kernel module's QUERY (its grants);
// this connection only announces my events or hands over BUFFERs, and its
// REGISTER_REPLY carries no grant (docs/control-protocol.md, "The module answers").
constexpr uint32_t kRegisterModule = 2;
// Register.flags (version 4): I joined from the daemon's grant table at
// Register.table_gen; this connection hands over my BUFFERs (each naming its
// session) and waits for no answer (docs/control-protocol.md, "The grant table").
constexpr uint32_t kRegisterTable = 4;
// Register.flags (version 4, with kRegisterTable): not a join but the
// hand-off of a buffer the process made at a slot's first event, after it
// joined from the table (docs/ring-buffer.md, "A buffer at the first
// event"); its BUFFER follows, nothing is answered, nothing is counted as
// a join and a stale table_gen signals nothing (the join did).
constexpr uint32_t kRegisterHandoff = 8;
// Register.flags (version 7 header): this process has a probe report
// (abi/strata_probe_report.h): `strata list` reads it.  Only ever set in
// the daemon's record of the process.
constexpr uint32_t kRegisterProbes = 16;
// Register.flags (version 7 header, with kRegisterProbes and nothing else
// but it): not a registration but a note for the daemon's record of the
// process (made if unknown yet): nothing is answered, joined or counted,
// and nothing else of the record changes but the mark (and an unknown
// process's comm).  Sent alone on a connection of its own, after a HELLO
// of versions 7..7 (an older daemon refuses the HELLO, reads nothing else
// and closes): docs/control-protocol.md, "Probe marks".
constexpr uint32_t kRegisterNote = 32;

// The grant table: per uid, what a REGISTER_REPLY to a process of that uid
// would grant, in the file <socket>.grants.<uid> (mode 0400, owned by that
// uid), replaced whole (rename) whenever it changes, so that a process
// starts with no round trip.  Layout, little-endian: u32 kTableMagic, u16
// the writer's protocol version (>= 4), u16 flags, u32 buffer ABI major,
// u32 the daemon's pid, u64 generation, i32 the daemon's descriptor of its
// clock page (-1: none; the process opens /proc/PID/fd/N read-only, where
// REGISTER_REPLY would have passed it), u32 zero; then one version-1
// message: a header and a REGISTER_REPLY payload whose trace uuids are zero
// (the process makes its own).  kTableAsk: the answer depends on the
// process (a rule targets pids or names): ask with a round trip.
constexpr uint32_t kTableMagic = 0x54475453u; // "STGT"
constexpr uint16_t kTableAsk = 1;
constexpr size_t kTableHeaderSize = 32;
constexpr const char *kTableSuffix = ".grants.";
// The quiet socket, <socket>.quiet: where a process that joined from the
// grant table sends its HELLO + REGISTER.  The daemon does not wake for each
// connection there: the first one arms a short timer, and when it fires (or
// before any controller command, or a session's stop) every queued
// connection is accepted and read in one go (docs/control-protocol.md,
// "The quiet socket").  A process that cannot connect there uses the socket.
constexpr const char *kQuietSuffix = ".quiet";
// The knock socket, <socket>.knock (a datagram socket): where a process
// whose connect() to the socket timed out (its queue full until the
// process's deadline: a burst of starts, or a daemon that stopped reading)
// leaves one datagram, never waiting, so that the daemon can name it in the
// sessions it would have joined (docs/control-protocol.md, "A process that
// cannot connect").  The payload: magic u32 ("STKN"), flags u32 (bit 0: it
// catches the update signal; bits 8-15: which, 0 from an older library),
// comm (16 bytes, NUL-padded); the daemon takes the pid and uid from the
// datagram's credentials (SO_PASSCRED), never from the payload, and signals
// a process that catches the signal it names to ask again.
constexpr const char *kKnockSuffix = ".knock";
constexpr uint32_t kKnockMagic = 0x4e4b5453u; // "STKN"
constexpr uint32_t kKnockAsync = 1u;          // flags: it catches the update signal
constexpr unsigned kKnockSignoShift = 8;      // flags: the signal's number, 8 bits
constexpr size_t kKnockSize = 24;
struct Register {
	uint32_t pid = 0, uid = 0;
	uint32_t abi_major = 0, abi_minor = 0;
	uint32_t flags = 0; // kRegister* flags
	uint32_t signo = 0; // with kRegisterAsync: the signal to send, 1..64
	std::string comm;
	std::vector<EventName> events; // tracepoints registered so far (for LIST)
	uint64_t table_gen = 0;        // version 4, with kRegisterTable: the table's generation
};
struct SessionGrant {
	uint32_t slot = 0;
	uint64_t session_id = 0; // unique per daemon run: tells a re-grant of a
				 // slot the process already joined from a new session
	ChannelConfig channel;
	uint8_t trace_uuid[16] = {};
	std::vector<Rule> rules;
	// Version 6: the session aggregates these events instead of (or
	// beside) recording its rules' ("" none), under this field filter.
	std::string aggregate{};
	std::string agg_filter{};
};
struct RegisterReply {
	std::vector<SessionGrant> sessions;
};
// Sent by the process per granted slot; when status == 0 the memfd travels
// with it as SCM_RIGHTS ancillary data.  Answered by a Reply.
struct Buffer {
	uint32_t slot = 0;
	int32_t status = 0;      // 0 or the negative errno of strata_rt_slot_open
	uint64_t session_id = 0; // version 4: the session joined (from the grant table), 0: unsaid
};
struct Create {
	std::string session;
	std::string output_dir; // absolute
	ChannelConfig channel;
	// Version 3: "HOST[:CTRL[:DATA]]" of an lttng-relayd to stream to ("":
	// local disk), and the hostname the relay files the trace under ("":
	// the daemon's).
	std::string relay{};
	std::string hostname{};
	// Version 5: kCreate* flags.
	uint32_t flags = 0;
	// Version 6: an aggregation session (SessionGrant.aggregate).
	std::string aggregate{};
	std::string agg_filter{};
};
// CREATE flag: when the connection that sent this CREATE closes (its
// controller exited, was killed, or closed it), the daemon stops the
// session, completes its trace and destroys it.
constexpr uint32_t kCreateOwned = 1;
// CREATE flag (version 10): only the process that sent this CREATE (the
// connection's SO_PEERCRED pid) and its descendants join the session,
// checked by the daemon when a process registers and when it hands over a
// buffer (docs/control-protocol.md, "Process-tree sessions").
constexpr uint32_t kCreateTree = 2;
struct EnableEvent {
	std::string session;
	Rule rule;
};
struct DisableEvent {
	std::string session;
	Rule rule;
};
struct Start {
	std::string session;
};
struct Stop {
	std::string session;
};
struct Destroy {
	std::string session;
};
struct List {};
// ListEntry.probes (version 7): what the daemon knows of the process's
// probe report.  A reply below version 7 carries none: read as kProbesUnknown.
constexpr uint32_t kProbesNone = 0;    // it tells its report (version 7) and has none
constexpr uint32_t kProbesMarked = 1;  // it said it has one (kRegisterProbes)
constexpr uint32_t kProbesUnknown = 2; // an older libstrata, or an older table: read to know
struct ListEntry {
	uint32_t pid = 0;
	std::string comm;
	std::string event;
	uint32_t loglevel = 0;
	uint32_t probes = kProbesUnknown; // version 7
};
struct ListReply {
	std::vector<ListEntry> entries;
};
struct Status {
	std::string session;
}; // "" = all visible sessions
enum class SessionState : uint32_t { Created = 0, Active = 1, Stopped = 2 };
struct SessionStatus {
	std::string name;
	uint32_t slot = 0;
	uint32_t state = 0; // enum SessionState
	uint32_t uid = 0;
	std::string output_dir;
	ChannelConfig channel;
	std::vector<Rule> rules;
	uint32_t n_buffers = 0; // traced buffers attached so far
	uint64_t packets = 0;   // packets written
	uint64_t bytes = 0;
	uint64_t errors = 0; // packets rejected by the reader, or not stored/sent
	// Version 3: where a relay session streams and whether its link is
	// down (why); "" for a disk session.
	std::string relay{};
	// Version 5: what went wrong with the session's producers, one line
	// each ("process NAME (pid N): ..."); "" when nothing did.
	std::string problems{};
	// Version 5: processes that registered while the session was active
	// and that its rules target, and the events they declared (at most
	// kMaxDeclared names, sorted): what `record` tells when nothing was
	// recorded.
	uint32_t joined = 0;
	std::vector<std::string> declared{};
	// Version 6: the session's aggregation ("" none) and its filter, and
	// the regions the daemon holds (processes that handed one over).
	std::string aggregate{};
	std::string agg_filter{};
	uint32_t agg_regions = 0;
	// Version 9: the daemon's clock links to other machines (docs/clocks.md),
	// one line each ("" none): state, probes, minimum RTT, bound width.
	std::string clocks{};
};
constexpr uint32_t kMaxDeclared = 256;
struct StatusReply {
	std::vector<SessionStatus> sessions;
	// Version 10: the daemon's clock links, as each session's clocks.
	std::string clocks{};
};
struct Reply {
	int32_t status = 0; // 0 ok, else a negative errno
	std::string text;
};
// Version 2: answer once every process signalled about the changes this
// connection made since its previous WAIT has acknowledged them (REPLY 0),
// or after timeout_ms (REPLY -ETIMEDOUT naming the processes that did not).
struct Wait {
	uint32_t timeout_ms = 1000; // 1..kMaxWaitMs
};
// Version 2: ENABLE_EVENT/DISABLE_EVENT (rule.enable) for chosen processes:
// the rule applies to processes whose pid is in `pids` or whose comm is in
// `names` (both empty: every process of the session's user).
struct TargetRule {
	std::string session;
	Rule rule;
	std::vector<uint32_t> pids;
	std::vector<std::string> names;
};

// Version 2: write the current content of an overwrite-mode session's
// buffers to a new trace directory, without stopping anything (REPLY 0 with
// the directory in its text).  output_dir: absolute, must not exist yet;
// empty: the daemon names it "<session output>-snapshot-<UTC time>".
struct Snapshot {
	std::string session;
	std::string output_dir;
};

// Version 2: the session takes a snapshot by itself (as SNAPSHOT with no
// directory) each time an event matching `pattern` is recorded, at most one
// per `holdoff_ms`; `off`: no more (pattern ignored).  Overwrite mode only.
// REPLY 0 says what was set.
constexpr uint32_t kMaxHoldoffMs = 86400000;
struct SnapshotOn {
	std::string session;
	std::string pattern; // "provider:event" glob with '*', as Rule
	uint32_t holdoff_ms = 1000;
	uint32_t off = 0;
};

// Version 6, process: the aggregation region (libtrace/agg_layout.h) the
// process opened for the session granted at `slot`; its memfd travels as
// SCM_RIGHTS (a message without one is refused).  Answered by REPLY.
struct AggRegion {
	uint32_t slot = 0;
	uint64_t session_id = 0;
};
// Version 6, controller: the index-th region the daemon holds for the
// session's current run (0, 1, ... in the order they arrived).  Answered by
// REPLY {0, "PID ALIVE COMM"} with a read-only descriptor of the region as
// SCM_RIGHTS, or REPLY {-ENODATA, "N region(s)"} past the last one (-ENOENT: no such session).
struct AggFetch {
	std::string session;
	uint32_t index = 0;
};

using Body = std::variant<std::monostate, Hello, HelloReply, Register, RegisterReply, Buffer, Create,
			  EnableEvent, DisableEvent, Start, Stop, Destroy, List, ListReply, Status,
			  StatusReply, Reply, Wait, TargetRule, Snapshot, SnapshotOn, AggRegion, AggFetch>;
// The variant index is the Type value (index 0 is "no message").
static_assert(std::variant_size<Body>::value == kTypeMax + 1, "one alternative per type");

struct Message {
	uint32_t seq = 0;
	Body body;
	uint16_t version = kVersion; // of the header: the connection's negotiated one
	Type type() const { return static_cast<Type>(body.index()); }
};

struct DecodeResult {
	Error error = Error::None;
	std::string text;
	explicit operator bool() const { return error == Error::None; }
};

// Encode header + payload.  Throws nothing; an empty body encodes nothing.
std::vector<uint8_t> encode(const Message &m);

// Check a 16-byte header: magic, version (any for HELLO), type, length.
DecodeResult decode_header(const uint8_t *p, size_t n, Header &h);
// Decode one complete message (header + exactly `length` payload bytes).
DecodeResult decode(const uint8_t *p, size_t n, Message &out);

// Range checks shared by encoder users and the daemon.
bool valid_channel(const ChannelConfig &c, std::string &why);
bool valid_session_name(const std::string &s);

} // namespace proto
} // namespace strata
#endif
