// sync_link.cpp - a clock link's protocol: its thread, connection, probes
// and answers, each exchange fed to the estimator; see sync_link.h and
// docs/clocks.md.  The spec and the frames: sync_wire.cpp; what the map
// becomes (status, clocks.json, CTF clocks, the split at a stop):
// sync_map.cpp.
#include "sync_link.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>
#if __has_include(<linux/vm_sockets.h>)
#include <linux/vm_sockets.h>
#endif

#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstring>
#include <random>

#include "clock_page.h"
#include "log.h"

namespace strata {
namespace daemon_impl {
namespace {

// No answer for this long (or kLostPeriods probe periods, if longer): the
// link is silent (a paused VM, a starved peer, a cut cable), said in its
// state and counted.  A silence starts no segment by itself: the first
// answers after it fit the current segment or show the step (take_probe).
constexpr int64_t kLostNs = 2000000000;
constexpr int kLostPeriods = 5;
// A probe unanswered for this many periods is replaced by a new one.
constexpr int kReprobePeriods = 3;
// Pings a probe train (docs/clocks.md, "Trains"): each sent when the
// previous one's answer arrives, while the path it took is still awake.
constexpr int kTrainLen = 4;
// Pings replaced unanswered whose answers are still taken (late_answer).
constexpr int kLateKeep = 8;
// Answers to the peer's pings remembered for its RESULTs (Serve::pongs): a
// train's 4 and the replaced pings', with room to spare.
constexpr int kPongKeep = 32;
// drain()'s reads (4 KiB each) at most, before a link is declared lost.
constexpr int kDrainReads = 16;
// A probe whose round trip exceeds this multiple of the least one seen (plus
// kRttSlackNs) is not fed to the estimator: it is valid but loose, and the
// hulls would drop it anyway (docs/clocks.md, "RTT filter").
constexpr int64_t kRttFactor = 4;
constexpr int64_t kRttSlackNs = 50000;

// The calling thread's CPU time.
int64_t thread_cpu_ns()
{
	timespec ts{};
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

// A connect that gives up after a second (SO_SNDTIMEO bounds connect on
// Linux): the link's thread must notice a stop, and an unreachable peer
// is tried again anyway.
void bounded_connect(int fd)
{
	const timeval tv{1, 0};
	if (fd >= 0)
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

} // namespace

SyncLink::SyncLink(const SyncSpec &spec, const std::string &hostname, const ClockInfo &clock,
		   uint64_t period_ns, Clock now)
    : spec_(spec), hostname_(hostname), clock_(clock), now_(now),
      nonce_(std::random_device()() | static_cast<uint64_t>(std::random_device()()) << 32 | 1),
      rate_(static_cast<int64_t>(period_ns))
{
	if (spec.kvm_pid)
		kvm_ = std::make_unique<KvmWatch>(spec.kvm_pid);
}

SyncLink::~SyncLink()
{
	if (thread_.joinable()) {
		stop_.store(true, std::memory_order_relaxed);
		const uint64_t one = 1;
		if (write(stop_fd_, &one, sizeof one) < 0) {
			// The eventfd cannot be full after one write: nothing to do.
		}
		thread_.join();
	}
	if (stop_fd_ >= 0)
		close(stop_fd_);
	if (listen_fd_ >= 0)
		close(listen_fd_);
	if (spec_.kind == SyncSpec::Kind::ListenUnix)
		unlink(spec_.path.c_str());
}

bool SyncLink::start(std::string *err)
{
	stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (stop_fd_ < 0) {
		*err = std::string("eventfd: ") + strerror(errno);
		return false;
	}
	// A listening end listens now, so that its error is the daemon's.
	if (spec_.kind == SyncSpec::Kind::ListenUnix) {
		listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		sockaddr_un a{};
		a.sun_family = AF_UNIX;
		memcpy(a.sun_path, spec_.path.c_str(), spec_.path.size() + 1);
		unlink(spec_.path.c_str());
		if (listen_fd_ < 0 || bind(listen_fd_, reinterpret_cast<sockaddr *>(&a), sizeof a) < 0 ||
		    listen(listen_fd_, 1) < 0) {
			*err = "listen on " + spec_.path + ": " + strerror(errno);
			return false;
		}
	} else if (spec_.kind == SyncSpec::Kind::ListenTcp) {
		addrinfo hints{}, *res = nullptr;
		hints.ai_socktype = SOCK_STREAM;
		hints.ai_flags = AI_PASSIVE;
		const std::string port = std::to_string(spec_.port);
		const int g = getaddrinfo(spec_.host.empty() ? nullptr : spec_.host.c_str(), port.c_str(),
					  &hints, &res);
		if (g != 0) {
			*err = "tcp address " + spec_.host + ": " + gai_strerror(g);
			return false;
		}
		listen_fd_ = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		const int one = 1;
		if (listen_fd_ >= 0)
			setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		const bool ok = listen_fd_ >= 0 && bind(listen_fd_, res->ai_addr, res->ai_addrlen) == 0 &&
				listen(listen_fd_, 1) == 0;
		const int e = errno;
		freeaddrinfo(res);
		if (!ok) {
			*err = "listen on tcp " + spec_.host + ":" + port + ": " + strerror(e);
			return false;
		}
	} else if (spec_.kind == SyncSpec::Kind::ListenVsock) {
#ifdef AF_VSOCK
		listen_fd_ = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
		sockaddr_vm a{};
		a.svm_family = AF_VSOCK;
		a.svm_cid = VMADDR_CID_ANY;
		a.svm_port = spec_.port;
		if (listen_fd_ < 0 || bind(listen_fd_, reinterpret_cast<sockaddr *>(&a), sizeof a) < 0 ||
		    listen(listen_fd_, 1) < 0) {
			*err = std::string("listen on vsock: ") + strerror(errno);
			return false;
		}
#else
		*err = "vsock is not available in this build";
		return false;
#endif
	}
	thread_ = std::thread([this] { run(); });
	return true;
}

bool SyncLink::sleep_ns(uint64_t ns)
{
	pollfd p{stop_fd_, POLLIN, 0};
	poll(&p, 1, static_cast<int>(ns / 1000000));
	return !stop_.load(std::memory_order_relaxed);
}

// open_link()'s TCP: the first of the host's addresses that connects
// (each within bounded_connect's bound), without Nagle's delay.
int SyncLink::connect_tcp(std::string *why)
{
	int fd = -1;
	addrinfo hints{}, *res = nullptr;
	hints.ai_socktype = SOCK_STREAM;
	const std::string port = std::to_string(spec_.port);
	const int g = getaddrinfo(spec_.host.c_str(), port.c_str(), &hints, &res);
	if (g != 0) {
		*why = spec_.host + ": " + gai_strerror(g);
		return -1;
	}
	for (addrinfo *r = res; r; r = r->ai_next) {
		fd = socket(r->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		bounded_connect(fd);
		if (fd >= 0 && connect(fd, r->ai_addr, r->ai_addrlen) == 0)
			break;
		*why = "connect to " + spec_.host + ":" + port + ": " + strerror(errno);
		if (fd >= 0)
			close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0)
		return -1;
	const int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	return fd;
}

// open_link()'s listening kinds: the peer accepted when it connects
// within a second (the caller waits and retries).
int SyncLink::accept_peer(std::string *why)
{
	pollfd p[2] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
	if (poll(p, 2, 1000) <= 0 || !(p[0].revents & POLLIN)) {
		*why = "waiting for the peer to connect";
		return -1;
	}
	const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
	if (fd < 0) {
		*why = std::string("accept: ") + strerror(errno);
		return -1;
	}
	if (spec_.kind == SyncSpec::Kind::ListenTcp) {
		const int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	}
	return fd;
}

// A connected descriptor, or -1 with *why (the caller waits and retries).
int SyncLink::open_link(std::string *why)
{
	int fd = -1;
	switch (spec_.kind) {
	case SyncSpec::Kind::Device:
		fd = open(spec_.path.c_str(), O_RDWR | O_NOCTTY | O_CLOEXEC | O_NONBLOCK);
		if (fd < 0)
			*why = "open " + spec_.path + ": " + strerror(errno);
		return fd;
	case SyncSpec::Kind::Unix: {
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		sockaddr_un a{};
		a.sun_family = AF_UNIX;
		memcpy(a.sun_path, spec_.path.c_str(), spec_.path.size() + 1);
		if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0)
			break;
		*why = "connect to " + spec_.path + ": " + strerror(errno);
		if (fd >= 0)
			close(fd);
		return -1;
	}
	case SyncSpec::Kind::Tcp:
		fd = connect_tcp(why);
		if (fd < 0)
			return -1;
		break;
	case SyncSpec::Kind::Vsock: {
#ifdef AF_VSOCK
		fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
		bounded_connect(fd);
		sockaddr_vm a{};
		a.svm_family = AF_VSOCK;
		a.svm_cid = spec_.cid;
		a.svm_port = spec_.port;
		if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0)
			break;
		*why = std::string("vsock connect: ") + strerror(errno);
		if (fd >= 0)
			close(fd);
		return -1;
#else
		*why = "vsock is not available in this build";
		return -1;
#endif
	}
	case SyncSpec::Kind::ListenUnix:
	case SyncSpec::Kind::ListenTcp:
	case SyncSpec::Kind::ListenVsock:
		fd = accept_peer(why);
		if (fd < 0)
			return -1;
		break;
	}
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	return fd;
}

void SyncLink::run()
{
	bool was_up = false;
	while (!stop_.load(std::memory_order_relaxed)) {
		std::string why;
		const int fd = open_link(&why);
		if (fd < 0) {
			{
				std::lock_guard<std::mutex> g(mu_);
				state_ = (was_up ? "lost (" : "connecting (") + why + ")";
			}
			if (!sleep_ns(200000000))
				break;
			continue;
		}
		{
			std::lock_guard<std::mutex> g(mu_);
			state_ = "connected, waiting for the peer's hello";
		}
		serve(fd);
		close(fd);
		was_up = true;
		std::lock_guard<std::mutex> g(mu_);
		est_.break_segment(clocksync::Start::LinkLost, "link closed");
		breaks_++;
	}
}

bool SyncLink::send_frame(int fd, const SyncFrame &f, int64_t *stamp)
{
	std::vector<uint8_t> b = encode_sync(f);
	if (stamp) {
		// The send stamp last, right before the write: PING's t1,
		// PONG's t3 (the header's bytes 16 and 32, little-endian).
		*stamp = static_cast<int64_t>(now_());
		const size_t at = f.type == kSyncPing ? 16 : 32;
		for (size_t i = 0; i < 8; i++)
			b[at + i] = static_cast<uint8_t>(static_cast<uint64_t>(*stamp) >> (8 * i));
	}
	// A socket's peer gone is an error here, never a SIGPIPE (the link
	// may run in a process that does not ignore it: the unit tests); a
	// virtio port or a serial line is not a socket.
	ssize_t n = send(fd, b.data(), b.size(), MSG_NOSIGNAL);
	if (n < 0 && errno == ENOTSOCK)
		n = write(fd, b.data(), b.size());
	if (n == static_cast<ssize_t>(b.size()))
		return true;
	// A full pipe drops the frame (a probe lost is a probe not made); a
	// partial write would desynchronise the peer, which skips to the next
	// magic.
	std::lock_guard<std::mutex> g(mu_);
	dropped_++;
	return n >= 0 || errno == EAGAIN || errno == EWOULDBLOCK;
}

// serve()'s state: the timers of what it sends, the frames read so far.
struct SyncLink::Serve {
	int fd;
	bool device; // a virtio port or a serial line, not a socket
	int64_t lost_ns;
	std::vector<uint8_t> in;
	bool hello_seen = false;
	int64_t next_probe, next_hello, last_quick = 0;
	int64_t next_second; // the page's line sent, KVM's facts read
	// Polling for our probe's answer (SyncSpec::spin): until when, and this
	// thread's CPU time when it began (the status reports CPU, not the
	// time a preempted spin spent off the CPU).
	int64_t spin_cpu0 = 0, spin_until = 0;
	// The train under way: pings still to send (each when the previous
	// answer arrives), the exchanges answered so far (fed to the
	// estimator and told to the peer at its end, so that nothing but the
	// next ping's write lies between an answer's read and that write),
	// whether it spins and until when at the latest.
	struct Answered {
		uint32_t seq;
		int64_t t1, t2, t3, t4;
		bool caught; // came while this end spun for it
		bool late;   // late_answer's
		bool unfit;  // late, and not late_fits: neither fed nor told
	};
	int train_left = 0, train_n = 0;
	Answered train[kTrainLen + kLateKeep];
	// The latest pings replaced unanswered (kReprobePeriods): an answer to
	// one is late, not wrong (late_answer).
	struct Replaced {
		uint32_t seq; // 0: answered, or none
		int64_t t1;
	};
	Replaced replaced[kLateKeep] = {};
	unsigned replaced_n = 0;
	// Our latest answers to the peer's pings: the send stamp (t3) and the
	// count of segment breaks then.  The peer's RESULT for that probe
	// comes at its train's end, after this end may have seen a step; a
	// probe answered before the latest break is stale (fresh_result).
	struct Pong {
		int64_t t3;
		uint64_t breaks;
	};
	Pong pongs[kPongKeep] = {};
	unsigned pongs_n = 0;
	bool train_spin = false;
	int64_t train_spin_end = 0;
};

void SyncLink::serve(int fd)
{
	Serve sv;
	sv.fd = fd;
	sv.device = spec_.kind == SyncSpec::Kind::Device;
	sv.lost_ns = std::max<int64_t>(kLostNs, kLostPeriods * rate_.period());
	sv.next_probe = sv.next_hello = sv.next_second = static_cast<int64_t>(now_());
	out_seq_ = 0;
	if (!sv.device) {
		const int one = 1; // the kernel's receive times (read_stamped)
		setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
	}
	while (!stop_.load(std::memory_order_relaxed)) {
		const int64_t t = static_cast<int64_t>(now_());
		if (t >= sv.next_hello && !sv.hello_seen) {
			SyncFrame h;
			h.type = kSyncHello;
			h.seq = static_cast<uint32_t>(nonce_);
			h.aux = clock_.offset_s * 1000000000LL + clock_.offset_ns;
			h.hostname = hostname_;
			h.boot_id = clock_.uuid;
			h.t1 = static_cast<int64_t>(nonce_ >> 32);
			if (!send_frame(fd, h))
				return;
			sv.next_hello = t + 1000000000;
		}
		if (t >= sv.next_second && sv.hello_seen) {
			sv.next_second = t + 1000000000;
			if (!send_second(fd))
				return;
		}
		if (t >= sv.next_probe && !probe(sv, t))
			return;
		const int ms = wait_ms(sv);
		if (ms == 0 && sv.spin_until && sv.device) {
			// Spinning on a character device: read at once, so that
			// no poll lies between the answer's arrival and its stamp.
			if (!read_frames(sv))
				return;
			continue;
		}
		pollfd p[2] = {{fd, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
		if (poll(p, 2, ms) < 0 && errno != EINTR)
			return;
		if (p[1].revents)
			return;
		if ((p[0].revents & (POLLIN | POLLHUP | POLLERR)) && !read_frames(sv))
			return;
	}
}

// serve()'s probe, due at t: the link declared silent after lost_ns with no
// answer (no segment break: a silence proves no step); a new train unless a
// ping is out (or one unanswered for kReprobePeriods once the peer said
// hello, replaced by a new train: its late answer still taken, what its
// train had answered fed), with its spin; the next one's time.  False: the
// link failed.
bool SyncLink::probe(Serve &sv, int64_t t)
{
	if (out_seq_ && t - out_since_ > sv.lost_ns && !drain(sv))
		return false;
	if (out_seq_ && t - out_since_ > sv.lost_ns) {
		end_train(sv); // what was answered before counts
		std::lock_guard<std::mutex> g(mu_);
		if (!silent_since_) {
			silent_since_ = out_since_;
			silences_++;
			logf("clock link %s: no answer for %lld ms (a paused or starved peer, or gone): the "
			     "map goes on if its next answers fit, a new segment if they show a step",
			     spec_.name.c_str(), static_cast<long long>((t - out_since_) / 1000000));
		}
		state_ = "lost (no answer for " + std::to_string((t - silent_since_) / 1000000) + " ms)";
		out_seq_ = 0;
		for (Serve::Replaced &r : sv.replaced)
			r.seq = 0; // a fresh train proves the peer back
	}
	// The rate first: from the ping's write to its answer's read this
	// thread does nothing else (under TCG the estimator's work there can
	// hold an answer that has arrived back from its receive stamp).
	rate_update(t);
	// The peer may be paused, and a ping sent during the pause is the
	// one whose receive, read at the resume, shows the step at once
	// (take_probe).
	const bool fresh = !out_seq_;
	if (fresh || (sv.hello_seen && t - out_t1_ >= kReprobePeriods * rate_.period())) {
		if (!fresh) {
			end_train(sv);
			sv.replaced[sv.replaced_n++ % kLateKeep] = {out_seq_, out_t1_};
		}
		end_spin(sv);
		// Spin only on a live link (the last probe answered): a lost
		// peer costs no CPU.
		sv.train_spin = spec_.spin && fresh && sv.hello_seen;
		if (sv.train_spin)
			sv.spin_cpu0 = thread_cpu_ns();
		sv.train_left = kTrainLen;
		if (!send_ping(sv))
			return false;
	}
	sv.next_probe += rate_.period();
	if (sv.next_probe <= t)
		sv.next_probe = t + rate_.period();
	return true;
}

// Before the link is declared lost, what has arrived is read: this thread,
// off its CPU for lost_ns (a loaded host), wakes to its peer's answers
// waiting unread, and only a peer that said nothing is lost (its answer
// read here is a slow probe, not fed).  At most kDrainReads reads, so a
// peer that floods cannot hold the thread.  False: the link ended.
bool SyncLink::drain(Serve &sv)
{
	for (int i = 0; i < kDrainReads && out_seq_; i++) {
		pollfd p{sv.fd, POLLIN, 0};
		if (poll(&p, 1, 0) <= 0 || (p.revents & (POLLIN | POLLHUP)) != POLLIN)
			return true;
		if (!read_frames(sv))
			return false;
	}
	return true;
}

// The train's next ping, its send stamp last before the write; with the
// train's spin, polled for until its own cap or the train's, whichever
// comes first.  False: the link failed.
bool SyncLink::send_ping(Serve &sv)
{
	SyncFrame p;
	p.type = kSyncPing;
	p.seq = next_seq_++;
	if (!send_frame(sv.fd, p, &p.t1)) // t1 stamped right before the write
		return false;
	if (!out_seq_)
		out_since_ = p.t1;
	out_seq_ = p.seq;
	out_t1_ = p.t1;
	if (sv.train_left-- == kTrainLen)
		sv.train_spin_end = p.t1 + train_spin_cap();
	if (sv.train_spin)
		sv.spin_until = std::min(p.t1 + spin_cap(), sv.train_spin_end);
	std::lock_guard<std::mutex> g(mu_);
	probes_++;
	spun_for_ += sv.train_spin;
	return true;
}

// The train ends (its last answer, a ping replaced, the link lost): each
// answered exchange told to the peer (RESULT, so that both ends' maps use
// every probe) and fed to the estimator.  True if one was slow.
bool SyncLink::end_train(Serve &sv)
{
	bool slow = false;
	{
		std::lock_guard<std::mutex> g(mu_);
		for (int i = 0; i < sv.train_n; i++) {
			Serve::Answered &a = sv.train[i];
			answered_++;
			caught_ += a.caught;
			if (a.t4 >= a.t1 && (min_wait_ < 0 || a.t4 - a.t1 < min_wait_))
				min_wait_ = a.t4 - a.t1;
			if (a.late && !late_fits(true, a.t1, a.t2, a.t3, a.t4))
				a.unfit = true;
			else
				slow |= take_probe(a.t1, a.t2, a.t3, a.t4, true);
		}
	}
	for (int i = 0; i < sv.train_n; i++) {
		const Serve::Answered &a = sv.train[i];
		if (a.unfit)
			continue;
		SyncFrame r;
		r.type = kSyncResult;
		r.seq = a.seq;
		r.t1 = a.t1, r.t2 = a.t2, r.t3 = a.t3;
		r.aux = a.t4;
		send_frame(sv.fd, r);
	}
	sv.train_n = 0;
	sv.train_left = 0;
	return slow;
}

// A late answer's exchange (mu_ held): fed only if it is fast (the RTT
// filter's, when a least round trip is known) and fits the current
// segment.  Its ping was sent up to kLateKeep replacements earlier, so a
// step it saw would begin a segment before exchanges already fed (the
// segments out of time order: measured once in kernel.clock_vm_pause);
// steps are the current ping's to see.
bool SyncLink::late_fits(bool ours, int64_t t1, int64_t t2, int64_t t3, int64_t t4) const
{
	constexpr int64_t kMax = int64_t{1} << 61; // as take_probe's
	for (int64_t t : {t1, t2, t3, t4})
		if (t <= -kMax || t >= kMax)
			return false;
	const int64_t rtt = (t4 - t1) - (t3 - t2);
	if (rtt < 0 || (min_rtt_ >= 0 && rtt > kRttFactor * min_rtt_ + kRttSlackNs))
		return false;
	const bool src = spec_.follower == ours; // as take_probe's
	return !est_.contradicts(src, t1, t2) && !est_.contradicts(!src, t3, t4);
}

// A RESULT (the peer's probe, told at its train's end) may see a step only
// if this end answered the probe after the latest segment break: one
// answered before, told after this end's own probe saw a step, is from the
// old clock and would begin a segment going back, then the next probe one
// going forward again (three breaks for one step, measured under TSan in
// e2e.clock_step_relay).  Such a RESULT is fed only if it fits (late_fits).
// A RESULT whose answer is not among the latest kPongKeep is stale too.
bool SyncLink::fresh_result(const Serve &sv, const SyncFrame &f) const
{
	for (const Serve::Pong &p : sv.pongs)
		if (p.t3 == f.t3 && p.t3 != 0)
			return p.breaks == breaks_;
	return false;
}

// A PONG that answers a ping replaced unanswered (one of the latest
// kLateKeep): the peer is there, only slower than kReprobePeriods periods
// (a loaded host, a TCG guest's halted vCPU, a long path), so the time
// without an answer counts from a later ping, and the exchange is fed with
// the train's if it fits (late_fits).  Ignored, such
// answers left a link whose every answer came that late lost after lost_ns,
// each ping replaced before its answer came.  Anything else (an unknown
// seq, a stamp not ours) is ignored.
void SyncLink::late_answer(Serve &sv, const SyncFrame &f, int64_t t_recv)
{
	for (Serve::Replaced &r : sv.replaced) {
		if (!r.seq || r.seq != f.seq || r.t1 != f.t1)
			continue;
		r.seq = 0;
		if (out_seq_)
			out_since_ = std::max(out_since_, f.t1);
		if (sv.train_n < kTrainLen + kLateKeep)
			sv.train[sv.train_n++] = {f.seq, f.t1, f.t2, f.t3, t_recv, false, true, false};
		std::lock_guard<std::mutex> g(mu_);
		late_++;
		return;
	}
}

// The spin over (its answer, its bound, a new train): its CPU counted.
void SyncLink::end_spin(Serve &sv)
{
	sv.train_spin = false;
	if (!sv.spin_until)
		return;
	sv.spin_until = 0;
	const int64_t spun = thread_cpu_ns() - sv.spin_cpu0; // a system call: outside the lock
	std::lock_guard<std::mutex> g(mu_);
	spun_ns_ += spun;
}

// How long serve()'s poll may sleep: until the next thing to send; 0 while
// spinning for a probe's answer (this CPU, a guest's vCPU, running when it
// comes), the spin's CPU time counted when it ends.
int SyncLink::wait_ms(Serve &sv)
{
	const int64_t wait = std::min(sv.next_probe, sv.hello_seen ? sv.next_second : sv.next_hello) -
			     static_cast<int64_t>(now_());
	int ms = wait <= 0 ? 0 : static_cast<int>((wait + 999999) / 1000000);
	if (sv.spin_until) {
		if (out_seq_ && static_cast<int64_t>(now_()) < sv.spin_until)
			ms = 0;
		else
			end_spin(sv); // the rest of the train, if any, sleeps
	}
	return ms;
}

// What the peer sent, read (with its receive time) and decoded frame by
// frame (garbage skipped a byte at a time, counted).  A slow probe's
// answer sends the next probe now (at most once a period), so that a step
// after a pause or a stall is seen within about one round trip of its end.
// False: the link ended.
bool SyncLink::read_frames(Serve &sv)
{
	uint8_t buf[4096];
	int64_t t_recv = 0;
	const ssize_t n =
		sv.device ? read(sv.fd, buf, sizeof buf) : read_stamped(sv.fd, buf, sizeof buf, &t_recv);
	if (!t_recv)
		t_recv = static_cast<int64_t>(now_()); // after the read
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return true;
	// A virtio port reads 0 while the host end is not connected: wait
	// for it rather than spin.
	if (n <= 0)
		return sv.device && n == 0 && sleep_ns(100000000);
	std::vector<uint8_t> &in = sv.in;
	in.insert(in.end(), buf, buf + n);
	size_t off = 0;
	while (off < in.size()) {
		SyncFrame f;
		const long r = decode_sync(in.data() + off, in.size() - off, &f);
		if (r == 0)
			break;
		if (r < 0) {
			off++;
			std::lock_guard<std::mutex> g(mu_);
			garbage_++;
			continue;
		}
		off += static_cast<size_t>(r);
		if (f.type == kSyncHello)
			sv.hello_seen = true;
		if (silent_since_)
			silence_over(t_recv);
		if (on_frame(sv, f, t_recv) && t_recv - sv.last_quick >= rate_.period()) {
			sv.next_probe = std::min(sv.next_probe, t_recv);
			sv.last_quick = t_recv;
		}
	}
	in.erase(in.begin(), in.begin() + static_cast<long>(off));
	if (in.size() > 2 * kSyncMaxFrame)
		in.clear();
	return true;
}

bool SyncLink::on_frame(Serve &sv, const SyncFrame &f, int64_t t_recv)
{
	const int fd = sv.fd;
	if (f.type == kSyncPing) {
		SyncFrame r;
		r.type = kSyncPong;
		r.seq = f.seq;
		r.t1 = f.t1;
		r.t2 = t_recv;
		send_frame(fd, r, &r.t3); // t3 stamped right before the write
		std::lock_guard<std::mutex> g(mu_);
		sv.pongs[sv.pongs_n++ % kPongKeep] = {r.t3, breaks_};
		return false;
	}
	if (f.type == kSyncPong) {
		// Ours if it answers the ping in flight; the train's next
		// ping goes at once, the exchange kept for the train's end.
		if (f.seq != out_seq_ || f.t1 != out_t1_) {
			late_answer(sv, f, t_recv);
			return false;
		}
		out_seq_ = 0;
		const bool caught = sv.spin_until && t_recv <= sv.spin_until;
		sv.train[sv.train_n++] = {f.seq, f.t1, f.t2, f.t3, t_recv, caught, false, false};
		if (sv.train_left == 0)
			return end_train(sv);
		send_ping(sv); // a write that failed: the next probe's fails too
		return false;
	}
	std::lock_guard<std::mutex> g(mu_);
	if (f.type == kSyncResult) {
		if (fresh_result(sv, f))
			return take_probe(f.t1, f.t2, f.t3, f.aux, false);
		if (late_fits(false, f.t1, f.t2, f.t3, f.aux))
			take_probe(f.t1, f.t2, f.t3, f.aux, false); // fits: starts nothing
		else
			stale_++;
		return false;
	}
	if (f.type == kSyncTsc) {
		// Untrusted: a rate far from any TSC's is not believed.
		const double npc = static_cast<double>(f.aux) / 4294967296.0;
		if (npc > 0.01 && npc < 100) {
			peer_page_ = clocksync::TscLine{static_cast<uint64_t>(f.t1), f.t2, npc};
			have_peer_page_ = true;
		}
		return false;
	}
	// HELLO
	const uint64_t nonce = static_cast<uint64_t>(f.t1) << 32 | f.seq;
	if (peer_nonce_ && nonce != peer_nonce_) {
		est_.break_segment(clocksync::Start::Fault, "the peer's daemon restarted");
		breaks_++;
	}
	if (!peer_boot_id_.empty() && f.boot_id != peer_boot_id_) {
		est_.break_segment(clocksync::Start::Fault, "the peer rebooted");
		breaks_++;
	}
	peer_nonce_ = nonce;
	peer_hostname_ = f.hostname;
	peer_boot_id_ = f.boot_id;
	peer_offset_ns_ = f.aux;
	if (state_.rfind("up", 0) != 0)
		state_ = "up";
	return false;
}

// One probe's four stamps (mu_ held).  `ours`: this end sent at t1 and
// received the answer at t4, the peer received at t2 and answered at t3;
// else the other way round.  True if the probe was slow: a pause or a
// stall may have just ended, and the next probe had better go at once.
bool SyncLink::take_probe(int64_t t1, int64_t t2, int64_t t3, int64_t t4, bool ours)
{
	// Stamps from the peer are untrusted: beyond +-2^61 ns (73 years) no
	// clock reads; within it every difference below fits.
	constexpr int64_t kMax = int64_t{1} << 61;
	for (int64_t t : {t1, t2, t3, t4})
		if (t <= -kMax || t >= kMax)
			return false;
	const int64_t rtt = (t4 - t1) - (t3 - t2);
	if (rtt < 0)
		return false; // cannot be (a clock ran backwards?): not believed
	if (min_rtt_ < 0 || rtt < min_rtt_)
		min_rtt_ = rtt;
	state_ = "up";
	// The map's source is this clock for a follower, the peer's for a
	// reference; the probe's first message is sent by its initiator.
	const bool src = spec_.follower == ours;
	// Exchanges are fed out of time order: a train's at its end, the
	// peer's at its train's end (RESULT).  One begun before the current
	// segment's first message (its earliest target stamp, t2 or t1, lower:
	// the target's clock runs forward) that the segment does not fit is
	// from before that segment's step: fed, it would begin a segment
	// going back and the next probe one going forward again (three breaks
	// for one step, measured under TSan in e2e.clock_step_serial: this
	// end's own exchange answered before the step, fed after the peer's
	// RESULT had shown it).  Dropped and counted.
	if ((src ? t2 : t1) < est_.first_target() &&
	    (est_.contradicts(src, t1, t2) || est_.contradicts(!src, t3, t4))) {
		stale_++;
		return false;
	}
	if (rtt > kRttFactor * min_rtt_ + kRttSlackNs) {
		// A slow probe is not fed: it is loose, and it may straddle a
		// step (its ping sent before a pause, received after) while
		// fitting the old line, which would stretch the old segment
		// past the step.  But a leg that no line of the current
		// segment fits proves a step before its receive: fed, it
		// starts the new segment there.  After a pause that is the
		// first ping the paused end reads (one sent during the pause,
		// see serve()'s re-probe), so the gap ends at the resume
		// rather than a round trip or a period later.
		if (est_.contradicts(src, t1, t2)) {
			est_.add(src, t1, t2);  // starts the new segment
			est_.add(!src, t3, t4); // after the step too
			step_seen("a delayed probe");
		} else if (est_.contradicts(!src, t3, t4)) {
			est_.add(!src, t3, t4);
			step_seen("a delayed probe");
		}
		return true;
	}
	used_++;
	const bool a = est_.add(src, t1, t2);
	const bool b = est_.add(!src, t3, t4);
	if (!a || !b)
		step_seen("a probe");
	return false;
}

// A frame from a silent peer, received at t: the silence is over (its
// length kept for the status and clocks.json).  The map goes on: the next
// exchanges fit it, or no line does and they start a segment (a step).
void SyncLink::silence_over(int64_t t)
{
	std::lock_guard<std::mutex> g(mu_);
	const int64_t len = t - silent_since_;
	longest_silence_ = std::max(longest_silence_, len);
	silent_since_ = 0;
	logf("clock link %s: the peer answers again after %.3f s without an answer", spec_.name.c_str(),
	     static_cast<double>(len) / 1e9);
}

// The longest silence so far, the one going on now included (mu_ held).
int64_t SyncLink::longest_silence() const
{
	return std::max(longest_silence_, silent_since_ ? static_cast<int64_t>(now_()) - silent_since_ : 0);
}

// A step seen by `what`: a new segment began (mu_ held).
void SyncLink::step_seen(const char *what)
{
	breaks_++;
	const std::vector<clocksync::Segment> segs = est_.segments();
	const int64_t gap = segs.size() >= 2 ? segs.back().x_first - segs[segs.size() - 2].x_last : 0;
	logf("clock link %s: no line fits the exchanges any more (a paused VM, a written TSC, a "
	     "stepped clock): the map starts a new segment (seen by %s; %.3f ms of the source's time "
	     "between the segments)",
	     spec_.name.c_str(), what, static_cast<double>(gap) / 1e6);
}

// Once a second with a peer: a follower sends its clock page's line (for
// the host's KVM check); a reference with kvm=PID reads KVM's facts, and a
// change of the guest's TSC offset starts a new segment.  False if the
// link broke.
bool SyncLink::send_second(int fd)
{
	SyncFrame f;
	f.type = kSyncTsc;
	uint64_t tsc0;
	double npc;
	// Both ends read their line: its first reading is its rate's base.
	if (consumer_page_line(&tsc0, &f.t2, &npc) && spec_.follower) {
		f.t1 = static_cast<int64_t>(tsc0);
		f.aux = static_cast<int64_t>(std::llround(npc * 4294967296.0));
		if (!send_frame(fd, f))
			return false;
	}
	if (kvm_) {
		const KvmReading r = kvm_->poll(); // files: outside the lock
		std::lock_guard<std::mutex> g(mu_);
		const std::string change = kvm_->apply(r);
		if (!change.empty()) {
			est_.break_segment(clocksync::Start::Fault, change);
			breaks_++;
			logf("clock link %s: %s: the map starts a new segment", spec_.name.c_str(),
			     change.c_str());
		}
	}
	return true;
}

} // namespace daemon_impl
} // namespace strata
