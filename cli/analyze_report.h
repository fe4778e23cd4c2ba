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

} // namespace analyze
} // namespace strata
#endif
