/*
 * options.cpp - see options.h.
 */
#include "options.h"

#include <cerrno>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <getopt.h>
#include <unistd.h>

namespace strata {
namespace cli {

bool parse_size(const char *s, uint64_t &out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (end == s || errno || *s == '-')
		return false;
	uint64_t mul = 1;
	if (*end == 'k' || *end == 'K')
		mul = 1024, end++;
	else if (*end == 'm' || *end == 'M')
		mul = 1024 * 1024, end++;
	if (*end == 'i' && (end[1] == 'B' || end[1] == 'b'))
		end += 2;
	if (*end || v > UINT64_MAX / mul)
		return false;
	out = v * mul;
	return true;
}

bool parse_u32(const char *s, uint32_t &out)
{
	uint64_t v;
	char *end;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (end == s || *end || errno || *s == '-' || v > UINT32_MAX)
		return false;
	out = static_cast<uint32_t>(v);
	return true;
}

std::string human_bytes(uint64_t n)
{
	char buf[64];
	if (n >= (1ull << 30))
		snprintf(buf, sizeof(buf), "%.1f GiB", n / double(1ull << 30));
	else if (n >= (1ull << 20))
		snprintf(buf, sizeof(buf), "%.1f MiB", n / double(1ull << 20));
	else if (n >= 1024)
		snprintf(buf, sizeof(buf), "%.1f KiB", n / 1024.0);
	else
		snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(n));
	return buf;
}

std::string absolute_path(const std::string &p)
{
	if (!p.empty() && p[0] == '/')
		return p;
	char cwd[4096];
	if (!getcwd(cwd, sizeof(cwd)))
		return p;
	return std::string(cwd) + "/" + p;
}

std::string Option::shown() const
{
	if (short_name)
		return std::string("-") + short_name;
	return std::string("--") + (name ? name : "");
}

Option section(const char *text)
{
	Option o;
	o.help = text;
	return o;
}

namespace {

// "-o needs a directory" (the value absent or empty).
std::string needs(const Option &o)
{
	return o.shown() + " needs " + (o.what ? o.what : "a value");
}

Option row(const char *name, char short_name, const char *arg, const char *what, const char *help)
{
	Option o;
	o.name = name;
	o.short_name = short_name;
	o.arg = arg;
	o.what = what;
	o.help = help;
	return o;
}

} // namespace

Option flag(const char *name, char short_name, const char *help, bool &dest)
{
	Option o = row(name, short_name, nullptr, nullptr, help);
	o.take = [&dest](const char *) {
		dest = true;
		return std::string();
	};
	return o;
}

namespace {

// A row whose value is a non-empty string, given to `store`.
Option nonempty(const char *name, char short_name, const char *arg, const char *what, const char *help,
		std::function<void(const char *)> store)
{
	Option o = row(name, short_name, arg, what, help);
	const std::string empty = needs(o);
	o.take = [store, empty](const char *v) {
		if (!*v)
			return empty;
		store(v);
		return std::string();
	};
	return o;
}

} // namespace

Option text(const char *name, char short_name, const char *arg, const char *what, const char *help,
	    std::string &dest)
{
	return nonempty(name, short_name, arg, what, help, [&dest](const char *v) { dest = v; });
}

Option texts(const char *name, char short_name, const char *arg, const char *what, const char *help,
	     std::vector<std::string> &dest)
{
	return nonempty(name, short_name, arg, what, help, [&dest](const char *v) { dest.push_back(v); });
}

Option path(const char *name, char short_name, const char *arg, const char *what, const char *help,
	    std::string &dest)
{
	return nonempty(name, short_name, arg, what, help,
			[&dest](const char *v) { dest = absolute_path(v); });
}

namespace {

// "--limit needs a positive count (1..1000), not 'x'".
std::string out_of_range(const Option &o, const char *v, const std::string &lo, const std::string &hi)
{
	return needs(o) + " (" + lo + ".." + hi + "), not '" + v + "'";
}

} // namespace

Option number(const char *name, char short_name, const char *arg, const char *what, const char *help,
	      uint64_t &dest, uint64_t lo, uint64_t hi)
{
	Option o = row(name, short_name, arg, what, help);
	o.take = [&dest, lo, hi, o](const char *v) {
		char *end;
		errno = 0;
		const unsigned long long n = strtoull(v, &end, 10);
		if (end == v || *end || errno || *v == '-' || *v == '+' || n < lo || n > hi)
			return out_of_range(o, v, std::to_string(lo), std::to_string(hi));
		dest = n;
		return std::string();
	};
	return o;
}

Option number(const char *name, char short_name, const char *arg, const char *what, const char *help,
	      uint32_t &dest, uint32_t lo, uint32_t hi)
{
	Option o = row(name, short_name, arg, what, help);
	o.take = [&dest, lo, hi, o](const char *v) {
		uint32_t n = 0;
		if (!parse_u32(v, n) || *v == '+' || n < lo || n > hi)
			return out_of_range(o, v, std::to_string(lo), std::to_string(hi));
		dest = n;
		return std::string();
	};
	return o;
}

Option size(const char *name, char short_name, const char *arg, const char *help, uint64_t &dest, uint64_t lo,
	    uint64_t hi)
{
	Option o = row(name, short_name, arg, "a size", help);
	o.take = [&dest, lo, hi, o](const char *v) {
		uint64_t n = 0;
		if (!parse_size(v, n) || n < lo || n > hi)
			return out_of_range(o, v, human_bytes(lo), human_bytes(hi));
		dest = n;
		return std::string();
	};
	return o;
}

namespace {

// "<n>ms", "<n>s" or "<n>" in bare_unit_ms: milliseconds, or -1.
double parse_duration_ms(const char *v, uint32_t bare_unit_ms)
{
	char *end;
	errno = 0;
	const double t = strtod(v, &end);
	if (end == v || errno || !std::isfinite(t) || t < 0 || *v == '+' || *v == ' ')
		return -1;
	if (!strcmp(end, "ms"))
		return t;
	if (!strcmp(end, "s"))
		return t * 1000;
	return *end ? -1 : t * bare_unit_ms;
}

std::string show_ms(uint32_t ms)
{
	return ms % 1000 || ms == 0 ? std::to_string(ms) + " ms" : std::to_string(ms / 1000) + " s";
}

} // namespace

Option duration_ms(const char *name, char short_name, const char *arg, const char *help, uint32_t &dest,
		   uint32_t lo_ms, uint32_t hi_ms, uint32_t bare_unit_ms)
{
	Option o = row(name, short_name, arg, bare_unit_ms == 1 ? "milliseconds" : "a duration", help);
	o.take = [&dest, lo_ms, hi_ms, bare_unit_ms, o](const char *v) {
		const double ms = parse_duration_ms(v, bare_unit_ms);
		if (ms < lo_ms || ms > hi_ms)
			return out_of_range(o, v, show_ms(lo_ms), show_ms(hi_ms)) +
			       (bare_unit_ms == 1 ? "" : " (seconds, or <n>ms)");
		dest = static_cast<uint32_t>(ms);
		return std::string();
	};
	return o;
}

Option choice(const char *name, char short_name, const char *arg, const char *help, int &dest,
	      std::initializer_list<const char *> choices)
{
	std::vector<const char *> words(choices);
	std::string list;
	for (size_t i = 0; i < words.size(); i++)
		list += std::string(i == 0 ? "" : i + 1 == words.size() ? " or " : ", ") + words[i];
	Option o = row(name, short_name, arg, nullptr, help);
	const std::string why = o.shown() + " is " + list + ", not '";
	o.take = [&dest, words, why](const char *v) {
		for (size_t i = 0; i < words.size(); i++)
			if (!strcmp(v, words[i])) {
				dest = static_cast<int>(i);
				return std::string();
			}
		return why + v + "'";
	};
	return o;
}

Option custom(const char *name, char short_name, const char *arg, const char *what, const char *help,
	      std::function<std::string(const char *value)> take)
{
	Option o = row(name, short_name, arg, what, help);
	o.take = std::move(take);
	return o;
}

void append(std::vector<Option> &opts, std::vector<Option> more)
{
	for (Option &o : more)
		opts.push_back(std::move(o));
}

// ---- help -------------------------------------------------------------------

namespace {

constexpr size_t kHelpColumn = 28, kWidth = 80;

// "  -o, --output DIR", "  --blocking[=MS]".
std::string option_column(const Option &o)
{
	std::string s = "  ";
	if (o.short_name)
		s += std::string("-") + o.short_name + (o.name ? ", " : "");
	if (o.name)
		s += std::string("--") + o.name;
	if (o.arg)
		s += o.optional ? std::string("[=") + o.arg + "]" : std::string(" ") + o.arg;
	return s;
}

// `text` from column `col` (the line already holds `col` characters),
// wrapped at kWidth; '\n' in it breaks a line.
void wrap(FILE *f, const char *text, size_t col)
{
	size_t at = col;
	const char *p = text;
	while (*p) {
		if (*p == '\n') {
			fprintf(f, "\n%*s", static_cast<int>(col), "");
			at = col;
			p++;
			continue;
		}
		const size_t word = strcspn(p, " \n");
		if (at > col && at + 1 + word > kWidth) {
			fprintf(f, "\n%*s", static_cast<int>(col), "");
			at = col;
		} else if (at > col) {
			fputc(' ', f);
			at++;
		}
		fwrite(p, 1, word, f);
		at += word;
		p += word;
		while (*p == ' ')
			p++;
	}
	fputc('\n', f);
}

void print_row(FILE *f, const Option &o)
{
	if (!o.name && !o.short_name) { // a section
		fprintf(f, "\n%s\n", o.help);
		return;
	}
	const std::string left = option_column(o);
	fputs(left.c_str(), f);
	if (left.size() + 2 > kHelpColumn)
		fprintf(f, "\n%*s", static_cast<int>(kHelpColumn), "");
	else
		fprintf(f, "%*s", static_cast<int>(kHelpColumn - left.size()), "");
	wrap(f, o.help, kHelpColumn);
}

// "strata NAME", or the program alone for a command without a name.
std::string invoked(const Command &cmd)
{
	return std::string(cmd.program) + (*cmd.name ? " " : "") + cmd.name;
}

// Usage's forms, one a line: "Usage: strata NAME FORM", "       strata NAME
// FORM2"; a line starting with a space continues the form above it.
void print_usage(FILE *f, const Command &cmd, const char *first_word)
{
	const std::string who = invoked(cmd);
	const char *u = cmd.usage;
	bool first = true;
	do {
		const size_t n = strcspn(u, "\n");
		if (*u == ' ')
			fprintf(f, "%*s%.*s\n", static_cast<int>(strlen(first_word) + 1 + who.size()), "",
				static_cast<int>(n - 1), u + 1);
		else
			fprintf(f, "%s %s%s%.*s\n", first ? first_word : "      ", who.c_str(), n ? " " : "",
				static_cast<int>(n), u);
		first = false;
		u += n;
	} while (*u++);
}

} // namespace

// ---- the same help as a man page --------------------------------------------

namespace {

// `s` as roff text: backslashes and minus signs escaped, a line that
// would start with a control character ('.' or '\'') guarded.
std::string roff(const std::string &s)
{
	std::string r;
	bool line_start = true;
	for (const char c : s) {
		if (line_start && (c == '.' || c == '\''))
			r += "\\&";
		if (c == '\\')
			r += "\\e";
		else if (c == '-')
			r += "\\-";
		else
			r += c;
		line_start = c == '\n';
	}
	return r;
}

// Help paragraphs as roff: a blank line starts a paragraph, other line
// breaks are the filler's (a line indented in the help keeps its break and
// indentation, as roff does with a line that starts with a space).
void man_text(FILE *f, const char *text)
{
	const std::string t = text;
	size_t from = 0;
	for (;;) {
		const size_t gap = t.find("\n\n", from);
		fprintf(f, "%s\n", roff(t.substr(from, gap == std::string::npos ? gap : gap - from)).c_str());
		if (gap == std::string::npos)
			return;
		fputs(".PP\n", f);
		from = gap + 2;
	}
}

void man_row(FILE *f, const Option &o)
{
	if (!o.name && !o.short_name) { // a section
		fprintf(f, ".SS \"%s\"\n", roff(o.help).c_str());
		return;
	}
	std::string left;
	if (o.short_name)
		left += std::string("\\fB\\-") + o.short_name + "\\fR" + (o.name ? ", " : "");
	if (o.name)
		left += "\\fB\\-\\-" + roff(o.name) + "\\fR";
	if (o.arg)
		left += o.optional ? "[=\\fI" + roff(o.arg) + "\\fR]" : " \\fI" + roff(o.arg) + "\\fR";
	fprintf(f, ".TP\n%s\n", left.c_str());
	man_text(f, o.help);
}

} // namespace

void print_man(FILE *f, const Command &cmd, const std::vector<Option> &opts, const char *summary)
{
	const std::string who = invoked(cmd);
	std::string page = who;
	for (char &c : page)
		c = c == ' ' ? '-' : c;
	std::string title = page;
	for (char &c : title)
		c = static_cast<char>(toupper(static_cast<unsigned char>(c)));
	const bool daemon = strcmp(cmd.program, "strata-consumerd") == 0;
	fprintf(f, ".TH \"%s\" \"%d\" \"\" \"Strata %s\" \"Strata Manual\"\n", roff(title).c_str(),
		daemon ? 8 : 1, STRATA_OPTIONS_VERSION);
	fprintf(f, ".SH NAME\n%s \\- %s\n", roff(page).c_str(), roff(summary).c_str());
	fputs(".SH SYNOPSIS\n.nf\n", f);
	std::string usage;
	{
		char *buf = nullptr;
		size_t n = 0;
		FILE *m = open_memstream(&buf, &n);
		print_usage(m, cmd, "");
		fclose(m);
		usage.assign(buf, n);
		free(buf);
	}
	for (size_t at = 0; at < usage.size();) { // each form flush left
		const size_t end = usage.find('\n', at);
		const std::string line = usage.substr(at, end - at);
		const size_t text = line.find_first_not_of(' ');
		fprintf(f, "%s\n", roff(text == std::string::npos ? "" : line.substr(text)).c_str());
		at = end == std::string::npos ? usage.size() : end + 1;
	}
	fputs(".fi\n", f);
	if (*cmd.about) {
		fputs(".SH DESCRIPTION\n", f);
		man_text(f, cmd.about);
	}
	bool any = false;
	for (const Option &o : opts) {
		if (!o.help)
			continue;
		if (!any)
			fputs(".SH OPTIONS\n", f);
		any = true;
		man_row(f, o);
	}
	if (*cmd.more) {
		fputs(".SH NOTES\n", f);
		man_text(f, cmd.more);
	}
	fputs(".SH EXIT STATUS\n", f);
	man_text(f, cmd.exit_status);
	fputs(".SH SEE ALSO\n", f);
	if (*cmd.name)
		fprintf(f, ".BR %s (1)\n", roff(cmd.program).c_str());
	else
		fputs(".BR strata (1),\n.BR babeltrace2 (1)\n", f);
}

void print_help(FILE *f, const Command &cmd, const std::vector<Option> &opts)
{
	// The man pages (strata help --man) are this help in roff: one source.
	if (const char *fmt = getenv("STRATA_HELP_FORMAT"); fmt && !strcmp(fmt, "man")) {
		const char *summary = getenv("STRATA_MAN_SUMMARY");
		print_man(f, cmd, opts, summary && *summary ? summary : "a Strata command");
		return;
	}
	print_usage(f, cmd, "Usage:");
	if (*cmd.about)
		fprintf(f, "\n%s\n", cmd.about);
	bool any = false;
	for (const Option &o : opts) {
		if (!o.help)
			continue;
		if (!any && (o.name || o.short_name))
			fputc('\n', f);
		any = true;
		print_row(f, o);
	}
	if (*cmd.more)
		fprintf(f, "\n%s\n", cmd.more);
	fprintf(f, "\n%s\n", cmd.exit_status);
}

int usage_error(const Command &cmd, const std::string &msg)
{
	const std::string who = invoked(cmd);
	fprintf(stderr, "%s: %s\n", who.c_str(), msg.c_str());
	const size_t n = strcspn(cmd.usage, "\n");
	fprintf(stderr, "usage: %s %.*s\nTry '%s --help'.\n", who.c_str(), static_cast<int>(n), cmd.usage,
		who.c_str());
	return kUsage;
}

// ---- parsing ----------------------------------------------------------------

namespace {

constexpr int kLongBase = 256; // getopt_long's value for row i: kLongBase + i
constexpr int kHelp = kLongBase - 1;

// getopt_long's tables for `opts`: "+:" then each short name (':' after
// one that takes a value, "::" an optional one); a long row per name.
void getopt_tables(const std::vector<Option> &opts, std::string &shorts, std::vector<struct option> &longs)
{
	shorts = "+:h";
	longs.push_back({"help", no_argument, nullptr, kHelp});
	for (size_t i = 0; i < opts.size(); i++) {
		const Option &o = opts[i];
		const int has = !o.arg ? no_argument : o.optional ? optional_argument : required_argument;
		if (o.short_name)
			shorts += std::string(1, o.short_name) + (has == no_argument         ? ""
								  : has == required_argument ? ":"
											     : "::");
		if (o.name)
			longs.push_back({o.name, has, nullptr, kLongBase + static_cast<int>(i)});
	}
	longs.push_back({nullptr, 0, nullptr, 0});
}

// The row getopt_long returned `c` for, or -1.
int row_of(const std::vector<Option> &opts, int c)
{
	if (c >= kLongBase)
		return c - kLongBase;
	for (size_t i = 0; i < opts.size(); i++)
		if (opts[i].short_name && opts[i].short_name == c)
			return static_cast<int>(i);
	return -1;
}

// The message for getopt_long's '?' or ':' at argv[optind - 1].
std::string getopt_error(const std::vector<Option> &opts, int c, char **argv)
{
	const int i = row_of(opts, optopt);
	const std::string arg = argv[optind - 1];
	if (c == ':')
		return i >= 0 ? needs(opts[i]) : arg + " needs a value";
	if (i >= 0 && optopt >= kLongBase) // "--flag=value"
		return "--" + std::string(opts[i].name) + " takes no value";
	if (optopt && optopt < kLongBase)
		return std::string("unknown option '-") + static_cast<char>(optopt) + "'";
	return "unknown option '" + arg.substr(0, arg.find('=')) + "'";
}

} // namespace

int parse(const Command &cmd, const std::vector<Option> &opts, int argc, char **argv,
	  std::vector<char *> &operands)
{
	std::string shorts;
	std::vector<struct option> longs;
	getopt_tables(opts, shorts, longs);
	opterr = 0;
	optind = 0; // glibc: start over (another parse may have run)
	for (;;) {
		const int before = optind ? optind : 1;
		const int c = getopt_long(argc, argv, shorts.c_str(), longs.data(), nullptr);
		if (c == -1) {
			// An operand (getopt in "+" mode stops there), "--", or the end.
			const bool dashdash = optind == before + 1 && !strcmp(argv[before], "--");
			if (optind >= argc || dashdash || cmd.stop_at_operand) {
				operands.insert(operands.end(), argv + optind, argv + argc);
				return kParsed;
			}
			operands.push_back(argv[optind++]);
			continue;
		}
		if (c == 'h' || c == kHelp) {
			print_help(stdout, cmd, opts);
			return kOk;
		}
		if (c == '?' || c == ':')
			return usage_error(cmd, getopt_error(opts, c, argv));
		const std::string why = opts[row_of(opts, c)].take(optarg);
		if (!why.empty())
			return usage_error(cmd, why);
	}
}

} // namespace cli
} // namespace strata
