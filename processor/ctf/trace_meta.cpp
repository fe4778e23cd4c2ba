// trace_meta.cpp - reading a Strata sub-trace's TSDL back; see trace_meta.h.
//
// The parser's blocks (tsdl_parser.h: its tokens tsdl_lexer.cpp, its types
// tsdl_types.cpp): typealias, trace, env, clock, named structs, stream and
// event blocks, checked against the one layout Strata writes
// (strata_abi.h), the fields turned back into FieldInfo.
#include "trace_meta.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <functional>
#include <memory>

#include "desc_rules.h"
#include "strata_abi.h"
#include "tsdl_parser.h"

namespace strata {
namespace tsdl {
namespace {

constexpr uint32_t kMaxEventId = STRATA_LIMIT_EVENT_ID; // strata_limits.h
constexpr size_t kMaxEventsPerClass = kMaxEventId + 1;  // ids fit the WIDE header's u16

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

// An integer type as Strata writes it for a field (COMPACT: byte-packed,
// WIDE: naturally aligned).
bool field_int_ok(const Type &t, bool packed)
{
	return valid_int_bits(t.size) && t.align == (packed ? 8u : t.size) && valid_base(t.base);
}

} // namespace

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

} // namespace tsdl

using tsdl::Parser;

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
