/* Workload driver (drive.h). */
#include "bench/drive.h"

#include <string.h>

#include "base/log.h"

/* One step; releases the requests that finished in it and books the step.
 * Returns how many finished, or -1. */
static int64_t step_once(tide_engine *e, tide_recorder *rec, tide_drive_result *out, tide_status *st) {
    rec->n_done = 0;
    if (tide_engine_step(e, st) != 0) return -1;
    tide_engine_stats s;
    tide_engine_get_stats(e, &s);
    out->steps++;
    out->sum_seqs += s.last_step_seqs;
    out->sum_tokens += s.last_step_tokens;
    int64_t n = rec->n_done;
    for (int64_t k = 0; k < n; k++) tide_engine_release(e, rec->done[k]);
    rec->n_done = 0;
    return n;
}

int tide_drive(tide_engine *e, tide_recorder *rec, const tide_workload *w, int64_t lo, int64_t hi,
               tide_drive_result *out, tide_status *st) {
    return tide_drive_window(e, rec, w, lo, hi, 0, out, st);
}

int tide_drive_window(tide_engine *e, tide_recorder *rec, const tide_workload *w, int64_t lo, int64_t hi,
                      int64_t window, tide_drive_result *out, tide_status *st) {
    memset(out, 0, sizeof *out);
    if (lo < 0 || hi > w->n || lo >= hi || hi > rec->n)
        return tide_fail(st, TIDE_ERR_INVALID, "drive: requests %lld..%lld of %lld", (long long)lo, (long long)hi,
                         (long long)w->n);
    int64_t limit = window > 0 ? window : hi - lo, next = lo, in_flight = 0;
    double t0 = tide_now_seconds();
    for (;;) {
        for (; next < hi && in_flight < limit; next++, in_flight++) {
            tide_request r = tide_request_default();
            r.prompt = w->prompt[next];
            r.n_prompt = w->n_prompt[next];
            r.sampling.temperature = 0;
            r.sampling.max_tokens = w->max_tokens;
            r.user = tide_recorder_slot(next);
            tide_request_id id;
            tide_recorder_submitted(rec, next);
            if (tide_engine_submit(e, &r, &id, st) != 0) return tide_fail_ctx(st, "request %lld", (long long)next);
        }
        if (!tide_engine_busy(e)) break;
        int64_t done = step_once(e, rec, out, st);
        if (done < 0) return -1;
        in_flight -= done;
    }
    out->wall = tide_now_seconds() - t0;
    return 0;
}

int tide_drive_until_idle(tide_engine *e, tide_recorder *rec, double t0, tide_drive_result *out, tide_status *st) {
    while (tide_engine_busy(e))
        if (step_once(e, rec, out, st) < 0) return -1;
    out->wall = tide_now_seconds() - t0;
    return 0;
}
