/* Per-request latency recording from the engine's event callback
 * (include/tide.h): the time to first token (from the request's submission
 * to its first TOKEN event) and the inter-token latencies (between
 * consecutive TOKEN events of one request), plus the ids of requests that
 * finished during a step so the driver can release them.
 *
 *     tide_recorder rec; tide_recorder_init(&rec, n_requests, expected_tokens, &st);
 *     cfg.on_event = tide_recorder_on_event; cfg.event_ctx = &rec;
 *     ... req.user = tide_recorder_slot(i); tide_recorder_submitted(&rec, i); submit ...
 *     ... after each step: release rec.done[0 .. rec.n_done), rec.n_done = 0 ...
 *
 * Times are tide_now_seconds() (monotonic). All tokens of one step are
 * reported at the end of that step, so an inter-token latency is the
 * duration of the steps between two tokens of a request. */
#ifndef TIDE_BENCH_RECORDER_H
#define TIDE_BENCH_RECORDER_H

#include <stdint.h>

#include "base/status.h"
#include "tide.h"

typedef struct tide_recorder {
    int64_t n;              /* request slots */
    double *t_submit, *t_last;
    int64_t *n_tokens;      /* per slot */
    double *ttft;           /* [n_ttft] seconds, in order of first tokens */
    int64_t n_ttft;
    int64_t *ttft_slot;     /* [n_ttft] the slot of each */
    double *itl;            /* [n_itl] seconds */
    int64_t n_itl, cap_itl;
    tide_request_id *done;  /* finished since the driver last emptied it */
    int64_t n_done;
    int64_t n_finished, n_errors, n_tokens_total;
    char first_error[256];
    int oom;                /* an inter-token sample could not be stored */
} tide_recorder;

/* n request slots; itl_hint: expected inter-token samples (grows as needed). */
int tide_recorder_init(tide_recorder *r, int64_t n, int64_t itl_hint, tide_status *st);
void tide_recorder_free(tide_recorder *r);
/* The user pointer that identifies slot i in events. */
void *tide_recorder_slot(int64_t i);
/* Marks slot i as submitted now. */
void tide_recorder_submitted(tide_recorder *r, int64_t i);
/* The engine callback (ctx = the recorder). */
void tide_recorder_on_event(void *ctx, const tide_event *ev);

#endif
