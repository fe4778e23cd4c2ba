// metadata.cpp - TSDL generation; see metadata.h.
#include "metadata.h"

#include <sys/utsname.h>
#include <time.h>

#include <atomic>
#include <cctype>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "strata_abi.h"

namespace strata {
namespace {

// Field names are prefixed with '_' (readers strip one), so a field called
// "event" or "struct" cannot collide with a TSDL keyword.
std::string ident(const std::string &name)
{
	std::string out = "_";
	for (char c : name)
		out += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
	return out;
}

// Field alignment in bits: natural (WIDE), or none at all (COMPACT: byte-packed).
unsigned field_align(unsigned bits, bool packed)
{
	return packed ? 8 : bits;
}

std::string integer_type(unsigned bits, bool is_signed, unsigned base, bool packed)
{
	std::ostringstream o;
	o << "integer { size = " << bits << "; align = " << field_align(bits, packed)
	  << "; signed = " << (is_signed ? "true" : "false") << "; base = " << (base ? base : 10) << "; }";
	return o.str();
}

void field_decl(std::ostringstream &o, const FieldInfo &f, bool packed)
{
	const std::string n = ident(f.name);
	switch (f.type) {
	case STRATA_FT_INTEGER:
		o << "\t\t" << integer_type(f.elem_bits, f.is_signed, f.base, packed) << " " << n << ";\n";
		break;
	case STRATA_FT_FLOAT:
		if (f.elem_bits == 32)
			o << "\t\tfloating_point { exp_dig = 8; mant_dig = 24; byte_order = le; align = "
			  << field_align(32, packed) << "; } ";
		else
			o << "\t\tfloating_point { exp_dig = 11; mant_dig = 53; byte_order = le; align = "
			  << field_align(64, packed) << "; } ";
		o << n << ";\n";
		break;
	case STRATA_FT_ENUM: {
		o << "\t\tenum : " << integer_type(f.elem_bits, f.is_signed, 10, packed) << " {";
		bool first = true;
		for (const EnumLabel &l : f.labels) {
			o << (first ? " " : ", ") << tsdl_quote(l.label) << " = " << l.first;
			if (l.last != l.first)
				o << " ... " << l.last;
			first = false;
		}
		o << " } " << n << ";\n";
		break;
	}
	case STRATA_FT_STRING:
		o << "\t\tstring { encoding = UTF8; } " << n << ";\n";
		break;
	case STRATA_FT_ARRAY:
		o << "\t\t" << integer_type(f.elem_bits, f.is_signed, f.base, packed) << " " << n << "["
		  << f.length << "];\n";
		break;
	case STRATA_FT_SEQUENCE: {
		const std::string len = "_" + n + "_length";
		o << "\t\tinteger { size = 32; align = " << field_align(32, packed) << "; signed = false; } "
		  << len << ";\n";
		o << "\t\t" << integer_type(f.elem_bits, f.is_signed, f.base, packed) << " " << n << "[ "
		  << len << " ];\n";
		break;
	}
	default:
		// The reader validated types; an unknown one cannot get here.
		break;
	}
}

} // namespace

std::string uuid_to_string(const uint8_t u[16])
{
	char buf[37];
	std::snprintf(buf, sizeof buf, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
		      u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
		      u[14], u[15]);
	return buf;
}

bool lttng_kernel_layout(const TraceEnv &env)
{
	return env.domain == "kernel";
}

std::string ctf_metadata_events(uint32_t stream_id, const std::vector<EventInfo> &events, const TraceEnv &env)
{
	// Kernel events are named as lttng-modules names them (sched_switch,
	// syscall_entry_openat): tools match those names exactly.
	const bool bare = lttng_kernel_layout(env);
	const bool packed = env.record_format == STRATA_REC_COMPACT;
	std::ostringstream o;
	// COMPACT: every event in both stream classes (owned and shared lanes).
	for (uint32_t sid = stream_id; sid <= stream_id + (packed ? 1u : 0u); sid++) {
		for (const EventInfo &e : events) {
			const std::string name = bare ? e.name : e.provider + ":" + e.name;
			o << "\nevent {\n\tname = " << tsdl_quote(name) << ";\n\tid = " << e.id
			  << ";\n\tstream_id = " << sid << ";\n\tloglevel = " << e.loglevel
			  << ";\n\tfields := struct {\n";
			for (const FieldInfo &f : e.fields)
				field_decl(o, f, packed);
			o << "\t};\n};\n";
		}
	}
	return o.str();
}

namespace {

// The integer types and the trace block (the packet header).
void write_trace(std::ostringstream &o, const uint8_t uuid[16])
{
	o << "typealias integer { size = 8; align = 8; signed = false; } := uint8_t;\n"
	     "typealias integer { size = 16; align = 8; signed = false; } := uint16_t;\n"
	     "typealias integer { size = 32; align = 8; signed = false; } := uint32_t;\n"
	     "typealias integer { size = 64; align = 8; signed = false; } := uint64_t;\n\n";
	o << "trace {\n\tmajor = 1;\n\tminor = 8;\n\tuuid = \"" << uuid_to_string(uuid)
	  << "\";\n\tbyte_order = le;\n"
	     "\tpacket.header := struct {\n"
	     "\t\tuint32_t magic;\n"
	     "\t\tuint8_t uuid[16];\n"
	     "\t\tuint32_t stream_id;\n"
	     "\t\tuint64_t stream_instance_id;\n"
	     "\t};\n};\n\n";
}

// The env block: LTTng kernel's fields for the kernel sub-trace, then the
// process's and the host's.
void write_env(std::ostringstream &o, const TraceEnv &env)
{
	if (lttng_kernel_layout(env)) {
		// What lttng-modules writes, so that tools choose their LTTng
		// kernel layout (lttng-analyses reads tracer_major/minor/
		// patchlevel; the names and fields follow lttng-modules 2.13);
		// strata_tracer says who really wrote it.
		struct utsname u {};
		uname(&u);
		o << "env {\n\tdomain = \"kernel\";\n\ttracer_name = \"lttng-modules\";\n"
		     "\ttracer_major = 2;\n\ttracer_minor = 13;\n\ttracer_patchlevel = 0;\n"
		     "\ttracer_buffering_scheme = \"global\";\n"
		  << "\tstrata_tracer = " << tsdl_quote(env.tracer_name)
		  << ";\n\tsysname = " << tsdl_quote(u.sysname)
		  << ";\n\tkernel_release = " << tsdl_quote(u.release)
		  << ";\n\tkernel_version = " << tsdl_quote(u.version) << ";\n";
	} else {
		o << "env {\n\tdomain = " << tsdl_quote(env.domain)
		  << ";\n\ttracer_name = " << tsdl_quote(env.tracer_name)
		  << ";\n\ttracer_major = 0;\n\ttracer_minor = 1;\n";
	}
	if (!env.procname.empty())
		o << "\tprocname = " << tsdl_quote(env.procname) << ";\n";
	if (env.pid)
		o << "\tvpid = " << env.pid << ";\n";
	if (env.host_pid && env.host_pid != env.pid)
		o << "\tpid = " << env.host_pid << ";\n";
	if (!env.hostname.empty())
		o << "\thostname = " << tsdl_quote(env.hostname) << ";\n";
	if (!env.clock_source.empty())
		o << "\tclock = " << tsdl_quote(env.clock_source) << ";\n";
	o << "};\n\n";
}

// The clock and its 64-bit integer type.
void write_clock(std::ostringstream &o, const ClockInfo &clock)
{
	o << ctf_clock_block(clock) << "\n";
	o << "typealias integer { size = 64; align = 8; signed = false; map = clock." << clock.name
	  << ".value; } := uint64_clock_t;\n\n";
}

// A stream class: its id, the packet context and event header declared
// before it and, unless `context` is "", an event context of those fields.
void write_stream(std::ostringstream &o, uint32_t id, const char *context)
{
	o << "stream {\n\tid = " << id
	  << ";\n"
	     "\tpacket.context := struct packet_context;\n"
	     "\tevent.header := struct event_header;\n";
	if (*context)
		o << "\tevent.context := struct {\n" << context << "\t};\n";
	o << "};\n";
}

// STRATA_REC_COMPACT: the compact event header, and two stream classes,
// owned lanes' (`stream_id`) and shared lanes' (+1, with the writer's tid).
void write_compact_streams(std::ostringstream &o, const ClockInfo &clock, uint32_t stream_id)
{
	// Record header (strata_abi.h, STRATA_REC_COMPACT): LTTng's
	// compact header, byte-packed.
	o << "typealias integer { size = 27; align = 1; signed = false; map = clock." << clock.name
	  << ".value; } := uint27_clock_t;\n\n"
	     "struct event_header {\n"
	     "\tenum : integer { size = 5; align = 1; signed = false; } { compact = 0 ... 30, "
	     "extended = 31 } id;\n"
	     "\tvariant <id> {\n"
	     "\t\tstruct { uint27_clock_t timestamp; } compact;\n"
	     "\t\tstruct { uint32_t id; uint64_clock_t timestamp; } extended;\n"
	     "\t} v;\n"
	     "} align(8);\n\n";
	write_stream(o, stream_id, "");
	o << "\n";
	write_stream(o, stream_id + 1, "\t\tinteger { size = 32; align = 8; signed = true; } _vtid;\n");
}

// STRATA_REC_WIDE (the kernel's): the wide event header, one stream class
// with the writer's tid and CPU.
void write_wide_stream(std::ostringstream &o, const ClockInfo &clock, uint32_t stream_id)
{
	// Record header: id at 0 (records start 8-byte aligned), timestamp at 2.
	o << "struct event_header {\n"
	     "\tinteger { size = 16; align = 64; signed = false; } id;\n"
	     "\tinteger { size = 64; align = 16; signed = false; map = clock."
	  << clock.name
	  << ".value; } timestamp;\n"
	     "};\n\n";
	write_stream(o, stream_id,
		     "\t\tinteger { size = 32; align = 16; signed = true; } _vtid;\n"
		     "\t\tinteger { size = 16; align = 16; signed = false; } _cpu_id;\n");
}

} // namespace

std::string ctf_metadata(const uint8_t uuid[16], const ClockInfo &clock, const TraceEnv &env,
			 uint32_t stream_id, const std::vector<EventInfo> &events)
{
	std::ostringstream o;
	// Must be the very first bytes (notes/ctf.md).
	o << "/* CTF 1.8 */\n\n";
	write_trace(o, uuid);
	write_env(o, env);
	write_clock(o, clock);
	// Packet context: offsets 32..88 of struct strata_packet_header.  In
	// user streams (COMPACT) vtid is the owner of an owned lane's packet (-1
	// in shared lanes); in the kernel's (WIDE) the word at 84 is not named:
	// the event header's 64-bit alignment skips it.
	o << "struct packet_context {\n"
	     "\tuint64_clock_t timestamp_begin;\n"
	     "\tuint64_clock_t timestamp_end;\n"
	     "\tuint64_t content_size;\n"
	     "\tuint64_t packet_size;\n"
	     "\tuint64_t packet_seq_num;\n"
	     "\tuint64_t events_discarded;\n"
	     "\tuint32_t lane_id;\n"
	  << (env.record_format == STRATA_REC_COMPACT
		      ? "\tinteger { size = 32; align = 8; signed = true; } vtid;\n"
		      : "")
	  << "};\n\n";
	if (env.record_format == STRATA_REC_COMPACT)
		write_compact_streams(o, clock, stream_id);
	else
		write_wide_stream(o, clock, stream_id);
	o << ctf_metadata_events(stream_id, events, env);
	return o.str();
}

namespace {
// Tests only: STRATA_TEST_REALTIME_STEP_NS=N makes the wall clock look
// stepped N ns ahead before each measurement after the first (as NTP or a
// VM's resume steps it), for check_clock_link.py (the host's daemon);
// STRATA_TEST_REALTIME_SHIFT_NS=N N ns ahead at every measurement, for
// check_clock_link_restart.py (a daemon started after such a step).
int64_t test_env_ns(const char *name)
{
	const char *e = getenv(name);
	return e && *e ? strtoll(e, nullptr, 10) : 0;
}
int64_t test_realtime_step()
{
	static const int64_t step = test_env_ns("STRATA_TEST_REALTIME_STEP_NS");
	static const int64_t shift = test_env_ns("STRATA_TEST_REALTIME_SHIFT_NS");
	static std::atomic<int64_t> calls{0};
	// Relaxed: a count, read by no one else.
	return shift + (step ? step * calls.fetch_add(1, std::memory_order_relaxed) : 0);
}
} // namespace

ClockInfo measure_session_clock()
{
	ClockInfo c;
	std::ifstream f("/proc/sys/kernel/random/boot_id");
	std::getline(f, c.uuid);
	if (c.uuid.size() != 36)
		c.uuid.clear();
	// Bracket a REALTIME read between two MONOTONIC reads and keep the
	// tightest bracket of a few tries.
	int64_t best_gap = INT64_MAX, best_off = 0;
	for (int i = 0; i < 16; i++) {
		struct timespec m0, r, m1;
		clock_gettime(CLOCK_MONOTONIC, &m0);
		clock_gettime(CLOCK_REALTIME, &r);
		clock_gettime(CLOCK_MONOTONIC, &m1);
		const int64_t a = m0.tv_sec * 1000000000LL + m0.tv_nsec;
		const int64_t b = m1.tv_sec * 1000000000LL + m1.tv_nsec;
		const int64_t rt = r.tv_sec * 1000000000LL + r.tv_nsec;
		if (b - a < best_gap) {
			best_gap = b - a;
			best_off = rt - (a + (b - a) / 2);
		}
	}
	best_off += test_realtime_step();
	c.offset_s = best_off / 1000000000LL;
	c.offset_ns = best_off % 1000000000LL;
	if (c.offset_ns < 0) {
		c.offset_ns += 1000000000LL;
		c.offset_s -= 1;
	}
	return c;
}

} // namespace strata
