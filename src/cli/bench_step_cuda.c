/* tide bench decode|prefill --backend cuda: the device-resident composed
 * step (backend/cuda/dev_step.h) timed with CUDA events, next to its
 * roofline under ceilings measured on the GPU at start (tide's copy kernel
 * over 1 GiB; the FP8 GEMM rate of tide's wgmma kernel at 8192^3, or the
 * rate given with --gemm-tflops). Built only where the CUDA backend is
 * (TIDE_HAVE_CUDA); elsewhere the mode says so. */
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "bench/roofline.h"
#include "bench/stats.h"
#include "cli/bench.h"
#include "cli/cli.h"
#include "model/config.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tide bench decode|prefill --backend cuda --model synth:SHAPE [options]\n"
            "\n"
            "Times one step of the device-resident composed step on the GPU: every weight of\n"
            "SHAPE generated in device memory at its stored dtype, KV pools of the context\n"
            "filled with synthetic contents, and per layer the sequence of tide's CUDA\n"
            "kernels that the model's step runs (docs/perf.md says what it is and is not:\n"
            "the values are random and the caches f32). decode: B rows at context C, one\n"
            "step captured as a CUDA graph and replayed (--no-graph: launched eagerly).\n"
            "prefill: one sequence of L tokens. W warm-up then N timed steps (CUDA events);\n"
            "the median is printed with tokens/s next to the step's roofline.\n"
            "\n"
            "options:\n"
            "  --model synth:SHAPE  tiny|small|flash|flash-ep8 (a directory is not supported yet)\n"
            "  --batch B            decode rows (default 1)\n"
            "  --context C          decode: cached tokens per sequence (default 4096)\n"
            "  --len L              prefill: prompt tokens (default 8192)\n"
            "  --steps N            timed steps (default 10 decode, 3 prefill)\n"
            "  --warmup W           warm-up steps (default 2 decode, 1 prefill)\n"
            "  --pools P            distinct KV pools for decode (default: as many as fit, <= B)\n"
            "  --kv f32|packed      cache dtypes the roofline charges (default packed)\n"
            "  --gemm-tflops X      FP8 ceiling in TFLOP/s (default: tide's wgmma GEMM measured now)\n"
            "  --copy-mib N         buffer of the bandwidth measurement (default 1024)\n"
            "  --no-graph           launch the decode step eagerly instead of replaying a graph\n"
            "  --profile            after the timed steps, one eager step with an event at each\n"
            "                       phase start: time per phase (launch gaps included)\n"
            "  --seed N             synthetic contents (default 1)\n");
}

#ifndef TIDE_HAVE_CUDA

int tide_bench_step_cuda(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return TIDE_EXIT_OK;
        }
    fprintf(stderr, "tide bench %s: --backend cuda: this build has no CUDA backend (configure where nvcc is found)\n",
            argv[0]);
    return TIDE_EXIT_FAIL;
}

#else

#include "backend/cuda/dev_step.h"

typedef struct {
    const char *model, *kv, *backend;
    int64_t batch, context, len, steps, warmup, pools, seed, copy_mib;
    int64_t gemm_tflops;
    int no_graph, decode, profile;
} cuda_opts;

/* Ceilings: copy bandwidth (read + write) of tide's copy kernel, and the
 * FP8 rate of tide's wgmma GEMM at 8192^3. */
static int ceilings(tide_cuda_stream cs, size_t n, double *copy_bps, double *gemm_fps, int measure_gemm,
                    tide_status *st) {
    void *a = NULL, *b = NULL;
    tide_cuda_timer t = {0};
    int rc = -1;
    if (tide_cuda_malloc(&a, n, st) != 0 || tide_cuda_malloc(&b, n, st) != 0 || tide_cuda_timer_create(&t, st) != 0)
        goto done;
    if (tide_cuda_fill(a, n, TIDE_CUDA_FILL_BYTES, 0, 0, 0, 7, cs, st) != 0) goto done;
    double best = 1e30, ms;
    for (int i = 0; i < 5; i++) {
        if (tide_cuda_timer_mark(&t, 0, cs, st) || tide_cuda_copy(b, a, n, cs, st) ||
            tide_cuda_timer_mark(&t, 1, cs, st) || tide_cuda_timer_ms(&t, &ms, st))
            goto done;
        if (ms < best) best = ms;
    }
    *copy_bps = 2.0 * (double)n / (best * 1e-3);
    if (measure_gemm && n >= ((size_t)512 << 20)) {
        int64_t m = 8192; /* xq [m][m], xs, w [m][m], ws, y bf16 [m][m] inside the two buffers */
        uint8_t *xq = a, *xs = (uint8_t *)a + m * m, *w = b, *ws = (uint8_t *)b + m * m;
        uint16_t *y = (uint16_t *)((uint8_t *)a + (size_t)m * m * 2);
        if (tide_cuda_fill(xq, (size_t)(m * m), TIDE_CUDA_FILL_E4M3, 1.0f, 0, 0, 1, cs, st) ||
            tide_cuda_fill(w, (size_t)(m * m), TIDE_CUDA_FILL_E4M3, 1.0f, 0, 0, 2, cs, st) ||
            tide_cuda_fill(xs, (size_t)(m * m / 32), TIDE_CUDA_FILL_CODE, 0, 120, 124, 3, cs, st) ||
            tide_cuda_fill(ws, (size_t)(m * m / 32), TIDE_CUDA_FILL_CODE, 0, 120, 124, 4, cs, st))
            goto done;
        best = 1e30;
        for (int i = 0; i < 4; i++) {
            if (tide_cuda_timer_mark(&t, 0, cs, st) ||
                tide_cuda_gemm_fp8_wgmma(xq, xs, m, w, ws, m, m, y, cs, st) || tide_cuda_timer_mark(&t, 1, cs, st) ||
                tide_cuda_timer_ms(&t, &ms, st))
                goto done;
            if (i > 0 && ms < best) best = ms;
        }
        *gemm_fps = 2.0 * (double)m * m * m / (best * 1e-3);
    }
    rc = 0;
done:
    tide_cuda_timer_destroy(&t);
    tide_cuda_free(a);
    tide_cuda_free(b);
    return rc;
}

static int parse(int argc, char **argv, cuda_opts *o) {
    memset(o, 0, sizeof *o);
    o->decode = !strcmp(argv[0], "decode");
    o->batch = 1;
    o->context = 4096;
    o->len = 8192;
    o->steps = o->decode ? 10 : 3;
    o->warmup = o->decode ? 2 : 1;
    o->seed = 1;
    o->kv = "packed";
    o->copy_mib = 1024;
    bench_opt t[] = {
        {"--copy-mib", BENCH_INT, &o->copy_mib, 1, 16384},
        {"--backend", BENCH_STR, &o->backend, 0, 0},
        {"--model", BENCH_STR, &o->model, 0, 0},
        {"--batch", BENCH_INT, &o->batch, 1, 65535},
        {"--context", BENCH_INT, &o->context, 1, 1 << 24},
        {"--len", BENCH_INT, &o->len, 1, 65535},
        {"--steps", BENCH_INT, &o->steps, 1, 100000},
        {"--warmup", BENCH_INT, &o->warmup, 0, 100000},
        {"--pools", BENCH_INT, &o->pools, 1, 65535},
        {"--kv", BENCH_STR, &o->kv, 0, 0},
        {"--gemm-tflops", BENCH_INT, &o->gemm_tflops, 1, 1000000},
        {"--no-graph", BENCH_FLAG, &o->no_graph, 0, 0},
        {"--profile", BENCH_FLAG, &o->profile, 0, 0},
        {"--seed", BENCH_INT, &o->seed, 0, INT64_MAX},
        {NULL, 0, NULL, 0, 0},
    };
    int rc = tide_bench_parse(argv[0], argc, argv, t, usage);
    if (rc >= 0) return rc;
    if (!o->model) return tide_bench_usage_error(argv[0], usage, "--model synth:SHAPE is required");
    if (strncmp(o->model, "synth:", 6))
        return tide_bench_usage_error(argv[0], usage,
                                      "--model '%s': the CUDA step generates its weights on the device; give "
                                      "synth:SHAPE (checkpoint directories are not supported by it yet)",
                                      o->model);
    if (strcmp(o->kv, "f32") && strcmp(o->kv, "packed"))
        return tide_bench_usage_error(argv[0], usage, "--kv: '%s' is neither f32 nor packed", o->kv);
    return -1;
}

int tide_bench_step_cuda(int argc, char **argv) {
    cuda_opts o;
    int rc = parse(argc, argv, &o);
    if (rc >= 0) return rc;
    tide_status st = {0};
    tide_config cfg;
    tide_dstep *s = NULL;
    tide_cuda_timer tm = {0};
    double *times = calloc((size_t)o.steps, sizeof *times);
    char dev[256] = "?", a[32], b[32];
    rc = TIDE_EXIT_FAIL;
    int n_dev = 0;
    if (!times) {
        tide_fail(&st, TIDE_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (tide_cuda_device_count(&n_dev, &st) != 0) goto done;
    if (n_dev < 1) {
        tide_fail(&st, TIDE_ERR_UNSUPPORTED, "no CUDA device");
        goto done;
    }
    (void)tide_cuda_describe(dev, sizeof dev, &st);
    if (tide_config_preset(o.model + 6, &cfg, &st) != 0) goto done;
    tide_dstep_opts so = {.prefill = !o.decode,
                          .batch = o.decode ? o.batch : 1,
                          .context = o.decode ? o.context : o.len,
                          .n_pools = o.pools,
                          .seed = (uint64_t)o.seed};
    double copy_bps = 0, gemm_fps = 0;
    double t0 = tide_now_seconds();
    if (tide_dstep_create(&cfg, &so, &s, &st) != 0) goto done;
    double t_create = tide_now_seconds() - t0;
    tide_cuda_stream cs = tide_dstep_stream(s);
    if (ceilings(cs, (size_t)o.copy_mib << 20, &copy_bps, &gemm_fps, o.gemm_tflops == 0, &st) != 0) goto done;
    if (o.gemm_tflops) gemm_fps = (double)o.gemm_tflops * 1e12;
    if (gemm_fps <= 0) {
        tide_fail(&st, TIDE_ERR_INVALID, "--copy-mib %lld is too small a buffer for the GEMM ceiling (512 or more, "
                  "or give --gemm-tflops)", (long long)o.copy_mib);
        goto done;
    }
    int graph = o.decode && !o.no_graph;
    const char *graph_note = graph ? "graph replay" : "eager launches";
    if (tide_cuda_timer_create(&tm, &st) != 0) goto done;
    if (graph) {
        /* one eager run first: lazy kernel loading and one-time attributes
         * happen outside the capture */
        if (tide_dstep_enqueue(s, &st) != 0 || tide_cuda_stream_sync(cs, &st) != 0) goto done;
        tide_status gst = {0};
        if (tide_dstep_capture(s, &gst) != 0) {
            fprintf(stderr, "tide bench %s: graph capture failed (%s); timing eager launches\n", argv[0], gst.msg);
            graph = 0;
            graph_note = "eager launches (graph capture failed)";
        }
    }
    for (int64_t i = 0; i < o.warmup + o.steps; i++) {
        double ms = 0;
        if (tide_cuda_timer_mark(&tm, 0, cs, &st) != 0) goto done;
        if ((graph ? tide_dstep_replay(s, &st) : tide_dstep_enqueue(s, &st)) != 0) goto done;
        if (tide_cuda_timer_mark(&tm, 1, cs, &st) != 0 || tide_cuda_timer_ms(&tm, &ms, &st) != 0) goto done;
        if (i >= o.warmup) times[i - o.warmup] = ms * 1e-3;
    }
    int64_t finite = 0, total = 0;
    int32_t am = -1;
    if (tide_dstep_check_output(s, &finite, &total, &am, &st) != 0) goto done;
    tide_dstep_info info;
    tide_dstep_get_info(s, &info);
    tide_roof_kv kv = !strcmp(o.kv, "packed") ? tide_roof_kv_packed() : tide_roof_kv_f32();
    tide_roof r;
    if ((o.decode ? tide_roof_decode(&cfg, &kv, o.batch, o.context, &r, &st)
                  : tide_roof_prefill(&cfg, &kv, o.len, &r, &st)) != 0)
        goto done;
    if (o.decode)
        printf("tide bench decode --backend cuda: model %s, batch %lld, context %lld (synthetic KV), seed %lld\n",
               o.model, (long long)o.batch, (long long)o.context, (long long)o.seed);
    else
        printf("tide bench prefill --backend cuda: model %s, prompt %lld tokens, seed %lld\n", o.model,
               (long long)o.len, (long long)o.seed);
    printf("  device           %s\n", dev);
    printf("  memory           weights %.2f GB, KV pools %.2f GB (%lld distinct pool%s for %lld sequences, f32), "
           "workspace %.2f GB; set up in %.1f s\n",
           info.weight_bytes / 1e9, info.pool_bytes / 1e9, (long long)info.n_pools, info.n_pools == 1 ? "" : "s",
           (long long)(o.decode ? o.batch : 1), info.work_bytes / 1e9, t_create);
    printf("  ceilings         copy %s (tide copy kernel, %lld MiB, read + write; measured), FP8 GEMM %s (%s)\n",
           tide_bench_si(copy_bps, "B/s", a, sizeof a), (long long)o.copy_mib,
           tide_bench_si(gemm_fps, "FLOP/s", b, sizeof b),
           o.gemm_tflops ? "given with --gemm-tflops" : "tide wgmma 8192^3, measured");
    printf("  step             %lld kernel launches, %s\n", (long long)info.launches, graph_note);
    tide_stats_sort(times, o.steps);
    double med = tide_stats_percentile(times, o.steps, 50);
    printf("  step time        median %.3f ms (min %.3f, max %.3f; %lld timed after %lld warm-up)\n", 1e3 * med,
           1e3 * times[0], 1e3 * times[o.steps - 1], (long long)o.steps, (long long)o.warmup);
    printf("  throughput       %.1f tokens/s\n", (double)(o.decode ? o.batch : o.len) / med);
    printf("  output           %lld of %lld logits finite, argmax of row 0: %d\n", (long long)finite, (long long)total,
           am);
    tide_bench_print_roofline(&r, o.kv, copy_bps, gemm_fps, med);
    if (o.profile) {
        double ph[TIDE_DSTEP_PHASES], sum = 0;
        if (tide_dstep_profile(s, ph, &st) != 0) goto done;
        for (int p = 0; p < TIDE_DSTEP_PHASES; p++) sum += ph[p];
        printf("  profile          one eager step, %.3f ms in all (events at phase starts):\n", sum);
        for (int p = 0; p < TIDE_DSTEP_PHASES; p++)
            printf("    %-30s %10.3f ms %6.1f%%\n", tide_dstep_phase_name(p), ph[p], sum > 0 ? 100.0 * ph[p] / sum : 0.0);
    }
    rc = TIDE_EXIT_OK;
done:
    if (rc != TIDE_EXIT_OK) fprintf(stderr, "tide bench %s --backend cuda: %s\n", argv[0], st.msg);
    tide_cuda_timer_destroy(&tm);
    tide_dstep_destroy(s);
    free(times);
    return rc;
}

#endif
