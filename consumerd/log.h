/*
 * log.h - strata-consumerd's log lines on stderr.
 *
 * Contract: g_verbose and g_quiet are set once by Daemon::run before any
 * other thread exists; every thread may log after that.
 */
#ifndef STRATA_CONSUMERD_LOG_H
#define STRATA_CONSUMERD_LOG_H

namespace strata {
namespace daemon_impl {

extern bool g_verbose;
extern bool g_quiet;
void logf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// Tests only: the milliseconds environment variable `name` says, 1 to
// 60000; 0 when it is unset, empty, not a number or out of that range.
long test_ms(const char *name);
// Tests only: the calling thread sleeps test_ms(name) ms (0: not at all),
// a daemon held up on a loaded machine at that point.
void delay_for_tests(const char *name);
#define VLOG(...)                          \
	do {                               \
		if (g_verbose)             \
			logf(__VA_ARGS__); \
	} while (0)
#define INFO(...)                          \
	do {                               \
		if (!g_quiet)              \
			logf(__VA_ARGS__); \
	} while (0)

} // namespace daemon_impl
} // namespace strata
#endif
