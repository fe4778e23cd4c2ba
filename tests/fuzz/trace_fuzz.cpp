/*
 * trace_fuzz.cpp - Strata's trace file reader (processor/ctf/trace_reader.h)
 * against arbitrary trace files (issue 49).  One input is one sub-trace:
 *
 *   u32 metadata length | metadata text | stream file 0 | 0xF1 0xF1 0xF1 0xF1 | stream file 1 ...
 *
 * written into a scratch directory and read as `strata view` and `strata
 * check` read it: the index, every message merged by time, every field of
 * every event decoded, and the clean copy's packet walk.  tests/fuzz/
 * trace_corpus/ holds real sub-traces (make_trace_seeds.sh).
 *
 * Oracle: no crash, no read outside a buffer (ASan), no endless loop
 * (libFuzzer's -timeout), and what the reader hands out is consistent:
 * events of one stream never go back in time, a decoded string ends inside
 * its record, a damage names a file of the sub-trace, and the events
 * counted equal the events delivered.
 *
 * Built twice, as reader_fuzz.cpp: with libFuzzer (`trace_fuzz`, the bounded
 * run) and with STRATA_FUZZ_MAIN as a replay of files and directories
 * (`trace_fuzz_replay`, every build, sanitizers included).
 */
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "trace_reader.h"

namespace {

[[noreturn]] void fail(const char *what)
{
	fprintf(stderr, "trace_fuzz: %s\n", what);
	abort();
}

std::string scratch_dir()
{
	static std::string dir;
	if (dir.empty()) {
		char tmpl[] = "/tmp/strata-trace-fuzz-XXXXXX";
		const char *shm = "/dev/shm";
		struct stat st;
		std::string t = (stat(shm, &st) == 0 ? std::string(shm) + "/strata-trace-fuzz-XXXXXX" : tmpl);
		std::vector<char> buf(t.begin(), t.end());
		buf.push_back('\0');
		if (!mkdtemp(buf.data()))
			fail("cannot make a scratch directory");
		dir = buf.data();
		std::atexit([] { // nothing left in /dev/shm by a run that ends
			std::error_code ec;
			std::filesystem::remove_all(dir, ec);
		});
	}
	return dir;
}

void write_file(const std::string &path, const uint8_t *p, size_t n)
{
	FILE *f = fopen(path.c_str(), "wb");
	if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f) != 0)
		fail("cannot write the scratch trace");
}

// The input as a sub-trace in the scratch directory; the number of streams.
size_t lay_out(const uint8_t *data, size_t size, const std::string &dir)
{
	for (int i = 0; i < 8; i++)
		unlink((dir + "/s" + std::to_string(i)).c_str());
	uint32_t mlen = 0;
	if (size >= 4)
		memcpy(&mlen, data, 4);
	size_t off = size >= 4 ? 4 : size;
	const size_t m = mlen < size - off ? mlen : size - off;
	write_file(dir + "/metadata", data + off, m);
	off += m;
	size_t n = 0;
	static const uint8_t kSep[4] = {0xF1, 0xF1, 0xF1, 0xF1};
	while (off <= size && n < 8) {
		const uint8_t *start = data + off;
		const uint8_t *sep = (const uint8_t *)memmem(start, size - off, kSep, 4);
		const size_t len = sep ? (size_t)(sep - start) : size - off;
		write_file(dir + "/s" + std::to_string(n), start, len);
		n++;
		if (!sep)
			break;
		off += len + 4;
	}
	return n;
}

void read_one(const std::string &dir)
{
	strata::TraceReader r;
	std::string why;
	if (!r.open_dirs({dir}, &why))
		return;
	std::map<const strata::StreamInfo *, int64_t> last;
	std::vector<strata::FieldValue> fields;
	uint64_t events = 0;
	r.read([&](const strata::TraceMsg &m) {
		if (m.kind == strata::TraceMsgKind::Damage) {
			if (!m.damage || m.damage->file.compare(0, dir.size(), dir) != 0)
				fail("a damage that names no file of the trace");
			return true;
		}
		if (m.kind != strata::TraceMsgKind::Event)
			return true;
		const strata::TraceEvent &e = *m.event;
		auto it = last.find(m.stream);
		if (it != last.end() && e.ns < it->second)
			fail("a stream's events went back in time");
		last[m.stream] = e.ns;
		e.decode(&fields);
		for (const strata::FieldValue &v : fields)
			if (v.str && (const uint8_t *)v.str + v.len >= e.pkt + e.end)
				fail("a string that does not end inside its record");
		events++;
		return true;
	});
	if (events != r.stats().events)
		fail("events counted and delivered differ");
	r.check_packets([](const strata::StreamInfo &, const strata::PacketEntry &e, uint64_t good,
			   const char *, const std::vector<uint8_t> &bytes) {
		if (good > e.content || bytes.size() < e.content)
			fail("a packet walked past its content");
	});
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const std::string dir = scratch_dir();
	lay_out(data, size, dir);
	read_one(dir);
	return 0;
}

#ifdef STRATA_FUZZ_MAIN
// trace_fuzz_replay FILE|DIR...: every input through the same check.
int main(int argc, char **argv)
{
	size_t n = 0;
	for (int i = 1; i < argc; i++) {
		std::vector<std::string> files;
		struct stat st;
		if (stat(argv[i], &st) != 0)
			continue;
		if (S_ISDIR(st.st_mode)) {
			DIR *d = opendir(argv[i]);
			for (struct dirent *de; d && (de = readdir(d));)
				if (de->d_name[0] != '.')
					files.push_back(std::string(argv[i]) + "/" + de->d_name);
			if (d)
				closedir(d);
		} else {
			files.push_back(argv[i]);
		}
		for (const std::string &f : files) {
			std::ifstream in(f, std::ios::binary);
			std::string bytes((std::istreambuf_iterator<char>(in)),
					  std::istreambuf_iterator<char>());
			LLVMFuzzerTestOneInput((const uint8_t *)bytes.data(), bytes.size());
			n++;
		}
	}
	printf("trace_fuzz_replay: %zu input(s) read without a fault\n", n);
	return n ? 0 : 1;
}
#endif
