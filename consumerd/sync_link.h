/*
 * sync_link.h - the daemon's clock links to other machines' daemons
 * (docs/clocks.md): periodic trains of timestamp exchanges over a byte
 * stream, the map between the two trace clocks with its bound
 * (libtrace/clocksync), and what is written with a session's trace.
 *
 * Roles.  `--sync NAME=SPEC` makes this daemon the follower of the link
 * (a guest): its traces are put onto the peer's clock (the estimator maps
 * this clock onto the peer's; at each stop the session's metadata clock
 * blocks are rewritten onto it).  `--sync-guest NAME=SPEC` makes it the
 * reference (the host): it maps the peer's clock onto its own, shows it in
 * `strata status` and stores it in clocks.json.  Both ends probe and
 * answer alike; only what they store differs.
 *
 * Contract:
 *   - each SyncLink owns one thread (started by start(), stopped and joined
 *     by the destructor) that alone touches the link's descriptors;
 *   - everything the main thread reads (status_line, record, ctf_clock) is
 *     under the link's mutex, held by the thread only to update its state,
 *     never across a system call;
 *   - stamps are the daemon's trace clock (consumer_page_now(): the clock
 *     page its processes use, else CLOCK_MONOTONIC), a send stamp taken
 *     before the write, a receive stamp after the read returns, so that
 *     each message's constraint holds whatever the delays;
 *   - every byte from the peer is untrusted: frames have a magic, a
 *     version and a bounded length; garbage is skipped byte by byte and
 *     counted; a peer's clock is believed only as message constraints.
 */
#ifndef STRATA_CONSUMERD_SYNC_LINK_H
#define STRATA_CONSUMERD_SYNC_LINK_H

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <sys/types.h>
#include <thread>
#include <vector>

#include "clocks_file.h"
#include "clocksync.h"
#include "metadata.h"
#include "sync_kvm.h"
#include "sync_rate.h"
#include "trace_split.h"

namespace strata {
class RelayLink;
class SerialLink;
namespace daemon_impl {

struct SyncSpec {
	enum class Kind { Device, Unix, ListenUnix, Tcp, ListenTcp, Vsock, ListenVsock };
	std::string name; // the peer, as this side names it
	bool follower = false;
	Kind kind = Kind::Unix;
	std::string path;  // Device, Unix, ListenUnix
	std::string host;  // Tcp, ListenTcp (address to bind)
	uint32_t port = 0; // Tcp, ListenTcp, Vsock, ListenVsock
	uint32_t cid = 0;  // Vsock
	long kvm_pid = 0;  // reference: ",kvm=PID", the guest's qemu (sync_kvm.h)
	// Wait for this end's probe's answer by polling rather than sleeping
	// (",spin=on|off"; on by default for a follower's virtio: and vsock:
	// links, the guest's end): a vCPU that halts while the answer is in
	// flight adds its wake-up to the answer's leg (docs/clocks.md, "Spin").
	bool spin = false;
	std::string text; // SPEC as given
};

// "NAME=SPEC", SPEC one of virtio:PATH (a character device), unix:PATH,
// listen:unix:PATH, tcp:HOST:PORT, listen:tcp:ADDR:PORT, vsock:CID:PORT,
// listen:vsock:PORT; on the reference's side (a guest's host) ",kvm=PID" may
// follow: the guest's qemu process, whose KVM facts are checked; on either
// side ",spin=on" or ",spin=off" (SyncSpec::spin).  False with *err.
bool parse_sync(const std::string &arg, bool follower, SyncSpec *out, std::string *err);

// The frame on the wire (little-endian): magic, version, type, length,
// seq, three stamps and an aux word; HELLO adds "hostname\0boot_id\0".
constexpr uint32_t kSyncMagic = 0x434e5953; // "SYNC"
constexpr uint8_t kSyncVersion = 1;
constexpr size_t kSyncHeader = 48;
constexpr size_t kSyncMaxFrame = 512;
// RESULT: the whole of a probe told back to its answerer (aux: the initiator's
// receive stamp), so that both ends' maps use every probe.
// TSC: the sender's clock page as a line (t1: a TSC value, t2: the page's
// ns there, aux: ns per cycle x 2^32), about once a second from a follower
// with a page, for the host's check of KVM's facts.
enum SyncType : uint8_t { kSyncHello = 1, kSyncPing = 2, kSyncPong = 3, kSyncResult = 4, kSyncTsc = 5 };
struct SyncFrame {
	uint8_t type = 0;
	uint32_t seq = 0;
	int64_t t1 = 0, t2 = 0, t3 = 0;
	int64_t aux = 0; // HELLO: REALTIME - MONOTONIC of the sender (ns); its nonce in seq
	std::string hostname, boot_id;
};
std::vector<uint8_t> encode_sync(const SyncFrame &f);
// One frame from the front of buf[0..n): its length (consumed), 0 if more
// bytes are needed, -1 if the first byte cannot start a frame (skip it).
long decode_sync(const uint8_t *buf, size_t n, SyncFrame *f);

// A kernel receive time (REALTIME) put on the trace clock: `now` (the trace
// clock read after REALTIME `rt`) less the data's age.  That carries the
// trace clock's offset from REALTIME now back to the arrival, wrong by a
// step of the trace clock between them (a written TSC; the tests' step):
// data that came before a step and was read after it would be stamped as
// if it came after.  So each call notes the offset; one that changed by
// more than kJumpNs since the last call marks a jump somewhere between
// them, and data that arrived before this call's REALTIME takes `now` (late
// by its age: a late receive weakens a constraint, never breaks it).  Also
// `now` for an age below 0 or over a second (REALTIME stepped).  Per link,
// its thread only.
class KernelStamps {
public:
	static constexpr int64_t kJumpNs = 1000000; // 1 ms: far above two clock reads' skew
	int64_t stamp(int64_t kernel_rt, int64_t rt, int64_t now);

private:
	bool have_ = false;
	int64_t offset_ = 0;          // now - rt at the last call
	int64_t jump_rt_ = INT64_MIN; // REALTIME of the last call that saw a jump
};

class SyncLink {
public:
	using Clock = uint64_t (*)();
	// hostname, boot id and REALTIME - MONOTONIC: this machine's, sent in
	// HELLO.  period_ns: --sync-period, 0 for the adaptive rate (sync_rate.h).
	SyncLink(const SyncSpec &spec, const std::string &hostname, const ClockInfo &clock,
		 uint64_t period_ns, Clock now);
	~SyncLink();
	SyncLink(const SyncLink &) = delete;
	SyncLink &operator=(const SyncLink &) = delete;

	bool start(std::string *err);
	const SyncSpec &spec() const { return spec_; }

	// One line for `strata status`.
	std::string status_line() const;
	// What a follower's metadata get at a stop: the longest bounded
	// segment's clock block and env lines (ok false: no bounded map, the
	// clock the local one, the env saying "uncorrelated"), and every piece
	// (trace_split.h).
	struct CtfLines {
		bool ok = false;
		ClockInfo clock;
		std::string env;
		std::vector<CtfPiece> pieces;
	};
	// The link's entry of clocks.json (clocks_file.h; docs/clocks.md,
	// "Stored format"); with `local` and `lines`, also the CTF lines of the
	// same state of the map (the link's thread refines it meanwhile).
	clocksync::ClocksLink record(const ClockInfo *local = nullptr, CtfLines *lines = nullptr) const;
	// Follower: the clock block that puts this machine's trace onto the
	// peer's (the longest bounded segment's line), and the env lines that
	// say so.  False (and env lines saying "uncorrelated") when there is no
	// bounded map.
	bool ctf_clock(const ClockInfo &local, ClockInfo *out, std::string *env_lines) const;

private:
	void run();
	int open_link(std::string *why);
	int connect_tcp(std::string *why);
	int accept_peer(std::string *why);
	void serve(int fd);
	struct Serve;
	bool probe(Serve &sv, int64_t t);
	bool drain(Serve &sv); // false: the link ended
	bool send_ping(Serve &sv);
	bool end_train(Serve &sv); // true: a slow probe in it, probe now
	void end_spin(Serve &sv);
	void late_answer(Serve &sv, const SyncFrame &f, int64_t t_recv);
	// ours: this end's probe, as take_probe's
	bool late_fits(bool ours, int64_t t1, int64_t t2, int64_t t3, int64_t t4) const; // mu_ held
	bool fresh_result(const Serve &sv, const SyncFrame &f) const;                    // mu_ held
	int wait_ms(Serve &sv);
	bool read_frames(Serve &sv);
	bool on_frame(Serve &sv, const SyncFrame &f, int64_t t_recv); // true: probe now
	bool take_probe(int64_t t1, int64_t t2, int64_t t3, int64_t t4, bool ours);
	void step_seen(const char *what);
	void silence_over(int64_t t);
	int64_t longest_silence() const; // mu_ held: the longest so far, one still going included
	bool send_second(int fd);
	void rate_update(int64_t t);     // after a probe: the next period, the target said
	std::string stuck_words() const; // mu_ held: why the bound stays above its target
	int64_t spin_cap() const;        // how long this end polls for a ping's answer
	int64_t train_spin_cap() const;  // and for a whole train's
	std::string kvm_checked() const; // mu_ held: the summary after a fresh check
	bool ctf_clock_of(const std::vector<clocksync::Segment> &segs, const ClockInfo &local, ClockInfo *out,
			  std::string *env) const; // mu_ held
	std::vector<CtfPiece> ctf_pieces_of(const std::vector<clocksync::Segment> &segs,
					    const ClockInfo &local) const; // mu_ held
	MapNames names() const;                                            // mu_ held
	// stamp (PING, PONG): the send stamp taken last before the write and
	// put in the frame (t1, t3), and here.
	bool send_frame(int fd, const SyncFrame &f, int64_t *stamp = nullptr);
	bool sleep_ns(uint64_t ns); // false: stop asked
	ssize_t read_stamped(int fd, uint8_t *buf, size_t len, int64_t *t_recv);
	KernelStamps kstamps_; // read_stamped's: the link's thread only

	const SyncSpec spec_;
	const std::string hostname_;
	const ClockInfo clock_;
	const Clock now_;
	const uint64_t nonce_;
	int stop_fd_ = -1;   // eventfd: the destructor's stop
	int listen_fd_ = -1; // listen: kinds
	std::thread thread_;
	std::atomic<bool> stop_{false}; // relaxed: stop_fd_'s wake-up orders it

	mutable std::mutex mu_; // guards everything below
	clocksync::Estimator est_;
	std::unique_ptr<KvmWatch> kvm_; // reference with kvm=PID
	clocksync::TscLine peer_page_;  // the peer's clock page (kSyncTsc)
	bool have_peer_page_ = false;
	std::string state_ = "starting";
	std::string peer_hostname_, peer_boot_id_;
	int64_t peer_offset_ns_ = 0;
	uint64_t peer_nonce_ = 0;
	uint64_t probes_ = 0, answered_ = 0, used_ = 0, garbage_ = 0, dropped_ = 0;
	int64_t min_rtt_ = -1;
	uint64_t late_ = 0; // answers to pings replaced meanwhile (late_answer)
	uint64_t breaks_ = 0;
	// Silences: no answer for the lost time (probe()); since when (0: none
	// now; written by the thread, under the mutex), how many, the longest.
	int64_t silent_since_ = 0, longest_silence_ = 0;
	uint64_t silences_ = 0;
	uint64_t stale_ = 0;         // exchanges from before the latest break, not fitting: dropped
	uint64_t kernel_stamps_ = 0; // receives stamped by the kernel (SO_TIMESTAMPNS)
	int64_t spun_ns_ = 0;        // CPU spent polling for answers (SyncSpec::spin)
	// Answers to this end's probes: the least wait from send to answer
	// (the peer's turnaround included: what a spin must cover), and how
	// many came while this end spun, of those it spun for.
	int64_t min_wait_ = -1;
	uint64_t spun_for_ = 0, caught_ = 0;
	ProbeRate rate_;
	std::string stuck_; // the words said when the bound could not reach its target
	// The ping in flight (of a train: serve()'s state): its seq and send
	// stamp, and since when pings have gone unanswered (thread only).
	uint32_t next_seq_ = 1, out_seq_ = 0;
	int64_t out_t1_ = 0, out_since_ = 0;
};

// Every link of the daemon, and what a session's stop does with them.
class SyncLinks {
public:
	void add(std::unique_ptr<SyncLink> l) { links_.push_back(std::move(l)); }
	bool empty() const { return links_.empty(); }
	// Lines, each ending in \n ("" with no link).
	std::string status() const;
	// A disk session stopped (its drains done): clocks.json written in
	// `out`, and with a follower link every metadata file under `out`
	// rewritten onto the peer's clock.  Problems are logged, never fatal.
	void session_stopped(const std::string &out, const ClockInfo &clock,
			     const std::string &hostname) const;
	// Relayed sessions (docs/clocks.md, "Relayed followers").  A follower's
	// relay link keeps its metadata texts; each goes out first with these
	// env lines (its clock is this machine's until the session ends).
	bool follows() const;
	std::string relay_pending_env() const;
	// The session goes with its relay link, its drains ended: with a
	// follower link every kept metadata text sent again onto the peer's
	// clock, then clocks.json beside the sub-traces.  Problems are logged.
	void relay_ending(RelayLink &link, const ClockInfo &clock, const std::string &hostname) const;
	// Serial sessions (docs/clocks.md, "Serial followers").  Opening: with
	// a follower link, each sub-trace's first metadata goes out saying
	// its clock is this machine's until a stop.  Stopped (its drains
	// ended): clocks.json for the received trace's top and, with a
	// follower link, every sub-trace's metadata rewritten onto the peer's
	// clock, sent on the line.  Problems are logged.
	void serial_opened(SerialLink &line) const;
	void serial_stopped(SerialLink &line, const ClockInfo &clock, const std::string &hostname) const;

private:
	// What a session's end writes: clocks.json's text, and with a follower
	// link the clock and env lines its metadata get (the peer's clock when
	// it has a map, else this one's, said "uncorrelated").
	struct Written {
		std::string json;
		const SyncLink *follow = nullptr;
		ClockInfo clock;
		std::string env;
		std::vector<CtfPiece> pieces; // of the same map as json
	};
	Written clocks_written(const ClockInfo &clock, const std::string &hostname) const;

	std::vector<std::unique_ptr<SyncLink>> links_;
};

} // namespace daemon_impl
} // namespace strata
#endif
