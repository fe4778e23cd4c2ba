/*
 * cmd_receive.cpp - `strata receive DEVICE|- -o DIR`: rebuild the CTF trace
 * a session sends over a byte line (`--serial`, docs/serial.md): the
 * command, its options and the line it reads; the frames become the trace
 * in receiver.h's Receiver.
 */
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "commands.h"
#include "proto/serial_frame.h"
#include "receiver.h"
#include "trace_split.h"

using namespace strata;
using strata::receive::Receiver;

namespace {

volatile sig_atomic_t g_stop = 0;
void on_signal(int)
{
	g_stop = 1;
}

const cli::Command kReceive = {"receive", "DEVICE[,BAUD] -o DIR",
			       "Rebuild the trace a session streams over a byte line (strata create or\n"
			       "record --serial): DEVICE is a tty (set raw, BAUD default 115200), a FIFO,\n"
			       "a file, or - (standard input).  DIR gets one sub-trace per process and\n"
			       "kernel buffer, readable (babeltrace2 DIR) while frames arrive.  Ends at\n"
			       "end of input, or on SIGINT/SIGTERM; then reports, per stream, the frames\n"
			       "received and lost.  Each packet that did not arrive is marked in the trace\n"
			       "where it was (babeltrace2 reports its events as discarded; docs/serial.md)."};

// The device and -o DIR: kParsed to go on, else the exit status.
int parse_args(int argc, char **argv, std::string &device, std::string &out)
{
	const std::vector<cli::Option> opts = {
		cli::path("output", 'o', "DIR", "a directory",
			  "where the trace goes (created; must not hold a trace)", out),
	};
	std::vector<char *> operands;
	if (const int r = cli::parse(kReceive, opts, argc, argv, operands); r != cli::kParsed)
		return r;
	if (operands.size() > 1)
		return cli::usage_error(kReceive, "one device only");
	if (operands.empty())
		return cli::usage_error(kReceive, "missing DEVICE (or - for standard input)");
	device = operands[0];
	if (out.empty())
		return cli::usage_error(kReceive, "missing -o DIR");
	return cli::kParsed;
}

// The line to read: DEVICE opened (a tty set raw at baud), or standard
// input for "-"; -1 after saying why.
int open_line(const char *cmd, const std::string &device, uint32_t baud, bool baud_given)
{
	int fd = 0;
	if (device != "-") {
		fd = open(device.c_str(), O_RDONLY | O_NOCTTY | O_CLOEXEC);
		if (fd < 0) {
			fprintf(stderr, "strata %s: cannot open %s: %s\n", cmd, device.c_str(),
				strerror(errno));
			return -1;
		}
	}
	if (fd != 0 && isatty(fd)) { // a terminal on standard input is left as it is
		std::string err;
		if (!serial::set_raw_tty(fd, baud, err)) {
			fprintf(stderr, "strata %s: %s: %s\n", cmd, device.c_str(), err.c_str());
			close(fd);
			return -1;
		}
	} else if (baud_given) {
		fprintf(stderr, "strata %s: %s is not a tty: the speed is ignored\n", cmd, device.c_str());
	}
	return fd;
}

// A clock follower's trace across a step: one CTF trace per clock piece,
// as a disk follower's stop splits it (docs/clocks.md, "Serial
// followers").  At the receiver's end only: the lanes' files stay open
// across the sender's stop and start, and nothing more comes now.
void split_received(const char *cmd, const std::string &out, const std::vector<std::string> &mine)
{
	TreeSplit ts;
	std::string err;
	if (!split_tree(out, &ts, &err, &mine))
		fprintf(stderr, "strata %s: %s\n", cmd, err.c_str());
	for (const std::string &n : ts.notes)
		fprintf(stderr, "strata %s: %s\n", cmd, n.c_str());
	if (ts.split)
		fprintf(stderr,
			"strata %s: %zu sub-trace(s) split by clock piece for babeltrace2 (%zu piece "
			"director%s written, %zu packet(s) moved, %zu cut at a record boundary)\n",
			cmd, ts.split, ts.st.dirs_made, ts.st.dirs_made == 1 ? "y" : "ies",
			ts.st.packets_moved, ts.st.packets_cut);
}

} // namespace

int strata_cmd_receive(int argc, char **argv)
{
	const char *cmd = "receive";
	std::string device, out;
	if (const int r = parse_args(argc, argv, device, out); r != cli::kParsed)
		return r;
	uint32_t baud = 115200;
	bool baud_given = false;
	if (size_t comma = device.rfind(','); comma != std::string::npos && device != "-") {
		if (!cli::parse_u32(device.c_str() + comma + 1, baud))
			return cli::usage_error(kReceive, "bad speed in " + device);
		baud_given = true;
		device.resize(comma);
	}
	struct stat st;
	if (stat((out + "/metadata").c_str(), &st) == 0)
		return cli::usage_error(kReceive, out + " already holds a trace");
	const int fd = open_line(cmd, device, baud, baud_given);
	if (fd < 0)
		return cli::kFail;
	if (int r = receive::mkdirs(out); r < 0) {
		fprintf(stderr, "strata %s: cannot create %s: %s\n", cmd, out.c_str(), strerror(-r));
		return cli::kFail;
	}
	struct sigaction sa = {};
	sa.sa_handler = on_signal; // no SA_RESTART: read() returns EINTR
	sigaction(SIGINT, &sa, nullptr);
	sigaction(SIGTERM, &sa, nullptr);
	Receiver rx(out);
	serial::FrameDecoder dec;
	setvbuf(stderr, nullptr, _IOLBF, 0);
	std::vector<uint8_t> buf(64 * 1024);
	int rc = cli::kOk;
	bool version_said = false;
	while (!g_stop && !rx.failed()) {
		ssize_t n = read(fd, buf.data(), buf.size());
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			fprintf(stderr, "strata %s: read %s: %s\n", cmd, device.c_str(), strerror(errno));
			rc = cli::kFail;
			break;
		}
		if (n == 0)
			break;
		dec.feed(buf.data(), static_cast<size_t>(n), [&](const serial::Frame &f) { rx.frame(f); });
		if (dec.stats().other_version && !version_said) {
			version_said = true;
			fprintf(stderr,
				"strata %s: the sender speaks wire format version %u; this receiver reads "
				"version "
				"%u: its frames are ignored (use the strata of the sender's release)\n",
				cmd, dec.stats().version_seen, serial::kVersion);
		}
	}
	if (rx.failed()) {
		fprintf(stderr, "strata %s: %s\n", cmd, rx.error().c_str());
		rc = cli::kFail;
	}
	rx.finish();
	rx.report(stderr, dec.stats());
	if (fd > 0)
		close(fd);
	rx.close_all();
	if (rx.clocks_written())
		split_received(cmd, out, rx.dirs());
	return rc;
}
