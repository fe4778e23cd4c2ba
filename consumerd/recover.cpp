// Recovering the buffers of a crash descriptor from an ELF core of physical
// memory: see recover.h and docs/crash.md.
#include "recover.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <elf.h>
#include <fcntl.h>
#include <memory>
#include <string>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

#include "strata_crash.h"
#include "strata_abi.h"
#include "control/names.h"
#include "drain.h"
#include "metadata.h"
#include "reader.h"

namespace strata {
namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kMaxBufPages = 1ull << 20; // 4 GiB: more is not a buffer of ours
constexpr size_t kScanChunk = 4u << 20;

// The physical memory an ELF core describes: its PT_LOAD segments.
class Image {
public:
	~Image()
	{
		if (fd_ >= 0)
			close(fd_);
	}
	bool open(const std::string &path, std::string &err);
	// n bytes at physical address pa; bytes a segment declares but does
	// not hold (p_memsz > p_filesz: pages the dumper left out) read as 0.
	// False when some byte is in no segment or cannot be read.
	bool read(uint64_t pa, void *buf, size_t n) const;
	// Page-aligned physical addresses whose first 16 bytes are the
	// descriptor's magic words.
	std::vector<uint64_t> scan() const;

private:
	struct Seg {
		uint64_t pa, off, filesz, memsz;
	};
	int fd_ = -1;
	uint64_t file_size_ = 0;
	std::vector<Seg> segs_; // sorted by pa, not overlapping
	bool pread_all(void *buf, size_t n, uint64_t off) const;
};

bool Image::pread_all(void *buf, size_t n, uint64_t off) const
{
	char *p = (char *)buf;
	while (n) {
		ssize_t r = pread(fd_, p, n, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return false;
		p += r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return true;
}

bool Image::open(const std::string &path, std::string &err)
{
	fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (fd_ < 0 || fstat(fd_, &st) != 0) {
		err = path + ": " + strerror(errno);
		return false;
	}
	file_size_ = (uint64_t)st.st_size;
	Elf64_Ehdr eh;
	if (!pread_all(&eh, sizeof eh, 0) || memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) {
		err = path + ": not an ELF file";
		return false;
	}
	if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB ||
	    eh.e_type != ET_CORE || eh.e_phentsize != sizeof(Elf64_Phdr)) {
		err = path + ": not a 64-bit little-endian ELF core (kdump's /proc/vmcore, qemu's "
			     "dump-guest-memory without -z/-l/-s)";
		return false;
	}
	uint64_t phnum = eh.e_phnum;
	if (phnum == PN_XNUM) { // the real count is in section 0's sh_info
		Elf64_Shdr sh;
		if (eh.e_shoff == 0 || eh.e_shoff > file_size_ || !pread_all(&sh, sizeof sh, eh.e_shoff)) {
			err = path + ": PN_XNUM without section 0";
			return false;
		}
		phnum = sh.sh_info;
	}
	if (eh.e_phoff > file_size_ || phnum > (file_size_ - eh.e_phoff) / sizeof(Elf64_Phdr)) {
		err = path + ": program headers beyond the end of the file";
		return false;
	}
	std::vector<Elf64_Phdr> ph(phnum);
	if (phnum && !pread_all(ph.data(), phnum * sizeof(Elf64_Phdr), eh.e_phoff)) {
		err = path + ": cannot read the program headers";
		return false;
	}
	for (const Elf64_Phdr &p : ph) {
		if (p.p_type != PT_LOAD || p.p_memsz == 0)
			continue;
		// Bytes the file really holds; memsz only grows the zero tail.
		if (p.p_filesz > p.p_memsz || p.p_offset > file_size_ ||
		    p.p_filesz > file_size_ - p.p_offset || p.p_paddr + p.p_memsz < p.p_paddr) {
			fprintf(stderr, "strata recover: segment at 0x%" PRIx64 " ignored (out of bounds)\n",
				(uint64_t)p.p_paddr);
			continue;
		}
		segs_.push_back({p.p_paddr, p.p_offset, p.p_filesz, p.p_memsz});
	}
	// Segments may overlap: kdump's /proc/vmcore describes the kernel's
	// text twice (its own mapping, and inside its RAM range), the same
	// physical bytes.  Sorted by address, larger first on a tie, each
	// segment is cut to start where the previous one ended (dropped when
	// wholly inside it): lookups then see disjoint ranges.
	std::sort(segs_.begin(), segs_.end(),
		  [](const Seg &a, const Seg &b) { return a.pa != b.pa ? a.pa < b.pa : a.memsz > b.memsz; });
	std::vector<Seg> disjoint;
	for (Seg s : segs_) {
		const uint64_t end = disjoint.empty() ? 0 : disjoint.back().pa + disjoint.back().memsz;
		if (!disjoint.empty() && s.pa < end) {
			const uint64_t cut = end - s.pa;
			if (cut >= s.memsz)
				continue;
			s.pa += cut;
			s.off += std::min(cut, s.filesz);
			s.filesz -= std::min(cut, s.filesz);
			s.memsz -= cut;
		}
		disjoint.push_back(s);
	}
	segs_.swap(disjoint);
	if (segs_.empty()) {
		err = path + ": no memory segment";
		return false;
	}
	return true;
}

bool Image::read(uint64_t pa, void *buf, size_t n) const
{
	char *out = (char *)buf;
	while (n) {
		auto it = std::upper_bound(segs_.begin(), segs_.end(), pa,
					   [](uint64_t a, const Seg &s) { return a < s.pa; });
		if (it == segs_.begin())
			return false;
		const Seg &s = *(it - 1);
		const uint64_t in = pa - s.pa;
		if (in >= s.memsz)
			return false;
		size_t k = (size_t)std::min<uint64_t>(n, s.memsz - in);
		if (in < s.filesz) {
			k = (size_t)std::min<uint64_t>(k, s.filesz - in);
			if (!pread_all(out, k, s.off + in))
				return false;
		} else {
			memset(out, 0, k);
		}
		out += k;
		pa += k;
		n -= k;
	}
	return true;
}

std::vector<uint64_t> Image::scan() const
{
	std::vector<uint64_t> found;
	std::vector<uint8_t> chunk(kScanChunk);
	for (const Seg &s : segs_) {
		// The first page-aligned address in the segment's file bytes.
		uint64_t pa = (s.pa + kPage - 1) & ~(kPage - 1);
		while (pa + 16 <= s.pa + s.filesz) {
			const size_t n = (size_t)std::min<uint64_t>(kScanChunk, s.pa + s.filesz - pa);
			if (!pread_all(chunk.data(), n, s.off + (pa - s.pa)))
				break;
			for (size_t o = 0; o + 16 <= n; o += kPage) {
				uint64_t m[2];
				memcpy(m, chunk.data() + o, 16);
				if (m[0] == STRATA_CRASH_MAGIC0 && m[1] == STRATA_CRASH_MAGIC1)
					found.push_back(pa + o);
			}
			pa += n;
		}
	}
	return found;
}

uint64_t fnv(const void *p, size_t n, uint64_t h = 0xcbf29ce484222325ull)
{
	const uint8_t *b = (const uint8_t *)p;
	while (n--)
		h = (h ^ *b++) * 0x100000001b3ull;
	return h;
}

// The descriptor at pa, checked; "" or why not.
std::string load_desc(const Image &img, uint64_t pa, strata_crash_desc &d, bool &clean)
{
	if (!img.read(pa, &d, sizeof d))
		return "not wholly in the image";
	if (d.version != STRATA_CRASH_VERSION || d.size != sizeof d || d.page_size != kPage ||
	    d.max_bufs != STRATA_CRASH_MAX_BUFS)
		return "version " + std::to_string(d.version) + " / size " + std::to_string(d.size) +
		       " not understood";
	strata_crash_desc c = d;
	c.checksum = 0;
	clean = fnv(&c, sizeof c) == d.checksum && d.seq % 2 == 0;
	return "";
}

struct Totals {
	uint64_t buffers = 0, failed = 0, packets = 0, bytes = 0, discarded = 0, dropped = 0;
};

// One described buffer rebuilt in a sealed memfd; -1 with why.
int rebuild(const Image &img, const strata_crash_buf &b, std::string &why, uint64_t &missing)
{
	if (b.n_pages == 0 || b.n_pages > kMaxBufPages || b.total_size != b.n_pages * kPage) {
		why = "impossible size (" + std::to_string(b.n_pages) + " pages)";
		return -1;
	}
	std::vector<uint64_t> pfns(b.n_pages);
	if (!img.read(b.pfns_phys, pfns.data(), b.n_pages * 8)) {
		why = "its page list is not in the image";
		return -1;
	}
	if (fnv(pfns.data(), b.n_pages * 8) != b.pfns_sum) {
		why = "its page list does not match its checksum";
		return -1;
	}
	int fd = memfd_create("strata-recovered", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || ftruncate(fd, (off_t)b.total_size) != 0) {
		why = std::string("memfd: ") + strerror(errno);
		if (fd >= 0)
			close(fd);
		return -1;
	}
	std::vector<uint8_t> page(kPage);
	missing = 0;
	for (uint64_t i = 0; i < b.n_pages; i++) {
		// A frame the dump left out (makedumpfile's exclusions) reads as
		// zeros: the reader then finds no committed data there.
		if (pfns[i] > UINT64_MAX / kPage || !img.read(pfns[i] * kPage, page.data(), kPage)) {
			std::fill(page.begin(), page.end(), 0);
			missing++;
		}
		if (pwrite(fd, page.data(), kPage, (off_t)(i * kPage)) != (ssize_t)kPage) {
			why = std::string("memfd: ") + strerror(errno);
			close(fd);
			return -1;
		}
	}
	fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
	return fd;
}

// Discard mode: a lane's `consumed` word is where the daemon got to, but
// what it took last may never have reached its disk (copied, not yet
// written, when the kernel died), and it is still in the ring: the
// writers reuse a sub-buffer only a lap later.  So the recovered trace
// starts at the oldest sub-buffer the ring still holds: the n_subbuf - 1
// before the one the writers are in (a packet the daemon did write is then
// in both traces).  Our private copy's words only; `info` is validated.
void rewind_lanes(int fd, const Reader &r)
{
	const BufferInfo &info = r.info();
	const uint64_t S = info.subbuf_size;
	for (uint32_t l = 0; l < info.n_lanes; l++) {
		const uint64_t at = info.lanes_offset + (uint64_t)l * sizeof(strata_lane_ctl) +
				    offsetof(strata_lane_ctl, consumed);
		uint64_t consumed = 0;
		if (pread(fd, &consumed, sizeof consumed, (off_t)at) != (ssize_t)sizeof consumed)
			continue;
		const uint64_t in = r.lane_position(l) / S; // the sub-buffer the writers are in
		const uint64_t oldest = in >= info.n_subbuf - 1 ? (in - (info.n_subbuf - 1)) * S : 0;
		if (oldest < consumed)
			pwrite(fd, &oldest, sizeof oldest, (off_t)at);
	}
}

void recover_one(const Image &img, const strata_crash_buf &b, const std::string &out, const ClockInfo &clock,
		 Totals &t)
{
	const bool kernel = b.kind == STRATA_CRASH_KERNEL;
	std::string what =
		"slot " + std::to_string(b.slot) + (kernel ? " kernel" : " pid " + std::to_string(b.pid));
	std::string why;
	uint64_t missing = 0;
	int fd = rebuild(img, b, why, missing);
	if (fd < 0) {
		fprintf(stderr, "strata recover: %s: %s\n", what.c_str(), why.c_str());
		t.failed++;
		return;
	}
	// A second reader of the same bytes for the report (Drain::create
	// takes the fd): validated like any buffer.
	std::unique_ptr<Reader> r = Reader::attach(fd, &why);
	if (!r) {
		fprintf(stderr, "strata recover: %s: %s\n", what.c_str(), why.c_str());
		close(fd);
		t.failed++;
		return;
	}
	const BufferInfo &info = r->info();
	if (info.mode == STRATA_MODE_DISCARD)
		rewind_lanes(fd, *r);
	TraceEnv env;
	std::string dir = out + "/slot" + std::to_string(b.slot);
	if (kernel) {
		env.domain = "kernel";
		env.procname = "kernel";
		dir += "/kernel";
	} else {
		env.procname = info.comm;
		env.pid = b.pid;
		dir += "/ust/pid/" + file_safe(info.comm) + "-" + std::to_string(b.pid);
	}
	const std::string base = dir;
	for (int n = 1; access(dir.c_str(), F_OK) == 0; n++)
		dir = base + "." + std::to_string(n);
	std::unique_ptr<Drain> d = Drain::create(fd, info.uuid, dir, clock, env, Owner(), why, kernel);
	if (!d) {
		fprintf(stderr, "strata recover: %s: %s\n", what.c_str(), why.c_str());
		t.failed++;
		return;
	}
	d->from_dump();
	if (d->overwrite())
		d->stream_overwrite(true); // the whole ring is history: its newest packets
	d->start();
	d->finish(true); // the producer is dead: its in-flight records never complete
	d->join();
	uint64_t discarded = 0;
	for (uint32_t l = 0; l < info.n_lanes; l++)
		discarded += r->lane_discarded(l);
	const DrainCounters &c = d->counters();
	const uint64_t packets = c.packets.load(std::memory_order_relaxed); // relaxed: the drain is joined
	const uint64_t errors = c.errors.load(std::memory_order_relaxed);
	printf("%s (%s, %s): %" PRIu64 " packets, %" PRIu64 " bytes -> %s; %" PRIu64
	       " events discarded by its writers, %" PRIu64 " packets dropped%s\n",
	       what.c_str(), info.comm.c_str(), info.mode == STRATA_MODE_OVERWRITE ? "overwrite" : "discard",
	       packets, c.bytes.load(std::memory_order_relaxed), dir.c_str(), discarded, errors,
	       missing ? (", " + std::to_string(missing) + " pages missing from the image").c_str() : "");
	t.buffers++;
	t.packets += packets;
	t.bytes += c.bytes.load(std::memory_order_relaxed);
	t.discarded += discarded;
	t.dropped += errors;
}

// The descriptor among the candidates: a clean one (even seq, checksum
// right) with the most updates; else one caught mid-change (its entries
// are checked one by one by their own checksums).  False if none loads.
bool pick_descriptor(Image &img, const std::vector<uint64_t> &cands, strata_crash_desc &best,
		     uint64_t &best_pa)
{
	bool have = false, best_clean = false;
	for (uint64_t pa : cands) {
		strata_crash_desc d;
		bool clean = false;
		std::string why = load_desc(img, pa, d, clean);
		if (!why.empty()) {
			fprintf(stderr, "strata recover: descriptor candidate at 0x%" PRIx64 ": %s\n", pa,
				why.c_str());
			continue;
		}
		if (!have || (clean && !best_clean) || (clean == best_clean && d.updates > best.updates)) {
			best = d;
			best_pa = pa;
			best_clean = clean;
		}
		have = true;
	}
	if (!have)
		return false;
	if (cands.size() > 1)
		fprintf(stderr, "strata recover: %zu descriptors found, using the one at 0x%" PRIx64 "\n",
			cands.size(), best_pa);
	if (!best_clean)
		fprintf(stderr, "strata recover: the descriptor was being changed at the crash: "
				"each buffer is checked on its own\n");
	return true;
}

// One clock for every recovered sub-trace: CLOCK_MONOTONIC of the crashed
// kernel, named by the module load's uuid.
ClockInfo crash_clock(const strata_crash_desc &best)
{
	ClockInfo clock;
	clock.uuid = uuid_to_string(best.load_uuid);
	int64_t off = best.realtime_offset_ns;
	clock.offset_s = off / 1000000000;
	clock.offset_ns = off % 1000000000;
	if (clock.offset_ns < 0) {
		clock.offset_ns += 1000000000;
		clock.offset_s -= 1;
	}
	return clock;
}

} // namespace

const cli::Command &recover_command(bool daemon)
{
	static const char kUsage[] = "IMAGE -o DIR [--at PADDR]";
	static const char kAbout[] =
		"Write the Strata buffers a crashed kernel held to CTF traces in DIR\n"
		"(DIR/slot<N>/kernel, DIR/slot<N>/ust/pid/<comm>-<pid>: one trace per session).\n"
		"IMAGE: an ELF core of physical memory: /proc/vmcore in a kdump capture\n"
		"kernel, or qemu's dump-guest-memory (ELF).  The module's crash descriptor is\n"
		"found by scanning (or at PADDR, as printed by the module at load).\n"
		"See docs/crash.md.";
	static const char kExit[] = "Exit status: 0 a buffer recovered, 1 none, 2 usage error.";
	static const cli::Command kCli = {"recover", kUsage, kAbout, "", kExit};
	static const cli::Command kDaemon = {"--recover",       kUsage, kAbout, "", kExit, false,
					     "strata-consumerd"};
	return daemon ? kDaemon : kCli;
}

int recover_parse(const cli::Command &cmd, int argc, char **argv, RecoverArgs *a)
{
	const std::vector<cli::Option> opts = {
		cli::text("output", 'o', "DIR", "a directory", "where the traces go", a->out),
		cli::custom("at", 0, "PADDR", "a physical address",
			    "the crash descriptor's physical address (page-aligned; decimal or 0x hex)",
			    [a](const char *v) {
				    char *end;
				    const unsigned long long pa = strtoull(v, &end, 0);
				    if (!*v || *end || *v == '-' || pa % kPage)
					    return std::string("bad --at '") + v +
						   "' (a page-aligned address)";
				    a->at = pa;
				    a->have_at = true;
				    return std::string();
			    }),
	};
	std::vector<char *> operands;
	if (const int r = cli::parse(cmd, opts, argc, argv, operands); r != cli::kParsed)
		return r;
	if (operands.size() != 1)
		return cli::usage_error(cmd, operands.empty() ? "missing IMAGE" : "one IMAGE only");
	if (a->out.empty())
		return cli::usage_error(cmd, "missing -o DIR");
	a->image = operands[0];
	return cli::kParsed;
}

int recover(const RecoverArgs &a)
{
	Image img;
	std::string err;
	if (!img.open(a.image, err)) {
		fprintf(stderr, "strata recover: %s\n", err.c_str());
		return 1;
	}
	std::vector<uint64_t> cands = a.have_at ? std::vector<uint64_t>{a.at} : img.scan();
	strata_crash_desc best;
	uint64_t best_pa = 0;
	if (!pick_descriptor(img, cands, best, best_pa)) {
		fprintf(stderr, "strata recover: no Strata crash descriptor in %s (was strata.ko loaded?)\n",
			a.image.c_str());
		return 1;
	}
	if (make_dirs(a.out, 0755) != 0) {
		fprintf(stderr, "strata recover: cannot create %s: %s\n", a.out.c_str(), strerror(errno));
		return 1;
	}
	const ClockInfo clock = crash_clock(best);
	printf("crash descriptor at 0x%" PRIx64 " (%" PRIu64 " updates)\n", best_pa, (uint64_t)best.updates);
	Totals t;
	for (const strata_crash_buf &b : best.bufs)
		if (b.kind == STRATA_CRASH_KERNEL || b.kind == STRATA_CRASH_USER)
			recover_one(img, b, a.out, clock, t);
	printf("recovered %" PRIu64 " buffers (%" PRIu64 " failed): %" PRIu64 " packets, %" PRIu64
	       " bytes; %" PRIu64 " events discarded by writers, %" PRIu64 " packets dropped\n",
	       t.buffers, t.failed, t.packets, t.bytes, t.discarded, t.dropped);
	fflush(stdout);
	return t.buffers ? 0 : 1;
}

} // namespace strata
