// export_proto.h - a small protocol-buffers writer for `strata export
// --format perfetto` (cli/cmd_export.cpp): varints, fixed64, strings and
// nested messages, appended to one growing buffer.  No library: the wire
// format is four rules (https://protobuf.dev/programming-guides/encoding/):
//   tag = field_number << 3 | wire_type; 0 varint, 1 fixed64, 2 length-
//   delimited (bytes, strings, messages); negative int32/int64 are ten-byte
//   varints (two's complement, not zigzag: they are not sint types).
// A nested message's length is written after its content, into four bytes
// reserved when it was opened: a varint may carry redundant continuation
// bytes (0x80...), which every decoder accepts (Perfetto's own writer does
// the same), so nothing is copied twice.  Messages above 256 MiB cannot be
// written that way; ours are a few hundred bytes.
#ifndef STRATA_CLI_EXPORT_PROTO_H
#define STRATA_CLI_EXPORT_PROTO_H

#include <cstdint>
#include <cstring>
#include <string>

namespace strata {
namespace pb {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLen = 2 };

class Writer {
public:
	std::string buf;

	void varint(uint64_t v)
	{
		char tmp[10];
		int n = 0;
		while (v >= 0x80) {
			tmp[n++] = static_cast<char>((v & 0x7f) | 0x80);
			v >>= 7;
		}
		tmp[n++] = static_cast<char>(v);
		buf.append(tmp, static_cast<size_t>(n));
	}
	void tag(uint32_t field, WireType wt) { varint(static_cast<uint64_t>(field) << 3 | wt); }

	// uint32/uint64/enum/bool fields.
	void u64(uint32_t field, uint64_t v)
	{
		tag(field, kVarint);
		varint(v);
	}
	// int32/int64 fields: two's complement (ten bytes when negative).
	void i64(uint32_t field, int64_t v) { u64(field, static_cast<uint64_t>(v)); }
	void fixed64(uint32_t field, uint64_t v)
	{
		tag(field, kFixed64);
		char b[8];
		for (int i = 0; i < 8; i++)
			b[i] = static_cast<char>(v >> (8 * i));
		buf.append(b, 8);
	}
	void f64(uint32_t field, double d)
	{
		uint64_t v;
		std::memcpy(&v, &d, sizeof v);
		fixed64(field, v);
	}
	void str(uint32_t field, const char *s, size_t n)
	{
		tag(field, kLen);
		varint(n);
		buf.append(s, n);
	}
	void str(uint32_t field, const std::string &s) { str(field, s.data(), s.size()); }

	// Opens a nested message (field `field`); returns the position to give
	// to end().
	size_t begin(uint32_t field)
	{
		tag(field, kLen);
		const size_t at = buf.size();
		buf.append(4, '\0');
		return at;
	}
	void end(size_t at)
	{
		const size_t n = buf.size() - at - 4; // < 2^28: see the top of this file
		buf[at + 0] = static_cast<char>((n & 0x7f) | 0x80);
		buf[at + 1] = static_cast<char>(((n >> 7) & 0x7f) | 0x80);
		buf[at + 2] = static_cast<char>(((n >> 14) & 0x7f) | 0x80);
		buf[at + 3] = static_cast<char>((n >> 21) & 0x7f);
	}
};

} // namespace pb
} // namespace strata
#endif
