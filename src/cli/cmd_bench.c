/* tide bench: performance measurements (docs/perf.md).
 *
 *   tide bench offline   throughput and latency of a generated workload through the engine
 *   tide bench prefix    a shared-prefix workload with the prefix cache off and on
 *   tide bench decode    one decode step at batch B and context C, with its roofline
 *   tide bench prefill   one prefill of L tokens, with its roofline
 *   tide bench roofline  the roofline model alone, for any shape (no weights)
 *   tide bench replay    the accuracy study of bounded SWA replay (bench_replay.c)
 *   tide bench serve     the offline workload against a running tide serve (bench_serve.c)
 *   tide bench route     a request trace through the router's placement, simulated (bench_route.c)
 *   tide bench grammar   structured-output compile and token-mask times (bench_grammar.c)
 *
 * This file dispatches and holds what the modes share: option parsing, the
 * engine flags, number formatting. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench.h"
#include "cli/bench_replay.h"
#include "cli/cli.h"
#include "engine/spec.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tide bench MODE [options]     ('tide bench MODE --help' describes each)\n"
            "\n"
            "modes:\n"
            "  offline    throughput and latency (TTFT, inter-token) of a generated workload\n"
            "             through the engine\n"
            "  prefix     a shared-prefix workload run with the prefix cache off and on:\n"
            "             hit rate, TTFT, speed-up\n"
            "  spec       speculative decoding off / fixed:K / dspark at several loads: accepted\n"
            "             length, verified drafts per step, throughput; the budget's simulation\n"
            "  decode     one decode step at batch B and context C (synthetic cache contents),\n"
            "             timed, next to its roofline\n"
            "  prefill    one prefill of L tokens, timed, next to its roofline\n"
            "             (decode and prefill: --backend cuda runs the device-resident step on\n"
            "             the GPU, weights generated in device memory)\n"
            "  roofline   the roofline model of decode and prefill steps for a shape (no weights)\n"
            "  replay     accuracy of bounded SWA replay on prefix-cache hits\n"
            "  kvstore    the persistent KV store: erasure coding, SSD and shared-store I/O, TTFT from the store\n"
            "  grammar    structured outputs: constraint compile time and per-token mask time\n"
            "             over a corpus of JSON Schemas, regexes and grammars\n"
            "  serve      the offline workload against a running tide serve over HTTP:\n"
            "             TTFT, inter-token, end-to-end, throughput (--offline for the ratio)\n"
            "  ep         the engine with the experts over N rank processes (tide run --ep):\n"
            "             tokens/s, all-to-all pairs and bytes per token, balancedness\n"
            "  eplb       expert placement (EPLB) on a skewed routing workload in simulation:\n"
            "             balancedness of the plain placement and of EPLB's\n"
            "  route      a request trace (Mooncake, Azure) through tide route's placement in\n"
            "             simulation: hit rate, balancedness vs ideal, TTFT / TPOT\n"
            "\n"
            "--model takes a checkpoint directory or synth:SHAPE (tiny, small, flash, flash-ep8):\n"
            "a synthetic checkpoint written to a temporary directory and deleted after loading.\n"
            "Exit status: 0 ok, 1 failed (message on stderr), 2 bad usage.\n");
}

int tide_cmd_bench(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return TIDE_EXIT_USAGE;
    }
    const char *mode = argv[1];
    if (!strcmp(mode, "--help") || !strcmp(mode, "-h") || !strcmp(mode, "help")) {
        usage(stdout);
        return TIDE_EXIT_OK;
    }
    if (!strcmp(mode, "offline")) return tide_bench_offline(argc - 1, argv + 1);
    if (!strcmp(mode, "prefix")) return tide_bench_prefix(argc - 1, argv + 1);
    if (!strcmp(mode, "spec")) return tide_bench_spec(argc - 1, argv + 1);
    if (!strcmp(mode, "decode") || !strcmp(mode, "prefill")) return tide_bench_step(argc - 1, argv + 1);
    if (!strcmp(mode, "roofline")) return tide_bench_roofline(argc - 1, argv + 1);
    if (!strcmp(mode, "kvstore")) return tide_bench_kvstore(argc - 1, argv + 1);
    if (!strcmp(mode, "serve")) return tide_bench_serve(argc - 1, argv + 1);
    if (!strcmp(mode, "route")) return tide_bench_route(argc - 1, argv + 1);
    if (!strcmp(mode, "grammar")) return tide_bench_grammar(argc - 1, argv + 1);
    if (!strcmp(mode, "eplb")) return tide_bench_eplb(argc - 1, argv + 1);
    if (!strcmp(mode, "ep")) return tide_bench_ep(argc - 1, argv + 1);
    if (!strcmp(mode, "replay")) return tide_bench_replay(argc - 2, argv + 2);
    fprintf(stderr, "tide bench: unknown mode '%s'\n\n", mode);
    usage(stderr);
    return TIDE_EXIT_USAGE;
}

/* ---- option parsing ---- */

int tide_cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    if (!s || !*s) return -1;
    long long x = strtoll(s, &end, 10);
    if (end == s || *end || errno || x < lo || x > hi) return -1;
    *out = x;
    return 0;
}

/* "A" or "A-B" */
static int parse_range(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    const char *dash = strchr(s, '-');
    if (!dash) {
        if (tide_cli_parse_i64(s, lo, hi, &out[0]) != 0) return -1;
        out[1] = out[0];
        return 0;
    }
    char a[32];
    size_t n = (size_t)(dash - s);
    if (n == 0 || n >= sizeof a) return -1;
    memcpy(a, s, n);
    a[n] = 0;
    if (tide_cli_parse_i64(a, lo, hi, &out[0]) != 0 || tide_cli_parse_i64(dash + 1, lo, hi, &out[1]) != 0) return -1;
    return out[0] <= out[1] ? 0 : -1;
}

static int parse_list(const char *s, int64_t lo, int64_t hi, bench_list *l) {
    l->n = 0;
    const char *p = s;
    while (1) {
        const char *comma = strchr(p, ',');
        char item[32];
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        if (n == 0 || n >= sizeof item || l->n == BENCH_LIST_MAX) return -1;
        memcpy(item, p, n);
        item[n] = 0;
        if (tide_cli_parse_i64(item, lo, hi, &l->v[l->n++]) != 0) return -1;
        if (!comma) return 0;
        p = comma + 1;
    }
}

int tide_bench_usage_error(const char *mode, void (*usage_fn)(FILE *), const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "tide bench %s: ", mode);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n\n");
    va_end(ap);
    usage_fn(stderr);
    return TIDE_EXIT_USAGE;
}

static int take_value(const char *mode, const bench_opt *o, const char *v, void (*usage_fn)(FILE *)) {
    switch (o->kind) {
    case BENCH_INT:
        if (tide_cli_parse_i64(v, o->lo, o->hi, o->dst) == 0) return 0;
        return tide_bench_usage_error(mode, usage_fn, "%s: '%s' is not an integer in %lld..%lld", o->flag, v,
                                      (long long)o->lo, (long long)o->hi);
    case BENCH_RANGE:
        if (parse_range(v, o->lo, o->hi, o->dst) == 0) return 0;
        return tide_bench_usage_error(mode, usage_fn, "%s: '%s' is not N or A-B with %lld <= A <= B <= %lld", o->flag,
                                      v, (long long)o->lo, (long long)o->hi);
    case BENCH_LIST:
        if (parse_list(v, o->lo, o->hi, o->dst) == 0) return 0;
        return tide_bench_usage_error(mode, usage_fn, "%s: '%s' is not a list of up to %d integers in %lld..%lld",
                                      o->flag, v, BENCH_LIST_MAX, (long long)o->lo, (long long)o->hi);
    case BENCH_STR:
        *(const char **)o->dst = v;
        return 0;
    case BENCH_FLAG:
        break;
    }
    return TIDE_EXIT_USAGE;
}

int tide_bench_parse(const char *mode, int argc, char **argv, const bench_opt *opts, void (*usage_fn)(FILE *)) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage_fn(stdout);
            return TIDE_EXIT_OK;
        }
        const bench_opt *o = opts;
        while (o->flag && strcmp(o->flag, a) != 0) o++;
        if (!o->flag) return tide_bench_usage_error(mode, usage_fn, "unknown option '%s'", a);
        if (o->kind == BENCH_FLAG) {
            *(int *)o->dst = 1;
            continue;
        }
        if (i + 1 >= argc) return tide_bench_usage_error(mode, usage_fn, "%s needs a value", a);
        int rc = take_value(mode, o, argv[++i], usage_fn);
        if (rc != 0) return rc;
    }
    return -1;
}

/* ---- engine flags ---- */

void tide_bench_engine_defaults(bench_engine_opts *o) {
    tide_engine_config d = tide_engine_config_default();
    o->threads = d.n_threads;
    o->max_seqs = d.max_seqs;
    o->step_tokens = d.max_step_tokens;
    o->chunk = d.prefill_chunk;
    o->kv_blocks = d.kv_blocks;
    o->kv_block = d.kv_block;
    o->seed = 1;
    o->canonical = 0;
    o->no_quirk = 0;
    o->overlap = 0;
}

void tide_bench_engine_table(bench_engine_opts *o, bench_opt *t, int *n) {
    const bench_opt add[] = {
        {"--threads", BENCH_INT, &o->threads, 1, 256},
        {"--max-seqs", BENCH_INT, &o->max_seqs, 1, 4096},
        {"--step-tokens", BENCH_INT, &o->step_tokens, 1, 1 << 24},
        {"--chunk", BENCH_INT, &o->chunk, 0, 1 << 24},
        {"--kv-blocks", BENCH_INT, &o->kv_blocks, 1, INT32_MAX},
        {"--kv-block", BENCH_INT, &o->kv_block, 1, 4096},
        {"--seed", BENCH_INT, &o->seed, 0, INT64_MAX},
        {"--canonical-layout", BENCH_FLAG, &o->canonical, 0, 0},
        {"--no-index-quirk", BENCH_FLAG, &o->no_quirk, 0, 0},
        {"--overlap", BENCH_FLAG, &o->overlap, 0, 0},
        {"--spec", BENCH_STR, &o->spec, 0, 0},
    };
    _Static_assert(sizeof add / sizeof add[0] == BENCH_ENGINE_OPTS, "BENCH_ENGINE_OPTS must count these entries");
    for (size_t i = 0; i < sizeof add / sizeof add[0]; i++) t[(*n)++] = add[i];
}

tide_engine_config tide_bench_engine_config(const bench_engine_opts *o) {
    tide_engine_config c = tide_engine_config_default();
    c.n_threads = (int)o->threads;
    c.max_seqs = (int)o->max_seqs;
    c.max_step_tokens = o->step_tokens;
    c.prefill_chunk = o->chunk;
    if (c.prefill_chunk > c.max_step_tokens) c.max_step_tokens = c.prefill_chunk;
    c.kv_blocks = o->kv_blocks;
    c.kv_block = (int)o->kv_block;
    c.seed = (uint64_t)o->seed;
    c.canonical_layout = o->canonical;
    c.index_key_quirk = !o->no_quirk;
    c.overlap = o->overlap;
    if (o->spec) {
        tide_status st = {0};
        if (tide_spec_parse(o->spec, &c.spec_mode, &c.spec_k, &st) != 0) {
            fprintf(stderr, "tide bench: %s\n", st.msg);
            c.spec_mode = -1; /* engine creation refuses it */
        }
        if (c.spec_mode > 0) { /* rollback is exact only in the chunking-invariant mode */
            c.canonical_layout = 1;
            c.index_key_quirk = 0;
        }
    }
    return c;
}

void tide_bench_engine_help(FILE *f) {
    fprintf(f,
            "  --threads N          worker threads (default 2)\n"
            "  --max-seqs N         requests running at once (default 64)\n"
            "  --step-tokens N      token budget of one step (default 512)\n"
            "  --chunk N            prefill chunk size (default 0: the step budget)\n"
            "  --kv-blocks N        KV pool capacity in blocks (default 1048576)\n"
            "  --kv-block N         compressed positions per KV block (default 64)\n"
            "  --seed N             workload and engine seed (default 1)\n"
            "  --canonical-layout   attention entry order independent of chunking (docs/model.md)\n"
            "  --no-index-quirk     index keys from each indexer's own source (docs/model.md)\n"
            "  --overlap            plan step N+1 while step N's forward pass runs (docs/engine.md)\n"
            "  --spec MODE          speculative decoding: dspark, fixed:K or off (default); turns\n"
            "                       on the chunking-invariant mode (docs/spec.md)\n");
}

const char *tide_bench_si(double x, const char *unit, char *buf, int cap) {
    static const char *const pre[] = {"", "k", "M", "G", "T", "P", "E"};
    int i = 0;
    double a = x < 0 ? -x : x;
    while (a >= 1000.0 && i < 6) {
        a /= 1000.0;
        x /= 1000.0;
        i++;
    }
    snprintf(buf, (size_t)cap, a >= 100 ? "%.0f %s%s" : a >= 10 ? "%.1f %s%s" : "%.2f %s%s", x, pre[i], unit);
    return buf;
}
