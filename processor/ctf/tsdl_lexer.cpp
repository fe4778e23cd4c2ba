// tsdl_lexer.cpp - TSDL's tokens (tsdl_parser.h).
#include <cctype>
#include <cstring>

#include "tsdl_parser.h"

namespace strata {
namespace tsdl {

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

} // namespace tsdl
} // namespace strata
