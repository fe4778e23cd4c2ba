// ctf_clock.cpp - the clock block of a metadata text and its rewrite onto a
// follower's map; contract in ctf_clock.h, design in docs/clocks.md.
#include "ctf_clock.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "json_writer.h"

namespace strata {

namespace {

// The block "\nNAME {\n...\n};\n" of a metadata text: *b at the newline
// before NAME, *e at its closing "\n};\n".  False if there is none.
bool find_block(const std::string &text, const char *name, size_t *b, size_t *e)
{
	*b = text.find(std::string("\n") + name + " {\n");
	*e = *b == std::string::npos ? *b : text.find("\n};\n", *b);
	return *e != std::string::npos;
}

} // namespace

std::string tsdl_quote(const std::string &s)
{
	std::string out = "\"";
	for (unsigned char c : s) {
		if (c == '"' || c == '\\') {
			out += '\\';
			out += static_cast<char>(c);
		} else if (c < 0x20 || c == 0x7f) {
			char buf[8];
			std::snprintf(buf, sizeof buf, "\\x%02x", c);
			out += buf;
		} else {
			out += static_cast<char>(c);
		}
	}
	return out + "\"";
}

std::string ctf_clock_block(const ClockInfo &clock)
{
	std::ostringstream o;
	o << "clock {\n\tname = \"" << clock.name << "\";\n";
	if (!clock.uuid.empty())
		o << "\tuuid = \"" << clock.uuid << "\";\n";
	o << "\tdescription = " << tsdl_quote(clock.description) << ";\n\tfreq = " << clock.freq
	  << ";\n\tprecision = 1;\n\toffset_s = " << clock.offset_s << ";\n\toffset = " << clock.offset_ns
	  << ";\n\tabsolute = true;\n};\n";
	return o.str();
}

std::string rewrite_metadata_env(const std::string &text, const std::string &env_lines)
{
	// The env block: earlier sync_ lines out, the new ones in.
	size_t eb, ee;
	if (!find_block(text, "env", &eb, &ee))
		return text;
	std::string body = text.substr(eb + 7, ee + 1 - (eb + 7)), kept;
	std::istringstream lines(body);
	for (std::string l; std::getline(lines, l);)
		if (l.rfind("\tsync_", 0) != 0)
			kept += l + "\n";
	return text.substr(0, eb + 7) + kept + env_lines + text.substr(ee + 1);
}

std::string rewrite_metadata_clock(const std::string &text, const ClockInfo &c, const std::string &env_lines)
{
	size_t cb, ce;
	if (!find_block(text, "clock", &cb, &ce))
		return text;
	std::string out = text.substr(0, cb + 1) + ctf_clock_block(c) + text.substr(ce + 4);
	const size_t eb = out.find("\nenv {\n");
	if (eb == std::string::npos || eb > cb)
		return out;
	return rewrite_metadata_env(out, env_lines);
}

void segment_clock(const SegmentLine &seg, size_t n_segs, const MapNames &names, const ClockInfo &local,
		   ClockInfo *out, std::string *env)
{
	// local -> peer: y = y0 + slope*(x - x0); CTF: absolute(x) =
	// offset_s*1e9 + (offset + x)*1e9/freq.  freq = round(1e9/slope), a'
	// its slope; C = peer_offset + y0 - a'*x0 the absolute time at x = 0.
	*out = local;
	const uint64_t freq = static_cast<uint64_t>(std::llround(1e9 / seg.slope));
	const long double a2 = 1e9L / static_cast<long double>(freq);
	const long double c = static_cast<long double>(names.peer_offset_ns) +
			      static_cast<long double>(seg.y0 - seg.x0) -
			      (a2 - 1) * static_cast<long double>(seg.x0);
	int64_t cs = static_cast<int64_t>(std::floor(c / 1e9L));
	const long double rem = c - static_cast<long double>(cs) * 1e9L; // [0, 1e9)
	int64_t cyc = std::llround(rem / a2);
	out->freq = freq;
	out->offset_s = cs;
	out->offset_ns = cyc; // in cycles of freq (CTF's `offset`)
	out->uuid = names.peer_boot_id;
	out->description = "monotonic clock of " + names.hostname + " mapped onto " + names.link + "'s (" +
			   (names.peer_hostname.empty() ? "?" : names.peer_hostname) + ")";
	// The rounding of the rate to whole Hz, at the segment's ends.
	const long double span =
		static_cast<long double>(std::max(seg.x_last - seg.x0, seg.x0 - seg.x_first));
	const int64_t extra =
		static_cast<int64_t>(std::ceil(std::fabs(static_cast<double>(a2 - seg.slope)) * span)) + 1;
	char b[512];
	snprintf(b, sizeof b,
		 "\tsync_state = \"correlated\";\n\tsync_peer = %s;\n\tsync_peer_hostname = %s;\n"
		 "\tsync_segments = %zu;\n\tsync_valid_from = %" PRId64 ";\n\tsync_valid_to = %" PRId64
		 ";\n\tsync_bound_ns = %" PRId64 ";\n\tsync_rate_rounding_ns = %" PRId64 ";\n",
		 json_quoted(names.link).c_str(), json_quoted(names.peer_hostname).c_str(), n_segs,
		 seg.x_first, seg.x_last, seg.width, extra);
	*env = b;
}

} // namespace strata
