/*
 * log.cpp - strata-consumerd's log lines (log.h).
 */
#include "log.h"

#include <cstdarg>
#include <cstdio>

namespace strata {
namespace daemon_impl {

bool g_verbose = false;
bool g_quiet = false;

void logf(const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	fprintf(stderr, "strata-consumerd: %s\n", buf);
}

} // namespace daemon_impl
} // namespace strata
