// sync_link.cpp - clock links between daemons; see sync_link.h and docs/clocks.md.
#include "sync_link.h"
#include "clock_page.h"
#include "serial.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
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
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>

#include "fs.h"
#include "log.h"
#include "clock_map.h"
#include "json_writer.h"
#include "relay.h"

namespace strata {
namespace daemon_impl {
namespace {

// No answer for this long (or kLostPeriods probe periods, if longer): the
// link is lost (a paused VM, a cut cable) and the map starts a new segment.
constexpr int64_t kLostNs = 2000000000;
constexpr int kLostPeriods = 5;
// A probe unanswered for this many periods is replaced by a new one.
constexpr int kReprobePeriods = 3;
// A probe whose round trip exceeds this multiple of the least one seen (plus
// kRttSlackNs) is not fed to the estimator: it is valid but loose, and the
// hulls would drop it anyway (docs/clocks.md, "RTT filter").
constexpr int64_t kRttFactor = 4;
constexpr int64_t kRttSlackNs = 50000;

bool parse_port(const std::string &s, uint32_t max, uint32_t *out)
{
	if (s.empty() || s.size() > 10)
		return false;
	uint64_t v = 0;
	for (char c : s) {
		if (c < '0' || c > '9')
			return false;
		v = v * 10 + static_cast<uint64_t>(c - '0');
	}
	if (v == 0 || v > max)
		return false;
	*out = static_cast<uint32_t>(v);
	return true;
}

void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}
uint32_t get32(const uint8_t *p)
{
	return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
	       static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

// A printable name from the peer: at most 64 bytes, control bytes dropped.
std::string clean(const std::string &s)
{
	std::string o;
	for (unsigned char c : s)
		if (c >= 0x20 && c != 0x7f && o.size() < 64)
			o += static_cast<char>(c);
	return o;
}

// The calling thread's CPU time.
int64_t thread_cpu_ns()
{
	timespec ts{};
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

std::string us(int64_t ns)
{
	char b[32];
	snprintf(b, sizeof b, "%.1f us", static_cast<double>(ns) / 1000.0);
	return b;
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

bool parse_sync(const std::string &arg, bool follower, SyncSpec *out, std::string *err)
{
	const size_t eq = arg.find('=');
	SyncSpec s;
	s.follower = follower;
	if (eq == std::string::npos || eq == 0) {
		*err = "'" + arg + "': expected NAME=SPEC";
		return false;
	}
	s.name = arg.substr(0, eq);
	for (char c : s.name)
		if (!(isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') ||
		    s.name.size() > 64) {
			*err = "'" + s.name +
			       "': a link's name is letters, digits, '-', '_', '.' (at most 64)";
			return false;
		}
	std::string v = arg.substr(eq + 1);
	s.text = v;
	int spin = -1; // not given
	for (const char *opt : {",spin=on", ",spin=off"}) {
		const size_t at = v.rfind(opt);
		if (at != std::string::npos && at + strlen(opt) == v.size()) {
			spin = !strcmp(opt, ",spin=on");
			v = v.substr(0, at);
			break;
		}
	}
	if (v.find(",spin=") != std::string::npos) {
		*err = "'" + s.text + "': expected ,spin=on or ,spin=off, last";
		return false;
	}
	const size_t kvm = v.rfind(",kvm=");
	if (kvm != std::string::npos) {
		uint32_t pid = 0;
		if (follower || !parse_port(v.substr(kvm + 5), 1u << 22, &pid) || !pid) {
			*err = "'" + v + "': " +
			       (follower ? std::string("kvm=PID belongs to the guest's host (--sync-guest)")
					 : "expected ,kvm=PID (the guest's qemu process)");
			return false;
		}
		s.kvm_pid = pid;
		v = v.substr(0, kvm);
	}
	bool listen = false;
	if (v.rfind("listen:", 0) == 0) {
		listen = true;
		v = v.substr(7);
	}
	auto after = [&](const char *p) { return v.substr(strlen(p)); };
	if (!listen && v.rfind("virtio:", 0) == 0) {
		s.kind = SyncSpec::Kind::Device;
		s.path = after("virtio:");
	} else if (v.rfind("unix:", 0) == 0) {
		s.kind = listen ? SyncSpec::Kind::ListenUnix : SyncSpec::Kind::Unix;
		s.path = after("unix:");
		if (s.path.size() >= sizeof(sockaddr_un::sun_path)) {
			*err = "'" + s.path + "': a unix socket path is at most 107 bytes";
			return false;
		}
	} else if (v.rfind("tcp:", 0) == 0) {
		s.kind = listen ? SyncSpec::Kind::ListenTcp : SyncSpec::Kind::Tcp;
		const std::string hp = after("tcp:");
		const size_t c = hp.rfind(':');
		if (c == std::string::npos || !parse_port(hp.substr(c + 1), 65535, &s.port)) {
			*err = "'" + v + "': expected tcp:HOST:PORT";
			return false;
		}
		s.host = hp.substr(0, c);
		if (s.host.size() > 2 && s.host.front() == '[' && s.host.back() == ']')
			s.host = s.host.substr(1, s.host.size() - 2);
	} else if (v.rfind("vsock:", 0) == 0) {
		s.kind = listen ? SyncSpec::Kind::ListenVsock : SyncSpec::Kind::Vsock;
		const std::string cp = after("vsock:");
		const size_t c = cp.rfind(':');
		if (listen ? !parse_port(cp, UINT32_MAX - 1, &s.port)
			   : (c == std::string::npos ||
			      !parse_port(cp.substr(0, c), UINT32_MAX - 1, &s.cid) ||
			      !parse_port(cp.substr(c + 1), UINT32_MAX - 1, &s.port))) {
			*err = "'" + v + "': expected vsock:CID:PORT or listen:vsock:PORT";
			return false;
		}
	} else {
		*err = "'" + s.text +
		       "': expected virtio:PATH, unix:PATH, tcp:HOST:PORT, vsock:CID:PORT (the last three "
		       "also as "
		       "listen:...)";
		return false;
	}
	s.spin = spin >= 0
			 ? spin == 1
			 : follower && (s.kind == SyncSpec::Kind::Device || s.kind == SyncSpec::Kind::Vsock);
	if ((s.kind == SyncSpec::Kind::Device || s.kind == SyncSpec::Kind::Unix ||
	     s.kind == SyncSpec::Kind::ListenUnix) &&
	    s.path.empty()) {
		*err = "'" + s.text + "': no path";
		return false;
	}
	*out = s;
	return true;
}

std::vector<uint8_t> encode_sync(const SyncFrame &f)
{
	std::string text;
	if (f.type == kSyncHello)
		text = clean(f.hostname) + '\0' + clean(f.boot_id) + '\0';
	std::vector<uint8_t> b(kSyncHeader + text.size(), 0);
	put32(&b[0], kSyncMagic);
	b[4] = kSyncVersion;
	b[5] = f.type;
	b[6] = static_cast<uint8_t>(b.size());
	b[7] = static_cast<uint8_t>(b.size() >> 8);
	put32(&b[8], f.seq);
	put64(&b[16], static_cast<uint64_t>(f.t1));
	put64(&b[24], static_cast<uint64_t>(f.t2));
	put64(&b[32], static_cast<uint64_t>(f.t3));
	put64(&b[40], static_cast<uint64_t>(f.aux));
	memcpy(b.data() + kSyncHeader, text.data(), text.size());
	return b;
}

long decode_sync(const uint8_t *p, size_t n, SyncFrame *f)
{
	// A partial magic at the end may still become a frame.
	for (size_t i = 0; i < 4 && i < n; i++)
		if (p[i] != static_cast<uint8_t>(kSyncMagic >> (8 * i)))
			return -1;
	if (n < 8)
		return 0;
	const size_t len = p[6] | static_cast<size_t>(p[7]) << 8;
	if (p[4] != kSyncVersion || p[5] < kSyncHello || p[5] > kSyncTsc || len < kSyncHeader ||
	    len > kSyncMaxFrame || (p[5] != kSyncHello && len != kSyncHeader))
		return -1;
	if (n < len)
		return 0;
	f->type = p[5];
	f->seq = get32(p + 8);
	f->t1 = static_cast<int64_t>(get64(p + 16));
	f->t2 = static_cast<int64_t>(get64(p + 24));
	f->t3 = static_cast<int64_t>(get64(p + 32));
	f->aux = static_cast<int64_t>(get64(p + 40));
	f->hostname.clear();
	f->boot_id.clear();
	if (f->type == kSyncHello) {
		const char *t = reinterpret_cast<const char *>(p + kSyncHeader);
		const size_t tn = len - kSyncHeader;
		const size_t z = strnlen(t, tn);
		f->hostname = clean(std::string(t, z));
		if (z + 1 < tn)
			f->boot_id = clean(std::string(t + z + 1, strnlen(t + z + 1, tn - z - 1)));
	}
	return static_cast<long>(len);
}

SyncLink::SyncLink(const SyncSpec &spec, const std::string &hostname, const ClockInfo &clock,
		   uint64_t period_ns, Clock now)
    : spec_(spec), hostname_(hostname), clock_(clock), period_ns_(period_ns), now_(now),
      nonce_(std::random_device()() | static_cast<uint64_t>(std::random_device()()) << 32 | 1)
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
	case SyncSpec::Kind::Tcp: {
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
		break;
	}
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
	case SyncSpec::Kind::ListenVsock: {
		pollfd p[2] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
		if (poll(p, 2, 1000) <= 0 || !(p[0].revents & POLLIN)) {
			*why = "waiting for the peer to connect";
			return -1;
		}
		fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
		if (fd < 0) {
			*why = std::string("accept: ") + strerror(errno);
			return -1;
		}
		if (spec_.kind == SyncSpec::Kind::ListenTcp) {
			const int one = 1;
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		}
		break;
	}
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

bool SyncLink::send_frame(int fd, const SyncFrame &f)
{
	const std::vector<uint8_t> b = encode_sync(f);
	const ssize_t n = write(fd, b.data(), b.size());
	if (n == static_cast<ssize_t>(b.size()))
		return true;
	// A full pipe drops the frame (a probe lost is a probe not made); a
	// partial write would desynchronise the peer, which skips to the next
	// magic.
	std::lock_guard<std::mutex> g(mu_);
	dropped_++;
	return n >= 0 || errno == EAGAIN || errno == EWOULDBLOCK;
}

void SyncLink::serve(int fd)
{
	std::vector<uint8_t> in;
	bool hello_seen = false;
	int64_t next_probe = static_cast<int64_t>(now_()), next_hello = next_probe, last_quick = 0;
	int64_t next_second = next_probe; // the page's line sent, KVM's facts read
	// Polling for our probe's answer (SyncSpec::spin): until when, and this
	// thread's CPU time when it began (the status reports CPU, not the
	// time a preempted spin spent off the CPU).
	int64_t spin_cpu0 = 0, spin_until = 0;
	out_seq_ = 0;
	const int64_t lost_ns = std::max<int64_t>(kLostNs, kLostPeriods * static_cast<int64_t>(period_ns_));
	const bool device = spec_.kind == SyncSpec::Kind::Device;
	if (!device) {
		const int one = 1; // the kernel's receive times (read_stamped)
		setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
	}
	while (!stop_.load(std::memory_order_relaxed)) {
		const int64_t t = static_cast<int64_t>(now_());
		if (t >= next_hello && !hello_seen) {
			SyncFrame h;
			h.type = kSyncHello;
			h.seq = static_cast<uint32_t>(nonce_);
			h.aux = clock_.offset_s * 1000000000LL + clock_.offset_ns;
			h.hostname = hostname_;
			h.boot_id = clock_.uuid;
			h.t1 = static_cast<int64_t>(nonce_ >> 32);
			if (!send_frame(fd, h))
				return;
			next_hello = t + 1000000000;
		}
		if (t >= next_second && hello_seen) {
			next_second = t + 1000000000;
			if (!send_second(fd))
				return;
		}
		if (t >= next_probe) {
			if (out_seq_ && t - out_since_ > lost_ns) {
				std::lock_guard<std::mutex> g(mu_);
				est_.break_segment(clocksync::Start::LinkLost,
						   "no answer for " +
							   std::to_string((t - out_since_) / 1000000) +
							   " ms");
				breaks_++;
				state_ = "lost (no answer for " + std::to_string((t - out_since_) / 1000000) +
					 " ms)";
				out_seq_ = 0;
			}
			// A probe unanswered for kReprobePeriods periods, once
			// the peer has said hello, is replaced (its late answer
			// ignored): the peer may be paused, and a ping sent
			// during the pause is the one whose receive, read at the
			// resume, shows the step at once (take_probe).
			if (!out_seq_ ||
			    (hello_seen &&
			     t - out_t1_ >= kReprobePeriods * static_cast<int64_t>(period_ns_))) {
				// Spin only on a live link (the last probe answered):
				// a lost peer costs no CPU.
				const bool live = !out_seq_ && hello_seen;
				SyncFrame p;
				p.type = kSyncPing;
				p.seq = next_seq_++;
				p.t1 = static_cast<int64_t>(now_()); // before the write
				if (!send_frame(fd, p))
					return;
				if (!out_seq_)
					out_since_ = p.t1;
				out_seq_ = p.seq;
				out_t1_ = p.t1;
				if (spec_.spin && live) {
					// Until the answer, at most 2 least round trips +
					// 50 us (1 ms before one is known) and a quarter
					// period: the answers that tighten the map come
					// early.  min_rtt_ is written by this thread only.
					const int64_t cap = std::min<int64_t>(
						min_rtt_ < 0 ? 1000000 : 2 * min_rtt_ + kRttSlackNs,
						static_cast<int64_t>(period_ns_) / 4);
					spin_cpu0 = thread_cpu_ns();
					spin_until = p.t1 + cap;
				}
				std::lock_guard<std::mutex> g(mu_);
				probes_++;
			}
			next_probe += static_cast<int64_t>(period_ns_);
			if (next_probe <= t)
				next_probe = t + static_cast<int64_t>(period_ns_);
		}
		const int64_t wait = std::min(next_probe, hello_seen ? next_second : next_hello) -
				     static_cast<int64_t>(now_());
		pollfd p[2] = {{fd, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
		int ms = wait <= 0 ? 0 : static_cast<int>((wait + 999999) / 1000000);
		if (spin_until) {
			// Spinning: poll without sleeping, so that this CPU (a
			// guest's vCPU) is running when the answer comes.
			const int64_t now = static_cast<int64_t>(now_());
			if (out_seq_ && now < spin_until) {
				ms = 0;
			} else {
				std::lock_guard<std::mutex> g(mu_);
				spun_ns_ += thread_cpu_ns() - spin_cpu0;
				spin_until = 0;
			}
		}
		if (poll(p, 2, ms) < 0 && errno != EINTR)
			return;
		if (p[1].revents)
			return;
		if (!(p[0].revents & (POLLIN | POLLHUP | POLLERR)))
			continue;
		uint8_t buf[4096];
		int64_t t_recv = 0;
		const ssize_t n =
			device ? read(fd, buf, sizeof buf) : read_stamped(fd, buf, sizeof buf, &t_recv);
		if (!t_recv)
			t_recv = static_cast<int64_t>(now_()); // after the read
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n <= 0) {
			// A virtio port reads 0 while the host end is not
			// connected: wait for it rather than spin.
			if (device && n == 0) {
				if (!sleep_ns(100000000))
					return;
				continue;
			}
			return;
		}
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
				hello_seen = true;
			// A slow probe: the next goes now (at most one such a
			// period), so that a step after a pause or a stall is
			// seen within about one round trip of its end.
			if (on_frame(fd, f, t_recv) &&
			    t_recv - last_quick >= static_cast<int64_t>(period_ns_)) {
				next_probe = std::min(next_probe, t_recv);
				last_quick = t_recv;
			}
		}
		in.erase(in.begin(), in.begin() + static_cast<long>(off));
		if (in.size() > 2 * kSyncMaxFrame)
			in.clear();
	}
}

// A socket's read with the kernel's receive time of its data
// (SO_TIMESTAMPNS, CLOCK_REALTIME) put on the trace clock: the thread's
// wake-up is then no part of the receive stamp.  The conversion reads
// REALTIME before the trace clock, so that it can only come out late (a
// late receive stamp weakens a constraint, never breaks it); *t_recv is the
// earlier of that and the trace clock after the read, 0 if the socket
// gave no time.
ssize_t SyncLink::read_stamped(int fd, uint8_t *buf, size_t len, int64_t *t_recv)
{
	iovec iov{buf, len};
	alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(timespec))];
	msghdr m{};
	m.msg_iov = &iov;
	m.msg_iovlen = 1;
	m.msg_control = ctl;
	m.msg_controllen = sizeof ctl;
	const ssize_t n = recvmsg(fd, &m, MSG_DONTWAIT);
	timespec rt;
	clock_gettime(CLOCK_REALTIME, &rt);
	const int64_t now = static_cast<int64_t>(now_());
	*t_recv = 0;
	if (n <= 0)
		return n;
	for (cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS &&
		    c->cmsg_len >= CMSG_LEN(sizeof(timespec))) {
			timespec ts;
			memcpy(&ts, CMSG_DATA(c), sizeof ts);
			const int64_t age =
				(rt.tv_sec - ts.tv_sec) * 1000000000LL + (rt.tv_nsec - ts.tv_nsec);
			// A time in the future or older than a second is not
			// believed (the realtime clock stepped between).
			if (age >= 0 && age < 1000000000LL) {
				*t_recv = now - age;
				std::lock_guard<std::mutex> g(mu_);
				kernel_stamps_++;
			}
		}
	if (!*t_recv)
		*t_recv = now;
	return n;
}

bool SyncLink::on_frame(int fd, const SyncFrame &f, int64_t t_recv)
{
	if (f.type == kSyncPing) {
		SyncFrame r;
		r.type = kSyncPong;
		r.seq = f.seq;
		r.t1 = f.t1;
		r.t2 = t_recv;
		r.t3 = static_cast<int64_t>(now_()); // before the write
		send_frame(fd, r);
		return false;
	}
	if (f.type == kSyncPong) {
		// Ours if it answers the probe in flight.
		if (f.seq != out_seq_ || f.t1 != out_t1_)
			return false;
		out_seq_ = 0;
		// The peer is told the whole probe (RESULT), so that both
		// ends' maps use every probe.
		SyncFrame r = f;
		r.type = kSyncResult;
		r.aux = t_recv;
		send_frame(fd, r);
		std::lock_guard<std::mutex> g(mu_);
		answered_++;
		return take_probe(f.t1, f.t2, f.t3, t_recv, true);
	}
	std::lock_guard<std::mutex> g(mu_);
	if (f.type == kSyncResult)
		return take_probe(f.t1, f.t2, f.t3, f.aux, false);
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

// KVM's facts checked against the map now, in words (mu_ held).
std::string SyncLink::kvm_checked() const
{
	clocksync::TscLine host;
	uint64_t tsc0;
	const bool have_host = consumer_page_line(&tsc0, &host.ns0, &host.ns_per_cycle);
	host.tsc0 = tsc0;
	kvm_->check(est_.segments(), have_peer_page_ ? &peer_page_ : nullptr, have_host ? &host : nullptr);
	return kvm_->summary();
}

std::string SyncLink::status_line() const
{
	std::lock_guard<std::mutex> g(mu_);
	std::string s = "clock link " + spec_.name + " (" +
			(spec_.follower ? "this machine follows" : "reference for") + ", " + spec_.text +
			"): " + state_;
	if (!peer_hostname_.empty())
		s += ", peer host " + peer_hostname_;
	s += "; " + std::to_string(answered_) + " of " + std::to_string(probes_) + " probe(s) answered, " +
	     std::to_string(used_) + " of both ends' used";
	if (min_rtt_ >= 0)
		s += ", min RTT " + us(min_rtt_);
	const int64_t w = est_.width_now();
	if (w >= 0)
		s += ", bound width " + us(w) + " now";
	else
		s += ", uncorrelated";
	const size_t segs = est_.segment_count();
	if (segs > 1)
		s += ", " + std::to_string(segs) + " segments (" + std::to_string(segs - 1) +
		     " step(s) or break(s): lost link, pause, restart)";
	if (spec_.spin) {
		char b[64];
		snprintf(b, sizeof b, "; %.1f ms of CPU spent spinning for answers",
			 static_cast<double>(spun_ns_) / 1e6);
		s += b;
	}
	if (kvm_)
		s += "; " + kvm_checked();
	return s;
}

clocksync::ClocksLink SyncLink::record(const ClockInfo *local, CtfLines *lines) const
{
	std::lock_guard<std::mutex> g(mu_);
	clocksync::ClocksLink l;
	l.segments = est_.segments();
	if (local && lines) { // the same state of the map as the record's
		lines->ok = ctf_clock_of(l.segments, *local, &lines->clock, &lines->env);
		lines->pieces = lines->ok ? ctf_pieces_of(l.segments, *local) : std::vector<CtfPiece>();
	}
	const std::string self = "(this machine)";
	l.name = spec_.name;
	l.spec = spec_.text;
	l.follower = spec_.follower;
	l.source = spec_.follower ? self : spec_.name;
	l.target = spec_.follower ? spec_.name : self;
	l.peer_hostname = peer_hostname_;
	l.peer_boot_id = peer_boot_id_;
	l.peer_clock_offset_ns = peer_offset_ns_;
	l.state = state_;
	l.correlated = !l.segments.empty() && l.segments.back().bounded;
	l.probes = probes_;
	l.answered = answered_;
	l.used = used_;
	l.min_rtt_ns = min_rtt_;
	l.width_now_ns = est_.width_now();
	l.garbage_bytes = garbage_;
	l.kernel_receive_stamps = kernel_stamps_;
	if (kvm_) {
		const std::string words = kvm_checked();
		if (kvm_->checked() && words.find("DISAGREES") != std::string::npos)
			logf("clock link %s: %s", spec_.name.c_str(), words.c_str());
		l.has_kvm = true;
		l.kvm = kvm_->facts();
	}
	return l;
}

// mu_ held: who maps onto whom, for the clock blocks and env lines of
// ctf_clock.h (shared with the CLI's split of a received or relayed trace).
namespace {

// Segment i of the map as ctf_clock.h's line.
SegmentLine line_of(const clocksync::Segment &seg, size_t i)
{
	SegmentLine l;
	l.index = i;
	l.x_first = seg.x_first;
	l.x_last = seg.x_last;
	l.x0 = seg.x0;
	l.y0 = seg.y0;
	l.slope = seg.slope;
	for (const auto &k : seg.knots)
		l.width = std::max(l.width, k.hi - k.lo);
	return l;
}

} // namespace

MapNames SyncLink::names() const
{
	MapNames n;
	n.link = spec_.name;
	n.hostname = hostname_;
	n.peer_hostname = peer_hostname_;
	n.peer_boot_id = peer_boot_id_;
	n.peer_offset_ns = peer_offset_ns_;
	return n;
}

bool SyncLink::ctf_clock(const ClockInfo &local, ClockInfo *out, std::string *env) const
{
	std::lock_guard<std::mutex> g(mu_);
	return ctf_clock_of(est_.segments(), local, out, env);
}

bool SyncLink::ctf_clock_of(const std::vector<clocksync::Segment> &segs, const ClockInfo &local,
			    ClockInfo *out, std::string *env) const
{
	// The longest bounded segment: babeltrace2 takes one line per trace.
	const clocksync::Segment *best = nullptr;
	for (const auto &s : segs)
		if (s.bounded && (!best || s.x_last - s.x_first > best->x_last - best->x_first))
			best = &s;
	*out = local;
	if (!best || peer_boot_id_.empty()) {
		*env = "\tsync_state = \"uncorrelated\";\n\tsync_peer = " + json_quoted(spec_.name) + ";\n";
		return false;
	}
	segment_clock(line_of(*best, static_cast<size_t>(best - segs.data())), segs.size(), names(), local,
		      out, env);
	return true;
}

// Every bounded segment as a piece (trace_split.h) with its own line, as
// clock_map.h makes them; empty without a bounded map.
std::vector<CtfPiece> SyncLink::ctf_pieces_of(const std::vector<clocksync::Segment> &segs,
					      const ClockInfo &local) const
{
	std::vector<SegmentLine> lines;
	for (size_t i = 0; i < segs.size(); i++)
		if (segs[i].bounded)
			lines.push_back(line_of(segs[i], i));
	return ctf_pieces(lines, segs.size(), names(), local);
}

std::string SyncLinks::status() const
{
	std::string s;
	for (const auto &l : links_)
		s += l->status_line() + "\n";
	return s;
}

namespace {

// trace_split.h's split with the sub-trace owner's rights (fs.h): a root
// daemon splitting a user's trace creates nothing the user could not, and
// hands what it creates to the user.
bool split_as_owner(const std::string &dir, const std::vector<CtfPiece> &pieces, SplitStats *st,
		    std::string *err)
{
	struct stat dst;
	if (lstat(dir.c_str(), &dst) != 0 || !S_ISDIR(dst.st_mode)) {
		*err = dir + ": not a directory";
		return false;
	}
	Owner own;
	if (geteuid() == 0 && dst.st_uid != 0)
		own.uid = dst.st_uid, own.gid = dst.st_gid;
	AsOwner as(own);
	if (!as.ok()) {
		*err = "cannot take the rights of uid " + std::to_string(own.uid);
		return false;
	}
	SplitOwner give;
	if (own.uid >= 0)
		give.give = [&own](int fd) { own.apply(fd); };
	const size_t whole = st->whole_files.size();
	const bool ok = split_subtrace(dir, pieces, st, err, give);
	for (size_t i = whole; i < st->whole_files.size(); i++)
		logf("clock links: %s: a packet header does not check; the file stays whole in its "
		     "directory (on one clock line)",
		     st->whole_files[i].c_str());
	return ok;
}

} // namespace

SyncLinks::Written SyncLinks::clocks_written(const ClockInfo &clock, const std::string &hostname) const
{
	Written w;
	clocksync::ClocksFile f;
	f.machine = hostname;
	f.boot_id = clock.uuid;
	f.clock_offset_ns = clock.offset_s * 1000000000LL + clock.offset_ns;
	SyncLink::CtfLines lines;
	for (const auto &l : links_) {
		const bool first_follower = l->spec().follower && !w.follow;
		if (first_follower)
			w.follow = l.get();
		f.links.push_back(
			l->record(first_follower ? &clock : nullptr, first_follower ? &lines : nullptr));
	}
	if (w.follow) {
		w.env = lines.env;
		w.pieces = std::move(lines.pieces);
		f.has_ctf = true;
		f.ctf.link = w.follow->spec().name;
		f.ctf.rewritten = lines.ok;
		f.ctf.freq = lines.clock.freq;
		f.ctf.offset_s = lines.clock.offset_s;
		f.ctf.offset = lines.clock.offset_ns;
		w.clock = lines.ok ? lines.clock : clock;
	}
	w.json = clocksync::clocks_json(f);
	return w;
}

void SyncLinks::session_stopped(const std::string &out, const ClockInfo &clock,
				const std::string &hostname) const
{
	if (links_.empty() || out.empty())
		return;
	std::error_code ec;
	if (!std::filesystem::is_directory(out, ec))
		return;
	const Written w = clocks_written(clock, hostname);
	const std::string path = out + "/clocks.json", tmp = path + ".tmp";
	{
		std::ofstream f(tmp, std::ios::trunc);
		f << w.json;
		if (!f)
			logf("clock links: cannot write %s", tmp.c_str());
	}
	if (rename(tmp.c_str(), path.c_str()) < 0)
		logf("clock links: cannot write %s: %s", path.c_str(), strerror(errno));
	if (!w.follow)
		return;
	// Every sub-trace's metadata (listed first: a split makes directories).
	std::vector<std::string> dirs;
	for (auto it = std::filesystem::recursive_directory_iterator(out, ec);
	     !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec))
		if (it->path().filename() == "metadata" && it->is_regular_file(ec) &&
		    !is_piece_dir(it->path().parent_path().string()))
			dirs.push_back(it->path().parent_path().string());
	// Across a step (two pieces or more): one CTF trace per piece, so that
	// babeltrace2 places every event as clocks.json does (trace_split.h).
	const std::vector<CtfPiece> &pieces = w.pieces; // of the map clocks.json holds
	size_t n = 0;
	SplitStats st;
	for (const std::string &d : dirs) {
		std::string text;
		{
			std::ifstream f(d + "/metadata");
			std::stringstream ss;
			ss << f.rdbuf();
			text = ss.str();
		}
		if (text.rfind("/* CTF 1.8 */", 0) != 0)
			continue;
		if (pieces.size() > 1) {
			std::string err;
			if (!split_as_owner(d, pieces, &st, &err))
				logf("clock links: %s: cannot split it by clock piece (%s): babeltrace2 "
				     "places it on "
				     "one clock line",
				     d.c_str(), err.c_str());
			else
				n++;
			continue;
		}
		// In place (the drains append with O_APPEND, so a later append
		// still lands at the end).
		const std::string nt = rewrite_metadata_clock(text, w.clock, w.env);
		if (nt == text)
			continue;
		const std::string path = d + "/metadata";
		const int fd = open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0 || write(fd, nt.data(), nt.size()) != static_cast<ssize_t>(nt.size()))
			logf("clock links: cannot rewrite %s: %s", path.c_str(), strerror(errno));
		if (fd >= 0)
			close(fd);
		n++;
	}
	if (pieces.size() > 1)
		INFO("clock links: %zu sub-trace(s) under %s split into %zu clock pieces (%zu piece "
		     "directories written, %zu packet(s) moved, %zu cut at a record boundary)",
		     n, out.c_str(), pieces.size(), st.dirs_made, st.packets_moved, st.packets_cut);
	else
		VLOG("clock links: %zu metadata file(s) under %s put onto %s's clock", n, out.c_str(),
		     w.follow->spec().name.c_str());
}

bool SyncLinks::follows() const
{
	for (const auto &l : links_)
		if (l->spec().follower)
			return true;
	return false;
}

namespace {

// The env lines of a streamed follower's metadata before the rewrite:
// `what` ("relay", "serial") and when the rewrite comes.
std::string pending_env(const std::string &peer, const char *what, const char *when)
{
	return "\tsync_state = \"uncorrelated\";\n\tsync_peer = " + json_quoted(peer) + ";\n\tsync_" + what +
	       " = \"this machine's clock; put onto the peer's when the session " + when + "\";\n";
}

} // namespace

std::string SyncLinks::relay_pending_env() const
{
	for (const auto &l : links_)
		if (l->spec().follower)
			return pending_env(l->spec().name, "relay", "ends");
	return "";
}

void SyncLinks::serial_opened(SerialLink &line) const
{
	for (const auto &l : links_)
		if (l->spec().follower) {
			line.set_opening_filter(
				[env = pending_env(l->spec().name, "serial", "stops")](const std::string &t) {
					return rewrite_metadata_env(t, env);
				});
			return;
		}
}

void SyncLinks::serial_stopped(SerialLink &line, const ClockInfo &clock, const std::string &hostname) const
{
	if (links_.empty())
		return;
	const std::string where = line.target().device;
	if (line.broken()) {
		logf("clock links: serial line %s is down (%s): the received trace stays on this machine's "
		     "clock, no clocks.json",
		     where.c_str(), line.why_broken().c_str());
		return;
	}
	const Written w = clocks_written(clock, hostname);
	const std::function<std::string(const std::string &)> rw = [&](const std::string &t) {
		return t.rfind("/* CTF 1.8 */", 0) == 0 ? rewrite_metadata_clock(t, w.clock, w.env)
							: std::string();
	};
	std::string err;
	size_t n = 0;
	if (!line.clock_rewrite("clocks.json", w.json, w.follow ? &rw : nullptr, &n, err))
		logf("clock links: serial line %s: clocks.json and the rewritten metadata not sent: %s",
		     where.c_str(), err.c_str());
	else if (w.follow)
		VLOG("clock links: %zu metadata of serial line %s sent onto %s's clock", n, where.c_str(),
		     w.follow->spec().name.c_str());
}

void SyncLinks::relay_ending(RelayLink &link, const ClockInfo &clock, const std::string &hostname) const
{
	if (links_.empty())
		return;
	if (link.broken()) {
		logf("clock links: relay trace %s: the link is down (%s): its clocks are not put onto the "
		     "reference's, no clocks.json",
		     link.base().c_str(), link.why_broken().c_str());
		return;
	}
	const Written w = clocks_written(clock, hostname);
	std::string err;
	if (w.follow) {
		const size_t n = link.rewrite_metadata(
			[&](const std::string &t) { return rewrite_metadata_clock(t, w.clock, w.env); }, err);
		if (!err.empty())
			logf("clock links: relay trace %s: %s", link.base().c_str(), err.c_str());
		VLOG("clock links: %zu relayed metadata of %s sent onto %s's clock", n, link.base().c_str(),
		     w.follow->spec().name.c_str());
	}
	if (!link.put_file("clocks.json", w.json, err))
		logf("clock links: relay trace %s: clocks.json not stored: %s", link.base().c_str(),
		     err.c_str());
}

} // namespace daemon_impl
} // namespace strata
