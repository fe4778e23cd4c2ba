/*
 * tsan.h - STRATA_TSAN: defined when ThreadSanitizer instruments this
 * translation unit (GCC defines __SANITIZE_THREAD__, Clang has
 * __has_feature(thread_sanitizer)).  Code that ThreadSanitizer cannot
 * follow (inline asm, a deliberate racy read) chooses its other branch.
 */
#ifndef STRATA_TSAN_H
#define STRATA_TSAN_H

#if defined(__SANITIZE_THREAD__)
#define STRATA_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define STRATA_TSAN 1
#endif
#endif

#endif
