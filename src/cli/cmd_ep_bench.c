/* `tide bench eplb`: EPLB's placement (dist/eplb.h) on a skewed routing
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

#include "cli/bench.h"
#include "cli/cli.h"
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
