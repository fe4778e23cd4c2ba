/*
 * output_disk.cpp - the disk output (output.h): one sub-trace directory.
 *
 * Files (dir = <out>/ust/pid/<comm>-<pid>-<date>, or <out>/kernel...):
 *   metadata            TSDL text: written whole at open, then one event
 *                       block appended (one write) per new descriptor batch
 *   <channel>_<lane>    stream files, created on their first packet;
 *                       packets appended whole, several per writev, and a
 *                       short write is cut back to the last whole packet,
 *                       so a file always ends on a packet boundary while we
 *                       run (repair.h covers a killed consumer).
 *                       With STRATA_DIRECT_IO=1 in the daemon's
 *                       environment, where the file system takes O_DIRECT
 *                       (statx's STATX_DIOALIGN on the metadata file,
 *                       Linux 6.1), every packet is padded to its
 *                       alignment (the drain, packet_align) and a drain
 *                       that keeps up writes around the page cache: no
 *                       copy into it, no writeback later, the traced
 *                       system's cache left alone.  A drain falling
 *                       behind (set_behind: a lane's writers a sub-buffer
 *                       ahead) or a file that does not end aligned (a
 *                       resumed one): the page cache (docs/consumerd.md,
 *                       "Writing around the page cache").  Not the
 *                       default: a direct write waits for the disk while
 *                       its sub-buffers are held.
 *                       Blocks are allocated ahead of each stream file's
 *                       end (fallocate, FALLOC_FL_KEEP_SIZE: the size
 *                       stays the bytes written), as much again as the
 *                       file holds, up to 16 MiB (none for a file's first
 *                       write: a small file never holds more than twice
 *                       its bytes in blocks), so that an append
 *                       lands in allocated blocks rather than reserving
 *                       and allocating them one page at a time; the close
 *                       gives back what was not used (a truncation to the
 *                       file's size).  A file system that refuses it: no
 *                       allocation ahead for this sub-trace; no room: the
 *                       writes go on without (docs/consumerd.md, "Blocks
 *                       ahead of the stream files").
 *   index/<channel>_<lane>.idx
 *                       each stream file's packet index (ctf_index.h, the
 *                       format lttng-consumerd writes): created with the
 *                       stream file, its entries appended (one write) after
 *                       each writev, for the packets stored whole.  A
 *                       stream file that already holds packets (a resumed
 *                       sub-trace) gets its index made again from its
 *                       headers first.  An index that cannot be written is
 *                       removed (said in the log): the readers then say
 *                       that the stream has none, rather than trust one
 *                       that lags.
 * A full disk (or EIO, or a directory removed under us) never leaves an
 * unreadable sub-trace: a metadata that cannot be written at open is
 * removed with its directory; an event block that cannot be appended is
 * cut off again (the metadata stays whole) and the drain retries it before
 * any packet; a short write is retried once for its errno, which the error
 * names with the file's path ("cannot write PATH: No space left on
 * device").  Later writes are tried again as they come: recording resumes
 * when space returns, the packets lost meanwhile a gap in the sequence
 * numbers (babeltrace2: discarded packets).  A stream file removed under
 * us (its directory deleted while the session runs: writes to it would go
 * nowhere) is seen before each write (one fstat) and made again, with its
 * directory and the whole metadata (kept in memory), from the next packet
 * on; said once in the daemon's log.
 */
#include "output.h"

#include <cerrno>
#include <cstdio>
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "ctf_index.h"
#include "drain.h"
#include "drain_pool.h"
#include "fs.h"

namespace strata {

namespace {

class DiskOutput : public Output {
public:
	DiskOutput(const std::string &dir, const std::string &channel, uint32_t n_lanes, const Owner &owner,
		   bool resume)
	    : dir_(dir), channel_(channel), owner_(owner), fds_(n_lanes, -1), dfds_(n_lanes, -1),
	      idx_fds_(n_lanes, -1), sizes_(n_lanes, 0), ahead_(n_lanes, 0), tried_(n_lanes, false),
	      resume_(resume)
	{
	}
	~DiskOutput() override { close(); }

	// Every path operation below (open, make_dirs, rename, unlink, rmdir)
	// runs with the session owner's rights (AsOwner, fs.h): a directory
	// of a user's trace swapped for a link never lets root write there.
	bool open(const std::string &text, std::string &err) override
	{
		AsOwner as(owner_);
		if (!as.ok()) {
			err = "cannot take the rights of uid " + std::to_string(owner_.uid) + " to write " +
			      dir_;
			return false;
		}
		int r = make_dirs(dir_, 0750, owner_);
		if (r < 0) {
			err = "cannot create " + dir_ + ": " + strerror(-r);
			return false;
		}
		const std::string path = dir_ + "/metadata";
		if (resume_) {
			const bool ok = replace_metadata(text, err);
			align_ = ok ? direct_align(path) : 1;
			return ok;
		}
		metadata_fd_ = ::open(path.c_str(),
				      O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0640);
		if (metadata_fd_ < 0) {
			err = "cannot create " + path + ": " + strerror(errno);
			rmdir(dir_.c_str()); // ours and empty, or left alone
			return false;
		}
		owner_.apply(metadata_fd_);
		if (!write_all(metadata_fd_, text.data(), text.size())) {
			// An empty or torn metadata makes babeltrace2 refuse the
			// whole session: no sub-trace rather than a broken one.
			err = "cannot write " + path + ": " + strerror(errno);
			::close(metadata_fd_);
			metadata_fd_ = -1;
			unlink(path.c_str());
			rmdir(dir_.c_str());
			return false;
		}
		metadata_size_ = text.size();
		metadata_text_ = text;
		align_ = direct_align(path);
		return true;
	}

	size_t packet_align() const override { return align_; }
	void set_behind(bool behind) override { behind_ = behind; }

	bool append_metadata(const std::string &text, std::string &err) override
	{
		if (metadata_fd_ >= 0 && write_all(metadata_fd_, text.data(), text.size())) {
			metadata_size_ += text.size();
			metadata_text_ += text;
			return true;
		}
		err = "cannot append to " + dir_ + "/metadata: " + strerror(errno);
		// Whole blocks only: a torn one is cut off again.
		if (metadata_fd_ >= 0 && ftruncate(metadata_fd_, static_cast<off_t>(metadata_size_)) < 0)
			err += std::string(" (cannot cut the torn block: ") + strerror(errno) + ")";
		return false;
	}

	size_t write_packets(uint32_t lane, const struct iovec *iov, int n_iov, const size_t *ends,
			     size_t n_pkts, std::string &err) override
	{
		if (lane >= fds_.size() || n_pkts == 0)
			return 0;
		int &fd = fds_[lane];
		const std::string path = dir_ + "/" + channel_ + "_" + std::to_string(lane);
		struct stat st;
		if (fd >= 0 && fstat(fd, &st) == 0 && st.st_nlink == 0 && !remake(err))
			return 0;
		if (fd < 0 && metadata_fd_ < 0 && !metadata_text_.empty() && !remake(err))
			return 0; // an earlier remake failed (no room): again
		if (fd < 0) {
			AsOwner as(owner_);
			fd = as.ok() ? ::open(path.c_str(),
					      O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0640)
				     : -1;
			if (fd < 0) {
				err = "cannot create " + path + ": " + strerror(errno);
				return 0;
			}
			owner_.apply(fd);
			sizes_[lane] = fstat(fd, &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
			ahead_[lane] = sizes_[lane];
			open_index(lane, path);
		}
		allocate_ahead(lane, fd, ends[n_pkts - 1]);
		const int wfd = direct_fd(lane, path, iov, n_iov, ends[n_pkts - 1]);
		ssize_t w;
		do
			w = writev(wfd, iov, n_iov);
		while (w < 0 && errno == EINTR);
		if (w < 0 && wfd != fd && errno == EINVAL) {
			// The file system took the open but not the write: the
			// page cache from now on, this write included.
			direct_refused(path, EINVAL);
			do
				w = writev(fd, iov, n_iov);
			while (w < 0 && errno == EINTR);
		}
		int e = w == 0 ? ENOSPC : errno;
		const size_t total = ends[n_pkts - 1];
		if (w > 0 && static_cast<size_t>(w) < total) {
			// Short (a file system nearly full): the rest once more,
			// which either goes on or says why (ENOSPC, EIO).
			const ssize_t more = write_rest(fd, iov, n_iov, static_cast<size_t>(w));
			if (more > 0)
				w += more;
			else
				e = more < 0 ? errno : ENOSPC;
		}
		size_t done = 0, whole = 0; // bytes and packets written whole
		while (whole < n_pkts && w >= 0 && ends[whole] <= static_cast<size_t>(w))
			done = ends[whole++];
		append_index(lane, path, iov, n_iov, ends, whole);
		sizes_[lane] += done;
		if (whole == n_pkts)
			return whole;
		// Cut the torn packet off again.
		std::string cut;
		if (w > 0 && static_cast<size_t>(w) > done &&
		    ftruncate(fd, static_cast<off_t>(sizes_[lane])) < 0)
			cut = std::string(" (cannot cut the torn packet: ") + strerror(errno) + ")";
		ahead_[lane] = std::min(ahead_[lane], sizes_[lane]); // a cut gives the blocks back
		err = "cannot write " + path + ": " + strerror(e) + cut;
		return whole;
	}

	void close() override
	{
		for (size_t lane = 0; lane < fds_.size(); lane++) {
			int &fd = fds_[lane];
			if (fd < 0)
				continue;
			give_back(lane, fd);
			::close(fd);
			fd = -1;
		}
		for (int &fd : dfds_)
			if (fd >= 0) {
				::close(fd);
				fd = -1;
			}
		for (int &fd : idx_fds_)
			if (fd >= 0) {
				::close(fd);
				fd = -1;
			}
		if (metadata_fd_ >= 0) {
			::close(metadata_fd_);
			metadata_fd_ = -1;
		}
	}

private:
	// The alignment an O_DIRECT write needs on the file system of `path`
	// (offset, length and memory: the largest of the two statx gives)
	// when STRATA_DIRECT_IO=1 asks for direct writes; else 1, as where
	// the file system has none (tmpfs, a kernel before 6.1), which the
	// log says (once per daemon: the user asked for direct writes).
	static size_t direct_align(const std::string &path)
	{
		if (!direct_io_asked())
			return 1;
		struct statx sx;
		memset(&sx, 0, sizeof sx);
		size_t a = 0;
		if (statx(AT_FDCWD, path.c_str(), AT_SYMLINK_NOFOLLOW, STATX_DIOALIGN, &sx) == 0 &&
		    (sx.stx_mask & STATX_DIOALIGN) && sx.stx_dio_offset_align != 0)
			a = std::max(sx.stx_dio_offset_align, sx.stx_dio_mem_align);
		if (a && a <= kMaxPacketAlign && (a & (a - 1)) == 0)
			return a;
		static std::atomic<bool> said{false};
		if (!said.exchange(true, std::memory_order_relaxed)) // a flag alone: orders nothing
			fprintf(stderr,
				"strata-consumerd: STRATA_DIRECT_IO=1: the file system of %s takes no "
				"O_DIRECT "
				"writes (statx gives no alignment up to %zu bytes): written through the page "
				"cache\n",
				path.c_str(), kMaxPacketAlign);
		return 1;
	}

	// Direct writes refused after all (the open, or a write's EINVAL):
	// the page cache from now on, said once for this sub-trace.
	void direct_refused(const std::string &path, int err)
	{
		direct_off_ = true;
		fprintf(stderr,
			"strata-consumerd: STRATA_DIRECT_IO=1: %s: O_DIRECT refused (%s): written through "
			"the "
			"page cache\n",
			path.c_str(), strerror(err));
	}

	// The descriptor for one write of `total` bytes to the lane's file:
	// its O_DIRECT one (opened on first use) where the file ends aligned,
	// every piece is aligned in memory and length, and the lane keeps up;
	// else the page cache's.
	int direct_fd(uint32_t lane, const std::string &path, const struct iovec *iov, int n_iov,
		      size_t total)
	{
		const int fd = fds_[lane];
		if (align_ <= 1 || direct_off_ || behind_ || sizes_[lane] % align_ || total % align_)
			return fd;
		for (int i = 0; i < n_iov; i++)
			if ((reinterpret_cast<uintptr_t>(iov[i].iov_base) | iov[i].iov_len) % align_)
				return fd;
		int &d = dfds_[lane];
		if (d < 0) {
			AsOwner as(owner_);
			d = as.ok() ? ::open(path.c_str(),
					     O_WRONLY | O_APPEND | O_DIRECT | O_CLOEXEC | O_NOFOLLOW)
				    : -1;
			if (d < 0) {
				direct_refused(path, errno);
				return fd;
			}
		}
		return d;
	}

	// Blocks allocated past the lane's end before a write of `total`
	// bytes that would reach beyond those allocated already: the write's
	// own and as many again as the file holds, at most 16 MiB; none
	// before a file holds anything.  So a file never has more blocks than
	// twice its bytes, or its bytes and 16 MiB: a thousand processes
	// that each write a packet reserve nothing ahead.  The size is left
	// alone (KEEP_SIZE): a reader, a killed daemon's repair and a crash
	// see only packets.  Refused (EOPNOTSUPP: a file system without it,
	// as NFS before 4.2) turns it off for this sub-trace; any other
	// failure (ENOSPC: blocks the writes themselves may still find) is
	// left to the write.
	void allocate_ahead(uint32_t lane, int fd, size_t total)
	{
		constexpr uint64_t kMax = 16 << 20;
		const uint64_t end = sizes_[lane] + total;
		const uint64_t more = std::min(kMax, sizes_[lane]);
		if (ahead_off_ || end <= ahead_[lane] || more == 0)
			return;
		const uint64_t from = std::max(ahead_[lane], sizes_[lane]);
		tried_[lane] = true;
		if (fallocate(fd, FALLOC_FL_KEEP_SIZE, static_cast<off_t>(from),
			      static_cast<off_t>(end - from + more)) == 0)
			ahead_[lane] = end + more;
		else if (errno == EOPNOTSUPP || errno == ENOSYS)
			ahead_off_ = true;
		else
			ahead_[lane] = end; // not again before this write's end
	}

	// The blocks allocated past the file's end given back (a truncation
	// to its size: the size as the file system has it, not ours, so that
	// a file cut or emptied under us is never lengthened).  After any
	// fallocate, even a refused one: ext4 keeps what it allocated before
	// running out of room.
	void give_back(uint32_t lane, int fd)
	{
		struct stat st;
		if (tried_[lane] && fstat(fd, &st) == 0 && st.st_nlink > 0)
			(void)ftruncate(fd, st.st_size); // nothing to say: only space
		tried_[lane] = false;
	}

	// The index of the stream file `path` just opened (already created
	// with the owner's rights): a new one for an empty file, else made
	// again from the file's headers, then opened to append.
	void open_index(uint32_t lane, const std::string &path)
	{
		AsOwner as(owner_);
		const std::string idx = ctf_index_path(path);
		int r = as.ok() ? make_dirs(dir_ + "/index", 0750, owner_) : -EPERM;
		if (r == 0 && sizes_[lane] > 0)
			r = rebuild_ctf_index(path, sizes_[lane]);
		int fd = -1;
		if (r == 0) {
			const int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW |
					  (sizes_[lane] ? 0 : O_TRUNC);
			fd = ::open(idx.c_str(), flags, 0640);
			r = fd < 0 ? -errno : 0;
		}
		uint8_t hdr[kCtfIndexHeaderSize];
		ctf_index_header(hdr);
		if (fd >= 0 && !sizes_[lane] && !write_all(fd, hdr, sizeof hdr)) {
			r = -errno;
			::close(fd);
			fd = -1;
		}
		if (fd >= 0)
			owner_.apply(fd);
		else
			drop_index(idx, r);
		idx_fds_[lane] = fd;
	}

	// The entries of the first `whole` packets of iov, stored at the
	// stream file's end (sizes_[lane], before they are counted).
	void append_index(uint32_t lane, const std::string &path, const struct iovec *iov, int n_iov,
			  const size_t *ends, size_t whole)
	{
		int &fd = idx_fds_[lane];
		if (fd < 0 || whole == 0)
			return;
		idx_buf_.resize(whole * kCtfIndexEntrySize);
		for (size_t i = 0; i < whole; i++) {
			const size_t at = i ? ends[i - 1] : 0;
			strata_packet_header h;
			copy_out(iov, n_iov, at, &h, sizeof h);
			ctf_index_entry(h, sizes_[lane] + at, idx_buf_.data() + i * kCtfIndexEntrySize);
		}
		if (write_all(fd, idx_buf_.data(), idx_buf_.size()))
			return;
		const int e = errno;
		::close(fd);
		fd = -1;
		AsOwner as(owner_);
		drop_index(ctf_index_path(path), -e);
	}

	// An index that could not be made or written: removed, said in the
	// log (a stream whose index is dropped gets none until it reopens).
	static void drop_index(const std::string &idx, int err)
	{
		unlink(idx.c_str());
		fprintf(stderr,
			"strata-consumerd: cannot write %s: %s; removed (readers say the stream has no "
			"index)\n",
			idx.c_str(), strerror(-err));
	}

	// n bytes of the iov's bytes from `at` into out.
	static void copy_out(const struct iovec *iov, int n_iov, size_t at, void *out, size_t n)
	{
		char *o = static_cast<char *>(out);
		size_t base = 0;
		for (int i = 0; i < n_iov && n; i++) {
			const size_t len = iov[i].iov_len;
			if (at < base + len) {
				const size_t from = at - base, k = std::min(n, len - from);
				memcpy(o, static_cast<const char *>(iov[i].iov_base) + from, k);
				o += k;
				at += k;
				n -= k;
			}
			base += len;
		}
	}

	// A resumed sub-trace: the whole metadata, written beside the old one
	// and renamed over it, so that a kill leaves one or the other whole.
	// The copy is a hidden file: one a kill leaves behind is neither a
	// stream file to babeltrace2 nor one the next daemon's repair cuts.
	bool replace_metadata(const std::string &text, std::string &err)
	{
		const std::string path = dir_ + "/metadata", tmp = dir_ + "/.metadata.resume";
		AsOwner as(owner_);
		int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC | O_NOFOLLOW,
				0640);
		if (fd < 0 || !write_all(fd, text.data(), text.size()) || fsync(fd) != 0 ||
		    rename(tmp.c_str(), path.c_str()) != 0) {
			err = "cannot write " + tmp + ": " + strerror(errno);
			if (fd >= 0)
				::close(fd);
			unlink(tmp.c_str());
			return false;
		}
		owner_.apply(fd);
		metadata_fd_ = fd;
		metadata_size_ = text.size();
		metadata_text_ = text;
		resume_ = false; // a remake() later creates afresh
		return true;
	}

	// The stream file was removed (its directory deleted under the
	// session): make the directory, the metadata (whole) and the stream
	// files again from the next packet on.  What went into the removed
	// files is lost; the stream files start again at a later sequence
	// number, which CTF allows.
	bool remake(std::string &err)
	{
		close(); // the stream files reopen on their next packet, at their size
		const std::string text = metadata_text_;
		AsOwner as(owner_);
		struct stat st;
		if (stat((dir_ + "/metadata").c_str(), &st) == 0) {
			// The directory is there (only stream files went): keep its
			// metadata, append to it again.
			metadata_fd_ = ::open((dir_ + "/metadata").c_str(),
					      O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
			metadata_size_ = static_cast<uint64_t>(st.st_size);
		} else if (!open(text, err)) {
			return false;
		}
		fprintf(stderr,
			"strata-consumerd: %s: its files were removed while recording; made again, "
			"the packets written in between are lost\n",
			dir_.c_str());
		return true;
	}

	// Writes bytes [from, total) of iov once (one writev of what is left):
	// what it wrote, or -1 (errno).
	static ssize_t write_rest(int fd, const struct iovec *iov, int n_iov, size_t from)
	{
		std::vector<struct iovec> rest;
		size_t o = 0;
		for (int i = 0; i < n_iov; i++) {
			const size_t len = iov[i].iov_len;
			if (o + len > from) {
				const size_t skip = from > o ? from - o : 0;
				rest.push_back({static_cast<char *>(iov[i].iov_base) + skip, len - skip});
			}
			o += len;
		}
		ssize_t w;
		do
			w = writev(fd, rest.data(), static_cast<int>(rest.size()));
		while (w < 0 && errno == EINTR);
		return w;
	}

	std::string dir_, channel_;
	uint64_t metadata_size_ = 0; // bytes of whole blocks in metadata
	std::string metadata_text_;  // all of it (remake)
	Owner owner_;
	int metadata_fd_ = -1;
	std::vector<int> fds_;
	std::vector<int> dfds_;    // the same files opened O_DIRECT (direct_fd), -1: not yet
	size_t align_ = 1;         // packet_align(): 1, or the O_DIRECT alignment (direct_align)
	bool behind_ = false;      // set_behind's, for the next write
	bool direct_off_ = false;  // O_DIRECT refused once: the page cache from then on
	std::vector<int> idx_fds_; // index/<stream>.idx, -1: none (not yet, or dropped)
	std::vector<uint64_t> sizes_;
	std::vector<uint64_t> ahead_;  // the end of the blocks allocated (allocate_ahead)
	std::vector<bool> tried_;      // a fallocate made since the file opened (give_back)
	bool ahead_off_ = false;       // fallocate refused: none ahead from then on
	std::vector<uint8_t> idx_buf_; // one writev's entries
	bool resume_ = false;
};

} // namespace

std::unique_ptr<Output> disk_output(const std::string &dir, const std::string &channel, uint32_t n_lanes,
				    const Owner &owner, bool resume)
{
	return std::make_unique<DiskOutput>(dir, channel, n_lanes, owner, resume);
}

bool direct_io_asked()
{
	static const bool asked = [] {
		const char *env = getenv("STRATA_DIRECT_IO");
		return env && strcmp(env, "1") == 0;
	}();
	return asked;
}

} // namespace strata
