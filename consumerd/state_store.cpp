/*
 * state_store.cpp - see state_store.h.
 *
 * A session file, "<dir>/<name>.session", is text, one record a line,
 * fields separated by one space; strings percent-encoded (every byte
 * outside '!'..'~', '%' and ','), so that no field holds a space or a line end:
 *
 *   strata-session 1
 *   session NAME ID RUN_ID SLOT UID OWNER_UID OWNER_GID OWNER_PID OUT
 *   channel NAME STREAM_ID MODE N_LANES N_SUBBUF SUBBUF_SIZE
 *   clock NAME UUID OFFSET_S OFFSET_NS DESCRIPTION
 *   rule ENABLE LOGLEVEL_MAX PATTERN FILTER PIDS NAMES   (PIDS, NAMES: comma lists, "-" empty)
 *   buffer PID START_TIME DEV INO UUID(32 hex) SIGNO UID COMM DIR [KMOD]  (KMOD: 1 joined
 *          through the kernel module; absent in older files: 0)
 *   kernel UUID(32 hex) DIR                 (the kernel buffer's sub-trace; at most one)
 *   unkept REASON                          (a session a restarted daemon only names)
 *   trigger PATTERN                        (its snapshot trigger, not kept)
 *   end
 *
 * "end" last: a file without it is not believed (it cannot be torn, being
 * renamed whole into place, but a disk that lost its tail may say so).
 */
#include "state_store.h"

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

#include "fs.h"

namespace strata {

namespace {

constexpr size_t kMaxFile = 1 << 20;
constexpr size_t kMaxBuffers = 65536;

std::string enc(const std::string &s)
{
	if (s.empty())
		return "%";
	static const char hex[] = "0123456789abcdef";
	std::string o;
	for (unsigned char c : s) {
		if (c > ' ' && c <= '~' && c != '%' && c != ',') {
			o += static_cast<char>(c);
		} else {
			o += '%';
			o += hex[c >> 4];
			o += hex[c & 15];
		}
	}
	return o;
}

bool dec(const std::string &s, std::string &out)
{
	out.clear();
	if (s == "%")
		return true;
	for (size_t i = 0; i < s.size(); i++) {
		if (s[i] != '%') {
			out += s[i];
			continue;
		}
		if (i + 2 >= s.size())
			return false;
		char h[3] = {s[i + 1], s[i + 2], 0};
		char *end = nullptr;
		const unsigned long v = strtoul(h, &end, 16);
		if (!isxdigit(static_cast<unsigned char>(h[0])) ||
		    !isxdigit(static_cast<unsigned char>(h[1])) || *end)
			return false;
		out += static_cast<char>(v);
		i += 2;
	}
	return true;
}

std::string hex16(const uint8_t u[16])
{
	char b[33];
	for (int i = 0; i < 16; i++)
		snprintf(b + 2 * i, 3, "%02x", u[i]);
	return b;
}

bool unhex16(const std::string &s, uint8_t u[16])
{
	if (s.size() != 32)
		return false;
	for (int i = 0; i < 16; i++) {
		char h[3] = {s[2 * i], s[2 * i + 1], 0};
		if (!isxdigit(static_cast<unsigned char>(h[0])) ||
		    !isxdigit(static_cast<unsigned char>(h[1])))
			return false;
		u[i] = static_cast<uint8_t>(strtoul(h, nullptr, 16));
	}
	return true;
}

template <class T> std::string join(const std::vector<T> &v)
{
	if (v.empty())
		return "-";
	std::string o;
	for (size_t i = 0; i < v.size(); i++) {
		std::ostringstream f;
		f << v[i];
		o += (i ? "," : "") + enc(f.str());
	}
	return o;
}

// Unsigned decimal within [0, max].
bool num(const std::string &s, uint64_t max, uint64_t &v)
{
	if (s.empty() || s.size() > 20 || s.find_first_not_of("0123456789") != std::string::npos)
		return false;
	errno = 0;
	v = strtoull(s.c_str(), nullptr, 10);
	return errno == 0 && v <= max;
}

bool snum(const std::string &s, int64_t min, int64_t max, int64_t &v)
{
	const bool neg = !s.empty() && s[0] == '-';
	uint64_t u = 0;
	if (!num(neg ? s.substr(1) : s, static_cast<uint64_t>(INT64_MAX), u))
		return false;
	v = neg ? -static_cast<int64_t>(u) : static_cast<int64_t>(u);
	return v >= min && v <= max;
}

std::vector<std::string> split(const std::string &line, char sep = ' ')
{
	std::vector<std::string> f;
	size_t p = 0;
	while (p <= line.size()) {
		size_t q = line.find(sep, p);
		if (q == std::string::npos)
			q = line.size();
		f.push_back(line.substr(p, q - p));
		p = q + 1;
	}
	return f;
}

bool list_u32(const std::string &s, std::vector<uint32_t> &out)
{
	out.clear();
	if (s == "-")
		return true;
	for (const std::string &x : split(s, ',')) {
		uint64_t v;
		if (!num(x, UINT32_MAX, v) || out.size() >= 64)
			return false;
		out.push_back(static_cast<uint32_t>(v));
	}
	return true;
}

bool list_str(const std::string &s, std::vector<std::string> &out)
{
	out.clear();
	if (s == "-")
		return true;
	for (const std::string &x : split(s, ',')) {
		std::string v;
		if (!dec(x, v) || out.size() >= 16)
			return false;
		out.push_back(v);
	}
	return true;
}

bool write_file(const std::string &dir, const std::string &name, const std::string &text)
{
	const std::string path = dir + "/" + name, tmp = path + ".tmp";
	int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return false;
	size_t done = 0;
	while (done < text.size()) {
		ssize_t w = write(fd, text.data() + done, text.size() - done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break;
		done += static_cast<size_t>(w);
	}
	// No fsync: what this file must survive is the daemon's death, which
	// leaves the page cache (and so the written file and the rename) as
	// it was; after a power loss or a kernel crash there are no processes
	// left to take buffers back from.  An fsync cost the main thread 8-9
	// ms per save on the ext4 of the test VM (0.14 ms without).
	const bool ok = done == text.size();
	close(fd);
	if (!ok || replace_file(tmp, path) != 0) {
		const int e = errno;
		unlink(tmp.c_str());
		errno = e;
		return false;
	}
	return true;
}

std::string file_name(const std::string &session)
{
	return enc(session) + ".session";
}

} // namespace

std::string StateStore::encode(const SessionRecord &r)
{
	std::ostringstream o;
	o << "strata-session 1\n";
	o << "session " << enc(r.name) << ' ' << r.id << ' ' << r.run_id << ' ' << r.slot << ' ' << r.uid
	  << ' ' << r.owner_uid << ' ' << r.owner_gid << ' ' << r.owner_pid << ' ' << enc(r.out) << '\n';
	const proto::ChannelConfig &c = r.channel;
	o << "channel " << enc(c.name) << ' ' << c.stream_id << ' ' << c.mode << ' ' << c.n_lanes << ' '
	  << c.n_subbuf << ' ' << c.subbuf_size << '\n';
	o << "clock " << enc(r.clock.name) << ' ' << enc(r.clock.uuid) << ' ' << r.clock.offset_s << ' '
	  << r.clock.offset_ns << ' ' << enc(r.clock.description) << '\n';
	for (size_t i = 0; i < r.rules.size(); i++) {
		const proto::Rule &u = r.rules[i];
		const TargetRecord t = i < r.targets.size() ? r.targets[i] : TargetRecord();
		o << "rule " << u.enable << ' ' << u.loglevel_max << ' ' << enc(u.pattern) << ' '
		  << enc(u.filter) << ' ' << join(t.pids) << ' ' << join(t.names) << '\n';
	}
	if (!r.aggregate.empty())
		o << "aggregate " << enc(r.aggregate) << ' ' << enc(r.agg_filter) << '\n';
	if (r.tree)
		o << "tree " << r.tree << '\n';
	for (const BufferRecord &b : r.buffers)
		o << "buffer " << b.pid << ' ' << b.start_time << ' ' << b.dev << ' ' << b.ino << ' '
		  << hex16(b.uuid) << ' ' << b.signo << ' ' << b.uid << ' ' << enc(b.comm) << ' '
		  << enc(b.dir) << (b.kmod ? " 1" : "") << '\n';
	if (r.kernel)
		o << "kernel " << hex16(r.kernel_uuid) << ' ' << enc(r.kernel_dir) << '\n';
	if (!r.unkept.empty())
		o << "unkept " << enc(r.unkept) << '\n';
	if (!r.trigger.empty())
		o << "trigger " << enc(r.trigger) << '\n';
	o << "end\n";
	return o.str();
}

namespace {

// `dir` is a sub-trace of the session's output `out` (the file is hostile).
bool inside(const std::string &out, const std::string &dir)
{
	return dir.compare(0, out.size() + 1, out + "/") == 0 && dir.find("/../") == std::string::npos;
}

bool decode_line(const std::vector<std::string> &f, SessionRecord &r, bool &seen_session, std::string &err)
{
	uint64_t v[8];
	int64_t sv[3];
	const std::string &k = f[0];
	if (k == "session" && f.size() == 10) {
		if (!dec(f[1], r.name) || !num(f[2], UINT64_MAX, v[0]) || !num(f[3], UINT64_MAX, v[1]) ||
		    !num(f[4], 15, v[2]) || !num(f[5], UINT32_MAX, v[3]) ||
		    !snum(f[6], -1, UINT32_MAX, sv[0]) || !snum(f[7], -1, UINT32_MAX, sv[1]) ||
		    !num(f[8], UINT32_MAX, v[4]) || !dec(f[9], r.out))
			return err = "bad session line", false;
		r.id = v[0], r.run_id = v[1], r.slot = static_cast<uint32_t>(v[2]),
		r.uid = static_cast<uint32_t>(v[3]);
		r.owner_uid = sv[0], r.owner_gid = sv[1], r.owner_pid = static_cast<uint32_t>(v[4]);
		if (r.name.empty() || r.name.size() > 63 || r.out.empty() || r.out[0] != '/')
			return err = "bad session name or output", false;
		seen_session = true;
	} else if (k == "channel" && f.size() == 7) {
		proto::ChannelConfig &c = r.channel;
		if (!dec(f[1], c.name) || !num(f[2], UINT32_MAX, v[0]) || !num(f[3], UINT32_MAX, v[1]) ||
		    !num(f[4], UINT32_MAX, v[2]) || !num(f[5], UINT32_MAX, v[3]) ||
		    !num(f[6], UINT64_MAX, v[4]))
			return err = "bad channel line", false;
		c.stream_id = static_cast<uint32_t>(v[0]), c.mode = static_cast<uint32_t>(v[1]);
		c.n_lanes = static_cast<uint32_t>(v[2]), c.n_subbuf = static_cast<uint32_t>(v[3]),
		c.subbuf_size = v[4];
	} else if (k == "clock" && f.size() == 6) {
		if (!dec(f[1], r.clock.name) || !dec(f[2], r.clock.uuid) ||
		    !snum(f[3], INT64_MIN + 1, INT64_MAX, sv[0]) || !snum(f[4], 0, 999999999, sv[1]) ||
		    !dec(f[5], r.clock.description))
			return err = "bad clock line", false;
		r.clock.offset_s = sv[0], r.clock.offset_ns = sv[1];
	} else if (k == "rule" && f.size() == 7) {
		proto::Rule u;
		TargetRecord t;
		if (!num(f[1], 1, v[0]) || !snum(f[2], -1, 15, sv[0]) || !dec(f[3], u.pattern) ||
		    !dec(f[4], u.filter) || !list_u32(f[5], t.pids) || !list_str(f[6], t.names) ||
		    r.rules.size() >= 1024)
			return err = "bad rule line", false;
		u.enable = static_cast<uint32_t>(v[0]), u.loglevel_max = static_cast<int32_t>(sv[0]);
		r.rules.push_back(u);
		r.targets.push_back(t);
	} else if (k == "aggregate" && f.size() == 3) {
		if (!dec(f[1], r.aggregate) || !dec(f[2], r.agg_filter) || r.aggregate.empty() ||
		    r.aggregate.size() > proto::kMaxAggregate || r.agg_filter.size() > proto::kMaxFilter)
			return err = "bad aggregate line", false;
	} else if (k == "tree" && f.size() == 2) {
		if (!num(f[1], INT32_MAX, v[0]) || v[0] < 2)
			return err = "bad tree line", false;
		r.tree = static_cast<uint32_t>(v[0]);
	} else if (k == "buffer" && (f.size() == 10 || f.size() == 11)) {
		BufferRecord b;
		if (!num(f[1], UINT32_MAX, v[0]) || !num(f[2], UINT64_MAX, b.start_time) ||
		    !num(f[3], UINT64_MAX, b.dev) || !num(f[4], UINT64_MAX, b.ino) ||
		    !unhex16(f[5], b.uuid) || !snum(f[6], 0, 64, sv[0]) || !num(f[7], UINT32_MAX, v[1]) ||
		    !dec(f[8], b.comm) || !dec(f[9], b.dir) || r.buffers.size() >= kMaxBuffers ||
		    (f.size() == 11 && f[10] != "1"))
			return err = "bad buffer line", false;
		b.pid = static_cast<uint32_t>(v[0]), b.signo = static_cast<int32_t>(sv[0]),
		b.uid = static_cast<uint32_t>(v[1]), b.kmod = f.size() == 11;
		if (!inside(r.out, b.dir))
			return err = "a buffer's sub-trace outside the session's output", false;
		r.buffers.push_back(b);
	} else if (k == "kernel" && f.size() == 3) {
		if (r.kernel || !unhex16(f[1], r.kernel_uuid) || !dec(f[2], r.kernel_dir))
			return err = "bad kernel line", false;
		if (!inside(r.out, r.kernel_dir))
			return err = "the kernel sub-trace outside the session's output", false;
		r.kernel = true;
	} else if ((k == "unkept" || k == "trigger") && f.size() == 2) {
		std::string &t = k == "unkept" ? r.unkept : r.trigger;
		if (!t.empty() || !dec(f[1], t) || t.empty() || t.size() > 1024)
			return err = "bad " + k + " line", false;
	} else {
		return err = "unknown line '" + k + "'", false;
	}
	return true;
}

} // namespace

bool StateStore::decode(const std::string &text, SessionRecord &r, std::string &err)
{
	r = SessionRecord();
	std::istringstream in(text);
	std::string line;
	if (!std::getline(in, line) || line != "strata-session 1")
		return err = "not a session file of this version", false;
	bool seen_session = false, ended = false;
	while (std::getline(in, line)) {
		if (ended)
			return err = "text after its end", false;
		if (line == "end") {
			ended = true;
			continue;
		}
		const std::vector<std::string> f = split(line);
		if (!decode_line(f, r, seen_session, err))
			return false;
	}
	if (!ended || !seen_session)
		return err = "incomplete", false;
	return true;
}

bool StateStore::save(const SessionRecord &r)
{
	const std::string text = encode(r);
	auto it = written_.find(r.name);
	if (it != written_.end() && it->second == text)
		return true;
	if (mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST)
		return false;
	if (!write_file(dir_, file_name(r.name), text))
		return false;
	written_[r.name] = text;
	return true;
}

void StateStore::remove(const std::string &name)
{
	written_.erase(name);
	unlink((dir_ + "/" + file_name(name)).c_str());
}

std::vector<std::string> StateStore::names() const
{
	std::vector<std::string> n;
	for (auto &kv : written_)
		n.push_back(kv.first);
	return n;
}

std::vector<SessionRecord> StateStore::load(std::vector<std::string> &errors)
{
	std::vector<SessionRecord> out;
	DIR *d = opendir(dir_.c_str());
	if (!d)
		return out;
	while (struct dirent *e = readdir(d)) {
		const std::string n = e->d_name;
		if (n.size() < 9 || n.compare(n.size() - 8, 8, ".session") != 0)
			continue;
		const std::string path = dir_ + "/" + n;
		int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		struct stat st;
		if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
		    static_cast<uint64_t>(st.st_size) > kMaxFile) {
			if (fd >= 0)
				close(fd);
			errors.push_back(path + ": not a session file of this daemon's");
			continue;
		}
		std::string text(static_cast<size_t>(st.st_size), '\0');
		const ssize_t r = pread(fd, &text[0], text.size(), 0);
		close(fd);
		SessionRecord rec;
		std::string err;
		if (r != static_cast<ssize_t>(text.size()) || !decode(text, rec, err) ||
		    file_name(rec.name) != n) {
			errors.push_back(path + ": " + (err.empty() ? "unreadable" : err));
			rename(path.c_str(), (path + ".ignored").c_str());
			continue;
		}
		written_[rec.name] = text;
		out.push_back(std::move(rec));
	}
	closedir(d);
	return out;
}

} // namespace strata
