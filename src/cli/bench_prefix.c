/* tide bench prefix: a shared-prefix workload (every prompt = one common
 * prefix + a suffix of its own) run twice through the engine, with the
 * prefix cache off and on, to measure what the cache buys: hit rate and
 * time to first token. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench/drive.h"
#include "bench/model_spec.h"
#include "bench/stats.h"
#include "bench/workload.h"
#include "cli/bench.h"
#include "cli/cli.h"
#include "engine/engine.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tide bench prefix --model DIR|synth:SHAPE [options]\n"
            "\n"
            "N requests whose prompts are one shared prefix of L random tokens plus S tokens of\n"
            "their own, greedy, G tokens generated each, run with the prefix cache off and then\n"
            "on (a fresh engine each time). Request 0 runs alone first, so that its pages are\n"
            "cached; the other N-1 are then submitted together. Prints, for both runs, the\n"
            "engine's prefix hit rate (hit tokens / looked-up tokens, request 0 included) and\n"
            "the TTFT (submission to first token event) mean, p50 and p99 of requests 1..N-1,\n"
            "their wall time, and the speed-up off/on.\n"
            "\n"
            "options:\n"
            "  --model SPEC         checkpoint directory, or synth:tiny|small|flash|flash-ep8\n"
            "  --requests N         requests, at least 2 (default 8)\n"
            "  --shared L           shared prefix tokens (default 256)\n"
            "  --suffix S           tokens of each request's own (default 16)\n"
            "  --gen G              tokens to generate per request (default 8)\n"
            "  --page-tokens N      prefix-cache page size (default 0: the engine's choice)\n"
            "  --prefix-replay N    tokens recomputed before a hit (default 140; -1 = all)\n");
    tide_bench_engine_help(f);
}

typedef struct prefix_opts {
    const char *model;
    int64_t requests, shared, suffix, gen, page_tokens, replay;
    bench_engine_opts eng;
} prefix_opts;

typedef struct prefix_result {
    double hit_rate, mean, p50, p99, wall;
    int64_t hits, hit_tokens, page_tokens;
} prefix_result;

/* One run: a fresh engine with the cache on or off. */
static int run_once(const prefix_opts *o, const tide_model *m, const tide_workload *w, int cache, prefix_result *res,
                    tide_status *st) {
    tide_recorder rec;
    if (tide_recorder_init(&rec, w->n, w->n * w->max_tokens, st) != 0) return -1;
    tide_engine_config c = tide_bench_engine_config(&o->eng);
    c.on_event = tide_recorder_on_event;
    c.event_ctx = &rec;
    c.prefix_cache = cache;
    c.page_tokens = o->page_tokens;
    c.prefix_replay = o->replay;
    tide_engine *e = NULL;
    tide_drive_result d0, d1;
    int rc = -1;
    double *t = malloc((size_t)w->n * sizeof *t);
    if (!t) {
        tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (tide_engine_create_with_model(&c, m, &e, st) != 0 || tide_drive(e, &rec, w, 0, 1, &d0, st) != 0 ||
        tide_drive(e, &rec, w, 1, w->n, &d1, st) != 0)
        goto done;
    if (rec.n_errors) {
        tide_fail(st, TIDE_ERR_INTERNAL, "%lld requests failed; the first: %s", (long long)rec.n_errors, rec.first_error);
        goto done;
    }
    int64_t n = 0;
    for (int64_t i = 0; i < rec.n_ttft; i++)
        if (rec.ttft_slot[i] != 0) t[n++] = rec.ttft[i];
    tide_stats_sort(t, n);
    tide_engine_stats s;
    tide_engine_get_stats(e, &s);
    *res = (prefix_result){s.prefix_hit_rate, tide_stats_mean(t, n), tide_stats_percentile(t, n, 50),
                           tide_stats_percentile(t, n, 99), d1.wall, s.prefix_hits, s.prefix_hit_tokens,
                           s.page_tokens};
    rc = 0;
done:
    tide_engine_destroy(e);
    tide_recorder_free(&rec);
    free(t);
    return rc;
}

static void print_row(const char *name, const prefix_result *r) {
    printf("  %-5s %8.3f %6lld %10lld %11.2f %9.2f %9.2f %9.3f\n", name, r->hit_rate, (long long)r->hits,
           (long long)r->hit_tokens, 1e3 * r->mean, 1e3 * r->p50, 1e3 * r->p99, r->wall);
}

int tide_bench_prefix(int argc, char **argv) {
    prefix_opts o = {.requests = 8, .shared = 256, .suffix = 16, .gen = 8};
    tide_bench_engine_defaults(&o.eng);
    o.replay = tide_engine_config_default().prefix_replay;
    bench_opt t[7 + BENCH_ENGINE_OPTS + 1] = {
        {"--model", BENCH_STR, &o.model, 0, 0},
        {"--requests", BENCH_INT, &o.requests, 2, 100000},
        {"--shared", BENCH_INT, &o.shared, 0, 1 << 22},
        {"--suffix", BENCH_INT, &o.suffix, 0, 1 << 22},
        {"--gen", BENCH_INT, &o.gen, 1, 1 << 20},
        {"--page-tokens", BENCH_INT, &o.page_tokens, 0, 1 << 20},
        {"--prefix-replay", BENCH_INT, &o.replay, -1, 1 << 22},
    };
    int nt = 7;
    tide_bench_engine_table(&o.eng, t, &nt);
    int rc = tide_bench_parse("prefix", argc, argv, t, usage);
    if (rc >= 0) return rc;
    if (!o.model) return tide_bench_usage_error("prefix", usage, "--model is required");
    if (o.shared + o.suffix < 1) return tide_bench_usage_error("prefix", usage, "--shared + --suffix must be >= 1");

    tide_status st = {0};
    tide_model *m = NULL;
    tide_workload w = {0};
    prefix_result off, on;
    rc = TIDE_EXIT_FAIL;
    if (tide_bench_load_model(o.model, (int)o.eng.threads, &m, &st) != 0 ||
        tide_workload_shared_prefix(&w, o.requests, o.shared, o.suffix, o.gen, m->cfg.text.vocab_size,
                                    m->cfg.image_token_id, (uint64_t)o.eng.seed, &st) != 0 ||
        run_once(&o, m, &w, 0, &off, &st) != 0 || run_once(&o, m, &w, 1, &on, &st) != 0)
        goto done;
    printf("tide bench prefix: model %s, %lld requests of %lld shared + %lld own tokens, %lld generated each, "
           "page %lld tokens, replay %lld, threads %lld, seed %lld\n",
           o.model, (long long)o.requests, (long long)o.shared, (long long)o.suffix, (long long)o.gen,
           (long long)on.page_tokens, (long long)o.replay, (long long)o.eng.threads, (long long)o.eng.seed);
    printf("  (request 0 runs alone first; TTFT and wall over requests 1..%lld)\n", (long long)(o.requests - 1));
    printf("  %-5s %8s %6s %10s %11s %9s %9s %9s\n", "cache", "hit rate", "hits", "hit tokens", "TTFT mean", "p50",
           "p99 (ms)", "wall (s)");
    print_row("off", &off);
    print_row("on", &on);
    printf("  speed-up (off / on): TTFT mean %.2fx, p50 %.2fx, p99 %.2fx, wall %.2fx\n", off.mean / on.mean,
           off.p50 / on.p50, off.p99 / on.p99, off.wall / on.wall);
    rc = TIDE_EXIT_OK;
done:
    if (rc != TIDE_EXIT_OK) fprintf(stderr, "tide bench prefix: %s\n", st.msg);
    tide_model_free(m);
    tide_workload_free(&w);
    return rc;
}
