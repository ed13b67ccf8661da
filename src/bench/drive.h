/* Drives a generated workload through an engine (include/tide.h only):
 * submits requests, steps until idle, releases finished requests, and sums
 * what each step did. Latencies go to the recorder, which must be the
 * engine's event callback context. */
#ifndef TIDE_BENCH_DRIVE_H
#define TIDE_BENCH_DRIVE_H

#include <stdint.h>

#include "base/status.h"
#include "bench/recorder.h"
#include "bench/workload.h"
#include "tide.h"

typedef struct tide_drive_result {
    double wall;          /* seconds from the first submission to idle */
    int64_t steps;
    int64_t sum_seqs;     /* sequences over all steps (mean batch = sum_seqs / steps) */
    int64_t sum_tokens;   /* tokens fed over all steps */
} tide_drive_result;

/* Submits requests [lo, hi) of w at once (slot = request index; greedy, no
 * stop tokens, so each generates exactly w->max_tokens), then steps until
 * the engine is idle. A rejected submission or a failed step fails the
 * call; requests that finish with an error are counted by the recorder. */
int tide_drive(tide_engine *e, tide_recorder *rec, const tide_workload *w, int64_t lo, int64_t hi,
               tide_drive_result *out, tide_status *st);

/* As tide_drive, with at most `window` requests in flight (0: all at
 * once): request i + window is submitted when one finishes, so each
 * request's TTFT counts from its own submission, not from a queue
 * (window 1: one request at a time, as `tide bench serve --concurrency 1`
 * sends them). */
int tide_drive_window(tide_engine *e, tide_recorder *rec, const tide_workload *w, int64_t lo, int64_t hi,
                      int64_t window, tide_drive_result *out, tide_status *st);

/* The second half of tide_drive, for callers that submitted their own
 * requests (slot = the recorder's): steps until idle, releasing finished
 * requests, adding to *out; out->wall is measured from t0
 * (tide_now_seconds() at the first submission). */
int tide_drive_until_idle(tide_engine *e, tide_recorder *rec, double t0, tide_drive_result *out, tide_status *st);

#endif
