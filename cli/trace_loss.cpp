/*
 * trace_loss.cpp - what a trace on disk says was discarded (commands.h,
 * TraceLoss), for `record`, `stop`, `destroy` and `status`: whichever
 * daemon wrote the trace, the packets carry the accounting.
 *
 * Each stream file (a regular file beside a `metadata` file, not hidden) is
 * a run of packets; every packet header (abi/strata_abi.h) carries the
 * lane's cumulative count of discarded events and the packet's sequence
 * number (read through a window of the file, not a read per packet).  A
 * stream's discarded events are its last packet's count; its
 * discarded packets are the gaps between consecutive sequence numbers.
 * That is what babeltrace2 reports as "discarded events" and "discarded
 * packets".  Headers are read, never trusted: a packet that runs past the
 * end of the file (a stream being written, a torn file) ends the walk of
 * that file quietly; a header that is not a Strata packet header ends it
 * too, and is said (the file, the offset: damage that `strata check`
 * names, beyond which this walk counts nothing).
 */
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <memory>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

#include "strata_abi.h"
#include "commands.h"

namespace strata {
namespace cli {

namespace {

// The window the headers are read through, shared by a walk's stream
// files: grown to what a file needs (at most 1 MiB), never zero-filled (a
// 1 MiB zero fill a stream cost `strata record -- true` a quarter of its
// CPU on a VM, where each fresh page traps: pread writes only what it reads).
struct Window {
	std::unique_ptr<uint8_t[]> buf;
	uint64_t cap = 0;
	uint8_t *reserve(uint64_t n)
	{
		if (n > cap) {
			buf.reset(new uint8_t[n]);
			cap = n;
		}
		return buf.get();
	}
};

// One stream file's loss; a damaged header's offset in *damaged_at (else
// UINT64_MAX).
void scan_stream(int dfd, const char *name, Window &w, uint64_t &events, uint64_t &packets,
		 uint64_t *damaged_at)
{
	*damaged_at = UINT64_MAX;
	int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return;
	struct stat st;
	uint64_t size = fstat(fd, &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
	uint64_t off = 0, last_disc = 0, prev_seq = 0;
	bool first = true;
	struct strata_packet_header h;
	// A stop's count is read while the traced program may keep every CPU
	// busy (a thousand threads on two CPUs), where each CPU millisecond of
	// ours costs about a second: the fewest bytes and calls.  Small
	// packets: their headers through a 1 MiB window, not a pread each;
	// large ones (above kHeaderOnly): the header alone, not the payloads
	// (copying a 215 MiB trace through the window took 49 of a 57 s stop).
	// The first header alone too, before a packet's size is known: a
	// window read first copied a whole 1 MiB packet into fresh pages (3 ms
	// of `strata record`'s own CPU on a VM, where each fresh page traps).
	constexpr uint64_t kHeaderOnly = 16 * 1024, kWindow = 1u << 20;
	uint8_t *const win = w.reserve(std::max<uint64_t>(sizeof h, std::min(kWindow, size)));
	uint64_t win_off = 0, win_len = 0, last_bytes = 0;
	// No readahead: what is read is what is asked (a window, a header; a
	// file the daemon wrote around the page cache comes from the disk, and
	// the kernel's window would read the payloads between the headers).
	posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
	while (size - off >= sizeof h) {
		if (off + sizeof h > win_off + win_len) {
			const uint64_t want = first || last_bytes > kHeaderOnly ? sizeof h : kWindow;
			const ssize_t n =
				pread(fd, win, std::min<uint64_t>(want, size - off), static_cast<off_t>(off));
			if (n < (ssize_t)sizeof h)
				break;
			win_off = off;
			win_len = static_cast<uint64_t>(n);
		}
		memcpy(&h, win + (off - win_off), sizeof h);
		const uint64_t bytes = h.packet_size / 8;
		if (h.magic != STRATA_CTF_MAGIC || h.packet_size % 8 || bytes < sizeof h - 4 ||
		    bytes > STRATA_MAX_SUBBUF_SIZE) {
			*damaged_at = off;
			break;
		}
		if (bytes > size - off)
			break; // being written, or torn at the end
		if (!first && h.packet_seq_num > prev_seq + 1)
			packets += h.packet_seq_num - prev_seq - 1;
		prev_seq = h.packet_seq_num;
		last_disc = h.events_discarded;
		first = false;
		off += bytes;
		last_bytes = bytes;
	}
	events += last_disc;
	close(fd);
}

void walk(const std::string &dir, const std::string &rel, TraceLoss &loss, Window &w, int depth)
{
	if (depth > 8)
		return;
	DIR *d = opendir(dir.c_str());
	if (!d)
		return;
	const bool is_trace = faccessat(dirfd(d), "metadata", F_OK, AT_SYMLINK_NOFOLLOW) == 0;
	TraceLoss::Sub sub;
	sub.path = rel;
	while (struct dirent *e = readdir(d)) {
		const char *n = e->d_name;
		if (n[0] == '.')
			continue;
		struct stat st;
		if (fstatat(dirfd(d), n, &st, AT_SYMLINK_NOFOLLOW) != 0)
			continue;
		if (S_ISDIR(st.st_mode))
			walk(dir + "/" + n, rel.empty() ? n : rel + "/" + n, loss, w, depth + 1);
		else if (is_trace && S_ISREG(st.st_mode) && strcmp(n, "metadata") != 0) {
			uint64_t at;
			scan_stream(dirfd(d), n, w, sub.events, sub.packets, &at);
			if (at != UINT64_MAX) {
				if (loss.damaged.empty())
					loss.damaged = (rel.empty() ? std::string(n) : rel + "/" + n) +
						       " at offset " + std::to_string(at);
				loss.damaged_files++;
			}
		}
	}
	closedir(d);
	if (!is_trace)
		return;
	loss.traces++;
	loss.events += sub.events;
	loss.packets += sub.packets;
	if (sub.events || sub.packets)
		loss.subs.push_back(sub);
}

} // namespace

TraceLoss trace_loss(const std::string &dir)
{
	TraceLoss loss;
	Window w;
	walk(dir, "", loss, w, 0);
	std::sort(loss.subs.begin(), loss.subs.end(), [](const TraceLoss::Sub &a, const TraceLoss::Sub &b) {
		return a.events != b.events ? a.events > b.events : a.packets > b.packets;
	});
	return loss;
}

std::string loss_summary(const TraceLoss &loss, const char *why)
{
	std::string damage;
	if (loss.damaged_files)
		damage = "; " + std::to_string(loss.damaged_files) +
			 " stream file(s) damaged, counted up to the damage only (first: " + loss.damaged +
			 "; `strata check` names it)";
	if (!loss.events && !loss.packets)
		return "nothing discarded" + damage;
	std::string s = std::to_string(loss.events) + " event(s) and " + std::to_string(loss.packets) +
			" packet(s) discarded (" + why + ")";
	const size_t worst = std::min<size_t>(loss.subs.size(), 3);
	for (size_t k = 0; k < worst; k++) {
		const TraceLoss::Sub &x = loss.subs[k];
		const std::string who = x.path.substr(x.path.rfind('/') + 1);
		s += (k ? ", " : "; most by ") + who + " (" + std::to_string(x.events) + " event(s), " +
		     std::to_string(x.packets) + " packet(s))";
	}
	if (loss.subs.size() > worst)
		s += " and " + std::to_string(loss.subs.size() - worst) + " more";
	return s + damage;
}

} // namespace cli
} // namespace strata
