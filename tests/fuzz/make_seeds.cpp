/*
 * make_seeds.cpp - writes the fuzz corpus's seeds (tests/fuzz/corpus/):
 * real trace buffers, as the runtime leaves them in its memfd, of small
 * geometries (1 owned lane + its shared one, 2-4 sub-buffers of 4 KiB)
 * with every field kind, shared-lane records (a second thread), extended
 * headers (a pause of more than 2^27 ns), open and complete packets, losses,
 * and an overwrite-mode ring.  Run by hand when the buffer layout changes:
 *     build/tests/fuzz/reader_fuzz_make_seeds tests/fuzz/corpus
 */
#define STRATA_DEFINE_PROVIDERS
#include "test_tp.h"

#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "runtime.h"

namespace {

const uint8_t kUuid[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

strata_channel_config config(uint32_t mode, uint32_t nsub)
{
	strata_channel_config c{};
	strcpy(c.name, "channel0");
	c.mode = mode;
	c.n_lanes = 1;
	c.n_subbuf = nsub;
	c.subbuf_size = 4096;
	return c;
}

void all(int i)
{
	const int16_t h[3] = {1, -2, (int16_t)i};
	const uint32_t seq[3] = {7, 8, (uint32_t)i};
	const uint8_t bytes[5] = {0, 1, 2, 3, 4};
	strata_tracepoint(rbtest, all, (int8_t)i, 0xbeef, -5, 2.5, 0.5f, i % 7 - 1, i % 2 ? "odd" : "", h,
			  seq, (uint32_t)(i % 4), bytes, (size_t)(i % 6));
}

void rec(uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		strata_tracepoint(rbtest, rec, 1u, i, i * 3);
}

// The runtime reserves a large descriptor table (most of a small buffer):
// keep what is used, rounded up to 256 bytes, and move the lane control
// blocks and the data down after it.  The reader accepts any such layout
// (regions in bounds, aligned, disjoint), and a small seed fuzzes faster.
bool shrink(std::vector<uint8_t> *buf)
{
	strata_buffer_header h;
	memcpy(&h, buf->data(), sizeof h);
	if (h.desc_offset + h.desc_capacity > h.lanes_offset || h.lanes_offset > h.data_offset)
		return false; // not the layout this expects
	const uint64_t cap = (h.desc_used + 255) & ~255ull;
	const uint64_t cut = h.desc_capacity - cap;
	std::vector<uint8_t> out(buf->begin(), buf->begin() + (ptrdiff_t)(h.desc_offset + cap));
	out.insert(out.end(), buf->begin() + (ptrdiff_t)(h.desc_offset + h.desc_capacity), buf->end());
	h.desc_capacity = cap;
	h.lanes_offset -= cut;
	h.data_offset -= cut;
	h.total_size = out.size();
	memcpy(out.data(), &h, sizeof h);
	*buf = std::move(out);
	return true;
}

bool dump(const char *dir, const char *name, unsigned slot, const strata_channel_config &cfg, void (*emit)())
{
	int fd = strata_rt_slot_open(slot, &cfg, kUuid);
	if (fd < 0)
		return false;
	strata_rule r{};
	strcpy(r.pattern, "rbtest:*");
	r.loglevel_max = -1;
	r.enable = 1;
	strata_rt_slot_set_rules(slot, &r, 1);
	emit();
	off_t size = lseek(fd, 0, SEEK_END);
	std::vector<uint8_t> buf((size_t)size);
	bool ok = pread(fd, buf.data(), buf.size(), 0) == (ssize_t)size;
	strata_rt_slot_close(slot);
	ok = ok && shrink(&buf);
	std::string path = std::string(dir) + "/" + name;
	FILE *f = fopen(path.c_str(), "wb");
	ok = ok && f && fwrite(buf.data(), 1, buf.size(), f) == buf.size();
	if (f)
		fclose(f);
	printf("%s: %zu bytes\n", path.c_str(), buf.size());
	return ok;
}

} // namespace

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s DIR\n", argv[0]);
		return 2;
	}
	const char *dir = argv[1];
	bool ok = true;
	ok &= dump(dir, "discard-recs", 0, config(STRATA_MODE_DISCARD, 2), [] { rec(200); });
	ok &= dump(dir, "discard-all-kinds", 1, config(STRATA_MODE_DISCARD, 4), [] {
		for (int i = 0; i < 60; i++)
			all(i);
		strata_tracepoint(rbtest, noargs);
	});
	ok &= dump(dir, "discard-shared-lane", 2, config(STRATA_MODE_DISCARD, 4), [] {
		rec(5); // this thread takes the one owned lane: the others share
		std::thread t([] { rec(10); });
		t.join();
		std::thread u([] {
			rec(3);
			all(1);
		});
		u.join();
	});
	ok &= dump(dir, "discard-extended-lost", 3, config(STRATA_MODE_DISCARD, 2), [] {
		rec(3);
		struct timespec ts = {0, 150000000}; // > 2^27 ns: the next header is extended
		nanosleep(&ts, nullptr);
		rec(600); // beyond the ring: losses
	});
	ok &= dump(dir, "overwrite-laps", 4, config(STRATA_MODE_OVERWRITE, 2), [] {
		rec(500);
		all(3);
	});
	return ok ? 0 : 1;
}
