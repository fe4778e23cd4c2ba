// analyze_report.h - render a lock-contention Report as text, JSON or a
// self-contained HTML page (inline SVG, no scripts, no network).
#ifndef STRATA_CLI_ANALYZE_REPORT_H
#define STRATA_CLI_ANALYZE_REPORT_H

#include <ostream>
#include <string>
#include <vector>

#include "analyze_model.h"

namespace strata {
namespace analyze {

void write_text(std::ostream &o, const Report &r, const Options &opt);
void write_json(std::ostream &o, const Report &r, const Options &opt);
void write_html(std::ostream &o, const Report &r, const Options &opt);

// For each object whose addresses had no symbol: a line saying so (its
// build id, where its debug file would be), then how to get the symbols.
// html: for the page (which names no web address).
std::vector<std::string> debug_hints(const Report &r, bool html);

// "12.3 us", "4.56 ms"...
std::string format_ns(double ns);

// s with HTML's special characters escaped.
std::string html_esc(const std::string &s);

} // namespace analyze
} // namespace strata
#endif
