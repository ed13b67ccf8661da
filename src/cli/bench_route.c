/* tide bench route: a request trace (Mooncake or Azure format) replayed
 * through the router's placement in simulation (src/cluster/route_sim.c):
 * cache-hit rate, balancedness against the ideal offline assignment, TTFT
 * and TPOT percentiles, for prefix-aware placement and round-robin. */
#include <stdio.h>
#include <string.h>

#include "cli/bench.h"
#include "cli/cli.h"
#include "cluster/route_sim.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tide bench route --trace FILE [options]\n"
            "\n"
            "Replays a request trace through the router's placement (the code tide route\n"
            "runs) in simulation, over P prefill and D decode replicas with a cost model\n"
            "(docs/route.md section 5). Prints per placement mode: the prefix-cache hit rate\n"
            "(prompt tokens found in the chosen prefill replica's cache), the balancedness\n"
            "of the prefill and decode pools (mean / max work per window, work-weighted)\n"
            "next to the ideal offline assignment's (longest job first) and their ratio,\n"
            "and TTFT and TPOT percentiles.\n"
            "Trace formats: Mooncake JSONL ({\"timestamp\" ms, \"input_length\",\n"
            "\"output_length\", \"hash_ids\"}, 512 tokens a hash id) or the Azure LLM\n"
            "inference CSV (TIMESTAMP,ContextTokens,GeneratedTokens; no prefix hashes).\n"
            "\n"
            "options:\n"
            "  --trace FILE         the trace\n"
            "  --config FILE        a tide route configuration: its placement section\n"
            "                       (buckets, weights, overload) is used\n"
            "  --mode M             aware, round-robin or both (default both)\n"
            "  --prefill N          prefill replicas (default 4)\n"
            "  --decode N           decode replicas (default 4)\n"
            "  --cache-blocks N     prefix cache of a prefill replica, in hash units (default 4096)\n"
            "  --prefill-tps N      prefill tokens per second of a replica (default 20000)\n"
            "  --decode-step-us N   a decode step's base time, microseconds (default 20000)\n"
            "  --window S           balancedness window, seconds (default 60)\n");
}

static void report(const char *name, const tide_sim_result *r) {
    double hit = r->prompt_tokens ? 100.0 * (double)r->hit_tokens / (double)r->prompt_tokens : 0;
    printf("%s:\n", name);
    printf("  prefix-cache hit rate   %.1f %% of prompt tokens\n", hit);
    printf("  prefill balancedness    %.3f (ideal %.3f, bound %.3f): %.1f %% of ideal\n", r->bal_prefill,
           r->ideal_prefill, r->bound_prefill, 100 * r->bal_prefill / r->ideal_prefill);
    printf("  decode balancedness     %.3f (ideal %.3f, bound %.3f): %.1f %% of ideal\n", r->bal_decode,
           r->ideal_decode, r->bound_decode, 100 * r->bal_decode / r->ideal_decode);
    printf("  TTFT p50/p90/p99        %.3f / %.3f / %.3f s\n", r->ttft[0], r->ttft[1], r->ttft[2]);
    printf("  TPOT p50/p90/p99        %.2f / %.2f / %.2f ms\n", r->tpot[0] * 1e3, r->tpot[1] * 1e3, r->tpot[2] * 1e3);
    printf("  last token at           %.1f s\n", r->makespan_s);
}

int tide_bench_route(int argc, char **argv) {
    const char *trace = NULL, *config = NULL, *mode = "both";
    tide_sim_config c = tide_sim_config_default();
    int64_t np = c.n_prefill, nd = c.n_decode, cache = c.cache_blocks, tps = 20000, step_us = 20000,
            window = (int64_t)c.window_s;
    const bench_opt opts[] = {
        {"--trace", BENCH_STR, &trace, 0, 0},
        {"--config", BENCH_STR, &config, 0, 0},
        {"--mode", BENCH_STR, &mode, 0, 0},
        {"--prefill", BENCH_INT, &np, 1, TIDE_ROUTE_MAX_REPLICAS - 1},
        {"--decode", BENCH_INT, &nd, 1, TIDE_ROUTE_MAX_REPLICAS - 1},
        {"--cache-blocks", BENCH_INT, &cache, 1, (int64_t)1 << 30},
        {"--prefill-tps", BENCH_INT, &tps, 1, (int64_t)1 << 30},
        {"--decode-step-us", BENCH_INT, &step_us, 1, 10000000},
        {"--window", BENCH_INT, &window, 1, 86400 * 365},
        {NULL, 0, NULL, 0, 0},
    };
    int rc = tide_bench_parse("route", argc, argv, opts, usage);
    if (rc >= 0) return rc;
    if (!trace) return tide_bench_usage_error("route", usage, "--trace FILE is required");
    int modes = !strcmp(mode, "aware") ? 1 : !strcmp(mode, "round-robin") ? 2 : !strcmp(mode, "both") ? 3 : 0;
    if (!modes) return tide_bench_usage_error("route", usage, "--mode '%s': expected aware, round-robin or both", mode);
    if (np + nd > TIDE_ROUTE_MAX_REPLICAS)
        return tide_bench_usage_error("route", usage, "--prefill + --decode: at most %d replicas",
                                      TIDE_ROUTE_MAX_REPLICAS);
    tide_status st = {0};
    if (config) {
        tide_route_config rc_;
        tide_route_config_default(&rc_);
        if (tide_route_config_load(&rc_, config, &st)) {
            fprintf(stderr, "tide bench route: %s\n", st.msg);
            return TIDE_EXIT_FAIL;
        }
        c.policy = rc_.policy;
    }
    c.n_prefill = (int)np;
    c.n_decode = (int)nd;
    c.cache_blocks = cache;
    c.prefill_s_per_token = 1.0 / (double)tps;
    c.decode_step_s = (double)step_us * 1e-6;
    c.window_s = (double)window;
    tide_trace t;
    if (tide_trace_load(trace, &t, &st)) {
        fprintf(stderr, "tide bench route: %s\n", st.msg);
        return TIDE_EXIT_FAIL;
    }
    int64_t tokens = 0, out_tokens = 0;
    for (int64_t i = 0; i < t.n; i++) tokens += t.reqs[i].in_len, out_tokens += t.reqs[i].out_len;
    printf("trace %s: %s, %lld requests over %.1f s, %lld prompt + %lld output tokens", trace, t.format,
           (long long)t.n, t.reqs[t.n - 1].t, (long long)tokens, (long long)out_tokens);
    if (t.block_tokens) printf(", %d tokens per hash id", t.block_tokens);
    printf("\npool: %d prefill + %d decode replicas; cost model: prefill %lld tok/s + %.0f ms, decode step %.1f ms "
           "+ %.2f ms/seq + %.0f ns/context token; prefix cache %lld units; window %lld s\n",
           c.n_prefill, c.n_decode, (long long)tps, c.prefill_overhead_s * 1e3, c.decode_step_s * 1e3,
           c.decode_s_per_seq * 1e3, c.decode_s_per_ctx_token * 1e9, (long long)cache, (long long)window);
    rc = TIDE_EXIT_OK;
    for (int m = 1; m <= 2; m++) {
        if (!(modes & m)) continue;
        c.policy.mode = m == 1 ? TIDE_PLACE_AWARE : TIDE_PLACE_ROUND_ROBIN;
        tide_sim_result r;
        if (tide_sim_run(&t, &c, &r, &st)) {
            fprintf(stderr, "tide bench route: %s\n", st.msg);
            rc = TIDE_EXIT_FAIL;
            break;
        }
        report(m == 1 ? "aware" : "round-robin", &r);
    }
    tide_trace_free(&t);
    return rc;
}
