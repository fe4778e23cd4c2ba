// read_progress.h - a progress bar for the trace readers that go through a
// whole trace (`strata export`, `strata analyze mutex`), drawn on standard
// error when it is a terminal; its scale is the traces' time range.
#ifndef STRATA_CLI_READ_PROGRESS_H
#define STRATA_CLI_READ_PROGRESS_H

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace strata {
namespace rd {
class Source;
}

// The time range of the traces in `dirs` (babeltrace2's
// "babeltrace.trace-infos" query on source.ctf.fs, which reads packet
// indexes only), in ns from the clock's origin.  False if unknown.
bool trace_range(const std::vector<std::string> &dirs, int64_t *begin, int64_t *end);

class Progress {
public:
	// cmd: "export"...; on: draw at all (stderr is a terminal).
	Progress(const char *cmd, bool on, int64_t begin, int64_t end);
	// After each event (events: how many so far, ts: the last one's time);
	// draws at most every 65536 events and 100 ms.
	void update(uint64_t events, int64_t ts);
	// Erases the bar.
	void done();

private:
	const char *cmd_;
	bool on_;
	int64_t begin_, end_;
	bool shown_ = false;
	std::chrono::steady_clock::time_point last_{};
};

// A Progress for the traces under `root`, on when stderr is a terminal.
Progress progress_for(const char *cmd, const std::vector<std::string> &dirs);
// The same for the traces of `src` (their range from the reader's index).
Progress progress_for(const char *cmd, rd::Source &src);

} // namespace strata
#endif
