// read_progress.cpp - see read_progress.h.
#include "read_progress.h"

#include "read_event.h"

#include <babeltrace2/babeltrace.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace strata {

// The time range of the traces (babeltrace2's "babeltrace.trace-infos"
// query on source.ctf.fs, which reads packet indexes only): the progress
// bar's scale, and the JSON output's zero.  False if unknown.
bool trace_range(const std::vector<std::string> &dirs, int64_t *begin, int64_t *end)
{
	const bt_plugin *ctf = nullptr;
	if (bt_plugin_find("ctf", BT_TRUE, BT_TRUE, BT_TRUE, BT_TRUE, BT_FALSE, &ctf) !=
	    BT_PLUGIN_FIND_STATUS_OK)
		return false;
	const bt_component_class_source *src =
		bt_plugin_borrow_source_component_class_by_name_const(ctf, "fs");
	bool any = false;
	*begin = INT64_MAX;
	*end = INT64_MIN;
	for (const std::string &d : dirs) {
		bt_value *params = bt_value_map_create();
		bt_value *inputs = nullptr;
		if (!params ||
		    bt_value_map_insert_empty_array_entry(params, "inputs", &inputs) !=
			    BT_VALUE_MAP_INSERT_ENTRY_STATUS_OK ||
		    bt_value_array_append_string_element(inputs, d.c_str()) !=
			    BT_VALUE_ARRAY_APPEND_ELEMENT_STATUS_OK) {
			bt_value_put_ref(params);
			continue;
		}
		bt_query_executor *q =
			bt_query_executor_create(bt_component_class_source_as_component_class_const(src),
						 "babeltrace.trace-infos", params);
		const bt_value *res = nullptr;
		if (q && bt_query_executor_query(q, &res) == BT_QUERY_EXECUTOR_QUERY_STATUS_OK && res &&
		    bt_value_is_array(res)) {
			for (uint64_t i = 0; i < bt_value_array_get_length(res); i++) {
				const bt_value *ti = bt_value_array_borrow_element_by_index_const(res, i);
				const bt_value *sis =
					bt_value_map_borrow_entry_value_const(ti, "stream-infos");
				if (!sis || !bt_value_is_array(sis))
					continue;
				for (uint64_t j = 0; j < bt_value_array_get_length(sis); j++) {
					const bt_value *range = bt_value_map_borrow_entry_value_const(
						bt_value_array_borrow_element_by_index_const(sis, j),
						"range-ns");
					const bt_value *b =
						range ? bt_value_map_borrow_entry_value_const(range, "begin")
						      : nullptr;
					const bt_value *e =
						range ? bt_value_map_borrow_entry_value_const(range, "end")
						      : nullptr;
					if (b && e && bt_value_is_signed_integer(b) &&
					    bt_value_is_signed_integer(e)) {
						*begin = std::min(*begin, bt_value_integer_signed_get(b));
						*end = std::max(*end, bt_value_integer_signed_get(e));
						any = true;
					}
				}
			}
		}
		if (const bt_error *err = bt_current_thread_take_error())
			bt_error_release(err); // no range: no bar, nothing worse
		bt_value_put_ref(res);
		bt_query_executor_put_ref(q);
		bt_value_put_ref(params);
	}
	bt_plugin_put_ref(ctf);
	return any && *end >= *begin;
}

Progress::Progress(const char *cmd, bool on, int64_t begin, int64_t end)
    : cmd_(cmd), on_(on), begin_(begin), end_(end)
{
}

void Progress::update(uint64_t events, int64_t ts)
{
	if (!on_ || (events & 0xffff))
		return;
	const auto now = std::chrono::steady_clock::now();
	if (now - last_ < std::chrono::milliseconds(100))
		return;
	last_ = now;
	double f = end_ > begin_ ? static_cast<double>(ts - begin_) / static_cast<double>(end_ - begin_) : 0;
	f = std::max(0.0, std::min(1.0, f));
	char bar[41];
	const int n = static_cast<int>(f * 40);
	for (int i = 0; i < 40; i++)
		bar[i] = i < n ? '#' : '.';
	bar[40] = '\0';
	std::fprintf(stderr, "\rstrata %s: [%s] %3d%%  %.1f M events", cmd_, bar, static_cast<int>(f * 100),
		     static_cast<double>(events) / 1e6);
	shown_ = true;
}

void Progress::done()
{
	if (shown_)
		std::fputs("\r\033[K", stderr);
}

Progress progress_for(const char *cmd, const std::vector<std::string> &dirs)
{
	int64_t begin = 0, end = 0;
	const bool ranged = trace_range(dirs, &begin, &end);
	return Progress(cmd, ranged && isatty(STDERR_FILENO), begin, end);
}

Progress progress_for(const char *cmd, rd::Source &src)
{
	int64_t begin = 0, end = 0;
	const bool ranged = isatty(STDERR_FILENO) && src.range(&begin, &end);
	return Progress(cmd, ranged, begin, end);
}

} // namespace strata
