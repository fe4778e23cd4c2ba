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
 */
#include "output.h"

#include <cerrno>
#include <cstring>
#include <vector>
#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include "drain.h"

namespace strata {

namespace {

bool write_all(int fd, const void *p, size_t n)
{
	const char *c = static_cast<const char *>(p);
	while (n) {
		ssize_t w = write(fd, c, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return false;
		c += w;
		n -= static_cast<size_t>(w);
	}
	return true;
}

class DiskOutput : public Output {
public:
	DiskOutput(const std::string &dir, const std::string &channel, uint32_t n_lanes, const Owner &owner)
		: dir_(dir), channel_(channel), owner_(owner), fds_(n_lanes, -1), sizes_(n_lanes, 0)
	{
	}
	~DiskOutput() override { close(); }

	bool open(const std::string &text, std::string &err) override
	{
		int r = make_dirs(dir_, 0750, owner_);
		if (r < 0) {
			err = "cannot create " + dir_ + ": " + strerror(-r);
			return false;
		}
		metadata_fd_ = ::open((dir_ + "/metadata").c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0640);
		if (metadata_fd_ < 0) {
			err = "cannot create " + dir_ + "/metadata: " + strerror(errno);
			return false;
		}
		owner_.apply(metadata_fd_);
		if (!write_all(metadata_fd_, text.data(), text.size())) {
			err = "cannot write " + dir_ + "/metadata: " + strerror(errno);
			return false;
		}
		return true;
	}

	bool append_metadata(const std::string &text, std::string &err) override
	{
		if (metadata_fd_ >= 0 && write_all(metadata_fd_, text.data(), text.size()))
			return true;
		err = std::string("cannot append to metadata: ") + strerror(errno);
		return false;
	}

	size_t write_packets(uint32_t lane, const struct iovec *iov, int n_iov, const size_t *ends, size_t n_pkts,
			     std::string &err) override
	{
		if (lane >= fds_.size() || n_pkts == 0)
			return 0;
		int &fd = fds_[lane];
		if (fd < 0) {
			std::string path = dir_ + "/" + channel_ + "_" + std::to_string(lane);
			fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
			if (fd < 0) {
				err = "cannot create " + path + ": " + strerror(errno);
				return 0;
			}
			owner_.apply(fd);
		}
		ssize_t w;
		do
			w = writev(fd, iov, n_iov);
		while (w < 0 && errno == EINTR);
		const int e = errno;
		size_t done = 0, whole = 0; // bytes and packets written whole
		while (whole < n_pkts && w >= 0 && ends[whole] <= static_cast<size_t>(w))
			done = ends[whole++];
		sizes_[lane] += done;
		if (whole == n_pkts)
			return whole;
		// Cut the torn packet off again.
		std::string cut;
		if (w > 0 && static_cast<size_t>(w) > done && ftruncate(fd, static_cast<off_t>(sizes_[lane])) < 0)
			cut = std::string(" (cannot cut the torn packet: ") + strerror(errno) + ")";
		err = std::string("write failed: ") + (w < 0 ? strerror(e) : "short write") + cut;
		return whole;
	}

	void close() override
	{
		for (int &fd : fds_)
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
	std::string dir_, channel_;
	Owner owner_;
	int metadata_fd_ = -1;
	std::vector<int> fds_;
	std::vector<uint64_t> sizes_;
};

} // namespace

std::unique_ptr<Output> disk_output(const std::string &dir, const std::string &channel, uint32_t n_lanes,
				    const Owner &owner)
{
	return std::make_unique<DiskOutput>(dir, channel, n_lanes, owner);
}

} // namespace strata
