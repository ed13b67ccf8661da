/* tide bench decode / prefill: one forward step timed on the CPU backend,
 * printed next to its roofline (bench/roofline.h) under ceilings measured
 * on this machine at start (bench/ceilings.h).
 *
 * decode: B sequences whose caches hold C tokens of synthetic contents
 * (bench/ctx_fill.h: nothing is prefilled), then warm-up steps and timed
 * steps of one token per sequence; the fill stops W tokens short of C so
 * that the first timed step runs at context C. prefill: a fresh sequence
 * of L random tokens through tide_forward, warm-up then timed runs. Both
 * report the median. */
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "bench/ceilings.h"
#include "bench/ctx_fill.h"
#include "bench/model_spec.h"
#include "bench/roofline.h"
#include "bench/stats.h"
#include "bench/workload.h"
#include "cli/bench.h"
#include "cli/cli.h"
#include "model/forward.h"

static void usage_decode(FILE *f) {
    fprintf(f,
            "usage: tide bench decode --model DIR|synth:SHAPE [options]\n"
            "\n"
            "Times one decode step (one new token for each of B sequences) at context C\n"
            "on the CPU backend. The caches are filled with synthetic contents of C tokens\n"
            "(random values of the real value sets; no prefill is run), W warm-up steps\n"
            "run, then N timed steps; the median is reported with tokens/s, next to the\n"
            "step's roofline: bytes and FLOPs from the model config (docs/perf.md) under\n"
            "the copy bandwidth and FP8 GEMM rate measured on this machine at start.\n"
            "\n"
            "options:\n"
            "  --model SPEC       checkpoint directory, or synth:tiny|small|flash|flash-ep8\n"
            "  --batch B          sequences (default 1)\n"
            "  --context C        cached tokens per sequence at the first timed step (default 1024)\n"
            "  --steps N          timed steps (default 5)\n"
            "  --warmup W         warm-up steps (default 2)\n"
            "  --kv f32|packed    cache dtypes the roofline charges (default packed: FP8 window,\n"
            "                     FP4 latents and keys, as the pools store them; f32 = 4 B a value)\n"
            "  --threads N        worker threads (default 2)\n"
            "  --seed N           synthetic contents and tokens (default 1)\n"
            "  --copy-mib N       buffer of the bandwidth measurement (default 64)\n"
            "  --canonical-layout the chunking-invariant attention layout (docs/model.md)\n"
            "  --backend cpu|cuda cpu (default); cuda: the device-resident step on the GPU\n"
            "                     ('tide bench decode --backend cuda --help')\n");
}

static void usage_prefill(FILE *f) {
    fprintf(f,
            "usage: tide bench prefill --model DIR|synth:SHAPE [options]\n"
            "\n"
            "Times the prefill of one sequence of L random tokens (one tide_forward call,\n"
            "logits for the last row) on the CPU backend: W warm-up runs, then N timed\n"
            "runs, each on a fresh cache; the median is reported with tokens/s, next to the\n"
            "step's roofline (docs/perf.md) under ceilings measured on this machine at start.\n"
            "\n"
            "options:\n"
            "  --model SPEC       checkpoint directory, or synth:tiny|small|flash|flash-ep8\n"
            "  --len L            prompt tokens (default 512)\n"
            "  --steps N          timed runs (default 3)\n"
            "  --warmup W         warm-up runs (default 1)\n"
            "  --kv f32|packed    cache dtypes the roofline charges (default packed)\n"
            "  --threads N        worker threads (default 2)\n"
            "  --seed N           prompt tokens (default 1)\n"
            "  --copy-mib N       buffer of the bandwidth measurement (default 64)\n"
            "  --canonical-layout the chunking-invariant attention layout (docs/model.md)\n"
            "  --backend cpu|cuda cpu (default); cuda: the device-resident step on the GPU\n"
            "                     ('tide bench prefill --backend cuda --help')\n");
}

typedef struct step_opts {
    const char *model, *kv, *backend;
    int64_t batch, context, len, steps, warmup, threads, seed, copy_mib;
    int canonical, decode;
} step_opts;

/* The pool blocks `batch` sequences of `tokens` positions need (plus slack). */
static int64_t blocks_needed(const tide_model *m, int64_t batch, int64_t tokens, int kv_block) {
    int64_t n = 16;
    for (int k = 0; k < m->n_kv_src; k++) {
        int r = m->cfg.roles[m->kv_src_layer[k]].compress_ratio;
        n += batch * ((tokens / r + kv_block - 1) / kv_block + 1);
    }
    return n;
}

static int setup(const step_opts *o, const tide_model *m, int64_t tokens, tide_fwd_ctx **fx, tide_ceilings *ceil,
                 tide_status *st) {
    tide_fwd_opts fo = tide_fwd_default_opts();
    fo.ref_layout = !o->canonical;
    fo.kv_max_blocks = blocks_needed(m, o->decode ? o->batch : 1, tokens, fo.kv_block);
    if (tide_fwd_ctx_create(m, tide_cpu_ops(), (int)o->threads, &fo, fx, st) != 0) return -1;
    const tide_text_config *x = &m->cfg.text;
    int64_t out = x->num_attention_heads * x->head_dim;
    if (out > 4096) out = 4096; /* the widest attention GEMM, capped for the CPU */
    return tide_measure_ceilings(tide_cpu_ops(), tide_fwd_pool(*fx), o->copy_mib << 20, out, x->q_lora_rank, 64,
                                 ceil, st);
}

static void print_head(const step_opts *o, const tide_ceilings *c) {
    char a[32], b[32];
    if (o->decode)
        printf("tide bench decode: model %s, batch %lld, context %lld (synthetic cache contents), threads %lld, seed %lld\n",
               o->model, (long long)o->batch, (long long)o->context, (long long)o->threads, (long long)o->seed);
    else
        printf("tide bench prefill: model %s, prompt %lld tokens, threads %lld, seed %lld\n", o->model,
               (long long)o->len, (long long)o->threads, (long long)o->seed);
    printf("  ceilings         copy %s (memcpy of %lld MiB, read + write), FP8 GEMM %s (linear %lldx%lld, %lld rows); measured\n",
           tide_bench_si(c->copy_bytes_per_s, "B/s", a, sizeof a), (long long)o->copy_mib,
           tide_bench_si(c->gemm_flops_per_s, "FLOP/s", b, sizeof b), (long long)c->gemm_out, (long long)c->gemm_in,
           (long long)c->gemm_rows);
}

static void print_times(const step_opts *o, double *t, int64_t n, int64_t tokens_per_step) {
    tide_stats_sort(t, n);
    double med = tide_stats_percentile(t, n, 50);
    printf("  step             median %.3f ms (min %.3f, max %.3f; %lld timed after %lld warm-up)\n", 1e3 * med,
           1e3 * t[0], 1e3 * t[n - 1], (long long)n, (long long)o->warmup);
    printf("  throughput       %.1f tokens/s\n", (double)tokens_per_step / med);
}

static int run_decode(const step_opts *o, const tide_model *m, tide_fwd_ctx *fx, double *times, tide_status *st) {
    int64_t B = o->batch, V = m->cfg.text.vocab_size;
    int64_t fill = o->context >= o->warmup ? o->context - o->warmup : 0;
    tide_seq_cache *sc = calloc((size_t)B, sizeof *sc);
    tide_step_seq *ss = calloc((size_t)B, sizeof *ss);
    int32_t *tok = calloc((size_t)B, sizeof *tok);
    float *logits = malloc((size_t)(B * V) * sizeof(float));
    int64_t n_init = 0;
    int rc = -1;
    if (!sc || !ss || !tok || !logits) {
        tide_fail(st, TIDE_ERR_NOMEM, "out of memory for a batch of %lld", (long long)B);
        goto done;
    }
    for (; n_init < B; n_init++) {
        if (tide_fwd_seq_init(fx, &sc[n_init], st) != 0) goto done;
        if (tide_bench_fill_context(fx, &sc[n_init], fill, (uint64_t)o->seed + (uint64_t)n_init, st) != 0) {
            n_init++;
            goto done;
        }
    }
    for (int64_t s = 0; s < o->warmup + o->steps; s++) {
        for (int64_t b = 0; b < B; b++) {
            tok[b] = tide_bench_token((uint64_t)o->seed, (uint64_t)(s * B + b), V, m->cfg.image_token_id);
            ss[b] = (tide_step_seq){.cache = &sc[b], .tokens = &tok[b], .n_tokens = 1, .logits = TIDE_LOGITS_LAST};
        }
        tide_step_out out = {.logits = logits};
        double t0 = tide_now_seconds();
        if (tide_forward(fx, ss, (int)B, &out, st) != 0) goto done;
        if (s >= o->warmup) times[s - o->warmup] = tide_now_seconds() - t0;
    }
    rc = 0;
done:
    for (int64_t b = 0; b < n_init; b++) tide_fwd_seq_free(fx, &sc[b]);
    free(sc);
    free(ss);
    free(tok);
    free(logits);
    return rc;
}

static int run_prefill(const step_opts *o, const tide_model *m, tide_fwd_ctx *fx, double *times, tide_status *st) {
    int64_t L = o->len, V = m->cfg.text.vocab_size;
    int32_t *tok = malloc((size_t)L * sizeof *tok);
    float *logits = malloc((size_t)V * sizeof(float));
    int rc = 0;
    if (!tok || !logits) rc = tide_fail(st, TIDE_ERR_NOMEM, "out of memory for %lld tokens", (long long)L);
    for (int64_t i = 0; rc == 0 && i < L; i++)
        tok[i] = tide_bench_token((uint64_t)o->seed, (uint64_t)i, V, m->cfg.image_token_id);
    for (int64_t s = 0; rc == 0 && s < o->warmup + o->steps; s++) {
        tide_seq_cache sc;
        if ((rc = tide_fwd_seq_init(fx, &sc, st)) != 0) break;
        tide_step_seq ss = {.cache = &sc, .tokens = tok, .n_tokens = L, .logits = TIDE_LOGITS_LAST};
        tide_step_out out = {.logits = logits};
        double t0 = tide_now_seconds();
        rc = tide_forward(fx, &ss, 1, &out, st);
        if (s >= o->warmup) times[s - o->warmup] = tide_now_seconds() - t0;
        tide_fwd_seq_free(fx, &sc);
    }
    free(tok);
    free(logits);
    return rc;
}

static int parse(int argc, char **argv, step_opts *o) {
    memset(o, 0, sizeof *o);
    o->decode = !strcmp(argv[0], "decode");
    o->batch = 1;
    o->context = 1024;
    o->len = 512;
    o->steps = o->decode ? 5 : 3;
    o->warmup = o->decode ? 2 : 1;
    o->threads = 2;
    o->seed = 1;
    o->copy_mib = 64;
    o->kv = "packed";
    void (*usage)(FILE *) = o->decode ? usage_decode : usage_prefill;
    bench_opt t[16] = {
        {"--model", BENCH_STR, &o->model, 0, 0},
        {"--steps", BENCH_INT, &o->steps, 1, 100000},
        {"--warmup", BENCH_INT, &o->warmup, 0, 100000},
        {"--kv", BENCH_STR, &o->kv, 0, 0},
        {"--threads", BENCH_INT, &o->threads, 1, 256},
        {"--seed", BENCH_INT, &o->seed, 0, INT64_MAX},
        {"--copy-mib", BENCH_INT, &o->copy_mib, 1, 16384},
        {"--canonical-layout", BENCH_FLAG, &o->canonical, 0, 0},
        {"--backend", BENCH_STR, &o->backend, 0, 0},
    };
    if (o->decode) {
        t[9] = (bench_opt){"--batch", BENCH_INT, &o->batch, 1, 4096};
        t[10] = (bench_opt){"--context", BENCH_INT, &o->context, 0, 1 << 24};
    } else {
        t[9] = (bench_opt){"--len", BENCH_INT, &o->len, 1, 1 << 24};
    }
    int rc = tide_bench_parse(argv[0], argc, argv, t, usage);
    if (rc >= 0) return rc;
    if (!o->model) return tide_bench_usage_error(argv[0], usage, "--model is required");
    if (strcmp(o->kv, "f32") && strcmp(o->kv, "packed"))
        return tide_bench_usage_error(argv[0], usage, "--kv: '%s' is neither f32 nor packed", o->kv);
    if (o->backend && strcmp(o->backend, "cpu"))
        return tide_bench_usage_error(argv[0], usage, "--backend: '%s' is neither cpu nor cuda", o->backend);
    return -1;
}

int tide_bench_step(int argc, char **argv) {
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--backend") && !strcmp(argv[i + 1], "cuda")) return tide_bench_step_cuda(argc, argv);
    step_opts o;
    int rc = parse(argc, argv, &o);
    if (rc >= 0) return rc;
    tide_status st = {0};
    tide_model *m = NULL;
    tide_fwd_ctx *fx = NULL;
    tide_ceilings ceil;
    double *times = calloc((size_t)o.steps, sizeof *times);
    rc = TIDE_EXIT_FAIL;
    if (!times) {
        tide_fail(&st, TIDE_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (tide_bench_load_model(o.model, (int)o.threads, &m, &st) != 0) goto done;
    int64_t tokens = o.decode ? o.context + o.steps + o.warmup + 1 : o.len;
    if (tokens > m->cfg.text.max_position_embeddings) {
        tide_fail(&st, TIDE_ERR_INVALID, "%lld positions exceed the model's context (%lld)", (long long)tokens,
                  (long long)m->cfg.text.max_position_embeddings);
        goto done;
    }
    if (setup(&o, m, tokens, &fx, &ceil, &st) != 0) goto done;
    if ((o.decode ? run_decode(&o, m, fx, times, &st) : run_prefill(&o, m, fx, times, &st)) != 0) goto done;
    tide_roof_kv kv = !strcmp(o.kv, "packed") ? tide_roof_kv_packed() : tide_roof_kv_f32();
    tide_roof r;
    /* the context of the first timed step (C, unless C < W: the fill is empty) */
    int64_t ctx = o.context >= o.warmup ? o.context : o.warmup;
    if ((o.decode ? tide_roof_decode(&m->cfg, &kv, o.batch, ctx, &r, &st)
                  : tide_roof_prefill(&m->cfg, &kv, o.len, &r, &st)) != 0)
        goto done;
    print_head(&o, &ceil);
    print_times(&o, times, o.steps, o.decode ? o.batch : o.len);
    tide_bench_print_roofline(&r, o.kv, ceil.copy_bytes_per_s, ceil.gemm_flops_per_s,
                              tide_stats_percentile(times, o.steps, 50));
    rc = TIDE_EXIT_OK;
done:
    if (rc != TIDE_EXIT_OK) fprintf(stderr, "tide bench %s: %s\n", argv[0], st.msg);
    tide_fwd_ctx_free(fx);
    tide_model_free(m);
    free(times);
    return rc;
}
