/*
 * main.cpp - strata-consumerd: the consumer daemon.  Options below; the
 * protocol is docs/control-protocol.md.
 */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/resource.h>

#include "daemon.h"
#include "drain.h"
#include "sched_policy.h"
#include "recover.h"
#include "repair.h"
#include "sync_link.h"

namespace {

void usage(FILE *f)
{
	fputs("Usage: strata-consumerd [--socket PATH] [--ready-fd N] [--adopt-early] [-q] [-v]\n"
	      "                        [--sync NAME=SPEC]... [--sync-guest NAME=SPEC]... [--sync-period MS]\n"
	      "       strata-consumerd --repair DIR | --check DIR\n"
	      "       strata-consumerd --version\n"
	      "\n"
	      "Receives traced processes' buffers and writes CTF traces.\n"
	      "\n"
	      "  --socket PATH   listen there (default: $STRATA_CONSUMERD_SOCKET, else\n"
	      "                  $XDG_RUNTIME_DIR/strata/consumerd.sock, else\n"
	      "                  /run/strata/consumerd.sock for root,\n"
	      "                  /tmp/strata-UID/consumerd.sock otherwise)\n"
	      "  --ready-fd N    write \"ready\" to fd N and close it once listening\n"
	      "  --adopt-early   a session that starts also records the processes that\n"
	      "                  began tracing with no daemon (STRATA_EARLY), from their\n"
	      "                  first event (e.g. the system daemon after early boot)\n"
	      "  --sync NAME=SPEC        a clock link to the daemon of NAME, whose clock this\n"
	      "                  machine's traces are put onto (in a guest: its host).\n"
	      "                  SPEC: virtio:PATH, unix:PATH, tcp:HOST:PORT, vsock:CID:PORT,\n"
	      "                  or listen:unix:PATH, listen:tcp:ADDR:PORT, listen:vsock:PORT\n"
	      "  --sync-guest NAME=SPEC  a clock link to a machine that follows this one's\n"
	      "                  clock (a guest); its map and bound in clocks.json, `strata\n"
	      "                  status` (docs/clocks.md). SPEC,kvm=PID: the guest's qemu\n"
	      "                  process, whose KVM TSC facts are checked against the map;\n"
	      "                  SPEC,spin=on|off: wait for answers polling, not sleeping\n"
	      "                  (default on for a follower's virtio: and vsock: links)\n"
	      "  --sync-period MS  between two probes of a link (default 100)\n"
	      "  --repair DIR    truncate every torn stream file under DIR to its last\n"
	      "                  whole packet, then exit\n"
	      "  --check DIR     list the torn stream files under DIR, change nothing;\n"
	      "                  exit 3 if there is one\n"
	      "  -q, --quiet     log warnings and errors only\n"
	      "  -v, --verbose   log registrations and attachments\n"
	      "\n"
	      "SIGTERM or SIGINT: flush every session and exit.\n"
	      "Exit status: 0 ok, 1 failure, 2 usage error, 3 torn files (--check).\n",
	      f);
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
	if (argc >= 2 && strcmp(argv[1], "--recover") == 0) // `strata recover`, docs/crash.md
		return strata::recover_main(argc - 1, argv + 1);
	strata::DaemonOptions opt;
	std::string repair;
	bool check_only = false;
	for (int i = 1; i < argc; i++) {
		std::string a = argv[i];
		auto value = [&](const char *name) -> const char * {
			if (i + 1 >= argc) {
				fprintf(stderr, "strata-consumerd: %s needs a value\n", name);
				exit(2);
			}
			return argv[++i];
		};
		if (a == "-h" || a == "--help") {
			usage(stdout);
			return 0;
		} else if (a == "--version") {
			printf("strata-consumerd " STRATA_VERSION_STRING "\n");
			return 0;
		} else if (a == "--socket") {
			opt.socket_path = value("--socket");
		} else if (a == "--ready-fd") {
			char *end;
			const char *v = value("--ready-fd");
			long fd = strtol(v, &end, 10);
			if (*end || fd < 0 || fd > 65535) {
				fprintf(stderr, "strata-consumerd: bad --ready-fd '%s'\n", v);
				return 2;
			}
			opt.ready_fd = static_cast<int>(fd);
		} else if (a == "--sync" || a == "--sync-guest") {
			const std::string v = value(a.c_str());
			strata::daemon_impl::SyncSpec spec;
			std::string err;
			if (!strata::daemon_impl::parse_sync(v, a == "--sync", &spec, &err)) {
				fprintf(stderr, "strata-consumerd: %s %s\n", a.c_str(), err.c_str());
				return 2;
			}
			(a == "--sync" ? opt.sync : opt.sync_guest).push_back(v);
		} else if (a == "--sync-period") {
			char *end;
			const char *v = value("--sync-period");
			long ms = strtol(v, &end, 10);
			if (*end || ms < 1 || ms > 60000) {
				fprintf(stderr, "strata-consumerd: bad --sync-period '%s' (1..60000 ms)\n",
					v);
				return 2;
			}
			opt.sync_period_ms = static_cast<uint32_t>(ms);
		} else if (a == "--adopt-early") {
			opt.adopt_early = true;
		} else if (a == "--repair") {
			repair = value("--repair");
		} else if (a == "--check") {
			repair = value("--check");
			check_only = true;
		} else if (a == "-q" || a == "--quiet") {
			opt.quiet = true;
		} else if (a == "-v" || a == "--verbose") {
			opt.verbose = true;
		} else {
			fprintf(stderr, "strata-consumerd: unknown argument '%s'\n", a.c_str());
			usage(stderr);
			return 2;
		}
	}
	if (!repair.empty()) {
		strata::RepairStats s = strata::repair_tree(repair, check_only);
		printf("%llu stream file(s) examined, %llu %s, %llu byte(s) %s, %llu error(s)",
		       static_cast<unsigned long long>(s.files), static_cast<unsigned long long>(s.repaired),
		       check_only ? "torn" : "repaired", static_cast<unsigned long long>(s.bytes_cut),
		       check_only ? "to cut" : "cut", static_cast<unsigned long long>(s.errors));
		if (s.damaged)
			printf(", %llu damaged inside and left as they are (strata check names the damage)",
			       static_cast<unsigned long long>(s.damaged));
		printf("\n");
		if (s.errors)
			return 1;
		return check_only && s.repaired ? 3 : 0;
	}
	raise_nofile();
	strata::short_slice(); // the control thread: answers registrations sooner under load
	return strata::run_daemon(opt);
}
