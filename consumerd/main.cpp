/*
 * main.cpp - strata-consumerd: the consumer daemon.  Its options: the table
 * below (libtrace/options/options.h: the same table parses argv and prints
 * --help); the protocol is docs/control-protocol.md.
 */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/resource.h>
#include <vector>

#include "daemon.h"
#include "drain.h"
#include "options.h"
#include "sched_policy.h"
#include "recover.h"
#include "reattach.h"
#include "repair.h"
#include "sync_link.h"

namespace {

using namespace strata;

const cli::Command kDaemon = {
	"",
	"[--socket PATH] [--ready-fd N] [--adopt-early] [-q] [-v]\n"
	" [--sync NAME=SPEC]... [--sync-guest NAME=SPEC]... [--sync-period MS]\n"
	"--repair DIR [--mark-lost] | --check DIR\n"
	"--recover IMAGE -o DIR [--at PADDR]\n"
	"--version",
	"Receives traced processes' buffers and writes CTF traces.",
	"SIGTERM or SIGINT: flush every session and exit.\n"
	"\n"
	"Environment: STRATA_DIRECT_IO=1 writes the stream files around the page\n"
	"cache (O_DIRECT, each packet padded to the file system's alignment) where the\n"
	"file system takes it and while the daemon keeps up with the writers: less CPU\n"
	"and the traced system's cache left alone, but a write the disk makes wait\n"
	"longer than the ring lasts loses a burst the page cache would have taken.",
	"Exit status: 0 ok, 1 failure, 2 usage error, 3 torn files (--check).",
	false,
	"strata-consumerd"};

struct Args {
	DaemonOptions opt;
	std::string repair;
	bool check_only = false, version = false, mark_lost = false;
};

// --sync (follower) or --sync-guest: NAME=SPEC, checked now.
cli::Option sync_option(const char *name, bool follower, const char *help, std::vector<std::string> &dest)
{
	return cli::custom(name, 0, "NAME=SPEC", "a clock link", help,
			   [name, follower, &dest](const char *v) {
				   daemon_impl::SyncSpec spec;
				   std::string err;
				   if (!daemon_impl::parse_sync(v, follower, &spec, &err))
					   return std::string("--") + name + " " + err;
				   dest.push_back(v);
				   return std::string();
			   });
}

std::vector<cli::Option> daemon_options(Args &a)
{
	DaemonOptions &o = a.opt;
	return {
		cli::text("socket", 0, "PATH", "a socket path",
			  "listen there (default: $STRATA_CONSUMERD_SOCKET, else "
			  "$XDG_RUNTIME_DIR/strata/consumerd.sock, else /run/strata/consumerd.sock for root, "
			  "/tmp/strata-UID/consumerd.sock otherwise)",
			  o.socket_path),
		cli::custom("ready-fd", 0, "N", "a descriptor",
			    "write \"ready\" to fd N and close it once listening",
			    [&o](const char *v) {
				    uint32_t fd = 0;
				    if (!cli::parse_u32(v, fd) || fd > 65535)
					    return std::string("bad --ready-fd '") + v + "'";
				    o.ready_fd = static_cast<int>(fd);
				    return std::string();
			    }),
		cli::flag("adopt-early", 0,
			  "a session that starts also records the processes that began tracing with no "
			  "daemon (STRATA_EARLY), from their first event (e.g. the system daemon after early "
			  "boot)",
			  o.adopt_early),
		sync_option("sync", true,
			    "a clock link to the daemon of NAME, whose clock this machine's traces are put "
			    "onto (in a guest: its host).  SPEC: virtio:PATH, unix:PATH, tcp:HOST:PORT, "
			    "vsock:CID:PORT, or listen:unix:PATH, listen:tcp:ADDR:PORT, listen:vsock:PORT",
			    o.sync),
		sync_option("sync-guest", false,
			    "a clock link to a machine that follows this one's clock (a guest); its map "
			    "and bound in clocks.json, `strata status` (docs/clocks.md).  SPEC,kvm=PID: the "
			    "guest's qemu process, whose KVM TSC facts are checked against the map; "
			    "SPEC,spin=on|off: wait for answers polling, not sleeping (default on for a "
			    "follower's virtio: and vsock: links)",
			    o.sync_guest),
		cli::number("sync-period", 0, "MS", "a period in ms",
			    "between two probes of a link, fixed (default: adaptive, every 4 ms while the "
			    "map is learnt or its bound above its target, every 100 ms once it holds)",
			    o.sync_period_ms, 1u, 60000u),
		cli::text("repair", 0, "DIR", "a directory",
			  "truncate every torn stream file under DIR to its last whole packet, then exit",
			  a.repair),
		cli::flag(
			"mark-lost", 0,
			"(with --repair) end each lane of each sub-trace under DIR with a discarded-packets "
			"mark: its daemon died with no successor, what it held is lost and not counted",
			a.mark_lost),
		cli::custom("check", 0, "DIR", "a directory",
			    "list the torn stream files under DIR, change nothing; exit 3 if there is one",
			    [&a](const char *v) {
				    if (!*v)
					    return std::string("--check needs a directory");
				    a.repair = v;
				    a.check_only = true;
				    return std::string();
			    }),
		cli::custom("recover", 0, "IMAGE", "a memory image",
			    "(first, with -o DIR [--at PADDR]) write the Strata buffers of a crashed "
			    "kernel's memory image as CTF traces: `strata-consumerd --recover --help`",
			    [](const char *) { return std::string("--recover comes first"); }),
		cli::flag("quiet", 'q', "log warnings and errors only", o.quiet),
		cli::flag("verbose", 'v', "log registrations and attachments", o.verbose),
		cli::flag("version", 0, "print the version and exit", a.version),
	};
}

int repair_main(const std::string &dir, bool check_only, bool mark_lost)
{
	strata::RepairStats s = strata::repair_tree(dir, check_only);
	printf("%llu stream file(s) examined, %llu %s, %llu byte(s) %s, %llu error(s)",
	       static_cast<unsigned long long>(s.files), static_cast<unsigned long long>(s.repaired),
	       check_only ? "torn" : "repaired", static_cast<unsigned long long>(s.bytes_cut),
	       check_only ? "to cut" : "cut", static_cast<unsigned long long>(s.errors));
	if (s.damaged)
		printf(", %llu damaged inside and left as they are (strata check names the damage)",
		       static_cast<unsigned long long>(s.damaged));
	std::string err;
	if (mark_lost && !check_only)
		printf(", %u lane(s) marked as cut short", strata::mark_lost_tree(dir, err));
	printf("\n");
	if (!err.empty())
		fprintf(stderr, "strata-consumerd: %s", err.c_str());
	if (s.errors || !err.empty())
		return 1;
	return check_only && s.repaired ? 3 : 0;
}

// The daemon holds descriptors per live traced process (its control
// connection, and others per buffer): with thousands of processes the usual
// soft limit of 1024 is what would refuse the next one.  The hard limit is
// the administrator's; the soft one is ours to raise (nothing here uses
// select(2)).
void raise_nofile()
{
	struct rlimit r;
	if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
		r.rlim_cur = r.rlim_max;
		setrlimit(RLIMIT_NOFILE, &r);
	}
}

} // namespace

int main(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "--recover") == 0) { // `strata recover`, docs/crash.md
		strata::RecoverArgs r;
		const int p = strata::recover_parse(strata::recover_command(true), argc - 1, argv + 1, &r);
		return p != strata::cli::kParsed ? p : strata::recover(r);
	}
	Args a;
	std::vector<char *> operands;
	if (const int r = strata::cli::parse(kDaemon, daemon_options(a), argc, argv, operands);
	    r != strata::cli::kParsed)
		return r;
	if (!operands.empty())
		return strata::cli::usage_error(kDaemon,
						std::string("unknown argument '") + operands[0] + "'");
	if (a.version) {
		printf("strata-consumerd " STRATA_VERSION_STRING "\n");
		return 0;
	}
	if (!a.repair.empty())
		return repair_main(a.repair, a.check_only, a.mark_lost);
	raise_nofile();
	strata::short_slice(); // the control thread: answers registrations sooner under load
	return strata::run_daemon(a.opt);
}
