/*
 * names.h - how trace directories and files are named, shared by the
 * consumer daemon and the `strata` command.
 */
#ifndef STRATA_CONTROL_NAMES_H
#define STRATA_CONTROL_NAMES_H

#include <string>

namespace strata {

// Local time now as YYYYMMDD-HHMMSS (LTTng's directory date format).
std::string local_timestamp();
// A name usable as one path component: [A-Za-z0-9._-], not starting with '.'.
std::string file_safe(const std::string &s);

} // namespace strata
#endif
