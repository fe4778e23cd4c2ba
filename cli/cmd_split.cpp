// strata split DIR [-o OUT]: a relayed or received follower's trace split
// into one CTF trace per clock piece, so that babeltrace2 places every
// event across a step as Strata's reader does with clocks.json
// (docs/clocks.md, "Relayed followers", "Serial followers"; the split
// itself: processor/ctf/trace_split.h, the same a disk follower's stop
// runs).
//
// In place only on a trace nobody writes: it needs DIR's clocks.json (a
// relayed follower sends it last, once its session ended; `strata receive`
// writes it at the sender's stop), and refuses while a process this user
// can see holds a file under DIR open for writing (a relayd or a receiver
// still at work).  With -o OUT it copies DIR to OUT (a new directory) and
// splits the copy, DIR untouched.
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <filesystem>
#include <string>
#include <unistd.h>
#include <vector>

#include "commands.h"
#include "trace_split.h"

namespace {

using namespace strata;

const cli::Command kSplit = {"split", "DIR [-o OUT]",
			     "Split a clock follower's trace that the follower did not write itself (a\n"
			     "relayd's output on the host, or what `strata receive` wrote) into one CTF\n"
			     "trace per piece of its clock map (<sub-trace>~seg<k> beside each sub-trace),\n"
			     "so that babeltrace2 places every event across a step (a paused VM, a written\n"
			     "clock) on the reference's timeline.  Needs the trace's clocks.json; changes\n"
			     "nothing on a trace already split or whose map has one piece.  In place it\n"
			     "refuses while a process holds a file under DIR open for writing; with -o OUT\n"
			     "it splits a copy.  Exits 1 when a follower's sub-trace stays on one clock\n"
			     "line (no usable map, or its rewrite never came), saying why.  See\n"
			     "docs/clocks.md."};

} // namespace

namespace strata::cli {

bool written_by_someone(const std::string &dir, std::string *who)
{
	DIR *proc = opendir("/proc");
	if (!proc)
		return false;
	const std::string prefix = dir + "/";
	bool found = false;
	for (struct dirent *e; !found && (e = readdir(proc));) {
		char *end;
		const long pid = strtol(e->d_name, &end, 10);
		if (*end || pid <= 0 || pid == getpid())
			continue;
		const std::string fds = std::string("/proc/") + e->d_name + "/fd";
		DIR *fd = opendir(fds.c_str());
		if (!fd)
			continue; // another user's: not ours to see
		for (struct dirent *f; !found && (f = readdir(fd));) {
			if (f->d_name[0] == '.')
				continue;
			char target[PATH_MAX];
			const ssize_t n =
				readlink((fds + "/" + f->d_name).c_str(), target, sizeof target - 1);
			if (n <= 0)
				continue;
			target[n] = 0;
			if (std::string(target).rfind(prefix, 0) != 0)
				continue;
			FILE *info = fopen(
				(std::string("/proc/") + e->d_name + "/fdinfo/" + f->d_name).c_str(), "r");
			unsigned flags = 0;
			char line[256];
			while (info && fgets(line, sizeof line, info))
				if (sscanf(line, "flags: %o", &flags) == 1)
					break;
			if (info)
				fclose(info);
			if ((flags & O_ACCMODE) != O_RDONLY) {
				char comm[64] = "?";
				if (FILE *c = fopen((std::string("/proc/") + e->d_name + "/comm").c_str(),
						    "r")) {
					if (fgets(comm, sizeof comm, c))
						comm[strcspn(comm, "\n")] = 0;
					fclose(c);
				}
				*who = std::string(e->d_name) + " (" + comm + ") writes " + target;
				found = true;
			}
		}
		closedir(fd);
	}
	closedir(proc);
	return found;
}

} // namespace strata::cli

int strata_cmd_split(int argc, char **argv)
{
	const char *cmd = "split";
	std::string out;
	const std::vector<cli::Option> opts = {
		cli::path("output", 'o', "OUT", "a directory",
			  "split a copy of DIR made at OUT (which must not exist); DIR is left as it is",
			  out),
	};
	std::vector<char *> operands;
	if (const int r = cli::parse(kSplit, opts, argc, argv, operands); r != cli::kParsed)
		return r;
	if (operands.size() != 1)
		return cli::usage_error(kSplit, operands.empty() ? "missing DIR" : "one DIR only");
	namespace fs = std::filesystem;
	std::error_code ec;
	const std::string dir = fs::absolute(operands[0], ec).lexically_normal().string();
	if (ec || !fs::is_directory(dir, ec)) {
		fprintf(stderr, "strata %s: %s: not a directory\n", cmd, operands[0]);
		return cli::kFail;
	}
	// The trace's clocks.json: at DIR or under it (a relayd's
	// <hostname>/<session>-<date>/, a receiver's DIR).
	size_t maps = 0;
	for (auto it = fs::recursive_directory_iterator(dir, ec);
	     !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
		maps += it->path().filename() == "clocks.json" && it->is_regular_file(ec);
	if (!maps) {
		fprintf(stderr,
			"strata %s: %s holds no clocks.json: nothing says how its clock maps (a relayed "
			"follower sends it when its session ends, `strata receive` writes it at the "
			"sender's stop)\n",
			cmd, dir.c_str());
		return cli::kFail;
	}
	std::string root = dir;
	if (!out.empty()) {
		const std::string dst = fs::absolute(out, ec).lexically_normal().string();
		if (fs::exists(dst, ec)) {
			fprintf(stderr, "strata %s: %s exists: -o needs a new directory\n", cmd, dst.c_str());
			return cli::kFail;
		}
		if (dst.rfind(dir + "/", 0) == 0) {
			fprintf(stderr, "strata %s: %s lies inside %s\n", cmd, dst.c_str(), dir.c_str());
			return cli::kFail;
		}
		fs::copy(dir, dst, fs::copy_options::recursive, ec);
		if (ec) {
			fprintf(stderr, "strata %s: cannot copy %s to %s: %s\n", cmd, dir.c_str(),
				dst.c_str(), ec.message().c_str());
			return cli::kFail;
		}
		root = dst;
	} else if (std::string who; cli::written_by_someone(dir, &who)) {
		fprintf(stderr,
			"strata %s: %s is being written (process %s): split it once the relayd closed "
			"the session or the receiver ended, or split a copy with -o OUT\n",
			cmd, dir.c_str(), who.c_str());
		return cli::kFail;
	}
	TreeSplit ts;
	std::string err;
	const bool ok = split_tree(root, &ts, &err);
	for (const std::string &n : ts.notes)
		fprintf(stderr, "strata %s: %s\n", cmd, n.c_str());
	printf("%s: %zu sub-trace(s), %zu on a map of several clock pieces, split (now: %zu piece "
	       "director%s written, %zu packet(s) moved, %zu cut at a record boundary), %zu on a one-piece "
	       "map, %zu left as they were\n",
	       root.c_str(), ts.subtraces, ts.split, ts.st.dirs_made, ts.st.dirs_made == 1 ? "y" : "ies",
	       ts.st.packets_moved, ts.st.packets_cut, ts.one_piece, ts.skipped);
	if (!ok)
		fprintf(stderr, "strata %s: %s\n", cmd, err.c_str());
	if (!ok || ts.skipped)
		return cli::kFail; // a follower's sub-trace stays on one line: said above
	return cli::kOk;
}
