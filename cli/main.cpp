/*
 * main.cpp - the `strata` command: dispatch to one subcommand per file.
 */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "commands.h"

namespace {

struct Subcommand {
	const char *name;
	int (*fn)(int, char **);
	const char *summary;
};

const Subcommand kCommands[] = {
	{"record", strata_cmd_record, "run a command and record its trace (no setup needed)"},
	{"create", strata_cmd_create, "create a tracing session"},
	{"enable-event", strata_cmd_enable_event, "enable tracepoints in a session (glob patterns)"},
	{"disable-event", strata_cmd_disable_event, "disable tracepoints in a session"},
	{"start", strata_cmd_start, "start recording a session"},
	{"stop", strata_cmd_stop, "stop recording and flush a session's trace"},
	{"snapshot", strata_cmd_snapshot, "write a running flight-recorder session's buffers to a new trace"},
	{"destroy", strata_cmd_destroy, "stop and forget a session (the trace stays on disk)"},
	{"list", strata_cmd_list, "list the tracepoints of registered traced processes"},
	{"status", strata_cmd_status, "show sessions and what they recorded"},
	{"receive", strata_cmd_receive, "rebuild a trace streamed over a serial line (--serial)"},
	{"split", strata_cmd_split,
	 "split a relayed or received follower's trace by clock piece (babeltrace2)"},
	{"align", strata_cmd_align, "refine a guest trace's clock map with traced messages (--match)"},
	{"top", strata_cmd_top, "live view of a process's aggregates (STRATA_AGGREGATE)"},
	{"recover", strata_cmd_recover, "write the buffers of a crashed kernel's memory image as a trace"},
	{"view", strata_cmd_view, "print a trace"},
	{"analyze", strata_cmd_analyze, "analyse a trace (e.g. mutex contention)"},
	{"export", strata_cmd_export, "write a trace for Perfetto's UI or as Chrome JSON trace events"},
	{"check", strata_cmd_check, "report a trace's damage; write a clean copy (--clean-copy)"},
	{"query", strata_cmd_query, "answer SQL about a trace (docs/query.md)"},
};

void usage(FILE *f)
{
	fputs("Usage: strata COMMAND [OPTIONS]\n\nCommands:\n", f);
	for (const Subcommand &c : kCommands)
		fprintf(f, "  %-14s %s\n", c.name, c.summary);
	fputs("\n'strata COMMAND --help' describes a command.\n"
	      "The daemon's socket: $STRATA_CONSUMERD_SOCKET, else\n"
	      "$XDG_RUNTIME_DIR/strata/consumerd.sock, else /run/strata/consumerd.sock (root).\n"
	      "Exit status: 0 ok, 1 runtime failure, 2 usage error.\n",
	      f);
}

// `strata help --man [CMD]`: the man page of strata (its commands) or of
// CMD, from the same table as --help (options.h, print_man); the build
// makes the installed man pages with it.
int man_page(const char *name)
{
	if (!name) {
		std::string more = "Commands (each has its page, strata-COMMAND(1), and --help):\n";
		for (const Subcommand &c : kCommands)
			more += std::string("\n  ") + c.name + ": " + c.summary;
		more += "\n\nThe daemon's socket: $STRATA_CONSUMERD_SOCKET, else\n"
			"$XDG_RUNTIME_DIR/strata/consumerd.sock, else /run/strata/consumerd.sock (root).";
		bool version = false;
		const strata::cli::Command top = {
			"", "COMMAND [OPTIONS]\n--version",
			"Strata records the tracepoints of C, C++ and Java programs and, with "
			"its kernel module, kernel events, on one clock, as CTF traces.",
			more.c_str()};
		strata::cli::print_man(
			stdout, top, {strata::cli::flag("version", 0, "print the version and exit", version)},
			"trace programs and the kernel into CTF traces");
		return 0;
	}
	for (const Subcommand &c : kCommands)
		if (!strcmp(name, c.name)) {
			setenv("STRATA_HELP_FORMAT", "man", 1);
			setenv("STRATA_MAN_SUMMARY", c.summary, 1);
			char help[] = "--help";
			char *av[] = {const_cast<char *>(c.name), help, nullptr};
			return c.fn(2, av);
		}
	fprintf(stderr, "strata help: unknown command '%s'\n", name);
	return 2;
}

} // namespace

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
		if (argc > 2 && !strcmp(argv[1], "help") && !strcmp(argv[2], "--man"))
			return man_page(argc > 3 ? argv[3] : nullptr);
		if (argc > 2 && strcmp(argv[1], "help") == 0) {
			for (const Subcommand &c : kCommands)
				if (!strcmp(argv[2], c.name)) {
					char help[] = "--help";
					char *av[] = {argv[2], help, nullptr};
					return c.fn(2, av);
				}
		}
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "--version")) {
		printf("strata " STRATA_VERSION_STRING "\n");
		return 0;
	}
	for (const Subcommand &c : kCommands)
		if (!strcmp(argv[1], c.name))
			return c.fn(argc - 1, argv + 1);
	fprintf(stderr, "strata: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
