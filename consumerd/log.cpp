/*
 * log.cpp - strata-consumerd's log lines (log.h).
 */
#include "log.h"

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <ctime>

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

long test_ms(const char *name)
{
	const char *e = getenv(name);
	char *end = nullptr;
	const long ms = e && *e ? strtol(e, &end, 10) : 0L;
	return ms > 0 && ms <= 60000 && end && *end == '\0' ? ms : 0L;
}

void delay_for_tests(const char *name)
{
	const long ms = test_ms(name);
	if (ms == 0)
		return;
	struct timespec ts = {ms / 1000, ms % 1000 * 1000000L};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
	}
}

} // namespace daemon_impl
} // namespace strata
