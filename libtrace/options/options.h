/*
 * options.h - one way for every Strata program (each `strata` command,
 * strata-consumerd and its recovery mode) to take its options: a
 * table of rows (long name, short name, value, help line, and what the
 * value does: a check and a store) that both parses argv (getopt_long
 * underneath) and prints --help, so the help cannot drift from what is
 * accepted (git's parse-options is the model).
 *
 *   bool once = false;
 *   uint32_t limit = 20;
 *   std::string out;
 *   const cli::Option opts[] = {
 *           cli::path("output", 'o', "DIR", "a directory", "where the trace goes", out),
 *           cli::number("limit", 0, "N", "a positive count", "keys shown", limit, 1u, 1000u),
 *           cli::flag("once", 0, "print one snapshot and exit", once),
 *   };
 *   static const cli::Command kCmd = {"top", "[--once] [--limit N]", "Show ..."};
 *   std::vector<char *> operands;
 *   if (int r = cli::parse(kCmd, opts, argc, argv, operands); r != cli::kParsed)
 *           return r;                           // help printed (0) or usage error told (2)
 *
 * -h/--help is every command's.  Options may come before, between and after
 * operands (unless Command::stop_at_operand), "--" ends them, a long name
 * may be shortened to any unambiguous prefix (getopt_long), and a value is
 * given as "--name VALUE", "--name=VALUE", "-xVALUE" or "-x VALUE" (an
 * optional value only as "--name=VALUE").  A row's `take` runs when its
 * option is met, in command-line order: it checks and stores the value and
 * returns "" or the message of the usage error (exit 2).
 */
#ifndef STRATA_CLI_OPTIONS_H
#define STRATA_CLI_OPTIONS_H

#include <cstdint>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace strata {
namespace cli {

// Exit statuses: ok, runtime failure, usage error.
constexpr int kOk = 0, kFail = 1, kUsage = 2;

// 4096, 64k, 1M, 2MiB...: a byte count.
bool parse_size(const char *s, uint64_t &out);
// A decimal whole number that fits uint32_t.
bool parse_u32(const char *s, uint32_t &out);
// "1.5 MiB": a byte count for people.
std::string human_bytes(uint64_t n);
// p made absolute against the working directory.
std::string absolute_path(const std::string &p);

// What a command's help says around its option table.
struct Command {
	const char *name; // "create": "strata create ..."; "": the program alone
	// After "Usage: strata NAME "; '\n' starts another form, "\n " continues
	// this one on the next line.
	const char *usage;
	const char *about;     // paragraphs before the options ("" none)
	const char *more = ""; // paragraphs after the options
	const char *exit_status = "Exit status: 0 ok, 1 runtime failure, 2 usage error.";
	bool stop_at_operand = false;   // options end at the first operand (record's CMD)
	const char *program = "strata"; // the program the command belongs to
};

// One row of a command's table.
struct Option {
	const char *name = nullptr; // long name without "--" (nullptr: short only)
	char short_name = 0;        // 0: none
	const char *arg = nullptr;  // the value's name in the help ("DIR"); nullptr: a flag
	bool optional = false;      // the value may be left out (--name or --name=VALUE)
	const char *what = nullptr; // the value as a noun, for "-o needs a directory"
	const char *help = nullptr; // nullptr: not shown by --help
	// Checks and stores the value (nullptr for a flag, or an optional value
	// left out): "" taken, else the usage error's message.
	std::function<std::string(const char *value)> take;

	// "-o" when there is a short name, else "--name": how messages name it.
	std::string shown() const;
};

// A heading between groups of rows in the help (a blank line, then text).
Option section(const char *text);

// ---- rows for the common kinds of value ---------------------------------
// A flag: dest = true.
Option flag(const char *name, char short_name, const char *help, bool &dest);
// A non-empty string (a repeated option keeps the last).
Option text(const char *name, char short_name, const char *arg, const char *what, const char *help,
	    std::string &dest);
// A non-empty string each time the option is given (repeatable).
Option texts(const char *name, char short_name, const char *arg, const char *what, const char *help,
	     std::vector<std::string> &dest);
// A non-empty path, made absolute against the working directory.
Option path(const char *name, char short_name, const char *arg, const char *what, const char *help,
	    std::string &dest);
// A whole number in lo..hi (decimal).
Option number(const char *name, char short_name, const char *arg, const char *what, const char *help,
	      uint64_t &dest, uint64_t lo, uint64_t hi);
Option number(const char *name, char short_name, const char *arg, const char *what, const char *help,
	      uint32_t &dest, uint32_t lo, uint32_t hi);
// A byte size in lo..hi: 4096, 64k, 1M, 2MiB (parse_size).
Option size(const char *name, char short_name, const char *arg, const char *help, uint64_t &dest, uint64_t lo,
	    uint64_t hi);
// A duration in lo_ms..hi_ms milliseconds: "<n>ms", "<n>s", or a bare number
// in `bare_unit_ms` units (1: milliseconds, 1000: seconds); fractions allowed.
Option duration_ms(const char *name, char short_name, const char *arg, const char *help, uint32_t &dest,
		   uint32_t lo_ms, uint32_t hi_ms, uint32_t bare_unit_ms);
// One word of `choices`: dest = its index.
Option choice(const char *name, char short_name, const char *arg, const char *help, int &dest,
	      std::initializer_list<const char *> choices);
// Anything else: `take` checks and stores.
Option custom(const char *name, char short_name, const char *arg, const char *what, const char *help,
	      std::function<std::string(const char *value)> take);

// ---- parsing and help -------------------------------------------------------
constexpr int kParsed = -1; // parse(): go on

// Parses argv[1..argc) by `opts` (plus -h/--help); the operands, in order,
// into `operands` (with stop_at_operand: the first one and all after it,
// which are then argv's tail).  kParsed to go on, 0 after --help was
// printed, 2 after a usage error was told on stderr.
int parse(const Command &cmd, const std::vector<Option> &opts, int argc, char **argv,
	  std::vector<char *> &operands);

// The command's help: usage, about, the option rows (wrapped to 80
// columns, values aligned), more, exit status.
void print_help(FILE *f, const Command &cmd, const std::vector<Option> &opts);

// The same help as a man page (roff): NAME ("strata-NAME - summary"),
// SYNOPSIS, DESCRIPTION (about), OPTIONS (the rows), NOTES (more), EXIT
// STATUS.  print_help prints this instead when STRATA_HELP_FORMAT=man is
// set in the environment (the summary from STRATA_MAN_SUMMARY): how
// `strata help --man CMD` and the build's man pages reach every command's
// table, the reader module's included.
void print_man(FILE *f, const Command &cmd, const std::vector<Option> &opts, const char *summary);

// "PROGRAM NAME: msg" and a hint to --help on stderr; returns 2.
int usage_error(const Command &cmd, const std::string &msg);

// Appends `more` to `opts` (a table made of shared parts: channel options).
void append(std::vector<Option> &opts, std::vector<Option> more);

} // namespace cli
} // namespace strata

#endif
