/* Workload driver (drive.h). */
#include "bench/drive.h"

#include <string.h>

#include "base/log.h"

int tide_drive(tide_engine *e, tide_recorder *rec, const tide_workload *w, int64_t lo, int64_t hi,
               tide_drive_result *out, tide_status *st) {
    memset(out, 0, sizeof *out);
    if (lo < 0 || hi > w->n || lo >= hi || hi > rec->n)
        return tide_fail(st, TIDE_ERR_INVALID, "drive: requests %lld..%lld of %lld", (long long)lo, (long long)hi,
                         (long long)w->n);
    double t0 = tide_now_seconds();
    for (int64_t i = lo; i < hi; i++) {
        tide_request r = tide_request_default();
        r.prompt = w->prompt[i];
        r.n_prompt = w->n_prompt[i];
        r.sampling.temperature = 0;
        r.sampling.max_tokens = w->max_tokens;
        r.user = tide_recorder_slot(i);
        tide_request_id id;
        tide_recorder_submitted(rec, i);
        if (tide_engine_submit(e, &r, &id, st) != 0) return tide_fail_ctx(st, "request %lld", (long long)i);
    }
    return tide_drive_until_idle(e, rec, t0, out, st);
}

int tide_drive_until_idle(tide_engine *e, tide_recorder *rec, double t0, tide_drive_result *out, tide_status *st) {
    while (tide_engine_busy(e)) {
        rec->n_done = 0;
        if (tide_engine_step(e, st) != 0) return -1;
        tide_engine_stats s;
        tide_engine_get_stats(e, &s);
        out->steps++;
        out->sum_seqs += s.last_step_seqs;
        out->sum_tokens += s.last_step_tokens;
        for (int64_t k = 0; k < rec->n_done; k++) tide_engine_release(e, rec->done[k]);
        rec->n_done = 0;
    }
    out->wall = tide_now_seconds() - t0;
    return 0;
}
