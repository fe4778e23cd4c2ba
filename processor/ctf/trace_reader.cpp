// trace_reader.cpp - reading Strata's trace files; contract in trace_reader.h.
#include "trace_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "ctf_index.h"
#include "strata_abi.h"

namespace strata {
namespace fs = std::filesystem;

// What the last whole header of a stream tells the next one.
struct HeaderContext {
	bool have = false;
	uint32_t stream_id = 0;
	uint64_t instance = 0;
	uint64_t ts_begin = 0;
};

namespace {

constexpr uint64_t kHdr = STRATA_PACKET_HEADER_SIZE;
constexpr uint64_t kMaxMetadata = 64u << 20;
constexpr uint64_t kMaxIndex = 1ull << 30; // 80 bytes a packet: 13 M packets
constexpr uint64_t kScanChunk = 1u << 20;
const uint8_t kMagic[4] = {0xC1, 0x1F, 0xFC, 0xC1}; // STRATA_CTF_MAGIC, little-endian

bool read_at(int fd, void *buf, size_t n, uint64_t off)
{
	size_t done = 0;
	while (done < n) {
		const ssize_t r = pread(fd, (uint8_t *)buf + done, n - done, (off_t)(off + done));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return false;
		done += (size_t)r;
	}
	return true;
}

bool read_file(const std::string &path, std::string *out, uint64_t max)
{
	std::ifstream f(path, std::ios::binary);
	if (!f)
		return false;
	out->clear();
	char buf[65536];
	while (f.read(buf, sizeof buf) || f.gcount() > 0) {
		out->append(buf, (size_t)f.gcount());
		if (out->size() > max)
			return false;
	}
	return true;
}

// Why the header at `off` is not a packet of this stream, or null.
const char *check_header(const strata_packet_header &h, const TraceMeta &m, const HeaderContext &ctx,
			 uint64_t off, uint64_t file_size)
{
	if (h.magic != STRATA_CTF_MAGIC)
		return "bad magic";
	if (m.has_uuid && memcmp(h.uuid, m.uuid, 16) != 0)
		return "uuid of another trace";
	if (!m.known_stream(h.stream_id))
		return "unknown stream class";
	if (ctx.have && (h.stream_id != ctx.stream_id || h.stream_instance_id != ctx.instance))
		return "another stream's packet";
	const uint64_t min_content =
		m.record_format == STRATA_REC_COMPACT
			? kHdr
			: offsetof(strata_packet_header, vtid); // WIDE leaves 84..88 unnamed
	if (h.packet_size % 8 || h.content_size % 8)
		return "sizes not whole bytes";
	if (h.content_size > h.packet_size || h.content_size / 8 < min_content || h.packet_size / 8 < kHdr)
		return "bad content or packet size";
	if (h.packet_size / 8 > STRATA_MAX_SUBBUF_SIZE)
		return "packet larger than any sub-buffer";
	if (h.packet_size / 8 > file_size - off)
		return "packet runs past the end of the file";
	if (h.timestamp_begin > h.timestamp_end)
		return "timestamp_begin after timestamp_end";
	if (ctx.have && h.timestamp_begin < ctx.ts_begin)
		return "timestamp_begin before the previous packet's";
	return nullptr;
}

} // namespace

uint64_t FieldValue::elem_u(uint32_t k) const
{
	const unsigned b = info->elem_bits / 8;
	uint64_t v = 0;
	memcpy(&v, elems + (size_t)k * b, b); // little-endian host (strata_abi.h)
	return v;
}

int64_t FieldValue::elem_i(uint32_t k) const
{
	const unsigned bits = info->elem_bits;
	const uint64_t v = elem_u(k);
	if (!info->is_signed || bits == 64)
		return (int64_t)v;
	const uint64_t sign = 1ull << (bits - 1);
	return (int64_t)((v ^ sign) - sign);
}

void TraceEvent::decode(std::vector<FieldValue> *out) const
{
	out->clear();
	for_each_field([out](const FieldValue &v) { out->push_back(v); });
}

// Records decoded per refill of a cursor (1.5 MiB): a 1 MiB packet of
// records of 16 bytes or more is walked once.
constexpr size_t kMaxDecoded = 65536;

TraceReader::TraceReader() = default;
TraceReader::~TraceReader() = default;

bool find_trace_dirs(const std::string &root, std::vector<std::string> *out, std::string *why)
{
	std::error_code ec;
	if (!fs::is_directory(root, ec)) {
		*why = "cannot open '" + root + "': " + (ec ? ec.message() : std::string("not a directory"));
		return false;
	}
	std::vector<std::pair<fs::path, int>> todo{{fs::path(root), 0}};
	while (!todo.empty()) {
		const auto [dir, depth] = todo.back();
		todo.pop_back();
		if (fs::is_regular_file(dir / "metadata", ec)) {
			out->push_back(dir.string());
			continue;
		}
		if (depth > 16)
			continue;
		fs::directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec);
		if (ec) {
			*why = "cannot list '" + dir.string() + "': " + ec.message();
			return false;
		}
		for (; it != fs::directory_iterator(); it.increment(ec)) {
			if (ec)
				break;
			if (it->is_directory(ec) && !it->is_symlink(ec))
				todo.emplace_back(it->path(), depth + 1);
		}
	}
	std::sort(out->begin(), out->end());
	if (out->empty()) {
		*why = "no CTF trace under '" + root + "' (no directory holds a 'metadata' file)";
		return false;
	}
	return true;
}

bool find_trace_dirs(const std::vector<std::string> &roots, std::vector<std::string> *out, std::string *why)
{
	std::vector<std::pair<std::string, std::string>> found; // (canonical, as found)
	for (const std::string &root : roots) {
		std::vector<std::string> dirs;
		if (!find_trace_dirs(root, &dirs, why))
			return false;
		for (std::string &d : dirs) {
			std::error_code ec;
			std::string key = fs::weakly_canonical(d, ec).string();
			found.emplace_back(ec ? d : std::move(key), std::move(d));
		}
	}
	std::sort(found.begin(), found.end());
	found.erase(std::unique(found.begin(), found.end(),
				[](const auto &a, const auto &b) { return a.first == b.first; }),
		    found.end());
	for (auto &f : found)
		out->push_back(std::move(f.second));
	std::sort(out->begin(), out->end());
	return true;
}

std::string roots_label(const std::vector<std::string> &roots)
{
	if (roots.size() == 1)
		return roots[0];
	std::string label;
	for (const std::string &r : roots) {
		if (!label.empty())
			label += ' ';
		if (!r.empty() && r.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
						      "0123456789_./-+=:,@%") == std::string::npos) {
			label += r;
			continue;
		}
		label += '\'';
		for (char c : r)
			label += c == '\'' ? std::string("'\\''") : std::string(1, c);
		label += '\'';
	}
	return label;
}

bool strata_wrote(const std::vector<std::string> &dirs)
{
	// Strata's when no sub-trace is another tracer's: a metadata text that
	// names another tracer, or LTTng's packetized metadata.  A metadata
	// too damaged to say (cut before its env block) is read, and named, by
	// Strata's reader, since babeltrace2 would refuse the whole tree for it.
	bool any = false;
	for (const std::string &d : dirs) {
		std::ifstream f(d + "/metadata", std::ios::binary);
		std::string head(65536, '\0');
		f.read(&head[0], (std::streamsize)head.size());
		head.resize((size_t)f.gcount());
		if (is_strata_metadata(head)) {
			any = true;
			continue;
		}
		// 0x75D11D57 in either byte order.
		if (head.compare(0, 4, "\x57\x1d\xd1\x75") == 0 ||
		    head.compare(0, 4, "\x75\xd1\x1d\x57") == 0 ||
		    head.find("tracer_name") != std::string::npos)
			return false;
		// Cut before its env: nobody can say whose; Strata's reader
		// names it unreadable and reads the rest.  With an env that names
		// no tracer: not Strata's.
		if (head.find("\nenv {") != std::string::npos)
			return false;
	}
	return any || !dirs.empty();
}

bool piece_dir_base(const std::string &dir, std::string *base)
{
	const size_t p = dir.rfind("~seg");
	if (p == std::string::npos || p + 4 >= dir.size() ||
	    dir.find_first_not_of("0123456789", p + 4) != std::string::npos)
		return false;
	if (base)
		*base = dir.substr(0, p);
	return true;
}

bool TraceReader::open(const std::string &root, std::string *why)
{
	std::vector<std::string> dirs;
	if (!find_trace_dirs(root, &dirs, why))
		return false;
	return open_dirs(dirs, why);
}

bool TraceReader::open_dirs(const std::vector<std::string> &dirs, std::string *why)
{
	for (const std::string &d : dirs)
		add_trace(d);
	// Piece directories to their base (SubTrace::whole).
	std::map<std::string, SubTrace *> by_dir;
	for (const auto &t : traces_)
		by_dir.emplace(t->dir, t.get());
	for (const auto &t : traces_) {
		std::string base;
		if (!piece_dir_base(t->dir, &base))
			continue;
		auto it = by_dir.find(base);
		if (it != by_dir.end() && it->second->readable && t->readable)
			t->whole = it->second;
	}
	index_damages_ = damages_.size();
	if (traces_.empty()) {
		*why = "no trace";
		return false;
	}
	return true;
}

void TraceReader::damage(const StreamInfo &s, uint64_t offset, uint64_t bytes, std::string why)
{
	damages_.push_back(TraceDamage{s.path, offset, bytes, std::move(why)});
	stats_.damaged++;
	stats_.damaged_bytes += bytes;
}

bool TraceReader::add_trace(const std::string &dir)
{
	auto t = std::make_shared<SubTrace>();
	t->dir = dir;
	std::string text;
	if (!read_file(dir + "/metadata", &text, kMaxMetadata)) {
		t->why = "cannot read its metadata (missing, unreadable or over 64 MiB)";
	} else if (!parse_trace_meta(text, &t->meta, &t->why)) {
		t->why = "metadata: " + t->why;
	} else {
		t->readable = true;
	}
	if (!t->readable) {
		stats_.unreadable_traces++;
		traces_.push_back(std::move(t));
		walks_.push_back(nullptr);
		return false;
	}
	load_clock_map(t.get());
	const TraceMeta &m = t->meta;
	t->procname = m.env_string("procname");
	m.env_int("vpid", &t->vpid);
	t->hostname = m.env_string("hostname");
	t->kernel = m.is_kernel();
	if (int64_t v; m.env_int("sync_piece_from", &v) && v > 0)
		t->piece_from = static_cast<uint64_t>(v);
	if (int64_t v; m.env_int("sync_piece_to", &v) && v > 0)
		t->piece_to = static_cast<uint64_t>(v);
	auto walk = std::make_shared<RecordWalk>(m.record_format);
	auto cls = m.events.find(m.stream_id);
	if (cls != m.events.end())
		for (const auto &kv : cls->second)
			walk->add(kv.second.info);
	SubTrace *tp = t.get();
	traces_.push_back(std::move(t));
	walks_.push_back(std::move(walk));
	// Its stream files: every regular file but the metadata and dot-files.
	std::vector<std::string> files;
	std::error_code ec;
	for (fs::directory_iterator it(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
		const std::string name = it->path().filename().string();
		if (name == "metadata" || name.empty() || name[0] == '.' || !it->is_regular_file(ec))
			continue;
		files.push_back(it->path().string());
	}
	std::sort(files.begin(), files.end());
	// A sub-trace with an index/ directory has an index per stream file;
	// one without (an older trace, a serial receiver's): nothing to
	// compare, not damage.
	const bool indexed = fs::is_directory(dir + "/index", ec);
	for (const std::string &f : files) {
		auto s = std::make_unique<StreamInfo>();
		s->trace = tp;
		s->path = f;
		s->index = (uint32_t)streams_.size();
		if (!indexed || walk_headers_ || !packets_from_index(s.get())) {
			index_stream(s.get());
			if (indexed)
				check_index(s.get());
		}
		streams_.push_back(std::move(s));
	}
	if (indexed)
		check_gone_streams(dir);
	if (!tp->meta.damage.empty())
		damages_.push_back(TraceDamage{dir + "/metadata", 0, 0, tp->meta.damage});
	return true;
}

// A follower's sub-trace (its metadata says sync_state = "correlated"):
// its clock map from the clocks.json above it, applied segment by segment
// (clock_map.h).  A clocks.json missing or not trusted: the metadata's one
// line, and a damage that says so (once per file).
void TraceReader::load_clock_map(SubTrace *t)
{
	if (t->meta.env_string("sync_state") != "correlated")
		return;
	const std::string link = t->meta.env_string("sync_peer");
	const std::string path = find_clocks_json(t->dir);
	const std::string key = path + '\n' + link;
	auto it = clock_maps_.find(key);
	if (it == clock_maps_.end()) {
		auto map = std::make_shared<ClockMap>();
		std::string text, why;
		if (path.empty())
			why = "no clocks.json in it or above it";
		else if (!read_file(path, &text, kMaxMetadata))
			why = "cannot read it (unreadable or over 64 MiB)";
		else if (!parse_clock_map(text, link, map.get(), &why))
			why = "cannot use it: " + why;
		map->file = path;
		if (!why.empty()) {
			map.reset();
			damages_.push_back(
				TraceDamage{path.empty() ? t->dir + "/clocks.json" : path, 0, 0,
					    "clock map of link '" + link + "': " + why +
						    "; its sub-traces are placed by their metadata's "
						    "one clock line (off by any step: a paused VM)"});
			stats_.damaged++;
		}
		it = clock_maps_.emplace(key, std::move(map)).first;
	}
	t->meta.map = it->second;
}

namespace {

// A stream file's headers, read one at a time (pread: a file cut meanwhile
// cannot fault).
struct HeaderScan {
	int fd;
	uint64_t size;
	const TraceMeta &m;
	HeaderContext ctx;
	std::vector<uint8_t> chunk;

	// Why the header at `o` is not the stream's next packet, or null.
	const char *check_at(uint64_t o, strata_packet_header *h)
	{
		if (size - o < kHdr || !read_at(fd, h, sizeof *h, o))
			return "truncated packet header";
		return check_header(*h, m, ctx, o, size);
	}
	// The first offset after `from` holding a valid header, or UINT64_MAX:
	// each byte scanned once, a header checked where the magic is.
	uint64_t next_valid(uint64_t from)
	{
		for (uint64_t pos = from + 1; pos + kHdr <= size;) {
			const uint64_t n = std::min<uint64_t>(kScanChunk + 3, size - pos);
			chunk.resize(n);
			if (n < 4 || !read_at(fd, chunk.data(), n, pos))
				return UINT64_MAX;
			for (uint64_t i = 0; i + 4 <= n; i++) {
				const auto *p =
					(const uint8_t *)memchr(chunk.data() + i, kMagic[0], n - i - 3);
				if (!p)
					break;
				i = (uint64_t)(p - chunk.data());
				strata_packet_header h;
				if (memcmp(p, kMagic, 4) == 0 && !check_at(pos + i, &h))
					return pos + i;
			}
			pos += n - 3;
		}
		return UINT64_MAX;
	}
};

} // namespace

// The packet index of one stream file: its headers, each checked; after a
// bad one, the next valid header is searched for byte by byte.
void TraceReader::index_stream(StreamInfo *s)
{
	const TraceMeta &m = s->trace->meta;
	const int fd = ::open(s->path.c_str(), O_RDONLY | O_CLOEXEC);
	struct stat st {};
	if (fd < 0 || fstat(fd, &st) != 0) {
		damage(*s, 0, 0, std::string("cannot open: ") + strerror(errno));
		if (fd >= 0)
			close(fd);
		return;
	}
	s->size = (uint64_t)st.st_size;
	HeaderScan scan{fd, (uint64_t)st.st_size, m, {}, {}};
	for (uint64_t off = 0; off < scan.size;) {
		strata_packet_header h;
		const char *why = scan.check_at(off, &h);
		if (!why) {
			accept_packet(s, off, h, &scan.ctx);
			off += h.packet_size / 8;
			continue;
		}
		const uint64_t found = scan.next_valid(off);
		const uint64_t end = found == UINT64_MAX ? scan.size : found;
		damage(*s, off, end - off, why);
		off = end;
	}
	close(fd);
}

namespace {

std::string base_name(const std::string &path)
{
	const size_t slash = path.rfind('/');
	return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string plural(uint64_t n, const char *what)
{
	return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
}

// "N packets its index (index/X.idx) names are missing (sequence numbers
// S to T, from byte O; B bytes past the file's end)": entries [from, end)
// of the index `name`, the file `size` bytes long.
std::string missing_text(const std::vector<CtfIndexEntry> &es, size_t from, const std::string &name,
			 uint64_t size)
{
	const uint64_t end = es.back().offset + es.back().packet_size / 8;
	std::string t = plural(es.size() - from, "packet") + " its index (" + name + ") names " +
			(es.size() - from == 1 ? "is" : "are") + " missing (sequence number";
	t += es.size() - from == 1
		     ? " " + std::to_string(es[from].seq)
		     : "s " + std::to_string(es[from].seq) + " to " + std::to_string(es.back().seq);
	t += ", from byte " + std::to_string(es[from].offset) + "; " + plural(end - size, "byte");
	return t + (size ? " past the file's end)" : ")");
}

// Why the index entry `e` is not the walked packet `p` at its offset, or "".
std::string entry_differs(const CtfIndexEntry &e, const PacketEntry &p)
{
	if (p.size * 8 != e.packet_size || p.content * 8 != e.content_size)
		return "sizes";
	if (p.ts_begin != e.ts_begin || p.ts_end != e.ts_end)
		return "timestamps";
	return "";
}

} // namespace

void TraceReader::index_damage(const std::string &idx, std::string why)
{
	TraceDamage d;
	d.file = idx;
	d.why = "packet index: " + std::move(why);
	d.index = true;
	damages_.push_back(std::move(d));
	stats_.damaged++;
}

// The stream's packet index (ctf_index.h), in a sub-trace that has an
// index/ directory.  What the file lacks of the packets it names is named
// as damage (packets and bytes missing from the file's end); an index
// missing, not valid, disagreeing with a header the walk found, or
// naming fewer bytes than the file holds, is named and not used: the
// packets are those of the headers, as without an index.
void TraceReader::check_index(StreamInfo *s)
{
	const std::string idx = ctf_index_path(s->path);
	const std::string name = "index/" + base_name(idx);
	std::string bytes, why;
	std::vector<CtfIndexEntry> es;
	if (!read_file(idx, &bytes, kMaxIndex))
		return index_damage(idx, "missing or unreadable (the sub-trace has an index/ directory): " +
						 base_name(s->path) +
						 "'s packets cannot be checked against it");
	if (!parse_ctf_index(bytes, &es, &why))
		return index_damage(idx, why + "; not used");
	size_t j = 0, k = 0; // k: the first entry past the file's end
	for (; k < es.size() && es[k].offset + es[k].packet_size / 8 <= s->size; k++) {
		while (j < s->packets.size() && s->packets[j].offset < es[k].offset)
			j++;
		if (j == s->packets.size() || s->packets[j].offset != es[k].offset)
			continue; // damage there (named by the walk), or a sibling piece's
		const std::string d = entry_differs(es[k], s->packets[j]);
		if (!d.empty())
			return index_damage(idx, "entry " + std::to_string(k) + " and the packet at byte " +
							 std::to_string(es[k].offset) + " of " +
							 base_name(s->path) + " differ (" + d +
							 "); not used");
	}
	const uint64_t end = es.empty() ? 0 : es.back().offset + es.back().packet_size / 8;
	// Bytes past the index's end: a torn tail (the walk names it) is
	// what a killed consumer leaves; whole packets there mean the index
	// lags its file.
	const bool more = !s->packets.empty() && s->packets.back().offset >= end;
	if (end < s->size && more)
		return index_damage(idx, "names " + plural(end, "byte") + " of the " +
						 std::to_string(s->size) + "-byte " + base_name(s->path) +
						 " (left behind its file: a consumer stopped between the two "
						 "writes?); the packets after are found by their headers");
	if (k == es.size())
		return;
	TraceDamage d;
	d.file = s->path;
	d.offset = s->size;
	d.missing_packets = es.size() - k;
	d.missing_bytes = end - s->size;
	d.missing_seq_end = es.back().seq + 1;
	d.why = (s->size ? "cut at byte " + std::to_string(s->size) + " after recording: "
			 : std::string("emptied after recording: ")) +
		missing_text(es, k, name, s->size);
	stats_.missing_packets += d.missing_packets;
	stats_.missing_bytes += d.missing_bytes;
	stats_.damaged++;
	damages_.push_back(std::move(d));
}

// Indexes whose stream file is gone (removed after recording): each
// named with the packets it names.
void TraceReader::check_gone_streams(const std::string &dir)
{
	std::vector<std::string> gone;
	std::error_code ec;
	for (fs::directory_iterator it(dir + "/index", ec); !ec && it != fs::directory_iterator();
	     it.increment(ec)) {
		const std::string name = it->path().filename().string();
		if (name.size() <= 4 || name[0] == '.' || name.compare(name.size() - 4, 4, ".idx") != 0)
			continue;
		const std::string stream = dir + "/" + name.substr(0, name.size() - 4);
		if (!fs::exists(fs::symlink_status(stream, ec)))
			gone.push_back(stream);
	}
	std::sort(gone.begin(), gone.end());
	for (const std::string &stream : gone) {
		const std::string idx = ctf_index_path(stream);
		std::string bytes, why;
		std::vector<CtfIndexEntry> es;
		TraceDamage d;
		d.file = stream;
		if (!read_file(idx, &bytes, kMaxIndex) || !parse_ctf_index(bytes, &es, &why)) {
			d.why = "the stream file is gone, and its index (index/" + base_name(idx) +
				") cannot be used" + (why.empty() ? std::string() : ": " + why);
		} else if (es.empty()) {
			d.why = "the stream file is gone (its index names no packet)";
		} else {
			d.missing_packets = es.size();
			d.missing_bytes = es.back().offset + es.back().packet_size / 8;
			d.why = "the stream file is gone: " +
				missing_text(es, 0, "index/" + base_name(idx), 0);
		}
		stats_.missing_packets += d.missing_packets;
		stats_.missing_bytes += d.missing_bytes;
		stats_.damaged++;
		damages_.push_back(std::move(d));
	}
}

static void push_packet(StreamInfo *s, PacketEntry e);

// The stream's packets from its packet index alone, without a header
// read: when the index is whole (it parses), has each packet's thread
// (Strata's 80-byte entries), adds up to the file's size exactly, and
// names one stream of a class the metadata knows, in time order.  Else
// false, nothing changed: the headers are walked and the index checked
// against them (check_index), which names what is wrong with it.
bool TraceReader::packets_from_index(StreamInfo *s)
{
	const TraceMeta &m = s->trace->meta;
	struct stat st {};
	std::string bytes, why;
	std::vector<CtfIndexEntry> es;
	if (stat(s->path.c_str(), &st) != 0 || !read_file(ctf_index_path(s->path), &bytes, kMaxIndex) ||
	    !parse_ctf_index(bytes, &es, &why))
		return false;
	const uint64_t size = (uint64_t)st.st_size;
	const uint64_t min_content =
		m.record_format == STRATA_REC_COMPACT ? kHdr : offsetof(strata_packet_header, vtid);
	uint64_t end = 0, ts = 0;
	for (const CtfIndexEntry &e : es) {
		if (!e.has_thread || e.stream_id != es[0].stream_id || e.instance != es[0].instance ||
		    e.packet_size / 8 < kHdr || e.content_size / 8 < min_content || e.ts_begin < ts)
			return false;
		ts = e.ts_begin;
		end = e.offset + e.packet_size / 8;
	}
	if (end != size ||
	    (!es.empty() && (es[0].stream_id > UINT32_MAX || !m.known_stream((uint32_t)es[0].stream_id))))
		return false;
	s->size = size;
	s->from_index = true;
	if (!es.empty()) {
		s->stream_class = (uint32_t)es[0].stream_id;
		s->instance = es[0].instance;
		s->shared = m.shared_stream(s->stream_class);
	}
	s->packets.reserve(es.size());
	for (const CtfIndexEntry &x : es)
		push_packet(s, PacketEntry{x.offset, x.packet_size / 8, x.content_size / 8, x.ts_begin,
					   x.ts_end, x.seq, x.discarded, x.lane, x.vtid});
	return true;
}

// Packet e (its vtid as its header has it) into the stream's index,
// unless a sibling piece's (SubTrace::piece_from).
static void push_packet(StreamInfo *s, PacketEntry e)
{
	if (e.ts_begin < s->trace->piece_from || e.ts_begin >= s->trace->piece_to)
		return;
	if (s->trace->meta.record_format != STRATA_REC_COMPACT)
		e.vtid = -1; // the kernel's: its records name their threads
	s->packets.push_back(e);
}

// A valid header at `off`: the stream's next index entry.
void TraceReader::accept_packet(StreamInfo *s, uint64_t off, const strata_packet_header &h,
				HeaderContext *ctx)
{
	const TraceMeta &m = s->trace->meta;
	if (!ctx->have) {
		ctx->have = true;
		ctx->stream_id = h.stream_id;
		ctx->instance = h.stream_instance_id;
		s->stream_class = h.stream_id;
		s->instance = h.stream_instance_id;
		s->shared = m.shared_stream(h.stream_id);
	}
	ctx->ts_begin = h.timestamp_begin;
	push_packet(s, PacketEntry{off, h.packet_size / 8, h.content_size / 8, h.timestamp_begin,
				   h.timestamp_end, h.packet_seq_num, h.events_discarded, h.lane_id, h.vtid});
}

void TraceReader::set_window(int64_t begin_ns, int64_t end_ns)
{
	win_begin_ = begin_ns;
	win_end_ = end_ns;
}

void TraceReader::set_stream_filter(std::function<bool(const StreamInfo &)> keep)
{
	keep_ = std::move(keep);
}

// The loss packet `e` reveals against the cursor's previous packet: a gap
// in the sequence numbers (packets), a rise of the cumulative count (events),
// as babeltrace2 reports them.
void TraceReader::queue_loss(Cursor &c, const PacketEntry &e)
{
	const TraceMeta &m = c.s->trace->meta;
	const int64_t at = m.ns_from_origin(c.prev ? c.prev->ts_end : e.ts_begin);
	TraceMsg msg;
	msg.stream = c.s;
	msg.begin_ns = at;
	if (c.prev && e.seq > c.prev->seq + 1) {
		msg.kind = TraceMsgKind::DiscardedPackets;
		msg.count = e.seq - c.prev->seq - 1;
		msg.end_ns = m.ns_from_origin(e.ts_begin);
		stats_.discarded_packets += msg.count;
		c.pending.push_back(msg);
	}
	const uint64_t prev_disc = c.prev ? c.prev->discarded : 0;
	if (e.discarded > prev_disc) {
		msg.kind = TraceMsgKind::DiscardedEvents;
		msg.count = e.discarded - prev_disc;
		msg.end_ns = m.ns_from_origin(e.ts_end);
		stats_.discarded_events += msg.count;
		c.pending.push_back(msg);
	}
}

// The next kMaxDecoded records past those decoded (c.ro < c.rend), into
// c.recs: stepped through, the walk that loaded the packet having checked
// them.
template <class C> __attribute__((noinline)) void refill(C &c)
{
	const size_t cap = c.recs_cap;
	size_t n = 0;
	while (n < cap && c.ro < c.rend) {
		WalkedRecord r;
		c.walk->step(c.buf.get(), c.rend, c.s->shared, c.rprev, &c.ro, &r);
		c.rprev = r.ts;
		c.recs[n++] = DecodedRecord{r.ts,  (uint32_t)r.payload, (uint32_t)r.end,
					    r.tid, (uint16_t)r.id,      r.cpu};
	}
	c.rp = c.recs.get();
	c.rq = c.rp + n;
}

// Whether the cursor's packet has a record left to deliver.
template <class C> __attribute__((always_inline)) inline bool has_record(const C &c)
{
	return c.rp < c.rq || c.ro < c.rend;
}

namespace {

// The walk's visitor of load_packet(): each good record into the
// cursor's recs, up to their room.
struct DecodeInto : RecordWalk::NoVisit {
	DecodedRecord *p, *full; // the next place, the end of recs
	// The walk's runs hand take() at most room() records;
	// record() gets the others.
	uint64_t room() const { return (uint64_t)(full - p); }
	void record(const WalkedRecord &r)
	{
		if (__builtin_expect(p != full, 1))
			take(r);
	}
	void take(const WalkedRecord &r)
	{
		// Three 8-byte stores (DecodedRecord's layout, little-
		// endian; offsets below 2^32: a packet is at most
		// 64 MiB): in a run of one id the last word is the
		// same for every record of an owned lane; the middle
		// one is a sum, not an or (the same bits), which the
		// compiler keeps across a run, one add a record.
		const uint64_t at = r.payload + (r.end << 32);
		const uint64_t who = (uint32_t)r.tid | (uint64_t)(uint16_t)r.id << 32 | (uint64_t)r.cpu << 48;
		char *d = reinterpret_cast<char *>(p);
		memcpy(d, &r.ts, 8);
		memcpy(d + offsetof(DecodedRecord, payload), &at, 8);
		memcpy(d + offsetof(DecodedRecord, tid), &who, 8);
		p++;
	}
};

} // namespace

// The header of packet e, read from the packet index (the stream's
// from_index): checked as the walk at open checks one, and against the
// entry.  A header that is not a packet of the stream, or whose sizes are
// not the entry's: the packet is skipped, named as damage in place.  One
// whose other values (times, counts, thread) differ: the index is named
// and the header's values are used, as a walk would have found them.
bool TraceReader::indexed_header_ok(Cursor &c, PacketEntry &e)
{
	const TraceMeta &m = c.s->trace->meta;
	strata_packet_header h;
	memcpy(&h, c.buf.get(), sizeof h); // content >= 84 bytes, then the zeroed slack
	HeaderContext ctx;
	ctx.have = true;
	ctx.stream_id = c.s->stream_class;
	ctx.instance = c.s->instance;
	const char *why = check_header(h, m, ctx, e.offset, c.s->size);
	if (!why && (h.packet_size / 8 != e.size || h.content_size / 8 != e.content))
		why = "sizes not those of its packet index entry";
	// The damage named last, as a message in place (resolved in
	// next_slow()), spanning [begin, end].
	auto in_place = [&](uint64_t begin, uint64_t end) {
		TraceMsg msg;
		msg.kind = TraceMsgKind::Damage;
		msg.stream = c.s;
		msg.begin_ns = m.ns_from_origin(begin);
		msg.end_ns = m.ns_from_origin(end);
		msg.count = damages_.size() - 1;
		c.pending.push_back(msg);
	};
	if (why) {
		damage(*c.s, e.offset, e.size,
		       std::string(why) + " (a header its packet index placed; the packet skipped)");
		// As a span the walk skips: from the packet before's end to the
		// one after's beginning.
		const size_t k = (size_t)(&e - c.s->packets.data());
		in_place(c.prev ? c.prev->ts_end : e.ts_begin,
			 k + 1 < c.s->packets.size() ? c.s->packets[k + 1].ts_begin : e.ts_end);
		return false;
	}
	const int32_t vtid = m.record_format == STRATA_REC_COMPACT ? h.vtid : -1;
	if (h.timestamp_begin != e.ts_begin || h.timestamp_end != e.ts_end || h.packet_seq_num != e.seq ||
	    h.events_discarded != e.discarded || h.lane_id != e.lane || vtid != e.vtid) {
		index_damage(ctf_index_path(c.s->path),
			     "the entry of the packet at byte " + std::to_string(e.offset) + " of " +
				     base_name(c.s->path) +
				     " differs from its header; the header's values used");
		in_place(h.timestamp_begin, h.timestamp_begin);
		e.ts_begin = h.timestamp_begin;
		e.ts_end = h.timestamp_end;
		e.seq = h.packet_seq_num;
		e.discarded = h.events_discarded;
		e.lane = h.lane_id;
		e.vtid = vtid;
	}
	return true;
}

// Packet e's content into the cursor's buffer (kTraceEventSlack zero
// bytes after it); false, named as damage, when it cannot be read.
bool TraceReader::read_packet(Cursor &c, PacketEntry &e)
{
	const int fd = ::open(c.s->path.c_str(), O_RDONLY | O_CLOEXEC);
	if (c.buf_cap < e.content + kTraceEventSlack) {
		c.buf_cap = e.content + kTraceEventSlack;
		c.buf.reset(new uint8_t[c.buf_cap]);
	}
	memset(c.buf.get() + e.content, 0, kTraceEventSlack);
	const bool ok = fd >= 0 && read_at(fd, c.buf.get(), e.content, e.offset);
	if (fd >= 0)
		close(fd);
	if (!ok)
		damage(*c.s, e.offset, e.size, "cannot read the packet (file changed?)");
	return ok && (!c.s->from_index || indexed_header_ok(c, e));
}

// What every record of packet e shares, set once (take_record() sets the
// rest): the event given before is done with by now.
void TraceReader::begin_packet(Cursor &c, const PacketEntry &e)
{
	c.prev = &e;
	c.pe = &e;
	c.packet_tid = c.compact && !c.s->shared ? e.vtid : INT32_MIN;
	c.run.tid = c.packet_tid == INT32_MIN;
	c.run.cpu = c.run.tid && !c.compact;
	c.ev.pkt = c.buf.get();
	c.ev.packet = &e;
	c.ev.cpu = -1;
	if (c.packet_tid != INT32_MIN)
		c.ev.tid = c.packet_tid;
	if (c.map) {
		c.piece = c.map->piece_at(e.ts_begin);
		if (c.map->piece_end(c.piece) <= e.ts_end)
			c.piece = SIZE_MAX;
	}
	stats_.packets++;
	stats_.bytes += e.content;
}

// The records, by the consumer's walk: checked and decoded in one pass
// (the first kMaxDecoded kept, the rest stepped through later by
// refill()).  *ts the walk's last time, *why what stopped it (null at the
// content's end); the end of the last good record.
uint64_t TraceReader::decode_packet(Cursor &c, const PacketEntry &e, uint64_t *ts, const char **why)
{
	// Room for every record the content can hold (each takes 4 bytes
	// or more), up to kMaxDecoded: grown to the largest packet's, left
	// uninitialised (pages touched as records fill them).
	const size_t cap = std::min<size_t>(kMaxDecoded, e.content > kHdr ? (e.content - kHdr) / 4 : 0);
	if (c.recs_cap < cap) {
		c.recs.reset(new DecodedRecord[cap]);
		c.recs_cap = cap;
	}
	DecodeInto v;
	v.p = c.recs.get();
	v.full = v.p + cap;
	*ts = e.ts_begin;
	const uint64_t good = c.walk->walk(c.buf.get(), e.content, c.s->shared, e.ts_end, ts, why, v);
	c.rp = c.recs.get();
	c.rq = v.p;
	c.rend = good;
	// Past the records kept (all of them unless recs is full): where
	// refill() goes on from.
	const bool any = c.rq != c.rp;
	c.ro = any ? c.rq[-1].end : good;
	c.rprev = any ? c.rq[-1].ts : e.ts_begin;
	return good;
}

// Across packets, a stream's records never go back in time: the leading
// run of records before the last one delivered (timestamps never go back
// within a walk), skipped; how many.
uint64_t TraceReader::skip_stale(Cursor &c)
{
	uint64_t first = 0;
	if (c.rq != c.rp && c.rp->ts < c.last_ts)
		while (has_record(c)) {
			if (c.rp == c.rq)
				refill(c);
			if (c.rp->ts >= c.last_ts)
				break;
			c.rp++;
			first++;
		}
	return first;
}

// Damage in packet e (records skipped at its start, or the walk stopped
// at byte good): named, and queued as a message at time ts.
void TraceReader::packet_damage(Cursor &c, const PacketEntry &e, uint64_t good, uint64_t ts, bool first,
				const char *why)
{
	damage(*c.s, e.offset + (first ? 0 : good), 0,
	       std::string(why) + (first ? "" : " (packet cut there; the rest of it skipped)"));
	TraceMsg msg;
	msg.kind = TraceMsgKind::Damage;
	msg.stream = c.s;
	msg.begin_ns = msg.end_ns = c.s->trace->meta.ns_from_origin(has_record(c) ? ts : e.ts_begin);
	msg.damage = nullptr; // resolved in read(): damages_ may grow meanwhile
	msg.count = damages_.size() - 1;
	c.pending.push_back(msg);
}

// Loads the cursor's next packet in the window and walks its records;
// queues the loss the packet reveals.  False at the stream's end.
bool TraceReader::load_packet(Cursor &c)
{
	const TraceMeta &m = c.s->trace->meta;
	while (c.next < c.s->packets.size()) {
		PacketEntry &e = c.s->packets[c.next++];
		if (m.ns_from_origin(e.ts_end) < win_begin_ || m.ns_from_origin(e.ts_begin) > win_end_) {
			c.prev = &e;
			continue;
		}
		if (!read_packet(c, e)) {
			if (c.pi < c.pending.size())
				return true; // its damage first (no record of it)
			continue;
		}
		queue_loss(c, e);
		begin_packet(c, e);
		uint64_t ts;
		const char *why = nullptr;
		const uint64_t good = decode_packet(c, e, &ts, &why);
		const uint64_t first = skip_stale(c);
		if (first)
			why = "records before the previous packet's last";
		if (why)
			packet_damage(c, e, good, ts, first != 0, why);
		return true;
	}
	return false;
}

// The packet's next record (c.ro < c.rend) into c.ev: the path of most
// calls of next(), inlined there (C: TraceReader::Cursor, private).
// The rarer parts of take_record, out of line: a time through a clock
// map or another clock's frequency, and the class of a new id.
template <class C> __attribute__((noinline)) int64_t slow_ns(const C &c, uint64_t ts)
{
	if (c.map)
		return c.piece != SIZE_MAX ? c.map->ns_with(c.piece, ts) : c.map->ns(ts);
	return c.s->trace->meta.ns_from_origin(ts);
}

template <class C> __attribute__((always_inline)) inline void take_record(C &c)
{
	if (__builtin_expect(c.rp == c.rq, 0))
		refill(c);
	const DecodedRecord &r = *c.rp++;
	TraceEvent &ev = c.ev;
	ev.ts = r.ts;
	ev.ns = __builtin_expect(!c.map && c.fast_ns, 1) ? c.base_ns + (int64_t)r.ts : slow_ns(c, r.ts);
	ev.cls = r.id < c.ncls ? c.cls[r.id] : nullptr;
	if (c.packet_tid == INT32_MIN) { // else set by load_packet(), with pkt and packet
		ev.tid = r.tid;
		if (!c.compact)
			ev.cpu = r.cpu;
	}
	ev.payload = r.payload;
	ev.end = r.end;
	c.last_ts = r.ts;
	c.key = ev.ns;
}

// Moves the cursor to what comes next; false at the stream's end.
bool TraceReader::next_record(Cursor &c)
{
	for (;;) {
		if (c.pi < c.pending.size()) {
			c.key = c.pending[c.pi].begin_ns;
			return true;
		}
		if (!c.pending.empty()) {
			c.pending.clear();
			c.pi = 0;
		}
		if (has_record(c)) {
			take_record(c);
			return true;
		}
		if (!load_packet(c))
			return false;
	}
}

// A cursor on stream `s` (the i-th), before its first packet.
std::unique_ptr<TraceReader::Cursor> TraceReader::make_cursor(StreamInfo *s, size_t i)
{
	auto c = std::make_unique<Cursor>();
	c->s = s;
	const size_t ti = (size_t)(std::find_if(traces_.begin(), traces_.end(),
						[&](const auto &t) { return t.get() == s->trace; }) -
				   traces_.begin());
	c->walk = walks_[ti].get();
	static const std::map<uint32_t, MetaEvent> kNone;
	const auto &ev = s->trace->meta.events;
	auto it = ev.find(s->trace->meta.stream_id);
	c->classes = it == ev.end() ? &kNone : &it->second;
	// The sub-trace's classes by id, made once: ids of 16 bits (what a
	// DecodedRecord holds; a described id is at most 0xfffe).
	if (cls_tabs_.size() < traces_.size())
		cls_tabs_.resize(traces_.size());
	std::vector<const MetaEvent *> &tab = cls_tabs_[ti];
	if (tab.empty() && !c->classes->empty()) {
		uint32_t top = 0;
		for (const auto &kv : *c->classes)
			if (kv.first <= UINT16_MAX)
				top = std::max(top, kv.first);
		tab.assign((size_t)top + 1, nullptr);
		for (const auto &kv : *c->classes)
			if (kv.first <= UINT16_MAX)
				tab[kv.first] = &kv.second;
	}
	c->cls = tab.data();
	c->ncls = (uint32_t)tab.size();
	c->order = i;
	c->ev.stream = s;
	c->compact = s->trace->meta.record_format == STRATA_REC_COMPACT;
	// ns = offset_s * 1e9 + offset + value where the clock counts ns.
	const MetaClock &clk = s->trace->meta.clock;
	c->map = s->trace->meta.map.get();
	c->fast_ns = !c->map && clk.freq == 1000000000u && clk.offset >= 0 && clk.offset_s >= 0 &&
		     clk.offset_s < INT64_MAX / 4000000000;
	c->base_ns = c->fast_ns ? clk.offset_s * 1000000000 + clk.offset : 0;
	c->run.ev = &c->ev;
	c->run.fast = !c->map && c->fast_ns;
	c->run.base = c->base_ns;
	c->run.cls = c->cls;
	c->run.ncls = c->ncls;
	return c;
}

bool TraceReader::read(const std::function<bool(const TraceMsg &)> &on)
{
	return read_each(on);
}

void TraceReader::share_index(const TraceReader &from)
{
	traces_ = from.traces_;
	walks_ = from.walks_;
	streams_.clear();
	for (const auto &s : from.streams_)
		streams_.push_back(std::make_unique<StreamInfo>(*s));
	// The index's damage (that found while reading is each pass's own).
	index_damages_ = from.index_damages_;
	damages_.assign(from.damages_.begin(), from.damages_.begin() + (ptrdiff_t)index_damages_);
	stats_ = TraceReadStats();
	stats_.unreadable_traces = from.stats_.unreadable_traces;
	stats_.damaged = damages_.size();
	for (const TraceDamage &d : damages_)
		stats_.damaged_bytes += d.bytes;
}

void TraceReader::start()
{
	if (started_)
		return;
	started_ = true;
	// Index damage first: named in the order found, at the start (their
	// time is not known: the bytes that would say it are the damaged ones).
	index_damage_end_ = damages_.size();
	for (size_t i = 0; i < streams_.size(); i++) {
		StreamInfo *s = streams_[i].get();
		if (s->packets.empty() || (keep_ && !keep_(*s)))
			continue;
		auto c = make_cursor(s, i);
		if (next_record(*c))
			cursors_.push_back(std::move(c));
	}
	for (auto &c : cursors_)
		heap_.push_back(c.get());
	// Sorted when few (heap_down from the last place up: each cursor
	// into the sorted ones after it).
	sorted_ = heap_.size() <= kSortedMax;
	for (size_t i = heap_.size(); i-- > 0;)
		heap_down(i);
}

// The time of a record of advance_'s packet (its clock not in ns from
// the origin, or a map's): as take_record() finds it.
int64_t TraceReader::run_ns(uint64_t ts) const
{
	return slow_ns(*advance_, ts);
}

// advance_ brought up to date with the records the run took: as if each
// went through take_record() (the event's fields already set).
__attribute__((always_inline)) inline void TraceReader::sync_run()
{
	Cursor &c = *advance_;
	if (run_p_ != c.rp) {
		c.rp = run_p_;
		c.last_ts = run_p_[-1].ts;
		c.key = c.ev.ns;
	}
	run_p_ = run_end_ = nullptr;
}

// Event message of cursor t, its run started: t is advance_ and first.
__attribute__((always_inline)) inline void TraceReader::give_event(Cursor &t, TraceMsg *out)
{
	stats_.events++;
	*out = TraceMsg();
	out->kind = TraceMsgKind::Event;
	out->stream = t.s;
	out->event = &t.ev;
	start_run(t);
}

// The run stopped at a record of advance_'s packet: one past the rival's
// time (most often: another stream's event comes next), or of an id no
// class describes.  Taken, and advance_ moved down the heap when the
// rival (the first of the others: they did not move meanwhile) now comes
// first.  (What sync_run() would set of the records given before is set
// again by take_record().)  True with the new first's event in *out;
// false with advance_ cleared: next_slow() goes on.
__attribute__((always_inline)) inline bool TraceReader::take_stopped_run(TraceMsg *out)
{
	Cursor &c = *advance_;
	c.rp = run_p_;
	run_p_ = run_end_ = nullptr;
	take_record(c);
	const Cursor *o = rival_;
	if (o && (o->key < c.key || (o->key == c.key && o->order < c.order))) {
		heap_down(0);
		// Most often the new first has its record taken and nothing
		// pending: given at once (as next_slow()'s loop would give it).
		Cursor &t = *heap_[0];
		if (__builtin_expect(t.pi >= t.pending.size() && t.ev.cls, 1)) {
			advance_ = &t;
			const size_t n = heap_.size();
			rival_ = n < 3 || heap_[1]->key < heap_[2]->key ||
						 (heap_[1]->key == heap_[2]->key &&
						  heap_[1]->order < heap_[2]->order)
					 ? heap_[1]
					 : heap_[2];
			give_event(t, out);
			return true;
		}
	}
	advance_ = nullptr;
	return false;
}

// Moves on from what the previous call gave (advance_, then cleared).
__attribute__((always_inline)) inline void TraceReader::move_on()
{
	Cursor &c = *advance_;
	advance_ = nullptr;
	// Most often the packet's next record (inlined); else what is
	// pending, the next packet, or the stream's end.
	if (__builtin_expect(c.pending.empty() && has_record(c), 1))
		take_record(c);
	else if (!next_record(c)) {
		heap_[0] = heap_.back();
		heap_.pop_back();
	}
	// Most often the cursor moved on stays the first (a run of one
	// stream's events): two compares, no sift.
	const size_t n = heap_.size();
	if (n > 1) {
		const Cursor *t = heap_[0];
		auto before = [t](const Cursor *o) {
			return o->key < t->key || (o->key == t->key && o->order < t->order);
		};
		if (before(heap_[1]) || (n > 2 && before(heap_[2])))
			heap_down(0);
	}
}

bool TraceReader::next_slow(TraceMsg *out)
{
	if (run_p_ != run_end_) {
		if (take_stopped_run(out))
			return true;
	} else if (run_p_) {
		sync_run();
	}
	if (!started_)
		start();
	if (index_damage_next_ < index_damage_end_) {
		*out = TraceMsg();
		out->kind = TraceMsgKind::Damage;
		out->damage = &damages_[index_damage_next_++];
		return true;
	}
	for (;;) {
		if (advance_)
			move_on();
		if (heap_.empty())
			return false;
		Cursor &c = *heap_[0];
		advance_ = &c;
		const size_t n = heap_.size();
		rival_ = n < 2 ? nullptr
			 : n < 3 || heap_[1]->key < heap_[2]->key ||
					 (heap_[1]->key == heap_[2]->key && heap_[1]->order < heap_[2]->order)
				 ? heap_[1]
				 : heap_[2];
		if (c.pi < c.pending.size()) {
			TraceMsg &p = c.pending[c.pi++];
			if (p.kind == TraceMsgKind::Damage)
				p.damage = &damages_[p.count];
			*out = p;
			return true;
		}
		if (!c.ev.cls)
			continue; // an id no class describes (the walk let it through)
		give_event(c, out);
		return true;
	}
}

void TraceReader::check_packets(const std::function<void(const StreamInfo &, const PacketEntry &, uint64_t,
							 const char *, const std::vector<uint8_t> &)> &on)
{
	std::vector<uint8_t> buf;
	for (size_t i = 0; i < streams_.size(); i++) {
		const StreamInfo &s = *streams_[i];
		const size_t ti = (size_t)(std::find_if(traces_.begin(), traces_.end(),
							[&](const auto &t) { return t.get() == s.trace; }) -
					   traces_.begin());
		RecordWalk *walk = walks_[ti].get();
		const int fd = ::open(s.path.c_str(), O_RDONLY | O_CLOEXEC);
		uint64_t last_ts = 0;
		for (const PacketEntry &e : s.packets) {
			buf.resize(e.size);
			if (fd < 0 || !read_at(fd, buf.data(), e.size, e.offset)) {
				on(s, e, 88, "cannot read the packet", buf);
				continue;
			}
			RecordWalk::NoVisit v;
			uint64_t ts = std::max(e.ts_begin, last_ts);
			const char *why = nullptr;
			const uint64_t good =
				walk->walk(buf.data(), e.content, s.shared, e.ts_end, &ts, &why, v);
			if (e.ts_begin < last_ts && !why && good > kHdr)
				why = "records before the previous packet's last";
			last_ts = std::max(last_ts, ts);
			on(s, e, good, why, buf);
		}
		if (fd >= 0)
			close(fd);
	}
}

} // namespace strata
