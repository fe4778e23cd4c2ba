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
#include <string_view>
#include <vector>

namespace strata {
namespace pb {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLen = 2 };

// The output being built: a plain growing buffer, so that a varint is a
// few stores and no library call (std::string's appends were a fifth of
// an export's time).
class Buf {
public:
	Buf() : b_(1u << 16) {}
	const char *data() const { return b_.data(); }
	size_t size() const { return n_; }
	bool empty() const { return n_ == 0; }
	void clear() { n_ = 0; }
	char &operator[](size_t i) { return b_[i]; }
	// Room for n more bytes at the end; commit() what was written.
	char *room(size_t n)
	{
		if (__builtin_expect(n_ + n > b_.size(), 0))
			grow(n);
		return b_.data() + n_;
	}
	void commit(size_t n) { n_ += n; }
	// Room for n bytes in all, kept (clear() keeps it too): a writer that
	// drains at a size below n then has room for what it adds past it.
	void reserve(size_t n)
	{
		if (n > b_.size())
			b_.resize(n);
	}
	// room() for what is known to fit (reserve()): no growth to check.
	char *end() { return b_.data() + n_; }
	void append(const char *p, size_t n)
	{
		std::memcpy(room(n), p, n);
		n_ += n;
	}

private:
	std::vector<char> b_;
	size_t n_ = 0;
	// Out of line: the callers' per-event paths then save no registers
	// for a call they do not make.
	__attribute__((noinline)) void grow(size_t n) { b_.resize((n_ + n) * 2); }
};

class Writer {
public:
	Buf buf;

	void varint(uint64_t v)
	{
		char *p = buf.room(10), *q = p;
		while (v >= 0x80) {
			*q++ = static_cast<char>((v & 0x7f) | 0x80);
			v >>= 7;
		}
		*q++ = static_cast<char>(v);
		buf.commit(static_cast<size_t>(q - p));
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
	void str(uint32_t field, std::string_view s) { str(field, s.data(), s.size()); }

	// Opens a nested message (field `field`); returns the position to give
	// to end().
	size_t begin(uint32_t field)
	{
		tag(field, kLen);
		const size_t at = buf.size();
		std::memset(buf.room(4), 0, 4);
		buf.commit(4);
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
