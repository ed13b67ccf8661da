/* Logging to stderr with a level set once at start (from TIDE_LOG or a flag).
 * Progress lines for long loads go through tide_progress. */
#ifndef TIDE_BASE_LOG_H
#define TIDE_BASE_LOG_H

#include <stdint.h>

typedef enum { TIDE_LOG_ERROR, TIDE_LOG_WARN, TIDE_LOG_INFO, TIDE_LOG_DEBUG } tide_log_level;

void tide_log_set_level(tide_log_level level);
tide_log_level tide_log_get_level(void);
void tide_log(tide_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define TIDE_ERROR(...) tide_log(TIDE_LOG_ERROR, __VA_ARGS__)
#define TIDE_WARN(...) tide_log(TIDE_LOG_WARN, __VA_ARGS__)
#define TIDE_INFO(...) tide_log(TIDE_LOG_INFO, __VA_ARGS__)
#define TIDE_DEBUG(...) tide_log(TIDE_LOG_DEBUG, __VA_ARGS__)

/* Progress of a long operation: "label: done/total (pct%)", rewritten in place on a
 * terminal, one line per ~10% otherwise. Call with done == total to finish. */
void tide_progress(const char *label, uint64_t done, uint64_t total);

double tide_now_seconds(void);

#endif
