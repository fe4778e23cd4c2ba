/*
 * record_options.cpp - `strata record`'s steps 1 and 2 (record.h): its
 * option table and the command line read through it; then everything
 * decided before a daemon is asked anything: the --preload libraries and
 * the JVM agent found and loadable, the output directory (new, or empty,
 * or --add), the buffers' default size, the session's name, and a
 * statically linked CMD said at once.
 */
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <string>
#include <vector>

#include "agg_spec.h"
#include "commands.h"
#include "control/names.h"
#include "pthread_count_env.h"
#include "record.h"

namespace strata {
namespace cli {
namespace record {

namespace {

// libstrata-NAME.so where cli::find_library looks; a NAME with a '/' is
// the library's path itself.
std::string find_preload(const std::string &name)
{
	if (name.find('/') != std::string::npos)
		return access(name.c_str(), R_OK) == 0 ? cli::absolute_path(name) : "";
	return cli::find_library("libstrata-" + name + ".so");
}

// strata.jar beside libstrata-jvm.so: the build tree keeps both in jvm/, an
// install puts the jar in share/java (lib/ or lib/<multiarch>/ beside it).
std::string find_java_api(const std::string &agent)
{
	std::string d = agent.substr(0, agent.rfind('/'));
	for (const std::string &p :
	     {d + "/strata.jar", d + "/../share/java/strata.jar", d + "/../../share/java/strata.jar",
	      cli::self_dir() + "/../share/java/strata.jar"})
		if (access(p.c_str(), R_OK) == 0)
			return p;
	return "";
}

// Whether the dynamic loader accepts `lib` (and every library it needs): a
// throwaway child dlopens it.  "" if it loads, else the loader's message.
// Its constructors run only in that child, pointed at no daemon.
std::string loader_refuses(const std::string &lib)
{
	int fds[2];
	if (pipe2(fds, O_CLOEXEC) != 0)
		return "";
	pid_t pid = fork();
	if (pid == 0) {
		close(fds[0]);
		setenv("STRATA_CONSUMERD_SOCKET", "/nonexistent/strata-probe.sock", 1);
		unsetenv("STRATA_EARLY");
		if (dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL))
			_exit(0);
		const char *e = dlerror();
		ssize_t n = write(fds[1], e ? e : "dlopen failed", e ? strlen(e) : 13);
		(void)n;
		_exit(1);
	}
	close(fds[1]);
	std::string msg;
	char buf[512];
	ssize_t n;
	while (pid > 0 && (n = read(fds[0], buf, sizeof buf)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			break;
		msg.append(buf, (size_t)n);
	}
	close(fds[0]);
	int st = 0;
	if (pid > 0)
		while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
		}
	if (pid > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return "";
	return msg.empty() ? "the loader refused it" : msg;
}

// Whether `dir` is absent or an empty directory.
bool dir_empty(const std::string &dir)
{
	DIR *d = opendir(dir.c_str());
	if (!d)
		return errno == ENOENT;
	bool empty = true;
	while (struct dirent *e = readdir(d))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			empty = false;
	closedir(d);
	return empty;
}

// record's sub-buffer size when the user chose none (docs/ring-buffer.md,
// "record's default buffers"): a process's rings together get about
// 1/256 of the machine's memory, spread over the lanes two writing
// threads a CPU use (2 x CPUs, at least 4, plus half as many shared) and
// n_subbuf sub-buffers each; a power of two between the runtime's default
// (128 KiB) and 1 MiB.  The runtime's default owns at least 8 lanes
// (slots.cpp): on 1 to 3 CPUs a process with more writing threads than
// 2 x CPUs may take up to twice that, rather than every thread's ring
// halved for it.
uint64_t default_subbuf_size(const proto::ChannelConfig &c)
{
	const long cpus = sysconf(_SC_NPROCESSORS_ONLN), pages = sysconf(_SC_PHYS_PAGES),
		   page = sysconf(_SC_PAGESIZE);
	uint64_t owned =
		c.n_lanes ? c.n_lanes : std::max<uint64_t>(4, 2 * static_cast<uint64_t>(std::max(1L, cpus)));
	const uint64_t lanes = owned + std::max<uint64_t>(1, owned / 2);
	const uint64_t subbufs = c.n_subbuf ? c.n_subbuf : proto::kDefaultSubbufs;
	const uint64_t mem =
		pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
	const uint64_t want = mem / 256 / lanes / subbufs;
	uint64_t size = proto::kDefaultSubbufSize;
	while (size * 2 <= want && size * 2 <= (1u << 20))
		size *= 2;
	return size;
}

// The file execvp(3) would run for `name`: itself if it holds a '/', else
// the first executable regular file of that name in PATH; "" if none.
std::string resolve_command(const char *name)
{
	if (strchr(name, '/'))
		return name;
	const char *path = getenv("PATH");
	std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
	for (size_t b = 0;;) {
		size_t e = dirs.find(':', b);
		std::string d = dirs.substr(b, e == std::string::npos ? std::string::npos : e - b);
		std::string f = (d.empty() ? "." : d) + "/" + name;
		struct stat st;
		if (stat(f.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(f.c_str(), X_OK) == 0)
			return f;
		if (e == std::string::npos)
			return "";
		b = e + 1;
	}
}

// Whether `path` is an ELF executable of this machine with no program
// interpreter (PT_INTERP): statically linked, so the dynamic loader never
// runs in it and neither LD_PRELOAD nor libstrata can be loaded into it.
bool static_executable(const std::string &path)
{
	int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	Elf64_Ehdr eh;
	bool is_static = false;
	if (pread(fd, &eh, sizeof eh, 0) == (ssize_t)sizeof eh && !memcmp(eh.e_ident, ELFMAG, SELFMAG) &&
	    eh.e_ident[EI_CLASS] == ELFCLASS64 && (eh.e_type == ET_EXEC || eh.e_type == ET_DYN) &&
	    eh.e_phentsize == sizeof(Elf64_Phdr) && eh.e_phnum > 0 && eh.e_phnum < 4096) {
		is_static = true;
		for (unsigned k = 0; k < eh.e_phnum && is_static; k++) {
			Elf64_Phdr ph;
			if (pread(fd, &ph, sizeof ph, static_cast<off_t>(eh.e_phoff + k * sizeof ph)) !=
			    (ssize_t)sizeof ph)
				is_static = false; // unreadable: say nothing
			else if (ph.p_type == PT_INTERP)
				is_static = false;
		}
	}
	close(fd);
	return is_static;
}

const char *const kCmd = "record";

// record's own options (the channel and relay options are cli's): one row
// an option, its help beside it.
std::vector<cli::Option> record_options(Record &r)
{
	Record *rp = &r;
	return {
		cli::path("output", 'o', "DIR", "a directory",
			  "trace directory (default ./strata-record-YYYYMMDD-HHMMSS)", r.create.output_dir),
		cli::custom(
			"aggregate", 0, "SPEC", "a spec",
			"aggregate instead of recording (strata create --aggregate): 'PROVIDER:EVENT[:FIELD] "
			"[by KEY] [limit N]'; once CMD ended, the aggregates are printed as strata top -s "
			"--once shows them (--json: as JSON); with -e, both",
			[rp](const char *v) {
				struct strata_agg_spec spec;
				char why[128] = "too long";
				if (strlen(v) > proto::kMaxAggregate ||
				    agg_spec_parse(v, &spec, why, sizeof why) != 0)
					return std::string(
						       "--aggregate needs 'PROVIDER:EVENT[:FIELD] [by KEY] "
						       "[limit N]': ") +
					       why;
				rp->create.aggregate = v;
				return std::string();
			}),
		cli::flag("json", 0, "with --aggregate: print the aggregates as JSON", r.agg_json),
		cli::custom("event", 'e', "PATTERN", "a pattern",
			    "enable \"provider:event\" globs (default: \"*\"); repeatable",
			    [rp](const char *v) {
				    const std::string why = cli::bad_pattern(v);
				    if (why.empty())
					    rp->patterns.push_back(v);
				    return why;
			    }),
		cli::flag("add", 0,
			  "record into DIR although it is not empty (else refused: two recordings in one "
			  "directory mix)",
			  r.add),
		cli::custom("loglevel", 0, "LEVEL", "a level", "with -e: only LEVEL or more severe",
			    [rp](const char *v) {
				    return cli::parse_loglevel(v, rp->loglevel)
						   ? std::string()
						   : std::string("bad log level '") + v + "'";
			    }),
		cli::texts("preload", 0, "NAME", "a library",
			   "LD_PRELOAD libstrata-NAME.so (e.g. pthread), or the library at NAME if it has a "
			   "/; refused up front if the loader refuses it",
			   r.preloads),
		cli::flag("jvm", 0,
			  "load libstrata-jvm.so into Java (JAVA_TOOL_OPTIONS -agentpath, strata.jar on the "
			  "boot class path): jvm:* events and the Java API",
			  r.jvm),
		cli::flag("all-processes", 0,
			  "record every process of yours the daemon serves (as strata create does), not "
			  "only CMD and its descendants",
			  r.all_processes),
	};
}

// A library to load into CMD that the loader refuses would stop it before
// main (exit 127) with only the loader's line to say why: say it here.
bool loader_accepts(const std::string &lib)
{
	const std::string why = loader_refuses(lib);
	if (why.empty())
		return true;
	fprintf(stderr, "strata record: the dynamic loader refuses %s: %s\n", lib.c_str(), why.c_str());
	return false;
}

// STRATA_PTHREAD_COUNT as the pthread preload reads it (pthread_count_env.h):
// said here, before the program runs, rather than by the library in each
// process it enters.
bool pthread_count_ok()
{
	const char *c = getenv("STRATA_PTHREAD_COUNT");
	if (strata_pthread_count_parse(c) >= 0)
		return true;
	fprintf(stderr,
		"strata record: STRATA_PTHREAD_COUNT=%s: give 0 (a record per lock pair), 1 (count "
		"uncontended pairs, every hold timed) or N up to 65536 (one hold in N timed), or leave it "
		"unset (the default, one in 16)\n",
		c);
	return false;
}

// Step 2a: the --preload libraries and the JVM agent, found and loadable.
bool find_libraries(Record &r)
{
	for (const std::string &p : r.preloads) {
		if (p == "pthread" && !pthread_count_ok())
			return false;
		std::string lib = find_preload(p);
		if (lib.empty()) {
			fprintf(stderr,
				"strata record: libstrata-%s.so not found next to strata, in ../lib or "
				"in " STRATA_LIBDIR "\n",
				p.c_str());
			return false;
		}
		if (!loader_accepts(lib))
			return false;
		r.preload_env += (r.preload_env.empty() ? "" : ":") + lib;
	}
	r.jvm_agent = r.jvm ? find_preload("jvm") : "";
	r.java_api = r.jvm_agent.empty() ? "" : find_java_api(r.jvm_agent);
	if (r.jvm && r.jvm_agent.empty()) {
		fprintf(stderr, "strata record: libstrata-jvm.so not found next to strata, in ../lib or "
				"in " STRATA_LIBDIR "\n");
		return false;
	}
	return r.jvm_agent.empty() || loader_accepts(r.jvm_agent);
}

} // namespace

// Step 1: the command line into `r`.  -1 to go on, else the exit status.
int parse_args(int argc, char **argv, Record &r)
{
	const std::string more =
		"Without --subbuf-size, record's sub-buffers are sized from the memory and the\nCPUs (here " +
		cli::human_bytes(default_subbuf_size(proto::ChannelConfig{})) +
		"; docs/ring-buffer.md, \"record's default buffers\").\n\n"
		"When CMD ends, the last lines (stderr) give the trace directory and what was\n"
		"discarded: \"N event(s) and M packet(s) discarded\" with the processes that lost\n"
		"most, or \"nothing discarded\"; before them, each process that did not join the\n"
		"session (its state query missed its deadline: its events are not in the trace).";
	cli::Command c = {kCmd,
			  "[-o DIR] [-e PATTERN]... [OPTIONS] -- CMD [ARGS]",
			  "Run CMD and record its tracepoints: CMD's and those of every process it starts\n"
			  "(its process tree), not those of other programs the daemon serves, unless\n"
			  "--all-processes.  Kernel events (-e 'kernel:...') are the whole machine's.\n"
			  "Uses the running strata-consumerd if one answers, else starts a private one\n"
			  "for the duration of CMD (and another that takes the session up if it dies\n"
			  "meanwhile).  CMD must link libstrata and tp-sync or tp-async\n"
			  "(Strata::tp_sync, Strata::tp_async), or be given a library with --preload.",
			  more.c_str(),
			  "Exit status: CMD's (128+N if killed by signal N), whatever was discarded (the\n"
			  "loss is told, not an error); 1 if recording failed before CMD ran or the\n"
			  "daemon did not complete the trace; 2 usage error.",
			  true};
	std::vector<cli::Option> opts = record_options(r);
	cli::append(opts, cli::channel_options(r.create.channel));
	cli::append(opts, cli::relay_options(r.create));
	std::vector<char *> operands;
	if (const int p = cli::parse(c, opts, argc, argv, operands); p != cli::kParsed)
		return p;
	if (operands.empty())
		return cli::usage_error(c, "missing command to run (strata record -- CMD [ARGS])");
	if (r.patterns.size() > proto::kMaxRules)
		return cli::usage_error(c, "at most 32 patterns");
	if (r.patterns.empty() && r.create.aggregate.empty())
		r.patterns.push_back("*");
	if (r.agg_json && r.create.aggregate.empty())
		return cli::usage_error(c, "--json goes with --aggregate");
	r.command = argv + (argc - static_cast<int>(operands.size()));
	return -1;
}

// Step 2: everything decided before a daemon is asked anything: the
// libraries, the output directory, the buffers, the session's name.  -1 to
// go on, else the exit status.
int prepare(Record &r)
{
	proto::Create &create = r.create;
	if (!find_libraries(r))
		return cli::kFail;
	if (create.output_dir.empty()) { // a new one: two records in one second get -1, -2...
		const std::string base = cli::absolute_path("strata-record-" + local_timestamp());
		create.output_dir = base;
		for (int k = 1; !dir_empty(create.output_dir) && k < 1000; k++)
			create.output_dir = base + "-" + std::to_string(k);
	}
	if (create.output_dir.size() > proto::kMaxPath)
		return cli::usage_error(kCmd, "output path longer than 4095 bytes");
	struct stat st;
	r.out_existed = stat(create.output_dir.c_str(), &st) == 0;
	if (!r.add && create.relay.empty() && !dir_empty(create.output_dir)) {
		fprintf(stderr,
			"strata record: %s exists and is not empty: a recording there would mix with what "
			"it holds; choose another -o, or give --add to add this recording to it\n",
			create.output_dir.c_str());
		return cli::kFail;
	}
	if (!create.channel.subbuf_size)
		create.channel.subbuf_size = default_subbuf_size(create.channel);
	create.session = "record-" + std::to_string(getpid());

	cli::warn_kernel_without_module(kCmd, r.patterns);
	for (const std::string &p : r.patterns)
		if (p.compare(0, 7, "kernel:") == 0) {
			fprintf(stderr,
				"strata record: note: kernel events (%s) are recorded for the whole "
				"machine, every process's, not only the command's\n",
				p.c_str());
			break;
		}
	const std::string cmd_path = resolve_command(r.command[0]);
	r.is_static = !cmd_path.empty() && static_executable(cmd_path);
	if (r.is_static)
		fprintf(stderr,
			"strata record: warning: %s is statically linked (no ELF interpreter): the dynamic "
			"loader never runs in it, so neither libstrata nor a --preload library can be loaded "
			"into it and none of its own events can be recorded (only those of dynamically "
			"linked "
			"programs it runs)\n",
			cmd_path.c_str());
	return -1;
}

} // namespace record
} // namespace cli
} // namespace strata
