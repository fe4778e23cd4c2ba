// bt_fields.h - reading babeltrace2 fields in the CLI's trace readers
// (`strata view`, `strata analyze mutex|monitor`): members by name, integer
// and string values, and an event's thread.
#ifndef STRATA_CLI_BT_FIELDS_H
#define STRATA_CLI_BT_FIELDS_H

#include <babeltrace2/babeltrace.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace strata {

// A member of a structure by name, or null.
inline const bt_field *member(const bt_field *st, const char *name)
{
	if (!st || bt_field_get_class_type(st) != BT_FIELD_CLASS_TYPE_STRUCTURE)
		return nullptr;
	return bt_field_structure_borrow_member_field_by_name_const(st, name);
}

// An integer field's value (either signedness); false if `f` is not one.
inline bool integer_value(const bt_field *f, int64_t *v)
{
	if (!f)
		return false;
	const bt_field_class_type type = bt_field_get_class_type(f);
	if (bt_field_class_type_is(type, BT_FIELD_CLASS_TYPE_SIGNED_INTEGER))
		*v = bt_field_integer_signed_get_value(f);
	else if (bt_field_class_type_is(type, BT_FIELD_CLASS_TYPE_UNSIGNED_INTEGER))
		*v = static_cast<int64_t>(bt_field_integer_unsigned_get_value(f));
	else
		return false;
	return true;
}

inline int64_t as_i64(const bt_field *f)
{
	int64_t v = 0;
	return integer_value(f, &v) ? v : 0;
}

inline uint64_t as_u64(const bt_field *f)
{
	return static_cast<uint64_t>(as_i64(f));
}

inline std::string as_str(const bt_field *f)
{
	if (!f || bt_field_get_class_type(f) != BT_FIELD_CLASS_TYPE_STRING)
		return "";
	return bt_field_string_get_value(f);
}

// A trace environment entry (CTF `env`): a string, or an integer of either
// signedness; false when absent or of another type.
inline bool env_string(const bt_trace *tr, const char *name, std::string *out)
{
	const bt_value *v = bt_trace_borrow_environment_entry_value_by_name_const(tr, name);
	if (!v || !bt_value_is_string(v))
		return false;
	*out = bt_value_string_get(v);
	return true;
}

inline bool env_int(const bt_trace *tr, const char *name, int64_t *out)
{
	const bt_value *v = bt_trace_borrow_environment_entry_value_by_name_const(tr, name);
	if (v && bt_value_is_signed_integer(v))
		*out = bt_value_integer_signed_get(v);
	else if (v && bt_value_is_unsigned_integer(v))
		*out = static_cast<int64_t>(bt_value_integer_unsigned_get(v));
	else
		return false;
	return true;
}

// The index of a member in a structure field class, or -1.
inline int64_t member_index(const bt_field_class *st, const char *name)
{
	if (!st || bt_field_class_get_type(st) != BT_FIELD_CLASS_TYPE_STRUCTURE)
		return -1;
	const uint64_t n = bt_field_class_structure_get_member_count(st);
	for (uint64_t i = 0; i < n; i++)
		if (!std::strcmp(bt_field_class_structure_member_get_name(
					 bt_field_class_structure_borrow_member_by_index_const(st, i)),
				 name))
			return static_cast<int64_t>(i);
	return -1;
}

// Payload members of one event class looked up by name once: babeltrace2's
// by-name lookup costs a hash and a strcmp per member and event.  Keep one
// per event class; `name` must be a string literal (compared by address).
struct MemberCache {
	mutable std::vector<std::pair<const char *, int64_t>> index; // name literal -> index

	const bt_field *field(const bt_field *pl, const char *name) const
	{
		for (const auto &p : index)
			if (p.first == name)
				return p.second < 0 ? nullptr
						    : bt_field_structure_borrow_member_field_by_index_const(
							      pl, static_cast<uint64_t>(p.second));
		if (!pl)
			return nullptr;
		index.emplace_back(name, member_index(bt_field_borrow_class_const(pl), name));
		return field(pl, name);
	}
	int64_t i64(const bt_field *pl, const char *name) const { return as_i64(field(pl, name)); }
	uint64_t u64(const bt_field *pl, const char *name) const { return as_u64(field(pl, name)); }
	std::string str(const bt_field *pl, const char *name) const { return as_str(field(pl, name)); }
};

// The thread of an event: its own `vtid` context (kernel events, user events
// of a shared lane), else its packet's `vtid` (a lane owned by one thread,
// strata_abi.h); false if neither says.
inline bool event_tid(const bt_event *ev, int64_t *tid)
{
	if (integer_value(member(bt_event_borrow_common_context_field_const(ev), "vtid"), tid) ||
	    integer_value(member(bt_event_borrow_common_context_field_const(ev), "tid"), tid))
		return true;
	const bt_packet *p = bt_event_borrow_packet_const(ev);
	return p && integer_value(member(bt_packet_borrow_context_field_const(p), "vtid"), tid) && *tid >= 0;
}

} // namespace strata
#endif
