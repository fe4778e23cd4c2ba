// analyze_report.h - render a lock-contention Report as text, JSON or a
// self-contained HTML page (inline SVG, no scripts, no network).
#ifndef STRATA_CLI_ANALYZE_REPORT_H
#define STRATA_CLI_ANALYZE_REPORT_H

#include <ostream>

#include "analyze_model.h"

namespace strata {
namespace analyze {

void write_text(std::ostream &o, const Report &r, const Options &opt);
void write_json(std::ostream &o, const Report &r, const Options &opt);
void write_html(std::ostream &o, const Report &r, const Options &opt);

// "12.3 us", "4.56 ms"...
std::string format_ns(double ns);

// A JSON string literal of s; s with HTML's special characters escaped.
std::string json_str(const std::string &s);
std::string html_esc(const std::string &s);

} // namespace analyze
} // namespace strata
#endif
