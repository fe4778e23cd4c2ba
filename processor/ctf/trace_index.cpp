// trace_index.cpp - opening a trace: finding its sub-traces, reading
// their metadata and clock maps, and each stream's packet index (walked
// from the headers, or taken from index/<stream>.idx and checked against
// the file); contract in trace_reader.h.
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "ctf_index.h"
#include "packet_file.h"
#include "strata_abi.h"
#include "trace_reader.h"

namespace strata {
namespace fs = std::filesystem;
using packet_file::base_name;
using packet_file::check_header;
using packet_file::kHdr;
using packet_file::read_at;

namespace {

constexpr uint64_t kMaxMetadata = 64u << 20;
constexpr uint64_t kMaxIndex = 1ull << 30; // 80 bytes a packet: 13 M packets
constexpr uint64_t kScanChunk = 1u << 20;
const uint8_t kMagic[4] = {0xC1, 0x1F, 0xFC, 0xC1}; // STRATA_CTF_MAGIC, little-endian

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

} // namespace

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
} // namespace strata
