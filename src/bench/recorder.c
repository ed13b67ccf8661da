/* Latency recording from engine events (recorder.h). */
#include "bench/recorder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"

int tide_recorder_init(tide_recorder *r, int64_t n, int64_t itl_hint, tide_status *st) {
    memset(r, 0, sizeof *r);
    if (n < 1) return tide_fail(st, TIDE_ERR_INVALID, "recorder: %lld requests", (long long)n);
    r->n = n;
    r->cap_itl = itl_hint > 16 ? itl_hint : 16;
    r->t_submit = calloc((size_t)n, sizeof(double));
    r->t_last = calloc((size_t)n, sizeof(double));
    r->n_tokens = calloc((size_t)n, sizeof(int64_t));
    r->ttft = calloc((size_t)n, sizeof(double));
    r->ttft_slot = calloc((size_t)n, sizeof(int64_t));
    r->done = calloc((size_t)n, sizeof(tide_request_id));
    r->itl = malloc((size_t)r->cap_itl * sizeof(double));
    if (!r->t_submit || !r->t_last || !r->n_tokens || !r->ttft || !r->ttft_slot || !r->done || !r->itl) {
        tide_recorder_free(r);
        return tide_fail(st, TIDE_ERR_NOMEM, "recorder: out of memory for %lld requests", (long long)n);
    }
    return 0;
}

void tide_recorder_free(tide_recorder *r) {
    if (!r) return;
    free(r->t_submit);
    free(r->t_last);
    free(r->n_tokens);
    free(r->ttft);
    free(r->ttft_slot);
    free(r->done);
    free(r->itl);
    memset(r, 0, sizeof *r);
}

void *tide_recorder_slot(int64_t i) { return (void *)(intptr_t)i; }

void tide_recorder_submitted(tide_recorder *r, int64_t i) {
    if (i >= 0 && i < r->n) r->t_submit[i] = tide_now_seconds();
}

static void add_itl(tide_recorder *r, double dt) {
    if (r->n_itl == r->cap_itl) {
        double *p = realloc(r->itl, (size_t)(2 * r->cap_itl) * sizeof(double));
        if (!p) {
            r->oom = 1;
            return;
        }
        r->itl = p;
        r->cap_itl *= 2;
    }
    r->itl[r->n_itl++] = dt;
}

void tide_recorder_on_event(void *ctx, const tide_event *ev) {
    tide_recorder *r = ctx;
    int64_t i = (int64_t)(intptr_t)ev->user;
    if (i < 0 || i >= r->n) return; /* not one of ours */
    double now = tide_now_seconds();
    if (ev->kind == TIDE_EVENT_TOKEN) {
        if (r->n_tokens[i] == 0) {
            r->ttft_slot[r->n_ttft] = i;
            r->ttft[r->n_ttft++] = now - r->t_submit[i];
        } else {
            add_itl(r, now - r->t_last[i]);
        }
        r->t_last[i] = now;
        r->n_tokens[i]++;
        r->n_tokens_total++;
    } else if (ev->kind == TIDE_EVENT_FINISHED) {
        if (ev->reason == TIDE_FINISH_ERROR) {
            if (!r->n_errors) snprintf(r->first_error, sizeof r->first_error, "%s", ev->error ? ev->error : "error");
            r->n_errors++;
        }
        if (r->n_done < r->n) r->done[r->n_done++] = ev->id;
        r->n_finished++;
    }
}
