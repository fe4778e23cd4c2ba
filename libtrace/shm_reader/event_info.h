/*
 * event_info.h - an event description after the consumer has read and
 * validated it from a buffer's descriptor table (strata_abi.h).  Produced by
 * the buffer reader (libtrace/shm_reader), consumed by the CTF metadata writer
 * (consumerd/metadata).  Plain values only: nothing here points into shared
 * memory.
 */
#ifndef STRATA_LIBTRACE_EVENT_INFO_H
#define STRATA_LIBTRACE_EVENT_INFO_H

#include <cstdint>
#include <string>
#include <vector>

namespace strata {

struct EnumLabel {
	std::string label;
	int64_t first = 0;
	int64_t last = 0;
};

struct FieldInfo {
	std::string name;
	uint8_t type = 0;      // enum strata_field_type (abi/strata_abi.h)
	uint8_t elem_bits = 0; // 8, 16, 32, 64 (strings: 8)
	bool is_signed = false;
	uint8_t base = 10;             // 2, 8, 10, 16
	uint32_t length = 0;           // STRATA_FT_ARRAY
	std::vector<EnumLabel> labels; // STRATA_FT_ENUM
};

struct EventInfo {
	uint32_t id = 0;
	std::string provider;
	std::string name; // event name without the provider
	uint32_t loglevel = 0;
	std::vector<FieldInfo> fields;
};

} // namespace strata
#endif
