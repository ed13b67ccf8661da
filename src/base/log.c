#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

/* The one process-wide setting tide keeps: how chatty stderr is. It is set once
 * at start by the front end and only read afterwards. */
static tide_log_level g_level = TIDE_LOG_INFO;

void tide_log_set_level(tide_log_level level) { g_level = level; }
tide_log_level tide_log_get_level(void) { return g_level; }

void tide_log(tide_log_level level, const char *fmt, ...) {
    if (level > g_level) return;
    static const char *names[] = {"error", "warn", "info", "debug"};
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "tide: %s: ", names[level]);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

void tide_progress(const char *label, uint64_t done, uint64_t total) {
    if (g_level < TIDE_LOG_INFO || total == 0) return;
    int pct = (int)(done * 100 / total);
    if (isatty(STDERR_FILENO)) {
        fprintf(stderr, "\r%s: %llu/%llu (%d%%)%s", label, (unsigned long long)done,
                (unsigned long long)total, pct, done >= total ? "\n" : "");
        fflush(stderr);
        return;
    }
    /* Not a terminal: print at most a line per 10%. */
    uint64_t prev = done ? (done - 1) * 10 / total : (uint64_t)-1;
    if (done >= total || done * 10 / total != prev)
        fprintf(stderr, "%s: %llu/%llu (%d%%)\n", label, (unsigned long long)done,
                (unsigned long long)total, pct);
}

double tide_now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
