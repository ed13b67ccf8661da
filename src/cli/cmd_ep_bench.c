/* `tide bench ep`: `tide run --ep N`'s launcher over a synthetic workload
 * for several widths (at the end of the file).
 *
 * `tide bench eplb`: EPLB's placement (dist/eplb.h) on a skewed routing
 * workload in simulation: balancedness (mean / max of the ranks' routed
 * rows) of the plain placement, of EPLB placed from the previous window's
 * counts (what a running server does: the placement lags the load) and of
 * EPLB placed from the window's own counts (the bound).
 *
 * Workload: each layer ranks its experts in a random order of popularity,
 * Zipf(skew) over that order; every token of a window picks top-k distinct
 * experts by it; between windows a fraction (--drift) of the order is
 * reshuffled, so hot experts move. A rank's load is the sum over its slots
 * of the expert's rows divided by the expert's copies (rows split evenly
 * over the copies, as dist/ep.c sends them round-robin). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "bench/model_spec.h"
#include "cli/bench.h"
#include "cli/cli.h"
#include "cli/cmd_ep.h"
#include "dist/eplb.h"

static void usage(FILE *f) {
    fprintf(f, "usage: tide bench eplb [options]\n"
               "  --experts E      routed experts per layer (default 384, the release's)\n"
               "  --top-k K        experts per token (default 6)\n"
               "  --layers L       MoE layers (default 40)\n"
               "  --ranks N        EP ranks (default 8)\n"
               "  --nodes M        nodes (the hierarchical policy's first level; default 1)\n"
               "  --groups G       expert groups (default 1)\n"
               "  --redundant R    extra slots per layer for copies of hot experts (default 32)\n"
               "  --skew S100      Zipf exponent x 100 (default 100)\n"
               "  --drift P        percent of the popularity order reshuffled per window (default 10)\n"
               "  --tokens T       tokens per window (default 8192)\n"
               "  --windows W      windows (default 8)\n"
               "  --seed N         (default 1)\n");
}

static uint64_t next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double unif(uint64_t *s) { return (double)(next(s) >> 11) / 9007199254740992.0; }

int tide_bench_eplb(int argc, char **argv) {
    int64_t E = 384, K = 6, L = 40, N = 8, M = 1, G = 1, R = 32, skew = 100, drift = 10, T = 8192, W = 8, seed = 1;
    const bench_opt opts[] = {
        {"--experts", BENCH_INT, &E, 2, 4096}, {"--top-k", BENCH_INT, &K, 1, 64},
        {"--layers", BENCH_INT, &L, 1, 256},   {"--ranks", BENCH_INT, &N, 1, 1024},
        {"--nodes", BENCH_INT, &M, 1, 1024},   {"--groups", BENCH_INT, &G, 1, 4096},
        {"--redundant", BENCH_INT, &R, 0, 4096}, {"--skew", BENCH_INT, &skew, 0, 400},
        {"--drift", BENCH_INT, &drift, 0, 100}, {"--tokens", BENCH_INT, &T, 1, 1 << 24},
        {"--windows", BENCH_INT, &W, 2, 10000}, {"--seed", BENCH_INT, &seed, 0, INT64_MAX},
        {NULL, 0, NULL, 0, 0},
    };
    int rc = tide_bench_parse("eplb", argc, argv, opts, usage);
    if (rc >= 0) return rc;
    if (K > E) return tide_bench_usage_error("eplb", usage, "--top-k %lld > --experts %lld", (long long)K, (long long)E);
    int64_t P = E + R;
    if (P % N) P += N - P % N; /* slots fill every rank */
    uint64_t s = (uint64_t)seed;
    int *order = malloc((size_t)(L * E) * sizeof(int));
    double *cdf = malloc((size_t)E * sizeof(double)), *load = malloc((size_t)(L * E) * sizeof(double));
    double *prev = malloc((size_t)(L * E) * sizeof(double)), *uni = malloc((size_t)E * sizeof(double));
    int *p2l = malloc((size_t)P * sizeof(int)), *rep = malloc((size_t)P * sizeof(int)), *cnt = malloc((size_t)E * sizeof(int));
    int *pick = malloc((size_t)K * sizeof(int));
    if (!order || !cdf || !load || !prev || !uni || !p2l || !rep || !cnt || !pick) abort();
    tide_status st = {0};
    for (int64_t e = 0; e < E; e++) uni[e] = 1;
    if (tide_eplb_place(uni, (int)E, (int)P, (int)G, (int)M, (int)N, p2l, rep, cnt, &st) != 0) {
        fprintf(stderr, "tide bench eplb: %s\n", st.msg);
        rc = TIDE_EXIT_USAGE;
        goto done;
    }
    for (int64_t l = 0; l < L; l++) {
        for (int64_t e = 0; e < E; e++) order[l * E + e] = (int)e;
        for (int64_t e = E - 1; e > 0; e--) {
            int64_t j = (int64_t)(next(&s) % (uint64_t)(e + 1));
            int t = order[l * E + e];
            order[l * E + e] = order[l * E + j];
            order[l * E + j] = t;
        }
    }
    double z = 0;
    for (int64_t i = 0; i < E; i++) z += cdf[i] = pow((double)(i + 1), -(double)skew / 100.0);
    for (int64_t i = 1; i < E; i++) cdf[i] += cdf[i - 1];
    double sum[3] = {0}, worst[3] = {1, 1, 1};
    int64_t n_meas = 0;
    for (int64_t w = 0; w < W; w++) {
        memset(load, 0, (size_t)(L * E) * sizeof(double));
        for (int64_t l = 0; l < L; l++)
            for (int64_t t = 0; t < T; t++)
                for (int64_t k = 0; k < K; k++) {
                    int e;
                    for (;;) {
                        double u = unif(&s) * z;
                        int64_t lo = 0, hi = E - 1;
                        while (lo < hi) {
                            int64_t mid = (lo + hi) / 2;
                            if (cdf[mid] < u) lo = mid + 1;
                            else hi = mid;
                        }
                        e = order[l * E + lo];
                        int dup = 0;
                        for (int64_t q = 0; q < k; q++) dup |= pick[q] == e;
                        if (!dup) break;
                    }
                    pick[k] = e;
                    load[l * E + e] += 1;
                }
        if (w > 0) /* measured from the second window: EPLB has a previous one */
            for (int64_t l = 0; l < L; l++) {
                const double *cur = load + l * E;
                double b[3];
                int64_t P0 = E + (N - E % N) % N;
                if (tide_eplb_place(uni, (int)E, (int)P0, 1, 1, (int)N, p2l, rep, cnt, &st) != 0) abort();
                b[0] = tide_eplb_balancedness(cur, (int)E, p2l, cnt, (int)P0, (int)N);
                if (tide_eplb_place(prev + l * E, (int)E, (int)P, (int)G, (int)M, (int)N, p2l, rep, cnt, &st) != 0)
                    abort();
                b[1] = tide_eplb_balancedness(cur, (int)E, p2l, cnt, (int)P, (int)N);
                if (tide_eplb_place(cur, (int)E, (int)P, (int)G, (int)M, (int)N, p2l, rep, cnt, &st) != 0) abort();
                b[2] = tide_eplb_balancedness(cur, (int)E, p2l, cnt, (int)P, (int)N);
                for (int i = 0; i < 3; i++) {
                    sum[i] += b[i];
                    if (b[i] < worst[i]) worst[i] = b[i];
                }
                n_meas++;
            }
        memcpy(prev, load, (size_t)(L * E) * sizeof(double));
        for (int64_t l = 0; l < L; l++) /* drift: reshuffle a fraction of the order */
            for (int64_t i = 0; i < E * drift / 100; i++) {
                int64_t a = (int64_t)(next(&s) % (uint64_t)E), b = (int64_t)(next(&s) % (uint64_t)E);
                int t = order[l * E + a];
                order[l * E + a] = order[l * E + b];
                order[l * E + b] = t;
            }
    }
    printf("tide bench eplb: %lld experts (top-%lld) x %lld layers over %lld ranks on %lld node(s), %lld groups, "
           "%lld slots per layer (%lld copies), Zipf skew %.2f, %lld tokens per window, %lld windows, drift %lld%%\n",
           (long long)E, (long long)K, (long long)L, (long long)N, (long long)M, (long long)G, (long long)P,
           (long long)(P - E), skew / 100.0, (long long)T, (long long)W, (long long)drift);
    printf("%-44s %12s %12s\n", "placement", "balancedness", "worst layer");
    const char *name[3] = {"plain (one copy each, no load information)", "EPLB from the previous window",
                           "EPLB from the same window (bound)"};
    for (int i = 0; i < 3; i++) printf("%-44s %12.3f %12.3f\n", name[i], sum[i] / (double)n_meas, worst[i]);
    printf("(balancedness = mean / max of the ranks' routed rows, averaged over layers and windows 2..%lld)\n",
           (long long)W);
    rc = TIDE_EXIT_OK;
done:
    free(order);
    free(cdf);
    free(load);
    free(prev);
    free(uni);
    free(p2l);
    free(rep);
    free(cnt);
    free(pick);
    return rc;
}

/* ---- tide bench ep: the engine over N rank processes ------------------------ */

static void usage_ep(FILE *f) {
    fprintf(f, "usage: tide bench ep --model DIR|synth:SHAPE [options]\n"
               "  --ranks A,B,..   EP widths to run (default 1,2,4)\n"
               "  --requests N     requests (default 16), each its own random prompt\n"
               "  --prompt-len N   prompt tokens (default 32)\n"
               "  --max-tokens N   generated tokens per request (default 16, end-of-sequence ignored)\n"
               "  --redundant R    EPLB copies per layer (default 0)\n"
               "  --window S       rebalance every S steps (default 0: never)\n"
               "  --threads N      threads per rank (default 1)\n"
               "  --seed N         prompts (default 1)\n"
               "Reports per width: wall time, generated tokens/s, (row, expert) pairs sent to another rank\n"
               "per token and their bytes, the experts' balancedness (mean/max routed rows per rank), and\n"
               "whether the tokens equal the first width's.\n");
}

int tide_bench_ep(int argc, char **argv) {
    const char *model = NULL;
    bench_list ranks = {{1, 2, 4}, 3};
    int64_t nreq = 16, plen = 32, mt = 16, R = 0, window = 0, threads = 1, seed = 1;
    const bench_opt opts[] = {
        {"--model", BENCH_STR, &model, 0, 0},           {"--ranks", BENCH_LIST, &ranks, 1, TIDE_COMM_MAX},
        {"--requests", BENCH_INT, &nreq, 1, 100000},    {"--prompt-len", BENCH_INT, &plen, 1, 1 << 20},
        {"--max-tokens", BENCH_INT, &mt, 1, 1 << 20},   {"--redundant", BENCH_INT, &R, 0, 4096},
        {"--window", BENCH_INT, &window, 0, 1 << 30},   {"--threads", BENCH_INT, &threads, 1, 256},
        {"--seed", BENCH_INT, &seed, 0, INT64_MAX},     {NULL, 0, NULL, 0, 0},
    };
    int rc = tide_bench_parse("ep", argc, argv, opts, usage_ep);
    if (rc >= 0) return rc;
    if (!model) return tide_bench_usage_error("ep", usage_ep, "--model is required");
    tide_status st = {0};
    tide_model *m = NULL;
    if (tide_bench_load_model(model, 1, &m, &st) != 0) {
        fprintf(stderr, "tide bench ep: %s\n", st.msg);
        return TIDE_EXIT_FAIL;
    }
    tide_ep_lines L = {.n = nreq};
    L.lines = calloc((size_t)nreq, sizeof *L.lines);
    if (!L.lines) abort();
    uint64_t s = (uint64_t)seed;
    int64_t V = m->cfg.text.vocab_size;
    const tide_jsonl_defaults d = {.max_tokens = mt, .ignore_eos = 1};
    char *line = malloc((size_t)(plen * 24 + 64));
    if (!line) abort();
    for (int64_t i = 0; i < nreq && rc < 0; i++) {
        int n = sprintf(line, "{\"prompt_ids\": [");
        for (int64_t t = 0; t < plen; t++)
            n += sprintf(line + n, "%s%lld", t ? "," : "", (long long)(2 + next(&s) % (uint64_t)(V - 2)));
        n += sprintf(line + n, "], \"temperature\": 0}");
        if (tide_jsonl_request_parse(line, (size_t)n, i + 1, &d, &L.lines[i], &st) != 0) {
            fprintf(stderr, "tide bench ep: %s\n", st.msg);
            rc = TIDE_EXIT_FAIL;
        }
    }
    free(line);
    int64_t D = m->cfg.text.hidden_size;
    char **first = NULL;
    if (rc < 0) {
        printf("tide bench ep: %s, %lld requests of %lld prompt tokens, %lld generated each, %lld copies, "
               "window %lld, %lld thread(s) per rank\n",
               model, (long long)nreq, (long long)plen, (long long)mt, (long long)R, (long long)window,
               (long long)threads);
        printf("%6s %9s %12s %16s %16s %13s %10s\n", "ranks", "wall s", "gen tok/s", "pairs sent/tok",
               "bytes sent/tok", "balancedness", "same toks");
    }
    for (int k = 0; k < ranks.n && rc < 0; k++) {
        tide_ep_run_opts o = {.model = model, .ranks = ranks.v[k], .max_tokens = mt, .threads = threads,
                              .redundant = R, .window = window, .timeout_ms = 60000, .max_seqs = 64,
                              .step_tokens = 512, .kill_rank = -1, .ignore_eos = 1, .no_model_dir = 1};
        tide_ep_result res;
        if (tide_ep_launch(&o, &L, m, &res, &st) != 0) {
            fprintf(stderr, "tide bench ep: --ranks %lld: %s\n", (long long)ranks.v[k], st.msg);
            tide_ep_result_free(&res, L.n);
            rc = TIDE_EXIT_FAIL;
            break;
        }
        int64_t gen = 0, fed = 0;
        int same = 1;
        for (int64_t i = 0; i < L.n; i++) {
            json_t *j = json_loads(res.got[i], 0, NULL);
            gen += json_integer_value(json_object_get(j, "completion_tokens"));
            fed += json_integer_value(json_object_get(j, "prompt_tokens"));
            json_decref(j);
            if (first && strcmp(first[i], res.got[i]) != 0) same = 0;
        }
        fed += gen; /* every token goes through the forward pass once (no preemption here) */
        /* a pair travels as {expert, weight, row} and comes back as a row of f32 */
        double pairs = (double)res.stats.rows_sent / (double)fed;
        printf("%6lld %9.2f %12.2f %16.2f %16.0f %13.3f %10s\n", (long long)ranks.v[k], res.seconds,
               (double)gen / res.seconds, pairs, pairs * (double)(8 + 8 * D), res.stats.balancedness,
               first ? (same ? "yes" : "NO") : "-");
        if (!first) {
            first = res.got;
            res.got = NULL;
        }
        tide_ep_result_free(&res, L.n);
    }
    if (first)
        for (int64_t i = 0; i < L.n; i++) free(first[i]);
    free(first);
    tide_ep_lines_free(&L);
    tide_model_free(m);
    return rc < 0 ? TIDE_EXIT_OK : rc;
}
