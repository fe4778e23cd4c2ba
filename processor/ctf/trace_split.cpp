// trace_split.cpp - a follower's sub-trace split by clock piece; contract in
// trace_split.h, design in docs/clocks.md ("babeltrace2 across a step").
#include "trace_split.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <map>
#include <sys/stat.h>
#include <unistd.h>

#include "clock_map.h"
#include "ctf_index.h"
#include "record_walk.h"
#include "strata_abi.h"
#include "trace_meta.h"
#include "trace_reader.h"

namespace strata {

namespace {

namespace fs = std::filesystem;
constexpr uint64_t kHdr = STRATA_PACKET_HEADER_SIZE;
constexpr size_t kMaxMetadata = 64u << 20;

// One part of a stream file bound for one piece: a whole packet (copied as
// it is), or a run of a cut packet's records under a new header.
struct Part {
	size_t piece = 0;
	uint64_t ts_begin = 0;
	uint64_t off = 0, len = 0; // the bytes in the source file (a cut part: its records)
	bool cut = false;
	strata_packet_header h{}; // a cut part's new header
};

struct FilePlan {
	std::string name;
	std::vector<Part> parts;
	bool whole = false; // damaged: stays in the base as it is
};

bool read_at(int fd, void *p, size_t n, uint64_t off)
{
	auto *c = static_cast<uint8_t *>(p);
	while (n) {
		const ssize_t r = pread(fd, c, n, static_cast<off_t>(off));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return false;
		c += r, n -= static_cast<size_t>(r), off += static_cast<uint64_t>(r);
	}
	return true;
}

bool read_text(int dirfd, const char *name, std::string *out)
{
	const int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) > kMaxMetadata) {
		if (fd >= 0)
			close(fd);
		return false;
	}
	out->resize(static_cast<size_t>(st.st_size));
	const bool ok = out->empty() || read_at(fd, &(*out)[0], out->size(), 0);
	close(fd);
	return ok;
}

// A whole file `name` in dirfd, written beside it and renamed over it.
bool put_text(int dirfd, const char *name, const std::string &text, const SplitOwner &own, std::string *err)
{
	const std::string tmp = std::string(".") + name + ".split";
	const int fd =
		openat(dirfd, tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0640);
	if (fd < 0 || !write_whole(fd, text.data(), text.size()) ||
	    renameat(dirfd, tmp.c_str(), dirfd, name) != 0) {
		*err = std::string("cannot write ") + name + ": " + strerror(errno);
		if (fd >= 0)
			close(fd);
		unlinkat(dirfd, tmp.c_str(), 0);
		return false;
	}
	own.apply(fd);
	close(fd);
	return true;
}

size_t piece_of(const std::vector<CtfPiece> &p, uint64_t x)
{
	const int64_t v = x > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(x);
	size_t i = 0;
	while (i + 1 < p.size() && p[i + 1].from <= v)
		i++;
	return i;
}

// Whether the packet header h at off checks (size the file's size,
// prev_begin the previous packet's timestamp_begin).
bool header_checks(const strata_packet_header &h, uint64_t off, uint64_t size, uint64_t prev_begin,
		   const TraceMeta &m)
{
	return h.magic == STRATA_CTF_MAGIC && h.packet_size % 8 == 0 && h.content_size % 8 == 0 &&
	       h.content_size <= h.packet_size && h.content_size / 8 >= kHdr - 4 &&
	       h.packet_size / 8 <= STRATA_MAX_SUBBUF_SIZE && h.packet_size / 8 <= size - off &&
	       h.timestamp_begin <= h.timestamp_end && h.timestamp_begin >= prev_begin &&
	       m.known_stream(h.stream_id);
}

// A packet's records by piece, as the walk gives them: each run's first
// record, its piece and its last time.
struct PieceRuns {
	const std::vector<CtfPiece> &pieces;
	std::vector<WalkedRecord> firsts; // each run's first record
	std::vector<size_t> run_piece;
	uint64_t last_ts = 0;
	std::vector<uint64_t> run_last_ts;
	void record(const WalkedRecord &r)
	{
		const size_t p = piece_of(pieces, r.ts);
		if (run_piece.empty() || run_piece.back() != p) {
			if (!run_piece.empty())
				run_last_ts.push_back(last_ts);
			firsts.push_back(r);
			run_piece.push_back(p);
		}
		last_ts = r.ts;
	}
	bool undescribed() { return false; }
};

// A packet not walked to its end, or in one piece after all: whole, in
// the piece of its first record.  Opened before that piece began (a
// packet open across the step whose records all came after it), it gets
// that record's value as its timestamp_begin, so that it begins inside
// its piece's range (a reader skips a packet outside it).
Part one_piece_part(Part whole, const PieceRuns &runs, const strata_packet_header &h, uint64_t content,
		    SplitStats *st)
{
	const size_t pa = whole.piece;
	if (!runs.run_piece.empty())
		whole.piece = runs.run_piece.front();
	if (whole.piece != pa) {
		whole.cut = true;
		whole.off += kHdr;
		whole.len = content - kHdr;
		whole.h = h;
		whole.h.timestamp_begin = runs.firsts.front().ts;
		whole.h.content_size = content * 8;
		whole.h.packet_size = whole.h.content_size;
		whole.ts_begin = whole.h.timestamp_begin;
		st->packets_cut++;
	}
	return whole;
}

// A packet at off whose runs lie in two pieces or more: a part per run,
// each under a header of its own.
void cut_parts(const PieceRuns &runs, const strata_packet_header &h, uint64_t off, uint64_t content,
	       FilePlan *plan)
{
	for (size_t i = 0; i < runs.run_piece.size(); i++) {
		Part p;
		p.piece = runs.run_piece[i];
		p.cut = true;
		const uint64_t b = i == 0 ? kHdr : runs.firsts[i].start;
		const uint64_t e = i + 1 < runs.run_piece.size() ? runs.firsts[i + 1].start : content;
		p.off = off + b;
		p.len = e - b;
		p.h = h;
		p.h.timestamp_begin = i == 0 ? h.timestamp_begin : runs.firsts[i].ts;
		p.h.timestamp_end = i + 1 < runs.run_piece.size() ? runs.run_last_ts[i] : h.timestamp_end;
		p.h.content_size = (kHdr + p.len) * 8;
		p.h.packet_size = p.h.content_size;
		p.ts_begin = p.h.timestamp_begin;
		plan->parts.push_back(p);
	}
}

// The parts of one stream file; false (plan->whole) when a header does not
// check: the file then stays as it is.
void plan_file(int fd, uint64_t size, const TraceMeta &m, RecordWalk &walk,
	       const std::vector<CtfPiece> &pieces, FilePlan *plan, SplitStats *st)
{
	std::vector<uint8_t> buf;
	uint64_t prev_begin = 0;
	for (uint64_t off = 0; off < size;) {
		strata_packet_header h;
		if (size - off < kHdr || !read_at(fd, &h, sizeof h, off) ||
		    !header_checks(h, off, size, prev_begin, m)) {
			plan->whole = true;
			plan->parts.clear();
			return;
		}
		prev_begin = h.timestamp_begin;
		const uint64_t psize = h.packet_size / 8, content = h.content_size / 8;
		const size_t pa = piece_of(pieces, h.timestamp_begin), pb = piece_of(pieces, h.timestamp_end);
		Part whole;
		whole.piece = pa;
		whole.ts_begin = h.timestamp_begin;
		whole.off = off;
		whole.len = psize;
		off += psize;
		if (pa == pb || content <= kHdr) {
			plan->parts.push_back(whole);
			continue;
		}
		// Records in two pieces or more: the record boundaries by the
		// consumer's walk, cut where the piece changes.
		buf.resize(content);
		if (!read_at(fd, buf.data(), content, whole.off)) {
			plan->parts.push_back(whole);
			continue;
		}
		PieceRuns runs{pieces, {}, {}, 0, {}};
		uint64_t ts = h.timestamp_begin;
		const char *why = nullptr;
		const uint64_t end = walk.walk(buf.data(), content, m.shared_stream(h.stream_id),
					       h.timestamp_end, &ts, &why, runs);
		if (end != content || runs.run_piece.size() < 2) {
			plan->parts.push_back(one_piece_part(whole, runs, h, content, st));
		} else {
			runs.run_last_ts.push_back(runs.last_ts);
			st->packets_cut++;
			cut_parts(runs, h, whole.off, content, plan);
		}
	}
}

bool copy_bytes(int in, uint64_t off, uint64_t len, int out, std::vector<uint8_t> *buf)
{
	buf->resize(1u << 20);
	while (len) {
		const size_t n = static_cast<size_t>(std::min<uint64_t>(len, buf->size()));
		if (!read_at(in, buf->data(), n, off) || !write_whole(out, buf->data(), n))
			return false;
		off += n, len -= n;
	}
	return true;
}

bool write_part(int in, const Part &p, int out, std::vector<uint8_t> *buf)
{
	if (p.cut && !write_whole(out, &p.h, sizeof p.h))
		return false;
	return copy_bytes(in, p.off, p.len, out, buf);
}

// The timestamp_begin of the last packet of a stream file (0: none): a
// piece dir's file appended to again skips what it holds (a split that a
// kill interrupted before the base was cut).
uint64_t last_begin(int fd)
{
	struct stat st;
	if (fstat(fd, &st) != 0)
		return 0;
	uint64_t last = 0;
	for (uint64_t off = 0; off + kHdr <= static_cast<uint64_t>(st.st_size);) {
		strata_packet_header h;
		if (!read_at(fd, &h, sizeof h, off) || h.magic != STRATA_CTF_MAGIC ||
		    h.packet_size / 8 < kHdr)
			break;
		last = h.timestamp_begin;
		off += h.packet_size / 8;
	}
	return last;
}

std::string range_env(const std::vector<CtfPiece> &pieces, size_t k, bool open_ended)
{
	std::string s = "\tsync_piece = " + std::to_string(pieces[k].segment) + ";\n";
	if (k > 0)
		s += "\tsync_piece_from = " + std::to_string(pieces[k].from) + ";\n";
	if (!open_ended && k + 1 < pieces.size())
		s += "\tsync_piece_to = " + std::to_string(pieces[k + 1].from) + ";\n";
	return s;
}

struct Fd {
	int fd = -1;
	explicit Fd(int f) : fd(f) {}
	~Fd()
	{
		if (fd >= 0)
			close(fd);
	}
	Fd(const Fd &) = delete;
	Fd &operator=(const Fd &) = delete;
};

} // namespace

bool is_piece_dir(const std::string &dir)
{
	return piece_dir_base(dir, nullptr);
}

std::string drop_trace_uuid(const std::string &text)
{
	const size_t tb = text.find("\ntrace {\n");
	if (tb == std::string::npos)
		return text;
	const size_t te = text.find("\n};\n", tb);
	const size_t u = text.find("\n\tuuid = \"", tb);
	if (u == std::string::npos || u > te)
		return text;
	const size_t ue = text.find('\n', u + 1);
	return text.substr(0, u) + text.substr(ue);
}

namespace {

// A sub-trace being split: its directory and its parent's, open; its
// metadata's text and parse.
struct SubDirs {
	std::string parent, leaf;
	Fd pfd{-1}, dfd{-1};
	std::string text;
	TraceMeta m;
};

bool open_subtrace(const std::string &dir, SubDirs *d, std::string *err)
{
	const fs::path base(dir);
	d->parent = base.parent_path().string();
	d->leaf = base.filename().string();
	struct stat dst;
	if (lstat(dir.c_str(), &dst) != 0 || !S_ISDIR(dst.st_mode)) {
		*err = dir + ": not a directory";
		return false;
	}
	d->pfd.fd = open(d->parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	d->dfd.fd = d->pfd.fd >= 0 ? openat(d->pfd.fd, d->leaf.c_str(),
					    O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW)
				   : -1;
	if (d->dfd.fd < 0) {
		*err = "cannot open " + dir + ": " + strerror(errno);
		return false;
	}
	std::string why;
	if (!read_text(d->dfd.fd, "metadata", &d->text) || !parse_trace_meta(d->text, &d->m, &why)) {
		*err = dir + "/metadata: " + (why.empty() ? "cannot read it" : why);
		return false;
	}
	return true;
}

// The plan: every stream file's parts, by piece (sorted by name); the
// base's piece, the latest that has a packet.
size_t plan_files(const std::string &dir, const SubDirs &d, const std::vector<CtfPiece> &pieces,
		  std::vector<FilePlan> *plans, SplitStats *st)
{
	RecordWalk walk(d.m.record_format);
	if (auto cls = d.m.events.find(d.m.stream_id); cls != d.m.events.end())
		for (const auto &kv : cls->second)
			walk.add(kv.second.info);
	std::error_code ec;
	for (fs::directory_iterator it(fs::path(dir), ec); !ec && it != fs::directory_iterator();
	     it.increment(ec)) {
		const std::string name = it->path().filename().string();
		if (name == "metadata" || name.empty() || name[0] == '.' || !it->is_regular_file(ec))
			continue;
		plans->push_back(FilePlan{name, {}, false});
	}
	std::sort(plans->begin(), plans->end(),
		  [](const FilePlan &a, const FilePlan &b) { return a.name < b.name; });
	size_t keep = 0;
	bool any = false;
	for (FilePlan &f : *plans) {
		Fd fd(openat(d.dfd.fd, f.name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
		struct stat fst;
		if (fd.fd < 0 || fstat(fd.fd, &fst) != 0) {
			f.whole = true;
			continue;
		}
		plan_file(fd.fd, static_cast<uint64_t>(fst.st_size), d.m, walk, pieces, &f, st);
		if (f.whole)
			st->whole_files.push_back(dir + "/" + f.name);
		for (const Part &p : f.parts)
			keep = std::max(keep, p.piece), any = true;
	}
	return any ? keep : pieces.size() - 1; // nothing recorded yet: later appends are the latest piece's
}

// Piece k's directory pname, split before and given no packet now: its
// metadata onto the piece's line as the map gives it now (a refined map:
// `strata align`, which keeps the handovers, so the ranges stay).  Its own
// text (its event classes are those of its packets), only the clock block
// and env lines changed.
bool reline_piece_dir(const SubDirs &d, const std::string &pname, const std::vector<CtfPiece> &pieces,
		      size_t k, const SplitOwner &own, std::string *err)
{
	Fd kfd(openat(d.pfd.fd, pname.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
	std::string old;
	if (kfd.fd < 0 || !read_text(kfd.fd, "metadata", &old))
		return true;
	const std::string mt =
		rewrite_metadata_clock(old, pieces[k].clock, pieces[k].env + range_env(pieces, k, false));
	if (mt != old && !put_text(kfd.fd, "metadata", mt, own, err)) {
		*err = d.parent + "/" + pname + ": " + *err;
		return false;
	}
	return true;
}

// Piece k's parts of file f appended to its copy in piece directory kfd
// (pname), those it holds already skipped.
bool append_parts(const SubDirs &d, int kfd, const std::string &pname, const FilePlan &f, size_t k,
		  const SplitOwner &own, std::vector<uint8_t> *buf, SplitStats *st, std::string *err)
{
	Fd in(openat(d.dfd.fd, f.name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
	Fd out(-1);
	uint64_t held = 0;
	for (const Part &p : f.parts) {
		if (p.piece != k)
			continue;
		if (out.fd < 0) {
			out.fd = openat(kfd, f.name.c_str(),
					O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0640);
			if (out.fd < 0 || in.fd < 0) {
				*err = "cannot create " + d.parent + "/" + pname + "/" + f.name + ": " +
				       strerror(errno);
				return false;
			}
			own.apply(out.fd);
			held = last_begin(out.fd);
		}
		if (held && p.ts_begin <= held)
			continue; // there already
		if (!write_part(in.fd, p, out.fd, buf)) {
			*err = "cannot write " + d.parent + "/" + pname + "/" + f.name + ": " +
			       strerror(errno);
			return false;
		}
		st->packets_moved++;
		st->bytes_moved += p.len;
	}
	return true;
}

// Piece k's directory pname (made, or appended to): its stream files,
// then its metadata (the base's, its uuid dropped, on the piece's line).
bool write_piece_dir(const SubDirs &d, const std::string &pname, const std::vector<FilePlan> &plans,
		     const std::vector<CtfPiece> &pieces, size_t k, const SplitOwner &own,
		     std::vector<uint8_t> *buf, SplitStats *st, std::string *err)
{
	if (mkdirat(d.pfd.fd, pname.c_str(), 0750) != 0 && errno != EEXIST) {
		*err = "cannot create " + d.parent + "/" + pname + ": " + strerror(errno);
		return false;
	}
	Fd kfd(openat(d.pfd.fd, pname.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
	if (kfd.fd < 0) {
		*err = "cannot open " + d.parent + "/" + pname + ": " + strerror(errno);
		return false;
	}
	for (const FilePlan &f : plans)
		if (!append_parts(d, kfd.fd, pname, f, k, own, buf, st, err))
			return false;
	const std::string mt = rewrite_metadata_clock(drop_trace_uuid(d.text), pieces[k].clock,
						      pieces[k].env + range_env(pieces, k, false));
	if (!put_text(kfd.fd, "metadata", mt, own, err)) {
		*err = d.parent + "/" + pname + ": " + *err;
		return false;
	}
	st->dirs_made++;
	return true;
}

// Stream file f of the base cut to piece keep's parts (removed when it has
// none).  Its index (index/<name>.idx, the consumer's or a relayd's, which
// babeltrace2 trusts over a scan) no longer matches: gone before the file
// changes, made again from the new file's headers after (ctf_index.h).
bool cut_base_file(const std::string &dir, const SubDirs &d, const FilePlan &f, size_t keep,
		   const SplitOwner &own, std::vector<uint8_t> *buf, std::string *err)
{
	const int dfd = d.dfd.fd;
	Fd in(openat(dfd, f.name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
	bool left = false;
	for (const Part &p : f.parts)
		left |= p.piece == keep;
	const std::string idx = "index/" + f.name + ".idx";
	const bool indexed = faccessat(dfd, idx.c_str(), F_OK, AT_SYMLINK_NOFOLLOW) == 0;
	if (!left) {
		unlinkat(dfd, idx.c_str(), 0);
		unlinkat(dfd, f.name.c_str(), 0);
		return true;
	}
	const std::string tmp = "." + f.name + ".split";
	Fd out(openat(dfd, tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0640));
	bool ok = in.fd >= 0 && out.fd >= 0;
	for (const Part &p : f.parts)
		if (ok && p.piece == keep)
			ok = write_part(in.fd, p, out.fd, buf);
	if (ok)
		own.apply(out.fd);
	if (ok)
		unlinkat(dfd, idx.c_str(), 0);
	if (!ok || renameat(dfd, tmp.c_str(), dfd, f.name.c_str()) != 0) {
		*err = "cannot rewrite " + dir + "/" + f.name + ": " + strerror(errno);
		unlinkat(dfd, tmp.c_str(), 0);
		return false;
	}
	struct stat st;
	const int r = indexed && fstatat(dfd, f.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0
			      ? rebuild_ctf_index(dir + "/" + f.name, static_cast<uint64_t>(st.st_size))
			      : 0;
	if (r < 0) {
		*err = "cannot write the index of " + dir + "/" + f.name + ": " + strerror(-r);
		return false;
	}
	if (indexed) {
		Fd ifd(openat(dfd, idx.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
		if (ifd.fd >= 0)
			own.apply(ifd.fd);
	}
	return true;
}

// The base: its metadata onto its piece's line (from then on a reader
// skips what moved), then each stream file cut to its piece's parts.  A
// damaged file stayed whole: no range then (its earlier packets are still
// here).
bool cut_base(const std::string &dir, const SubDirs &d, const std::vector<FilePlan> &plans,
	      const std::vector<CtfPiece> &pieces, size_t keep, const SplitOwner &own,
	      std::vector<uint8_t> *buf, std::string *err)
{
	bool damaged = false;
	for (const FilePlan &f : plans)
		damaged |= f.whole;
	const std::string bt = rewrite_metadata_clock(
		d.text, pieces[keep].clock,
		pieces[keep].env + (damaged ? std::string() : range_env(pieces, keep, true)));
	if (bt != d.text && !put_text(d.dfd.fd, "metadata", bt, own, err)) {
		*err = dir + ": " + *err;
		return false;
	}
	for (const FilePlan &f : plans) {
		bool moves = false;
		for (const Part &p : f.parts)
			moves |= p.piece != keep || p.cut; // a cut part that stays: its new header
		if (!f.whole && moves && !cut_base_file(dir, d, f, keep, own, buf, err))
			return false;
	}
	return true;
}

} // namespace

bool split_subtrace(const std::string &dir, const std::vector<CtfPiece> &pieces, SplitStats *st,
		    std::string *err, const SplitOwner &own, bool reline)
{
	if (pieces.empty())
		return true;
	SubDirs d;
	if (!open_subtrace(dir, &d, err))
		return false;
	std::vector<FilePlan> plans;
	const size_t keep = plan_files(dir, d, pieces, &plans, st);
	// Each earlier piece's directory: its stream files, then its metadata.
	std::vector<uint8_t> buf;
	for (size_t k = 0; k < keep; k++) {
		bool has = false;
		for (const FilePlan &f : plans)
			for (const Part &p : f.parts)
				has |= p.piece == k;
		const std::string pname = d.leaf + "~seg" + std::to_string(pieces[k].segment);
		if (!has && reline && !reline_piece_dir(d, pname, pieces, k, own, err))
			return false;
		if (has && !write_piece_dir(d, pname, plans, pieces, k, own, &buf, st, err))
			return false;
	}
	return cut_base(dir, d, plans, pieces, keep, own, &buf, err);
}

} // namespace strata

namespace strata {

std::vector<CtfPiece> ctf_pieces(const std::vector<SegmentLine> &segs, size_t n_segs, const MapNames &names,
				 const ClockInfo &local)
{
	std::vector<CtfPiece> v;
	if (names.peer_boot_id.empty())
		return v;
	const auto line = [](const SegmentLine &s) {
		ClockPiece l;
		l.x0 = s.x0;
		l.y0 = s.y0;
		l.slope = s.slope;
		return l;
	};
	const SegmentLine *prev = nullptr;
	for (const SegmentLine &s : segs) {
		CtfPiece p;
		p.segment = s.index;
		// From the handover, as clock_map.h's pieces: an event in the gap
		// goes to the side of the step the reader puts it on.
		p.from = !prev ? INT64_MIN : piece_handover(line(*prev), prev->x_last, line(s), s.x_first);
		if (prev && s.piece_from > prev->x_last && s.piece_from <= s.x_first)
			p.from = s.piece_from; // stored: a refinement keeps the split's
		segment_clock(s, n_segs, names, local, &p.clock, &p.env);
		v.push_back(std::move(p));
		prev = &s;
	}
	return v;
}

namespace {

// The sub-trace directories under top (piece dirs aside), those of `only`
// alone when given, sorted; listed first: a split makes directories.
bool subtrace_dirs(const std::filesystem::path &top, const std::string &root,
		   const std::vector<std::string> *only, std::vector<std::string> *dirs, std::string *err)
{
	std::error_code ec;
	for (auto it = fs::recursive_directory_iterator(top, ec);
	     !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
		if (it->path().filename() == "metadata" && it->is_regular_file(ec) &&
		    !is_piece_dir(it->path().parent_path().string()))
			dirs->push_back(it->path().parent_path().string());
	if (ec) {
		*err = "cannot list " + root + ": " + ec.message();
		return false;
	}
	if (only) {
		std::vector<std::string> mine;
		for (const std::string &o : *only)
			mine.push_back(fs::absolute(fs::path(o), ec).lexically_normal().string());
		std::sort(mine.begin(), mine.end());
		dirs->erase(std::remove_if(dirs->begin(), dirs->end(),
					   [&](const std::string &d) {
						   return !std::binary_search(mine.begin(), mine.end(), d);
					   }),
			    dirs->end());
	}
	std::sort(dirs->begin(), dirs->end());
	return true;
}

// A clocks.json's map of one link, as pieces; why when it cannot be used.
struct TreeMap {
	bool ok = false;
	std::string why;
	std::vector<CtfPiece> pieces;
};

void load_tree_map(const std::string &cj, const std::string &link, TreeMap *mp)
{
	std::string jtext;
	ClockMap cm;
	Fd jfd(open(cj.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
	struct stat jst;
	if (jfd.fd < 0 || fstat(jfd.fd, &jst) != 0 || static_cast<uint64_t>(jst.st_size) > kMaxMetadata) {
		mp->why = "cannot read it";
		return;
	}
	jtext.resize(static_cast<size_t>(jst.st_size));
	if (!jtext.empty() && !read_at(jfd.fd, &jtext[0], jtext.size(), 0))
		mp->why = "cannot read it";
	else if (parse_clock_map(jtext, link, &cm, &mp->why))
		mp->pieces = ctf_pieces(cm.lines, cm.n_segments, cm.names, ClockInfo());
	if (mp->why.empty() && mp->pieces.empty())
		mp->why = "it names no reference boot id";
	mp->ok = mp->why.empty();
}

// Sub-trace d's map: null (said in out's notes) when it is not a
// follower's, is on its own clock, or has no usable clocks.json in the
// trace.
const TreeMap *map_of(const std::string &d, const std::filesystem::path &top, const TraceMeta &m,
		      std::map<std::pair<std::string, std::string>, TreeMap> &maps, TreeSplit *out)
{
	const std::string link = m.env_string("sync_peer");
	if (link.empty())
		return nullptr; // not a follower's sub-trace (a reference's, or no link)
	if (m.env_string("sync_state") != "correlated") {
		out->skipped++;
		out->notes.push_back(d + ": on its own clock (sync_state \"" + m.env_string("sync_state") +
				     "\": the follower's rewrite never came): left as it is");
		return nullptr;
	}
	// The clocks.json of the trace (within root: one above it is
	// another trace's).
	const std::string cj = find_clocks_json(d);
	const std::string rel = cj.empty() ? std::string() : fs::path(cj).lexically_relative(top).string();
	if (cj.empty() || rel.empty() || rel.rfind("..", 0) == 0) {
		out->skipped++;
		out->notes.push_back(d + ": no clocks.json in the trace: left on its metadata's one line");
		return nullptr;
	}
	TreeMap &mp = maps[{cj, link}];
	if (!mp.ok && mp.why.empty())
		load_tree_map(cj, link, &mp);
	if (!mp.ok) {
		out->skipped++;
		out->notes.push_back(d + ": " + cj + ": " + mp.why + ": left on its metadata's one line");
		return nullptr;
	}
	return &mp;
}

// Sub-trace d (its metadata fd and text) by its map: onto the one line of
// a one-piece map (when reline asks), else split; false with *err (the
// first failure's) when it could not be.
bool split_by_map(const std::string &d, int dfd, const std::string &text, const TreeMap &mp, bool reline,
		  TreeSplit *out, std::string *err, bool first)
{
	std::string e;
	if (mp.pieces.size() < 2) {
		out->one_piece++;
		// Its metadata onto the one line the map gives now (a refined
		// map), when asked.
		const std::string nt = rewrite_metadata_clock(text, mp.pieces[0].clock, mp.pieces[0].env);
		if (!reline || nt == text)
			return true;
		if (!put_text(dfd, "metadata", nt, SplitOwner(), &e)) {
			out->notes.push_back(d + ": " + e);
			if (first)
				*err = d + ": " + e;
			return false;
		}
		out->relined++;
		return true;
	}
	const size_t whole = out->st.whole_files.size();
	const bool done = split_subtrace(d, mp.pieces, &out->st, &e, SplitOwner(), reline);
	for (size_t i = whole; i < out->st.whole_files.size(); i++)
		out->notes.push_back(
			out->st.whole_files[i] +
			": a packet header does not check; the file stays whole (on one clock line)");
	if (!done) {
		out->notes.push_back(d + ": cannot split it by clock piece: " + e);
		if (first)
			*err = e;
		return false;
	}
	out->split++;
	return true;
}

} // namespace

bool split_tree(const std::string &root, TreeSplit *out, std::string *err,
		const std::vector<std::string> *only, bool reline)
{
	std::error_code ec;
	const fs::path top = fs::absolute(fs::path(root), ec).lexically_normal();
	std::vector<std::string> dirs;
	if (!subtrace_dirs(top, root, only, &dirs, err))
		return false;
	std::map<std::pair<std::string, std::string>, TreeMap> maps; // by (clocks.json, link)
	bool ok = true;
	for (const std::string &d : dirs) {
		out->subtraces++;
		Fd dfd(open(d.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
		std::string text, why;
		TraceMeta m;
		if (dfd.fd < 0 || !read_text(dfd.fd, "metadata", &text) ||
		    !parse_trace_meta(text, &m, &why)) {
			out->skipped++;
			out->notes.push_back(d + ": its metadata cannot be read (" +
					     (why.empty() ? std::string(strerror(errno)) : why) +
					     "): left as it is");
			continue;
		}
		const TreeMap *mp = map_of(d, top, m, maps, out);
		if (mp && !split_by_map(d, dfd.fd, text, *mp, reline, out, err, ok))
			ok = false;
	}
	return ok;
}

} // namespace strata
