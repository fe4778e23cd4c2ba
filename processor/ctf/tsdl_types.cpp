// tsdl_types.cpp - the parser's steps over tokens and its type grammar:
// integer, floating_point, enum, string, struct and variant types, arrays
// and sequences, parsed into a small tree (tsdl_parser.h).
#include <algorithm>
#include <cctype>
#include <cstring>

#include "desc_rules.h"
#include "tsdl_parser.h"

namespace strata {
namespace tsdl {
namespace {

constexpr int kMaxDepth = 16; // nested types

} // namespace

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

} // namespace tsdl
} // namespace strata
