/* `tide bench`: the modes (one file each) and what they share: option
 * parsing, the engine flags of the engine-driven modes, number formatting.
 * cmd_bench.c dispatches `tide bench MODE ...`; docs/perf.md describes the
 * modes, their output and the roofline model. */
#ifndef TIDE_CLI_BENCH_H
#define TIDE_CLI_BENCH_H

#include <stdint.h>
#include <stdio.h>

#include "tide.h"

/* Each mode: argv[0] is the mode's name; returns a process exit code
 * (0 ok, 1 failed, 2 bad usage). */
int tide_bench_offline(int argc, char **argv);  /* bench_offline.c */
int tide_bench_prefix(int argc, char **argv);   /* bench_prefix.c */
int tide_bench_spec(int argc, char **argv);     /* bench_spec.c */
/* The speculative figures of an engine run (--spec): accepted length,
 * verified drafts per sequence-step, the profiled cost model. */
void tide_bench_spec_report(const tide_engine_stats *s);

/* The requests of a JSONL file in the format of 'tide run --input', in file
 * order (bench_offline.c; bench spec takes their prompts). gen: the
 * max_tokens of lines without one. Every line is checked before the model
 * loads, so a bad file fails fast. */
struct tide_jsonl_request;
typedef struct tide_bench_jsonl {
    struct tide_jsonl_request *r;
    int64_t *lineno; /* [n] each request's line, for messages */
    int64_t n, cap;
    int64_t total_prompt, len_lo, len_hi, max_tokens_sum;
} tide_bench_jsonl;
int tide_bench_jsonl_read(const char *path, int64_t gen, tide_bench_jsonl *w, tide_status *st);
void tide_bench_jsonl_free(tide_bench_jsonl *w);
int tide_bench_step(int argc, char **argv);     /* bench_step.c: decode and prefill */
int tide_bench_roofline(int argc, char **argv); /* bench_roofline.c */
int tide_bench_kvstore(int argc, char **argv);  /* bench_kvstore.c */
int tide_bench_serve(int argc, char **argv);    /* bench_serve.c: against a running tide serve */
int tide_bench_route(int argc, char **argv);    /* bench_route.c: trace replay through the router's placement */
int tide_bench_grammar(int argc, char **argv);  /* bench_grammar.c: structured-output masks */
int tide_bench_eplb(int argc, char **argv);     /* cmd_ep_bench.c: EPLB placement on skewed routing */
int tide_bench_ep(int argc, char **argv);       /* cmd_ep_bench.c: the engine over N EP ranks */
/* decode / prefill with --backend cuda (bench_step_cuda.c; a stub saying so
 * in builds without the CUDA backend) */
int tide_bench_step_cuda(int argc, char **argv);

/* ---- option parsing (cmd_bench.c) ---- */

typedef enum bench_kind {
    BENCH_INT,   /* int64_t *, within [lo, hi] */
    BENCH_RANGE, /* int64_t[2]: "A" or "A-B", lo <= A <= B <= hi */
    BENCH_LIST,  /* bench_list *: "A,B,C", each within [lo, hi] */
    BENCH_STR,   /* const char ** */
    BENCH_FLAG,  /* int *, set to 1 */
} bench_kind;

#define BENCH_LIST_MAX 16
typedef struct bench_list {
    int64_t v[BENCH_LIST_MAX];
    int n;
} bench_list;

typedef struct bench_opt {
    const char *flag; /* NULL ends a table */
    bench_kind kind;
    void *dst;
    int64_t lo, hi;
} bench_opt;

/* Parses argv[1..argc) against opts. Returns -1 to go on; 0 after --help
 * (usage on stdout); 2 after a bad or unknown option (the problem and the
 * usage on stderr, prefixed "tide bench MODE: "). */
int tide_bench_parse(const char *mode, int argc, char **argv, const bench_opt *opts, void (*usage)(FILE *));
/* Reports a usage error found after parsing (missing option, bad combination). */
int tide_bench_usage_error(const char *mode, void (*usage)(FILE *), const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The engine flags of offline and prefix, with their defaults. */
typedef struct bench_engine_opts {
    int64_t threads, max_seqs, step_tokens, chunk, kv_blocks, kv_block, seed;
    int canonical, no_quirk, overlap;
    const char *spec; /* --spec (NULL = off) */
} bench_engine_opts;
void tide_bench_engine_defaults(bench_engine_opts *o);
/* Appends the BENCH_ENGINE_OPTS engine flags' entries to opts at *n (size
 * tables as own entries + BENCH_ENGINE_OPTS + 1 for the terminator). */
#define BENCH_ENGINE_OPTS 11
void tide_bench_engine_table(bench_engine_opts *o, bench_opt *opts, int *n);
tide_engine_config tide_bench_engine_config(const bench_engine_opts *o);
/* The help lines of those flags. */
void tide_bench_engine_help(FILE *f);

struct tide_roof;
/* The roofline lines of one step (bench_roofline.c): bytes and FLOPs by
 * part, the roofline time under the given ceilings and, when measured > 0
 * (seconds), the ratio roofline / measured. kv names the cache dtypes. */
void tide_bench_print_roofline(const struct tide_roof *r, const char *kv, double bytes_per_s, double flops_per_s,
                               double measured);

/* "12.3 MB" style (decimal prefixes) into buf; returns buf. */
const char *tide_bench_si(double x, const char *unit, char *buf, int cap);

#endif
