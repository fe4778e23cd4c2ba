// trace_meta.cpp - reading a Strata sub-trace's TSDL back; see trace_meta.h.
//
// A tokenizer and a recursive-descent parser for the part of TSDL that
// consumerd/metadata.cpp writes: typealias, trace, env, clock, named
// structs, stream and event blocks; integer, floating_point, enum, string,
// struct and variant types; arrays and sequences.  Types are parsed into a
// small tree, then the blocks are checked against the one layout Strata
// writes (strata_abi.h) and the fields turned back into FieldInfo.
#include "trace_meta.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <functional>
#include <memory>

#include "desc_rules.h"
#include "strata_abi.h"

namespace strata {
namespace {

constexpr int kMaxDepth = 16;                // nested types
constexpr size_t kMaxEventsPerClass = 65535; // ids fit the WIDE header's u16
constexpr uint32_t kMaxEventId = 0xfffe;

enum class Tok { End, Ident, Number, String, Punct };

struct Token {
	Tok kind = Tok::End;
	std::string text; // identifier, string contents, punctuation
	uint64_t num = 0; // Number: magnitude
	bool neg = false; // Number: a leading '-'
	size_t at = 0;    // byte offset
};

class Lexer {
public:
	explicit Lexer(const std::string &t) : s_(t) {}
	bool next(Token *t, std::string *why);

private:
	bool skip_space(std::string *why);
	bool number(Token *t, std::string *why);
	bool string(Token *t, std::string *why);
	const std::string &s_;
	size_t p_ = 0;
};

// Whitespace and comments.
bool Lexer::skip_space(std::string *why)
{
	for (;;) {
		while (p_ < s_.size() &&
		       (s_[p_] == ' ' || s_[p_] == '\t' || s_[p_] == '\n' || s_[p_] == '\r'))
			p_++;
		if (s_.compare(p_, 2, "/*") == 0) {
			const size_t e = s_.find("*/", p_ + 2);
			if (e == std::string::npos) {
				*why = "unterminated comment";
				return false;
			}
			p_ = e + 2;
		} else if (s_.compare(p_, 2, "//") == 0) {
			const size_t e = s_.find('\n', p_);
			p_ = e == std::string::npos ? s_.size() : e + 1;
		} else {
			return true;
		}
	}
}

// A decimal or hexadecimal number, maybe negative, maybe with a suffix.
bool Lexer::number(Token *t, std::string *why)
{
	if (s_[p_] == '-') {
		t->neg = true;
		p_++;
	}
	unsigned base = 10;
	if (s_.compare(p_, 2, "0x") == 0 || s_.compare(p_, 2, "0X") == 0) {
		base = 16;
		p_ += 2;
	}
	const size_t b = p_;
	uint64_t v = 0;
	for (; p_ < s_.size(); p_++) {
		const char d = s_[p_];
		unsigned x;
		if (d >= '0' && d <= '9')
			x = (unsigned)(d - '0');
		else if (base == 16 && std::isxdigit((unsigned char)d))
			x = (unsigned)(std::tolower((unsigned char)d) - 'a' + 10);
		else
			break;
		if (v > (UINT64_MAX - x) / base) {
			*why = "number out of range";
			return false;
		}
		v = v * base + x;
	}
	if (p_ == b) {
		*why = "bad number";
		return false;
	}
	while (p_ < s_.size() && s_[p_] && std::strchr("uUlL", s_[p_]))
		p_++;
	t->kind = Tok::Number;
	t->num = v;
	return true;
}

// A string literal: \xNN and the one-character escapes.
bool Lexer::string(Token *t, std::string *why)
{
	p_++;
	t->kind = Tok::String;
	while (p_ < s_.size() && s_[p_] != '"') {
		if (s_[p_] == '\\' && p_ + 1 < s_.size()) {
			const char e = s_[p_ + 1];
			if (e == 'x' && p_ + 3 < s_.size() && std::isxdigit((unsigned char)s_[p_ + 2]) &&
			    std::isxdigit((unsigned char)s_[p_ + 3])) {
				t->text += (char)std::stoi(s_.substr(p_ + 2, 2), nullptr, 16);
				p_ += 4;
				continue;
			}
			t->text += e == 'n' ? '\n' : e == 't' ? '\t' : e;
			p_ += 2;
			continue;
		}
		t->text += s_[p_++];
	}
	if (p_ >= s_.size()) {
		*why = "unterminated string";
		return false;
	}
	p_++;
	return true;
}

bool Lexer::next(Token *t, std::string *why)
{
	if (!skip_space(why))
		return false;
	*t = Token();
	t->at = p_;
	if (p_ >= s_.size())
		return true;
	const unsigned char c = (unsigned char)s_[p_];
	if (std::isalpha(c) || c == '_') {
		const size_t b = p_;
		while (p_ < s_.size() && (std::isalnum((unsigned char)s_[p_]) || s_[p_] == '_'))
			p_++;
		t->kind = Tok::Ident;
		t->text = s_.substr(b, p_ - b);
		return true;
	}
	if (std::isdigit(c) || (c == '-' && p_ + 1 < s_.size() && std::isdigit((unsigned char)s_[p_ + 1])))
		return number(t, why);
	if (c == '"')
		return string(t, why);
	t->kind = Tok::Punct;
	if (s_.compare(p_, 2, ":=") == 0 || s_.compare(p_, 3, "...") == 0) {
		const size_t n = s_[p_] == ':' ? 2 : 3;
		t->text = s_.substr(p_, n);
		p_ += n;
		return true;
	}
	if (c && std::strchr("{}[]<>();=:,.", c)) {
		t->text = std::string(1, (char)c);
		p_++;
		return true;
	}
	*why = "unexpected character";
	return false;
}

// A parsed type.
struct Type {
	enum Kind { Int, Float, Enum, String, Struct, Variant } kind = Int;
	// Int (and Enum's container)
	unsigned size = 0, align = 8, base = 10;
	bool is_signed = false, mapped = false;
	// Float
	unsigned exp_dig = 0, mant_dig = 0;
	// Enum
	std::vector<EnumLabel> labels;
	// Struct / Variant: members (Variant: its options)
	struct Member {
		std::string name;
		std::shared_ptr<Type> type;
		bool array = false, sequence = false;
		uint64_t length = 0;     // array
		std::string length_name; // sequence
	};
	std::vector<Member> members;
	unsigned struct_align = 1;
};
using TypeP = std::shared_ptr<Type>;

class Parser {
public:
	Parser(const std::string &text, TraceMeta *m) : lex_(text), m_(m) {}
	bool run(std::string *why);
	size_t fail_at() const { return fail_at_; }

private:
	bool advance();
	bool fail(const std::string &what);
	bool is(const char *punct) const { return cur_.kind == Tok::Punct && cur_.text == punct; }
	bool is_ident(const char *id) const { return cur_.kind == Tok::Ident && cur_.text == id; }
	bool expect(const char *punct);
	bool ident(std::string *out);
	bool number(int64_t *out);
	bool type(TypeP *out, int depth);
	bool named(const std::map<std::string, TypeP> &names, const char *what, TypeP *out);
	bool int_attrs(Type *t);
	bool float_attrs(Type *t);
	bool struct_body(Type *t, int depth);
	bool declarator(Type::Member *m);
	bool assignments(const std::function<bool(const std::string &, const Token &)> &on, int depth);
	bool statement();
	bool typealias_stmt();
	bool struct_stmt();
	bool trace_block();
	bool env_block();
	bool clock_block();
	bool stream_block();
	bool event_block();
	bool enum_body(Type *t, int depth);
	bool field_of(const std::string &event, const Type::Member &mb, bool packed, FieldInfo *f);
	bool finish();
	bool check_event(const std::string &name, uint64_t id, uint64_t sid, int64_t loglevel,
			 const TypeP &fields);

	Lexer lex_;
	Token cur_;
	TraceMeta *m_;
	std::string why_;
	size_t fail_at_ = 0;
	std::map<std::string, TypeP> aliases_, structs_;
	// stream id -> its event.context struct (may be null)
	std::map<uint64_t, TypeP> streams_;
	TypeP header_;
	bool have_trace_ = false, have_clock_ = false;
	struct PendingEvent {
		std::string name;
		uint64_t id, sid;
		int64_t loglevel;
		TypeP fields;
	};
	std::vector<PendingEvent> events_;
};

bool Parser::advance()
{
	std::string w;
	if (!lex_.next(&cur_, &w))
		return fail(w);
	return true;
}

bool Parser::fail(const std::string &what)
{
	if (why_.empty()) {
		why_ = what + " at byte " + std::to_string(cur_.at);
		fail_at_ = cur_.at;
	}
	return false;
}

bool Parser::expect(const char *punct)
{
	if (!is(punct))
		return fail(std::string("expected '") + punct + "'");
	return advance();
}

bool Parser::ident(std::string *out)
{
	if (cur_.kind != Tok::Ident)
		return fail("expected a name");
	*out = cur_.text;
	return advance();
}

bool Parser::number(int64_t *out)
{
	if (cur_.kind != Tok::Number || cur_.num > (uint64_t)INT64_MAX)
		return fail("expected a number");
	*out = cur_.neg ? -(int64_t)cur_.num : (int64_t)cur_.num;
	return advance();
}

// `{ key = value; ... }` where a value is a number, string or name (a
// dotted name such as clock.monotonic.value is one value).
bool Parser::assignments(const std::function<bool(const std::string &, const Token &)> &on, int depth)
{
	(void)depth;
	if (!expect("{"))
		return false;
	while (!is("}")) {
		if (cur_.kind == Tok::End)
			return fail("unterminated block");
		std::string key;
		if (!ident(&key))
			return false;
		if (!expect("="))
			return false;
		Token v = cur_;
		if (v.kind == Tok::End || v.kind == Tok::Punct)
			return fail("expected a value");
		if (!advance())
			return false;
		while (v.kind == Tok::Ident && is(".")) {
			if (!advance() || cur_.kind != Tok::Ident)
				return fail("expected a name");
			v.text += "." + cur_.text;
			if (!advance())
				return false;
		}
		if (!on(key, v))
			return false;
		if (!expect(";"))
			return false;
	}
	return advance();
}

bool Parser::int_attrs(Type *t)
{
	t->kind = Type::Int;
	bool ok = assignments(
		[&](const std::string &k, const Token &v) {
			if (k == "size" || k == "align" || k == "base") {
				unsigned x = 0;
				if (v.kind == Tok::Number && !v.neg && v.num <= 64)
					x = (unsigned)v.num;
				else if (k == "base" && v.kind == Tok::Ident)
					x = v.text == "hex" || v.text == "x" || v.text == "X" || v.text == "p"
						    ? 16
					    : v.text == "decimal" || v.text == "dec" || v.text == "d" ||
							    v.text == "i" || v.text == "u"
						    ? 10
					    : v.text == "oct" || v.text == "o"    ? 8
					    : v.text == "binary" || v.text == "b" ? 2
										  : 0;
				if (!x)
					return fail("bad integer " + k);
				(k == "size" ? t->size : k == "align" ? t->align : t->base) = x;
			} else if (k == "signed") {
				t->is_signed = (v.kind == Tok::Ident && v.text == "true") ||
					       (v.kind == Tok::Number && v.num == 1);
			} else if (k == "map") {
				t->mapped = true;
			} // encoding, byte_order: Strata writes none (little-endian)
			return true;
		},
		0);
	if (ok && (t->size == 0 || t->align == 0 || (t->align & (t->align - 1))))
		return fail("integer without a size or with a bad alignment");
	return ok;
}

bool Parser::float_attrs(Type *t)
{
	t->kind = Type::Float;
	return assignments(
		[&](const std::string &k, const Token &v) {
			if (k == "exp_dig" && v.kind == Tok::Number)
				t->exp_dig = (unsigned)std::min<uint64_t>(v.num, 1000);
			else if (k == "mant_dig" && v.kind == Tok::Number)
				t->mant_dig = (unsigned)std::min<uint64_t>(v.num, 1000);
			else if (k == "align" && v.kind == Tok::Number && v.num <= 64)
				t->align = (unsigned)v.num;
			else if (k == "byte_order" &&
				 !(v.kind == Tok::Ident && (v.text == "le" || v.text == "native")))
				return fail("a floating point not little-endian");
			return true;
		},
		0);
}

// A member's name and its array or sequence suffix.
bool Parser::declarator(Type::Member *m)
{
	if (!ident(&m->name))
		return false;
	if (is("[")) {
		if (!advance())
			return false;
		if (cur_.kind == Tok::Number) {
			if (cur_.neg || cur_.num > kMaxArrayLength)
				return fail("array length out of range");
			m->array = true;
			m->length = cur_.num;
			if (!advance())
				return false;
		} else {
			m->sequence = true;
			if (!ident(&m->length_name))
				return false;
		}
		if (!expect("]"))
			return false;
	}
	return true;
}

bool Parser::struct_body(Type *t, int depth)
{
	if (!expect("{"))
		return false;
	while (!is("}")) {
		if (cur_.kind == Tok::End)
			return fail("unterminated struct");
		if (t->members.size() > 4096)
			return fail("too many members");
		Type::Member m;
		if (!type(&m.type, depth + 1) || !declarator(&m) || !expect(";"))
			return false;
		t->members.push_back(std::move(m));
	}
	if (!advance())
		return false;
	if (is_ident("align")) {
		int64_t a = 0;
		if (!advance() || !expect("(") || !number(&a) || !expect(")"))
			return false;
		if (a <= 0 || a > 64 || (a & (a - 1)))
			return fail("bad struct alignment");
		t->struct_align = (unsigned)a;
	}
	return true;
}

// enum : INTEGER-TYPE { "label" = v, "label" = a ... b, ... }
bool Parser::enum_body(Type *t, int depth)
{
	t->kind = Type::Enum;
	if (!advance() || !expect(":"))
		return false;
	TypeP c;
	if (!type(&c, depth + 1))
		return false;
	if (c->kind != Type::Int)
		return fail("an enumeration's container is not an integer");
	t->size = c->size;
	t->align = c->align;
	t->is_signed = c->is_signed;
	if (!expect("{"))
		return false;
	while (!is("}")) {
		EnumLabel l;
		if (cur_.kind != Tok::String && cur_.kind != Tok::Ident)
			return fail("expected an enumeration label");
		l.label = cur_.text;
		if (!advance() || !expect("=") || !number(&l.first))
			return false;
		l.last = l.first;
		if (is("...") && (!advance() || !number(&l.last)))
			return false;
		if (t->labels.size() >= 65536)
			return fail("too many enumeration labels");
		t->labels.push_back(std::move(l));
		if (is(",")) {
			if (!advance())
				return false;
		} else if (!is("}")) {
			return fail("expected ',' or '}'");
		}
	}
	return advance();
}

// The type the name at cur_ names in `names` (a named struct, a typealias),
// into *out; the name consumed.
bool Parser::named(const std::map<std::string, TypeP> &names, const char *what, TypeP *out)
{
	auto it = names.find(cur_.text);
	if (it == names.end())
		return fail(std::string("unknown ") + what + " " + cur_.text);
	*out = it->second;
	return advance();
}

bool Parser::type(TypeP *out, int depth)
{
	if (depth > kMaxDepth)
		return fail("types nested too deep");
	auto t = std::make_shared<Type>();
	if (is_ident("integer")) {
		if (!advance() || !int_attrs(t.get()))
			return false;
	} else if (is_ident("floating_point")) {
		if (!advance() || !float_attrs(t.get()))
			return false;
	} else if (is_ident("string")) {
		t->kind = Type::String;
		if (!advance())
			return false;
		if (is("{") && !assignments([](const std::string &, const Token &) { return true; }, depth))
			return false;
	} else if (is_ident("enum")) {
		if (!enum_body(t.get(), depth))
			return false;
	} else if (is_ident("struct")) {
		t->kind = Type::Struct;
		if (!advance())
			return false;
		if (cur_.kind == Tok::Ident && !is("{")) // a named struct
			return named(structs_, "struct", out);
		if (!struct_body(t.get(), depth))
			return false;
	} else if (is_ident("variant")) {
		t->kind = Type::Variant;
		if (!advance())
			return false;
		if (is("<")) {
			std::string tag;
			if (!advance() || !ident(&tag) || !expect(">"))
				return false;
		}
		if (!struct_body(t.get(), depth))
			return false;
	} else if (cur_.kind == Tok::Ident) {
		return named(aliases_, "type", out);
	} else {
		return fail("expected a type");
	}
	*out = t;
	return true;
}

int64_t as_i64(const Token &v)
{
	return v.neg ? -(int64_t)std::min<uint64_t>(v.num, (uint64_t)INT64_MAX)
		     : (int64_t)std::min<uint64_t>(v.num, (uint64_t)INT64_MAX);
}

bool parse_uuid(const std::string &s, uint8_t out[16])
{
	if (s.size() != 36)
		return false;
	size_t j = 0;
	for (size_t i = 0; i < 36;) {
		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (s[i] != '-')
				return false;
			i++;
			continue;
		}
		if (!std::isxdigit((unsigned char)s[i]) || !std::isxdigit((unsigned char)s[i + 1]))
			return false;
		out[j++] = (uint8_t)std::stoi(s.substr(i, 2), nullptr, 16);
		i += 2;
	}
	return j == 16;
}

// typealias TYPE := NAME;
bool Parser::typealias_stmt()
{
	TypeP t;
	if (!type(&t, 0) || !expect(":="))
		return false;
	std::string name;
	while (cur_.kind == Tok::Ident) { // "unsigned long" style names
		name += (name.empty() ? "" : " ") + cur_.text;
		if (!advance())
			return false;
	}
	if (name.empty())
		return fail("expected an alias name");
	aliases_[name] = t;
	return expect(";");
}

// struct NAME { ... } align(N);  (a named struct)
bool Parser::struct_stmt()
{
	std::string name;
	if (!ident(&name))
		return false;
	auto t = std::make_shared<Type>();
	t->kind = Type::Struct;
	if (!struct_body(t.get(), 0))
		return false;
	structs_[name] = t;
	return expect(";");
}

// trace { major; uuid; byte_order; packet.header := ...; };
bool Parser::trace_block()
{
	have_trace_ = true;
	if (!expect("{"))
		return false;
	while (!is("}")) {
		std::string k;
		if (!ident(&k))
			return false;
		if (k == "packet") { // packet.header := struct {...}
			std::string h;
			TypeP t;
			if (!expect(".") || !ident(&h) || !expect(":=") || !type(&t, 0) || !expect(";"))
				return false;
			continue;
		}
		if (!expect("="))
			return false;
		const Token v = cur_;
		if (!advance())
			return false;
		if (k == "uuid" && v.kind == Tok::String) {
			if (!parse_uuid(v.text, m_->uuid))
				return fail("bad trace uuid");
			m_->has_uuid = true;
		} else if (k == "byte_order" && !(v.kind == Tok::Ident && v.text == "le")) {
			return fail("a trace not little-endian");
		} else if (k == "major" && !(v.kind == Tok::Number && v.num == 1)) {
			return fail("not CTF 1");
		}
		if (!expect(";"))
			return false;
	}
	return advance() && expect(";");
}

// env { key = value; ... };
bool Parser::env_block()
{
	bool ok = assignments(
		[&](const std::string &k, const Token &v) {
			MetaEnvValue e;
			e.is_int = v.kind == Tok::Number;
			e.i = as_i64(v);
			e.s = v.text;
			if (m_->env.size() < 4096)
				m_->env.emplace_back(k, std::move(e));
			return true;
		},
		0);
	return ok && expect(";");
}

// clock { name; uuid; freq; offset_s; offset; absolute; ... };
bool Parser::clock_block()
{
	have_clock_ = true;
	MetaClock &c = m_->clock;
	bool ok = assignments(
		[&](const std::string &k, const Token &v) {
			if (k == "name")
				c.name = v.text;
			else if (k == "uuid")
				c.uuid = v.text;
			else if (k == "description")
				c.description = v.text;
			else if (k == "freq" && v.kind == Tok::Number && v.num > 0 && !v.neg)
				c.freq = v.num;
			else if (k == "freq")
				return fail("bad clock frequency");
			else if (k == "offset_s")
				c.offset_s = as_i64(v);
			else if (k == "offset")
				c.offset = as_i64(v);
			else if (k == "absolute")
				c.absolute = v.kind == Tok::Ident && v.text == "true";
			return true;
		},
		0);
	return ok && expect(";");
}

// stream { id; packet.context; event.header; event.context; };
bool Parser::stream_block()
{
	if (!expect("{"))
		return false;
	uint64_t id = 0;
	TypeP ctx;
	while (!is("}")) {
		std::string k;
		if (!ident(&k))
			return false;
		if (k == "id") {
			int64_t v;
			if (!expect("=") || !number(&v) || !expect(";"))
				return false;
			if (v < 0 || v > UINT32_MAX)
				return fail("bad stream id");
			id = (uint64_t)v;
			continue;
		}
		if (k != "packet" && k != "event")
			return fail("unknown stream attribute " + k);
		std::string sub;
		TypeP t;
		if (!expect(".") || !ident(&sub) || !expect(":=") || !type(&t, 0) || !expect(";"))
			return false;
		if (k == "event" && sub == "context")
			ctx = t;
		else if (k == "event" && sub == "header")
			header_ = t;
	}
	if (streams_.size() > 64)
		return fail("too many stream classes");
	streams_[id] = ctx;
	return advance() && expect(";");
}

// event { name; id; stream_id; loglevel; fields := struct { ... }; };
bool Parser::event_block()
{
	PendingEvent e{"", UINT64_MAX, 0, 0, nullptr};
	if (!expect("{"))
		return false;
	while (!is("}")) {
		std::string k;
		if (!ident(&k))
			return false;
		if (k == "fields") {
			if (!expect(":=") || !type(&e.fields, 0) || !expect(";"))
				return false;
			continue;
		}
		if (k == "context")
			return fail("events with their own context are not Strata's");
		if (!expect("="))
			return false;
		const Token v = cur_;
		if (!advance() || !expect(";"))
			return false;
		if (k == "name")
			e.name = v.text;
		else if (k == "id" && v.kind == Tok::Number)
			e.id = v.num;
		else if (k == "stream_id" && v.kind == Tok::Number)
			e.sid = v.num;
		else if (k == "loglevel" && v.kind == Tok::Number)
			e.loglevel = as_i64(v);
	}
	if (e.name.empty() || e.id > kMaxEventId)
		return fail("an event without a name or with a bad id");
	if (events_.size() >= kMaxEventsPerClass * 2)
		return fail("too many events");
	events_.push_back(std::move(e));
	return advance() && expect(";");
}

bool Parser::statement()
{
	std::string kw;
	if (!ident(&kw))
		return false;
	static const struct {
		const char *kw;
		bool (Parser::*parse)();
	} kBlocks[] = {
		{"typealias", &Parser::typealias_stmt}, {"struct", &Parser::struct_stmt},
		{"trace", &Parser::trace_block},        {"env", &Parser::env_block},
		{"clock", &Parser::clock_block},        {"stream", &Parser::stream_block},
		{"event", &Parser::event_block},
	};
	for (const auto &b : kBlocks)
		if (kw == b.kw)
			return (this->*b.parse)();
	return fail("unknown block " + kw);
}

// An integer type as Strata writes it for a field (COMPACT: byte-packed,
// WIDE: naturally aligned).
bool field_int_ok(const Type &t, bool packed)
{
	return valid_int_bits(t.size) && t.align == (packed ? 8u : t.size) && valid_base(t.base);
}

// One member of an event's fields as the FieldInfo it was written from
// (the member's name without the '_' metadata.cpp adds).  The sequence's
// length member is the caller's.
bool Parser::field_of(const std::string &event, const Type::Member &mb, bool packed, FieldInfo *f)
{
	const Type &t = *mb.type;
	f->name = mb.name.size() > 1 && mb.name[0] == '_' ? mb.name.substr(1) : mb.name;
	const std::string where = "event " + event + ": field " + f->name + ": ";
	if (mb.array || mb.sequence) {
		f->type = mb.array ? STRATA_FT_ARRAY : STRATA_FT_SEQUENCE;
		f->length = (uint32_t)mb.length;
		if (t.kind != Type::Int || !field_int_ok(t, packed))
			return fail(where + "array of a type Strata does not write");
		f->elem_bits = (uint8_t)t.size;
		f->is_signed = t.is_signed;
		f->base = (uint8_t)t.base;
	} else if (t.kind == Type::Int) {
		if (!field_int_ok(t, packed))
			return fail(where + "integer layout");
		f->type = STRATA_FT_INTEGER;
		f->elem_bits = (uint8_t)t.size;
		f->is_signed = t.is_signed;
		f->base = (uint8_t)t.base;
	} else if (t.kind == Type::Float) {
		f->type = STRATA_FT_FLOAT;
		f->elem_bits = t.exp_dig == 8 && t.mant_dig == 24    ? 32
			       : t.exp_dig == 11 && t.mant_dig == 53 ? 64
								     : 0;
		if (!f->elem_bits || t.align != (packed ? 8u : f->elem_bits))
			return fail(where + "float size or layout");
	} else if (t.kind == Type::Enum) {
		Type c = t;
		c.base = 10;
		if (!field_int_ok(c, packed))
			return fail(where + "enum layout");
		f->type = STRATA_FT_ENUM;
		f->elem_bits = (uint8_t)t.size;
		f->is_signed = t.is_signed;
		f->labels = t.labels;
	} else if (t.kind == Type::String) {
		f->type = STRATA_FT_STRING;
		f->elem_bits = 8;
	} else {
		return fail(where + "a type Strata does not write");
	}
	return true;
}

bool Parser::check_event(const std::string &name, uint64_t id, uint64_t sid, int64_t loglevel,
			 const TypeP &fields)
{
	const bool packed = m_->record_format == STRATA_REC_COMPACT;
	if (!m_->known_stream((uint32_t)sid))
		return fail("event " + name + " of an unknown stream class");
	MetaEvent ev;
	ev.full_name = name;
	ev.loglevel = (uint32_t)std::max<int64_t>(0, std::min<int64_t>(loglevel, UINT32_MAX));
	ev.info.id = (uint32_t)id;
	const size_t colon = name.find(':');
	ev.info.provider = colon == std::string::npos ? "" : name.substr(0, colon);
	ev.info.name = colon == std::string::npos ? name : name.substr(colon + 1);
	ev.info.loglevel = ev.loglevel;
	if (fields && fields->kind != Type::Struct)
		return fail("event " + name + ": fields not a struct");
	const auto &ms = fields ? fields->members : std::vector<Type::Member>();
	for (size_t i = 0; i < ms.size(); i++) {
		const Type::Member &mb = ms[i];
		// A sequence's length: a u32 member "__x_length" right before
		// the sequence "_x[ __x_length ]".
		if (i + 1 < ms.size() && ms[i + 1].sequence && ms[i + 1].length_name == mb.name) {
			const Type &t = *mb.type;
			if (t.kind != Type::Int || t.size != 32 || t.is_signed ||
			    t.align != (packed ? 8u : 32u) || mb.array || mb.sequence)
				return fail("event " + name + ": a sequence length not a u32");
			continue;
		}
		if (mb.sequence && (i == 0 || ms[i - 1].name != mb.length_name))
			return fail("event " + name + ": a sequence without its length before it");
		FieldInfo f;
		if (!field_of(name, mb, packed, &f))
			return false;
		ev.info.fields.push_back(std::move(f));
	}
	m_->events[(uint32_t)sid][(uint32_t)id] = std::move(ev);
	return true;
}

// The blocks against the layout of strata_abi.h.
bool Parser::finish()
{
	if (!have_trace_ || !have_clock_ || streams_.empty() || !header_)
		return fail("no trace, clock or stream block");
	auto pc = structs_.find("packet_context");
	if (pc == structs_.end())
		return fail("no packet context");
	static const char *const kCtx[] = {
		"timestamp_begin", "timestamp_end",    "content_size", "packet_size",
		"packet_seq_num",  "events_discarded", "lane_id",      "vtid"};
	const auto &pm = pc->second->members;
	if (pm.size() < 7 || pm.size() > 8)
		return fail("a packet context Strata does not write");
	for (size_t i = 0; i < pm.size(); i++)
		if (pm[i].name != kCtx[i])
			return fail("a packet context Strata does not write");
	// The record format from the event header: COMPACT's 5-bit id enum,
	// or WIDE's 16-bit id.
	const Type &h = *header_;
	if (h.kind != Type::Struct || h.members.empty())
		return fail("bad event header");
	const Type &id = *h.members[0].type;
	if (id.kind == Type::Enum && id.size == 5 && h.members.size() == 2)
		m_->record_format = STRATA_REC_COMPACT;
	else if (id.kind == Type::Int && id.size == 16 && id.align == 64 && h.members.size() == 2)
		m_->record_format = STRATA_REC_WIDE;
	else
		return fail("an event header Strata does not write");
	if ((m_->record_format == STRATA_REC_COMPACT) != (pm.size() == 8))
		return fail("a packet context that does not match the event header");
	m_->stream_id = (uint32_t)streams_.begin()->first;
	if (m_->record_format == STRATA_REC_COMPACT) {
		if (streams_.size() != 2 || !streams_.count(m_->stream_id + 1ull) ||
		    streams_.begin()->second || !streams_[m_->stream_id + 1ull])
			return fail("COMPACT stream classes not as Strata writes them");
		m_->has_shared = true;
	} else if (streams_.size() != 1) {
		return fail("WIDE stream classes not as Strata writes them");
	}
	for (const PendingEvent &e : events_)
		if (!check_event(e.name, e.id, e.sid, e.loglevel, e.fields))
			return false;
	return true;
}

bool Parser::run(std::string *why)
{
	bool ok = advance();
	while (ok && cur_.kind != Tok::End)
		ok = statement();
	if (ok)
		ok = finish();
	if (!ok)
		*why = why_.empty() ? "bad metadata" : why_;
	return ok;
}

} // namespace

const MetaEnvValue *TraceMeta::env_value(const std::string &key) const
{
	for (const auto &kv : env)
		if (kv.first == key)
			return &kv.second;
	return nullptr;
}

std::string TraceMeta::env_string(const std::string &key) const
{
	const MetaEnvValue *v = env_value(key);
	return v && !v->is_int ? v->s : std::string();
}

bool TraceMeta::env_int(const std::string &key, int64_t *out) const
{
	const MetaEnvValue *v = env_value(key);
	if (!v || !v->is_int)
		return false;
	*out = v->i;
	return true;
}

int64_t TraceMeta::ns_from_origin(uint64_t value) const
{
	if (map)
		return map->ns(value);
	// As babeltrace2 computes it: offset_s s + (offset + value) cycles.
	const unsigned __int128 cycles =
		(unsigned __int128)value + (uint64_t)(clock.offset < 0 ? 0 : clock.offset);
	__int128 ns =
		clock.freq == 1000000000u ? (__int128)cycles : (__int128)(cycles * 1000000000u / clock.freq);
	if (clock.offset < 0)
		ns -= (__int128)((unsigned __int128)(-(__int128)clock.offset) * 1000000000u / clock.freq);
	ns += (__int128)clock.offset_s * 1000000000;
	if (ns > INT64_MAX)
		return INT64_MAX;
	if (ns < INT64_MIN)
		return INT64_MIN;
	return (int64_t)ns;
}

bool is_strata_metadata(const std::string &text)
{
	if (text.compare(0, 8, "/* CTF 1") != 0)
		return false;
	const size_t env = text.find("\nenv {");
	if (env == std::string::npos)
		return false;
	const size_t end = text.find("\n};", env);
	const std::string block = text.substr(env, end == std::string::npos ? std::string::npos : end - env);
	return block.find("\n\ttracer_name = \"strata\";") != std::string::npos ||
	       block.find("\n\tstrata_tracer = ") != std::string::npos;
}

bool parse_trace_meta(const std::string &text, TraceMeta *out, std::string *why)
{
	*out = TraceMeta();
	Parser p(text, out);
	if (p.run(why)) {
		out->text_used = text.size();
		return true;
	}
	// Damaged after its stream blocks (an appended event block cut or
	// scribbled): the events before the damage are kept, the rest lost
	// with it (their records then fail the walk as undescribed, and their
	// packets are named as damaged).
	const size_t cut = text.rfind("\nevent {", p.fail_at());
	if (cut == std::string::npos || text.find("\nstream {") > cut)
		return false;
	const std::string first_why = *why;
	*out = TraceMeta();
	const std::string head = text.substr(0, cut + 1); // the parser keeps a reference
	Parser again(head, out);
	if (!again.run(why)) {
		*why = first_why;
		return false;
	}
	out->text_used = cut + 1;
	out->damage =
		first_why + "; the events described from byte " + std::to_string(cut + 1) + " on are lost";
	return true;
}

} // namespace strata
