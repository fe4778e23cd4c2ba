/*
 * filter.cpp - field filter parser/compiler and evaluator (see filter.h for
 * the contract, docs/filters.md for the language).
 *
 * Recursive descent over the text, emitting postfix operations as it goes:
 *   or      := and ( "||" and )*
 *   and     := unary ( "&&" unary )*
 *   unary   := "!"* primary
 *   primary := "(" or ")" | IDENT cmp literal
 * No allocation, no libc parsing (strtod and friends are neither
 * async-signal-safe nor locale-free): numbers are converted here.
 */
#include "filter.h"

#include <cstring>

namespace strata {
namespace {

bool is_ident_start(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

bool is_ident_char(char c)
{
	return is_ident_start(c) || is_digit(c);
}

int hex_value(char c)
{
	if (is_digit(c))
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

// 10^k in long double: exact up to 10^27 (5^27 < 2^64), within an ulp or
// two of long double beyond, which double rounding then absorbs.
long double pow10l_(unsigned k)
{
	long double r = 1, b = 10;
	while (k) {
		if (k & 1)
			r *= b;
		b *= b;
		k >>= 1;
	}
	return r;
}

struct Parser {
	const char *text;
	size_t pos;
	FilterProgram *prog;
	FilterError *err;
	unsigned depth; // open parentheses
	unsigned sp;    // evaluation stack height after the ops emitted so far
	bool failed;

	bool fail(size_t at, const char *msg)
	{
		if (!failed) {
			failed = true;
			err->column = (unsigned)at + 1;
			err->msg = msg;
		}
		return false;
	}

	void skip_space()
	{
		while (text[pos] == ' ' || text[pos] == '\t' || text[pos] == '\n' || text[pos] == '\r')
			pos++;
	}

	bool emit(const FilterOp &op, size_t at)
	{
		if (prog->n_ops >= kFilterMaxOps)
			return fail(
				at,
				"too many operations (a filter has at most 64 comparisons and operators)");
		if (op.code == kFilterCmp) {
			if (++sp > kFilterMaxStack)
				return fail(at, "expression too deeply nested");
		} else if (op.code != kFilterNot) {
			sp--; // two popped, one pushed; the grammar guarantees sp >= 2
		}
		prog->ops[prog->n_ops++] = op;
		return true;
	}

	bool emit_code(uint8_t code, size_t at)
	{
		FilterOp op{};
		op.code = code;
		return emit(op, at);
	}

	// Appends n bytes plus a NUL to the pool; returns the offset, or -1.
	long pool_add(const char *s, size_t n, size_t at)
	{
		if (prog->pool_len + n + 1 > kFilterPoolMax) {
			fail(at, "field names and strings too long in total");
			return -1;
		}
		long off = (long)prog->pool_len;
		if (n)
			memcpy(prog->pool + off, s, n);
		prog->pool[off + n] = 0;
		prog->pool_len += (uint32_t)(n + 1);
		return off;
	}

	// left ( OP left )*, OP being "||" or "&&": postfix left, right, OP.
	bool parse_binary(char sym, uint8_t code, bool (Parser::*operand)())
	{
		if (!(this->*operand)())
			return false;
		for (;;) {
			skip_space();
			if (text[pos] != sym || text[pos + 1] != sym)
				return true;
			size_t at = pos;
			pos += 2;
			if (!(this->*operand)() || !emit_code(code, at))
				return false;
		}
	}

	bool parse_or() { return parse_binary('|', kFilterOr, &Parser::parse_and); }
	bool parse_and() { return parse_binary('&', kFilterAnd, &Parser::parse_unary); }

	bool parse_unary()
	{
		unsigned nots = 0;
		size_t at = 0;
		for (;;) {
			skip_space();
			if (text[pos] != '!' || text[pos + 1] == '=')
				break;
			at = pos++;
			nots++;
		}
		if (!parse_primary())
			return false;
		return (nots & 1) == 0 || emit_code(kFilterNot, at); // "!!x" is x
	}

	bool parse_primary()
	{
		skip_space();
		if (text[pos] == '(') {
			size_t open = pos++;
			if (++depth > kFilterMaxDepth)
				return fail(open, "parentheses nested deeper than 16");
			if (!parse_or())
				return false;
			skip_space();
			if (text[pos] != ')')
				return fail(pos, "expected ')'");
			pos++;
			depth--;
			return true;
		}
		if (!is_ident_start(text[pos]))
			return fail(pos,
				    text[pos]
					    ? "expected a field name, '!' or '('"
					    : "expression ends where a field name, '!' or '(' was expected");
		FilterOp op{};
		op.code = kFilterCmp;
		size_t name_at = pos;
		while (is_ident_char(text[pos]))
			pos++;
		long off = pool_add(text + name_at, pos - name_at, name_at);
		if (off < 0)
			return false;
		op.name_off = (uint16_t)off;
		op.name_len = (uint16_t)(pos - name_at);
		skip_space();
		size_t op_at = pos;
		char c = text[pos], d = c ? text[pos + 1] : 0;
		if (c == '=' && d == '=')
			op.cmp = kCmpEq, pos += 2;
		else if (c == '!' && d == '=')
			op.cmp = kCmpNe, pos += 2;
		else if (c == '<' && d == '=')
			op.cmp = kCmpLe, pos += 2;
		else if (c == '>' && d == '=')
			op.cmp = kCmpGe, pos += 2;
		else if (c == '<')
			op.cmp = kCmpLt, pos++;
		else if (c == '>')
			op.cmp = kCmpGt, pos++;
		else if (c == 0)
			return fail(op_at, "expression ends where a comparison operator was expected");
		else
			return fail(op_at, c == '=' ? "'=' is not an operator: use '=='"
						    : "expected a comparison operator (== != < <= > >=)");
		skip_space();
		if (text[pos] == '"') {
			if (!parse_string(&op))
				return false;
			if (op.cmp != kCmpEq && op.cmp != kCmpNe)
				return fail(op_at, "strings only compare with == or !=");
		} else if (!parse_number(&op)) {
			return false;
		}
		return emit(op, name_at);
	}

	bool parse_string(FilterOp *op)
	{
		size_t open = pos++;
		char buf[kFilterMaxText + 1];
		size_t n = 0;
		for (;;) {
			char c = text[pos];
			if (c == 0)
				return fail(open, "unterminated string");
			if (c == '"')
				break;
			if (c == '\\') {
				char e = text[pos + 1];
				if (e != '"' && e != '\\')
					return fail(pos, "bad escape in string (only \\\" and \\\\)");
				c = e;
				pos++;
			} else if (c == '*') {
				op->glob = 1;
			}
			if (n >= kFilterMaxText)
				return fail(open, "string too long");
			buf[n++] = c;
			pos++;
		}
		pos++; // closing quote
		long off = pool_add(buf, n, open);
		if (off < 0)
			return false;
		op->lit = kLitString;
		op->v = (uint64_t)off | (uint64_t)n << 32;
		return true;
	}

	bool parse_number(FilterOp *op)
	{
		size_t at = pos;
		bool neg = false;
		if (text[pos] == '-') {
			neg = true;
			pos++;
		}
		if (!is_digit(text[pos]))
			return fail(at, text[pos] || neg
						? "expected a number or a string in double quotes"
						: "expression ends where a number or a string was expected");
		if (text[pos] == '0' && (text[pos + 1] == 'x' || text[pos + 1] == 'X')) {
			pos += 2;
			return parse_hex(op, neg, at);
		}
		// Decimal: integer unless a '.' or an exponent follows.
		Decimal d;
		if (!scan_decimal(d, at))
			return false;
		if (is_ident_char(text[pos]) || text[pos] == '.')
			return fail(at, "bad number");
		if (!d.is_float) {
			if (d.overflow)
				return fail(at, "integer out of range (64 bits)");
			return set_int(op, neg, d.iv, at);
		}
		return set_float(op, neg, d, at);
	}

	// After "0x": the hexadecimal digits of an integer.
	bool parse_hex(FilterOp *op, bool neg, size_t at)
	{
		uint64_t m = 0;
		size_t digits = 0;
		for (int h; (h = hex_value(text[pos])) >= 0; pos++, digits++) {
			if (m >> 60)
				return fail(at, "integer out of range (64 bits)");
			m = m << 4 | (uint64_t)h;
		}
		if (digits == 0 || is_ident_char(text[pos]) || text[pos] == '.')
			return fail(at, "bad hexadecimal number");
		return set_int(op, neg, m, at);
	}

	// A decimal number's digits: the integer exactly (iv), and for a float
	// its value m * 10^exp10 with at most 19 significant digits kept in m.
	struct Decimal {
		uint64_t m = 0;
		bool overflow = false; // iv does not fit
		int exp10 = 0;
		unsigned sig = 0;
		bool is_float = false;
		uint64_t iv = 0;
	};

	// The integer digits, then a '.' and its digits, then an exponent.
	bool scan_decimal(Decimal &d, size_t at)
	{
		for (; is_digit(text[pos]); pos++) {
			unsigned dgt = (unsigned)(text[pos] - '0');
			if (d.iv > (UINT64_MAX - dgt) / 10)
				d.overflow = true;
			d.iv = d.iv * 10 + dgt;
			if (d.sig < 19) {
				d.m = d.m * 10 + dgt;
				if (d.m)
					d.sig++;
			} else {
				d.exp10++; // digit dropped (floats only)
			}
		}
		if (text[pos] == '.') {
			d.is_float = true;
			pos++;
			if (!is_digit(text[pos]))
				return fail(at, "bad number: digits must follow '.'");
			for (; is_digit(text[pos]); pos++)
				if (d.sig < 19) {
					d.m = d.m * 10 + (unsigned)(text[pos] - '0');
					if (d.m)
						d.sig++;
					d.exp10--;
				}
		}
		if (text[pos] == 'e' || text[pos] == 'E') {
			d.is_float = true;
			pos++;
			bool eneg = false;
			if (text[pos] == '+' || text[pos] == '-')
				eneg = text[pos++] == '-';
			if (!is_digit(text[pos]))
				return fail(at, "bad number: digits must follow the exponent");
			int e = 0;
			for (; is_digit(text[pos]); pos++)
				if (e < 100000)
					e = e * 10 + (text[pos] - '0');
			d.exp10 += eneg ? -e : e;
		}
		return true;
	}

	// m * 10^exp10 as a double literal (neg: negated).
	bool set_float(FilterOp *op, bool neg, const Decimal &d, size_t at)
	{
		double v = 0;
		if (d.m != 0) {
			if (d.exp10 > 400 || d.exp10 < -420)
				return fail(at, "floating-point number out of range");
			long double x = (long double)d.m;
			x = d.exp10 >= 0 ? x * pow10l_((unsigned)d.exp10) : x / pow10l_((unsigned)-d.exp10);
			v = (double)x;
			if (v == 0 || v > 1.7976931348623157e308)
				return fail(at, "floating-point number out of range");
		}
		if (neg)
			v = -v;
		op->lit = kLitFloat;
		memcpy(&op->v, &v, sizeof v);
		return true;
	}

	bool set_int(FilterOp *op, bool neg, uint64_t m, size_t at)
	{
		if (neg) {
			if (m > (uint64_t)1 << 63)
				return fail(at, "integer out of range (64 bits)");
			op->lit = kLitInt;
			op->v = (uint64_t)0 - m; // two's complement of the magnitude
		} else {
			op->lit = m > (uint64_t)INT64_MAX ? kLitUint : kLitInt;
			op->v = m;
		}
		return true;
	}
};

// Index of the field named pool[off, off+len) in d, or -1.
int find_field(const FilterProgram &p, const FilterOp &op, const strata_event_desc *d)
{
	if ((uint32_t)op.name_off + op.name_len > p.pool_len || p.pool_len > kFilterPoolMax)
		return -1;
	const char *name = p.pool + op.name_off;
	uint32_t nf = d->n_fields;
	for (uint32_t i = 0; i < nf && i < 64; i++) {
		const char *fn = d->fields[i].name;
		if (!fn)
			continue;
		uint32_t k = 0; // never reads fn past its NUL, nor name past name_len
		while (k < op.name_len && fn[k] && fn[k] == name[k])
			k++;
		if (k == op.name_len && fn[k] == 0)
			return (int)i;
	}
	return -1;
}

bool op_binds(const FilterProgram &p, const FilterOp &op, const strata_event_desc *d)
{
	int i = find_field(p, op, d);
	if (i < 0)
		return false;
	switch (d->fields[i].kind) {
	case STRATA_FIELD_INTEGER:
	case STRATA_FIELD_ENUM:
	case STRATA_FIELD_FLOAT:
		return op.lit == kLitInt || op.lit == kLitUint || op.lit == kLitFloat;
	case STRATA_FIELD_STRING:
		return op.lit == kLitString;
	default:
		return false; // arrays and sequences are not comparable
	}
}

template <typename T> bool compare(uint8_t cmp, T a, T b)
{
	switch (cmp) {
	case kCmpEq:
		return a == b;
	case kCmpNe:
		return a != b;
	case kCmpLt:
		return a < b;
	case kCmpLe:
		return a <= b;
	case kCmpGt:
		return a > b;
	case kCmpGe:
		return a >= b;
	default:
		return false;
	}
}

// '*' matches any run of characters; t is NUL-terminated, p has n bytes.
// Iterative with one backtrack point: O(strlen(t) * n) at worst.
bool glob_n(const char *p, size_t n, const char *t)
{
	size_t i = 0, star = (size_t)-1;
	const char *retry = nullptr;
	while (*t) {
		if (i < n && p[i] == '*') {
			star = i++;
			retry = t;
		} else if (i < n && p[i] == *t) {
			i++;
			t++;
		} else if (star != (size_t)-1) {
			i = star + 1;
			t = ++retry;
		} else {
			return false;
		}
	}
	while (i < n && p[i] == '*')
		i++;
	return i == n;
}

// A string field against op's string literal (== and != only; a glob
// literal matches as a pattern).
bool cmp_string(const FilterProgram &p, const FilterOp &op, const char *s)
{
	if (op.lit != kLitString)
		return false;
	uint32_t off = (uint32_t)op.v, len = (uint32_t)(op.v >> 32);
	if ((uint64_t)off + len >= p.pool_len || p.pool_len > kFilterPoolMax)
		return false;
	const char *lit = p.pool + off;
	bool eq;
	if (op.glob) {
		eq = glob_n(lit, len, s);
	} else {
		uint32_t k = 0;
		while (k < len && s[k] == lit[k])
			k++;
		eq = k == len && s[k] == 0;
	}
	return op.cmp == kCmpEq ? eq : op.cmp == kCmpNe ? !eq : false;
}

// A float field (f.size 4 or 8) against op's number.
bool cmp_float(const FilterOp &op, const strata_field_desc &f, const void *arg)
{
	long double x;
	if (f.size == 4) {
		float v;
		memcpy(&v, arg, 4);
		if (op.lit == kLitFloat) { // compare as float: 0.1 matches 0.1f
			double l;
			memcpy(&l, &op.v, 8);
			return compare<float>(op.cmp, v, (float)l);
		}
		x = v;
	} else {
		double v;
		memcpy(&v, arg, 8);
		x = v;
	}
	long double l;
	if (op.lit == kLitFloat) {
		double dl;
		memcpy(&dl, &op.v, 8);
		l = dl;
	} else if (op.lit == kLitInt) {
		l = (long double)(int64_t)op.v;
	} else if (op.lit == kLitUint) {
		l = (long double)op.v;
	} else {
		return false;
	}
	return compare<long double>(op.cmp, x, l);
}

// An integer or enum field (f.size 1, 2, 4 or 8) against op's number.
bool cmp_int(const FilterOp &op, const strata_field_desc &f, const void *arg)
{
	__int128 x;
	switch (f.size) {
	case 1: {
		uint8_t u;
		memcpy(&u, arg, 1);
		x = f.is_signed ? (__int128)(int8_t)u : (__int128)u;
		break;
	}
	case 2: {
		uint16_t u;
		memcpy(&u, arg, 2);
		x = f.is_signed ? (__int128)(int16_t)u : (__int128)u;
		break;
	}
	case 4: {
		uint32_t u;
		memcpy(&u, arg, 4);
		x = f.is_signed ? (__int128)(int32_t)u : (__int128)u;
		break;
	}
	case 8: {
		uint64_t u;
		memcpy(&u, arg, 8);
		x = f.is_signed ? (__int128)(int64_t)u : (__int128)u;
		break;
	}
	default:
		return false;
	}
	switch (op.lit) {
	case kLitInt:
		return compare<__int128>(op.cmp, x, (__int128)(int64_t)op.v);
	case kLitUint:
		return compare<__int128>(op.cmp, x, (__int128)op.v);
	case kLitFloat: {
		double l;
		memcpy(&l, &op.v, 8);
		return compare<long double>(op.cmp, (long double)x, (long double)l); // exact for 64-bit x
	}
	default:
		return false;
	}
}

bool eval_cmp(const FilterProgram &p, const FilterOp &op, const strata_event_desc *d, const void *const *argv)
{
	int fi = find_field(p, op, d);
	if (fi < 0)
		return false;
	size_t a = 0; // argv index: sequences take two entries
	for (int k = 0; k < fi; k++)
		a += d->fields[k].kind == STRATA_FIELD_SEQUENCE ? 2 : 1;
	const strata_field_desc &f = d->fields[fi];
	const void *arg = argv[a];
	if (!arg)
		return false;
	if (f.kind == STRATA_FIELD_STRING)
		return cmp_string(p, op, (const char *)arg);
	if (f.kind == STRATA_FIELD_FLOAT)
		return cmp_float(op, f, arg);
	if (f.kind != STRATA_FIELD_INTEGER && f.kind != STRATA_FIELD_ENUM)
		return false;
	return cmp_int(op, f, arg);
}

} // namespace

bool filter_compile(const char *text, FilterProgram *out, FilterError *err)
{
	out->n_ops = 0;
	out->pool_len = 0;
	err->column = 0;
	err->msg = nullptr;
	if (!text)
		text = "";
	size_t len = strnlen(text, kFilterMaxText + 1);
	if (len > kFilterMaxText) {
		err->column = kFilterMaxText + 1;
		err->msg = "filter longer than 255 bytes";
		return false;
	}
	if (len == 0)
		return true;
	Parser ps{text, 0, out, err, 0, 0, false};
	if (ps.parse_or()) {
		ps.skip_space();
		if (text[ps.pos] == 0)
			return true;
		ps.fail(ps.pos, text[ps.pos] == ')' ? "unbalanced ')'"
						    : "expected '&&', '||' or the end of the expression");
	}
	out->n_ops = 0;
	out->pool_len = 0;
	return false;
}

bool filter_bind(const FilterProgram &p, const strata_event_desc *d)
{
	if (p.n_ops > kFilterMaxOps || !d || (d->n_fields && !d->fields))
		return false;
	for (uint32_t i = 0; i < p.n_ops; i++)
		if (p.ops[i].code == kFilterCmp && !op_binds(p, p.ops[i], d))
			return false;
	return true;
}

int filter_eval(const FilterProgram &p, const strata_event_desc *d, const void *const *argv)
{
	if (p.n_ops == 0)
		return 1;
	if (p.n_ops > kFilterMaxOps || !d || !argv || (d->n_fields && !d->fields))
		return 0;
	bool st[kFilterMaxStack];
	unsigned sp = 0;
	for (uint32_t i = 0; i < p.n_ops; i++) {
		const FilterOp &op = p.ops[i];
		switch (op.code) {
		case kFilterCmp:
			if (sp >= kFilterMaxStack)
				return 0;
			st[sp++] = eval_cmp(p, op, d, argv);
			break;
		case kFilterNot:
			if (sp < 1)
				return 0;
			st[sp - 1] = !st[sp - 1];
			break;
		case kFilterAnd:
		case kFilterOr:
			if (sp < 2)
				return 0;
			sp--;
			st[sp - 1] = op.code == kFilterAnd ? (st[sp - 1] && st[sp]) : (st[sp - 1] || st[sp]);
			break;
		default:
			return 0;
		}
	}
	return sp == 1 && st[0] ? 1 : 0;
}

// Rule patterns: '*' matches any run of characters (registry.cpp matches
// events with it; the daemon checks filters against the events it knows).
bool glob_match(const char *p, const char *t)
{
	// Iterative: remember the last '*' and the text position it stood for.
	const char *star = nullptr, *retry = nullptr;
	while (*t) {
		if (*p == '*') {
			star = p++;
			retry = t;
		} else if (*p == *t) {
			p++;
			t++;
		} else if (star) {
			p = star + 1;
			t = ++retry;
		} else {
			return false;
		}
	}
	while (*p == '*')
		p++;
	return *p == 0;
}

} // namespace strata
