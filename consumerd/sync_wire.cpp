// sync_wire.cpp - a clock link's spec (NAME=SPEC), its frames on the
// wire and a socket's stamped read; see sync_link.h and docs/clocks.md.
#include "sync_link.h"

#include <cstring>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>

namespace strata {
namespace daemon_impl {
namespace {

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

// A link spec's trailing options, taken off v: ",kvm=PID" (a guest's
// host: its qemu process) and ",spin=on|off" last (*spin: -1 not given).
bool parse_link_options(std::string &v, bool follower, SyncSpec &s, int *spin, std::string *err)
{
	*spin = -1;
	for (const char *opt : {",spin=on", ",spin=off"}) {
		const size_t at = v.rfind(opt);
		if (at != std::string::npos && at + strlen(opt) == v.size()) {
			*spin = !strcmp(opt, ",spin=on");
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
	return true;
}

// A link spec's transport (v without its options): virtio:PATH,
// unix:PATH, tcp:HOST:PORT, vsock:CID:PORT, the last three also as
// listen:... .
bool parse_link_transport(std::string v, SyncSpec &s, std::string *err)
{
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
	return true;
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
	int spin;
	if (!parse_link_options(v, follower, s, &spin, err) || !parse_link_transport(v, s, err))
		return false;
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
	const int64_t rt_ns = rt.tv_sec * 1000000000LL + rt.tv_nsec;
	for (cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS &&
		    c->cmsg_len >= CMSG_LEN(sizeof(timespec))) {
			timespec ts;
			memcpy(&ts, CMSG_DATA(c), sizeof ts);
			*t_recv = kstamps_.stamp(ts.tv_sec * 1000000000LL + ts.tv_nsec, rt_ns, now);
			if (*t_recv != now) {
				std::lock_guard<std::mutex> g(mu_);
				kernel_stamps_++;
			}
		}
	if (!*t_recv)
		*t_recv = now;
	return n;
}

int64_t KernelStamps::stamp(int64_t kernel_rt, int64_t rt, int64_t now)
{
	const int64_t offset = now - rt;
	if (have_ && (offset - offset_ > kJumpNs || offset_ - offset > kJumpNs))
		jump_rt_ = rt; // the trace clock (or REALTIME) jumped since the last call
	have_ = true;
	offset_ = offset;
	const int64_t age = rt - kernel_rt;
	if (age < 0 || age >= 1000000000LL || kernel_rt <= jump_rt_)
		return now;
	return now - age;
}

} // namespace daemon_impl
} // namespace strata
