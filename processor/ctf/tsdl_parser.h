/*
 * tsdl_parser.h - the TSDL reader behind parse_trace_meta (trace_meta.h):
 * a tokenizer (tsdl_lexer.cpp) and a recursive-descent parser for the
 * part of TSDL that consumerd/metadata.cpp writes.  Its type grammar
 * (integer, floating_point, enum, string, struct and variant types;
 * arrays and sequences) is tsdl_types.cpp; the blocks (typealias, trace,
 * env, clock, named structs, stream and event) and their check against
 * the one layout Strata writes, trace_meta.cpp.  Internal to
 * processor/ctf.
 */
#ifndef STRATA_CTF_TSDL_PARSER_H
#define STRATA_CTF_TSDL_PARSER_H

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "trace_meta.h"

namespace strata {
namespace tsdl {

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

} // namespace tsdl
} // namespace strata
#endif
