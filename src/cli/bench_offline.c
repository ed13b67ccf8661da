/* tide bench offline: throughput and latency of a generated workload
 * through the public engine API (include/tide.h), timestamps from the
 * event callback (bench/recorder.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "bench/drive.h"
#include "bench/model_spec.h"
#include "bench/stats.h"
#include "bench/workload.h"
#include "cli/bench.h"
#include "cli/cli.h"
#include "engine/engine.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tide bench offline --model DIR|synth:SHAPE [options]\n"
            "\n"
            "Submits a generated workload to the engine at once and steps until it is done:\n"
            "N requests with random prompts (lengths uniform in A..B) and greedy decoding of\n"
            "exactly G tokens each (no stop tokens). Prints requests/s, prompt and generated\n"
            "tokens/s over the wall time from the first submission to the end (model load\n"
            "excluded), TTFT p50/p90/p99 (submission to first token event), inter-token\n"
            "latency p50/p99, steps and the mean batch. Reading a JSONL workload (the\n"
            "format of 'tide run --input') is not supported yet. The prefix cache is on,\n"
            "as in the engine's default (random prompts share no pages).\n"
            "\n"
            "options:\n"
            "  --model SPEC         checkpoint directory, or synth:tiny|small|flash|flash-ep8\n"
            "  --requests N         requests (default 16)\n"
            "  --prompt-len A[-B]   prompt tokens, uniform in A..B (default 16-64)\n"
            "  --gen G              tokens to generate per request (default 16)\n");
    tide_bench_engine_help(f);
}

typedef struct offline_opts {
    const char *model;
    int64_t requests, len[2], gen;
    bench_engine_opts eng;
} offline_opts;

static void print_ms(const char *label, double *v, int64_t n, const double *ps, int nps) {
    tide_stats_sort(v, n);
    printf("  %-16s", label);
    for (int i = 0; i < nps; i++) printf(" p%g %.2f", ps[i], 1e3 * tide_stats_percentile(v, n, ps[i]));
    printf("  (ms, %lld samples)\n", (long long)n);
}

static void report(const offline_opts *o, const tide_workload *w, tide_recorder *rec, const tide_drive_result *d) {
    double wall = d->wall > 0 ? d->wall : 1e-9;
    printf("tide bench offline: model %s, %lld requests, prompt %lld-%lld tokens (%lld in all), %lld generated each, "
           "seed %lld, threads %lld\n",
           o->model, (long long)o->requests, (long long)o->len[0], (long long)o->len[1], (long long)w->total_prompt,
           (long long)o->gen, (long long)o->eng.seed, (long long)o->eng.threads);
    printf("  wall             %.3f s\n", wall);
    printf("  requests/s       %.3f\n", (double)rec->n_finished / wall);
    printf("  prompt tok/s     %.1f\n", (double)w->total_prompt / wall);
    printf("  generated tok/s  %.1f (%lld tokens)\n", (double)rec->n_tokens_total / wall,
           (long long)rec->n_tokens_total);
    static const double p3[] = {50, 90, 99}, p2[] = {50, 99};
    print_ms("TTFT", rec->ttft, rec->n_ttft, p3, 3);
    print_ms("inter-token", rec->itl, rec->n_itl, p2, 2);
    printf("  steps            %lld, mean batch %.2f sequences (%.1f tokens)\n", (long long)d->steps,
           d->steps ? (double)d->sum_seqs / (double)d->steps : 0.0,
           d->steps ? (double)d->sum_tokens / (double)d->steps : 0.0);
}

int tide_bench_offline(int argc, char **argv) {
    offline_opts o = {.requests = 16, .len = {16, 64}, .gen = 16};
    tide_bench_engine_defaults(&o.eng);
    bench_opt t[4 + BENCH_ENGINE_OPTS + 1] = {
        {"--model", BENCH_STR, &o.model, 0, 0},
        {"--requests", BENCH_INT, &o.requests, 1, 1000000},
        {"--prompt-len", BENCH_RANGE, o.len, 1, 1 << 24},
        {"--gen", BENCH_INT, &o.gen, 1, 1 << 24},
    };
    int nt = 4;
    tide_bench_engine_table(&o.eng, t, &nt);
    int rc = tide_bench_parse("offline", argc, argv, t, usage);
    if (rc >= 0) return rc;
    if (!o.model) return tide_bench_usage_error("offline", usage, "--model is required");

    tide_status st = {0};
    tide_model *m = NULL;
    tide_engine *e = NULL;
    tide_workload w = {0};
    tide_recorder rec = {0};
    tide_drive_result d;
    rc = TIDE_EXIT_FAIL;
    if (tide_bench_load_model(o.model, (int)o.eng.threads, &m, &st) != 0) goto done;
    if (tide_workload_random(&w, o.requests, o.len[0], o.len[1], o.gen, m->cfg.text.vocab_size,
                             m->cfg.image_token_id, (uint64_t)o.eng.seed, &st) != 0 ||
        tide_recorder_init(&rec, o.requests, o.requests * o.gen, &st) != 0)
        goto done;
    tide_engine_config c = tide_bench_engine_config(&o.eng);
    c.on_event = tide_recorder_on_event;
    c.event_ctx = &rec;
    if (tide_engine_create_with_model(&c, m, &e, &st) != 0) goto done;
    if (tide_drive(e, &rec, &w, 0, w.n, &d, &st) != 0) goto done;
    if (rec.n_errors) {
        tide_fail(&st, TIDE_ERR_INTERNAL, "%lld requests failed; the first: %s", (long long)rec.n_errors,
                  rec.first_error);
        goto done;
    }
    report(&o, &w, &rec, &d);
    rc = TIDE_EXIT_OK;
done:
    if (rc != TIDE_EXIT_OK) fprintf(stderr, "tide bench offline: %s\n", st.msg);
    tide_engine_destroy(e);
    tide_model_free(m);
    tide_workload_free(&w);
    tide_recorder_free(&rec);
    return rc;
}
