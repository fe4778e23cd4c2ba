/*
 * reader_descriptors.cpp - the event descriptors a buffer's producers
 * publish (reader.h): each record checked against the descriptor rules
 * (desc_rules.h) before it becomes an EventInfo.
 */
#include "reader.h"

#include <algorithm>
#include <cstring>

#include "desc_rules.h"

namespace strata {
namespace {

// A string of the record at `off`, NUL-terminated inside the record.
const char *record_str(const uint8_t *rec, uint32_t size, uint32_t off)
{
	if (off >= size || !memchr(rec + off, 0, size - off))
		return nullptr;
	return (const char *)rec + off;
}

// An enumeration's labels (df.n_labels at df.labels_off of the record) into
// f->labels, a RANGE_END label closing the range its predecessor opened;
// false when they do not check.
bool parse_enum_labels(const uint8_t *rec, uint32_t size, const strata_desc_field &df, FieldInfo *f)
{
	bool ok = df.n_labels >= 1 && df.labels_off % 8 == 0 &&
		  df.n_labels <= size / sizeof(strata_desc_enum_label) && df.labels_off <= size &&
		  (uint64_t)df.n_labels * sizeof(strata_desc_enum_label) <= size - df.labels_off;
	for (uint32_t l = 0; ok && l < df.n_labels; l++) {
		strata_desc_enum_label el;
		memcpy(&el, rec + df.labels_off + l * sizeof el, sizeof el);
		if (el.flags == STRATA_DESC_LABEL_RANGE_END) {
			ok = !f->labels.empty() && f->labels.back().first == f->labels.back().last &&
			     el.value > f->labels.back().first;
			if (ok)
				f->labels.back().last = el.value;
			continue;
		}
		const char *lab = record_str(rec, size, el.label_off);
		ok = el.flags == 0 && lab && valid_label(lab, size - el.label_off);
		if (ok)
			f->labels.push_back(EnumLabel{lab, el.value, el.value});
	}
	return ok;
}

// Whether field df's type, element bits, base and length (or labels)
// describe a field this reader can walk; f takes its length and labels.
bool parse_field_type(const uint8_t *rec, uint32_t size, const strata_desc_field &df, FieldInfo *f)
{
	const bool ints = valid_int_bits(df.elem_bits) && df.is_signed <= 1;
	switch (df.type) {
	case STRATA_FT_INTEGER:
	case STRATA_FT_SEQUENCE:
		return ints && valid_base(df.base);
	case STRATA_FT_ARRAY:
		f->length = df.length;
		return ints && valid_base(df.base) && df.length >= 1 && df.length <= kMaxArrayLength;
	case STRATA_FT_FLOAT:
		return df.elem_bits == 32 || df.elem_bits == 64;
	case STRATA_FT_STRING:
		return df.elem_bits == 8;
	case STRATA_FT_ENUM:
		return ints && parse_enum_labels(rec, size, df, f);
	default:
		return false;
	}
}

} // namespace

bool Reader::parse_descriptor(const uint8_t *rec, uint32_t size, EventInfo *ev, std::string *err)
{
	strata_desc_event de;
	memcpy(&de, rec, sizeof de);
	const char *prov = record_str(rec, size, de.provider_off);
	const char *name = record_str(rec, size, de.name_off);
	if (!prov || !name || !valid_identifier(prov, size - de.provider_off) ||
	    !valid_identifier(name, size - de.name_off)) {
		*err = "bad provider or event name";
		return false;
	}
	std::string where = std::string(prov) + ":" + name + ": ";
	if (de.id > STRATA_LIMIT_EVENT_ID ||
	    std::find(seen_ids_.begin(), seen_ids_.end(), de.id) != seen_ids_.end()) {
		*err = where + "bad or duplicate event id " + std::to_string(de.id);
		return false;
	}
	if (de.loglevel > 15 || de.n_fields > STRATA_DESC_MAX_FIELDS ||
	    sizeof de + (uint64_t)de.n_fields * sizeof(strata_desc_field) > size) {
		*err = where + "bad loglevel or field count";
		return false;
	}
	ev->id = de.id;
	ev->provider = prov;
	ev->name = name;
	ev->loglevel = de.loglevel;
	ev->fields.clear();
	for (uint32_t i = 0; i < de.n_fields; i++) {
		strata_desc_field df;
		memcpy(&df, rec + sizeof de + i * sizeof df, sizeof df);
		const char *fname = record_str(rec, size, df.name_off);
		if (!fname || !valid_identifier(fname, size - df.name_off)) {
			*err = where + "bad field name";
			return false;
		}
		FieldInfo f;
		f.name = fname;
		f.type = df.type;
		f.elem_bits = df.elem_bits;
		f.is_signed = df.is_signed != 0;
		f.base = df.base;
		const std::string fw = where + "field " + f.name + ": ";
		for (const FieldInfo &g : ev->fields)
			if (g.name == f.name) {
				*err = fw + "duplicate field name";
				return false;
			}
		if (!parse_field_type(rec, size, df, &f)) {
			*err = fw + "bad type description (type " + std::to_string(df.type) + ")";
			return false;
		}
		ev->fields.push_back(std::move(f));
	}
	seen_ids_.push_back(de.id);
	return true;
}

// Parses the records appended to the table since the last call into
// known_ (errors kept for the caller).  False once the table is broken.
bool Reader::absorb_descriptors()
{
	if (desc_broken_)
		return false;
	auto *h = (strata_buffer_header *)base_;
	// Acquire: pairs with the producer's release store of desc_used after
	// it appended the records (publish_descriptors).
	uint64_t used = __atomic_load_n(&h->desc_used, __ATOMIC_ACQUIRE);
	const uint8_t *table = base_ + info_.desc_offset;
	auto broken = [&](const std::string &why) {
		desc_broken_ = true;
		stats_.descriptor_errors++;
		desc_errors_.push_back("descriptor table at byte " + std::to_string(desc_read_) + ": " + why +
				       "; no further events of this buffer can be described");
		return false;
	};
	if (used > info_.desc_capacity || used < desc_read_ || used % 8 != 0)
		return broken("bad desc_used " + std::to_string(used));
	std::vector<uint8_t> rec;
	while (desc_read_ < used) { // each round advances by >= 24 bytes, or stops
		uint64_t left = used - desc_read_;
		uint32_t size;
		if (left < sizeof(strata_desc_event))
			return broken("truncated record");
		memcpy(&size, table + desc_read_, sizeof size);
		if (size < sizeof(strata_desc_event) || size % 8 != 0 || size > STRATA_DESC_MAX_RECORD ||
		    size > left)
			return broken("bad record_size " + std::to_string(size));
		rec.assign(table + desc_read_, table + desc_read_ + size); // copy, then validate
		memcpy(&rec[0], &size, sizeof size); // the size we bounded, whatever changed since
		EventInfo ev;
		std::string err;
		if (parse_descriptor(rec.data(), size, &ev, &err)) {
			if (by_id_.size() <= ev.id) // ids are <= STRATA_LIMIT_EVENT_ID (parse_descriptor)
				by_id_.resize(ev.id + 1, -1);
			by_id_[ev.id] = (int32_t)known_.size();
			walk_.add(ev);
			known_.push_back(std::move(ev));
		} else {
			stats_.descriptor_errors++;
			desc_errors_.push_back("descriptor at byte " + std::to_string(desc_read_) + ": " +
					       err);
		}
		desc_read_ += size;
	}
	return true;
}

void Reader::peek_events(size_t from, std::vector<EventInfo> *out)
{
	absorb_descriptors(); // its errors stay for read_new_events
	if (from < known_.size())
		out->insert(out->end(), known_.begin() + (ptrdiff_t)from, known_.end());
}

bool Reader::read_new_events(std::vector<EventInfo> *out, std::vector<std::string> *errors)
{
	bool ok = absorb_descriptors();
	out->insert(out->end(), known_.begin() + (ptrdiff_t)known_returned_, known_.end());
	known_returned_ = known_.size();
	errors->insert(errors->end(), desc_errors_.begin(), desc_errors_.end());
	desc_errors_.clear();
	return ok;
}

} // namespace strata
