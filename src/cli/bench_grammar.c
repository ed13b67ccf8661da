/* tide bench grammar: structured-output constraints (docs/structured.md)
 * over a corpus of JSON Schemas, regexes and GBNF grammars
 * (tests/data/structured/corpus.jsonl by default) against the stand-in
 * tokenizer's vocabulary padded to 129,280 ids: the compile time of each
 * constraint, and the time of every token mask along a generation that
 * picks random allowed tokens (the end token, where allowed, with
 * probability 1/8), on this thread alone.
 *
 * Times are this thread's CPU time (CLOCK_THREAD_CPUTIME_ID): on a shared
 * machine the wall clock includes waiting for a core. Compile time is the
 * compiler's alone (JSON parse, tree, NFA); a generation's first masks
 * include the lazy determinisation and trie walks a cache then saves. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/stats.h"
#include "cli/bench.h"
#include "cli/cli.h"
#include "constrain/constrain.h"
#include "text/tokenizer.h"

#define VOCAB 129280
#ifndef TIDE_BENCH_GRAMMAR_CORPUS /* CMake sets the source tree's */
#define TIDE_BENCH_GRAMMAR_CORPUS "tests/data/structured/corpus.jsonl"
#endif

static void usage(FILE *f) {
    fprintf(f,
            "usage: tide bench grammar [--corpus FILE] [--tokenizer FILE] [--tokens N] [--runs N] [--seed N]\n"
            "\n"
            "Structured outputs: per constraint of the corpus (JSON lines {\"kind\": \"json_schema\" |\n"
            "\"regex\" | \"gbnf\" | \"lark\", \"text\": ...}; default tests/data/structured/corpus.jsonl), the\n"
            "compile time, then a generation of up to --tokens tokens (default 64) of random\n"
            "allowed tokens over the tokenizer's vocabulary padded to %d ids (default the\n"
            "stand-in tokenizer), timing every token mask. Prints p50/p90/p99/max of both, in\n"
            "this thread's CPU time. --runs N (default 1): N generations per constraint, each\n"
            "on its own random path; runs after the first share the constraint's cached\n"
            "positions and masks (as later requests with the same constraint do) and are\n"
            "reported apart (\"warm\").\n",
            VOCAB);
}

static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t next_rand(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

typedef struct samples { double *v; int64_t n, cap; } samples;

static int push(samples *s, double x) {
    if (s->n == s->cap) {
        int64_t cap = s->cap ? 2 * s->cap : 1024;
        double *v = realloc(s->v, (size_t)cap * sizeof *v);
        if (!v) return -1;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = x;
    return 0;
}

static void report(const char *what, samples *s) {
    tide_stats_sort(s->v, s->n);
    printf("%-22s n=%-7lld p50 %9.1f us  p90 %9.1f us  p99 %9.1f us  max %9.1f us  mean %9.1f us\n", what,
           (long long)s->n, 1e6 * tide_stats_percentile(s->v, s->n, 50), 1e6 * tide_stats_percentile(s->v, s->n, 90),
           1e6 * tide_stats_percentile(s->v, s->n, 99), s->n ? 1e6 * s->v[s->n - 1] : 0.0, 1e6 * tide_stats_mean(s->v, s->n));
}

int tide_bench_grammar(int argc, char **argv) {
    const char *corpus = TIDE_BENCH_GRAMMAR_CORPUS, *tokp = TIDE_DEFAULT_TOKENIZER;
    int64_t tokens = 64, seed = 1, runs = 1;
    const bench_opt opts[] = {
        {"--corpus", BENCH_STR, &corpus, 0, 0},
        {"--tokenizer", BENCH_STR, &tokp, 0, 0},
        {"--tokens", BENCH_INT, &tokens, 1, 1 << 20},
        {"--runs", BENCH_INT, &runs, 1, 1000},
        {"--seed", BENCH_INT, &seed, 0, INT64_MAX},
        {NULL, 0, NULL, 0, 0},
    };
    int rc = tide_bench_parse("grammar", argc, argv, opts, usage);
    if (rc >= 0) return rc;
    tide_status st = {0};
    tide_tokenizer *tok = NULL;
    tide_cons_vocab *v = NULL;
    FILE *f = NULL;
    samples comp = {0}, mask = {0}, mask_s = {0}, mask_r = {0}, mask_g = {0}, warm = {0};
    int ret = TIDE_EXIT_FAIL, n_items = 0, n_failed = 0;
    int64_t n_stop = 0, n_length = 0;
    if (tide_tokenizer_load(tokp, &tok, &st) != 0) {
        fprintf(stderr, "tide bench grammar: %s\n", st.msg);
        goto done;
    }
    double t0 = cpu_now();
    if (tide_cons_vocab_from_tokenizer(tok, VOCAB, &v, &st) != 0) {
        fprintf(stderr, "tide bench grammar: %s\n", st.msg);
        goto done;
    }
    printf("vocabulary: %d ids (%u from %s), trie built in %.1f ms\n", VOCAB, tide_tokenizer_n_ids(tok), tokp,
           1e3 * (cpu_now() - t0));
    int32_t end = tide_tokenizer_token_id(tok, "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", 27);
    if (end < 0) end = VOCAB - 1;
    if (!(f = fopen(corpus, "r"))) {
        fprintf(stderr, "tide bench grammar: cannot open the corpus %s\n", corpus);
        goto done;
    }
    uint32_t *allow = malloc((VOCAB + 31) / 32 * sizeof *allow);
    if (!allow) goto done;
    uint64_t rng = (uint64_t)seed;
    char line[1 << 16];
    while (fgets(line, sizeof line, f)) {
        json_t *o = json_loads(line, 0, NULL);
        if (!o) continue;
        const char *kind = json_string_value(json_object_get(o, "kind"));
        json_t *text = json_object_get(o, "text");
        tide_cons_kind k = kind && !strcmp(kind, "regex") ? TIDE_CONS_REGEX
                           : kind && !strcmp(kind, "gbnf") ? TIDE_CONS_GBNF
                           : kind && !strcmp(kind, "lark") ? TIDE_CONS_LARK : TIDE_CONS_JSON_SCHEMA;
        char *t = json_is_string(text) ? strdup(json_string_value(text)) : json_dumps(text, JSON_COMPACT | JSON_ENCODE_ANY);
        json_decref(o);
        if (!t) continue;
        n_items++;
        tide_cons_grammar *g = NULL;
        double c0 = cpu_now();
        int crc = tide_cons_compile(k, t, strlen(t), &g, &st);
        double c1 = cpu_now();
        free(t);
        if (crc != 0) {
            fprintf(stderr, "corpus line %d: %s\n", n_items, st.msg);
            n_failed++;
            continue;
        }
        push(&comp, c1 - c0);
        for (int64_t run = 0; run < runs; run++) { /* the first run fills the shared caches */
            tide_cons *c = NULL;
            if (tide_cons_new(g, v, &c, &st) != 0) {
                fprintf(stderr, "corpus line %d: %s\n", n_items, st.msg);
                n_failed++;
                break;
            }
            samples *per = k == TIDE_CONS_REGEX ? &mask_r : k == TIDE_CONS_GBNF || k == TIDE_CONS_LARK ? &mask_g : &mask_s;
            int64_t i = 0;
            for (; i < tokens; i++) {
                double m0 = cpu_now();
                int mrc = tide_cons_mask(c, allow, &end, 1, &st);
                double m1 = cpu_now();
                if (mrc != 0) {
                    fprintf(stderr, "corpus line %d, token %lld: %s\n", n_items, (long long)i, st.msg);
                    n_failed++;
                    break;
                }
                if (run == 0) {
                    push(&mask, m1 - m0);
                    push(per, m1 - m0);
                } else push(&warm, m1 - m0);
                int32_t pick = -1;
                if ((allow[end >> 5] >> (end & 31) & 1) && next_rand(&rng) % 8 == 0) pick = end;
                /* a random allowed token: random probes, then a scan from a random start */
                for (int tries = 0; pick < 0 && tries < 64; tries++) {
                    int32_t x = (int32_t)(next_rand(&rng) % VOCAB);
                    if (allow[x >> 5] >> (x & 31) & 1) pick = x;
                }
                for (int32_t x = (int32_t)(next_rand(&rng) % VOCAB), n = 0; pick < 0 && n < VOCAB; n++, x = (x + 1) % VOCAB)
                    if (allow[x >> 5] >> (x & 31) & 1) pick = x;
                if (tide_cons_accept(c, pick, &end, 1, &st) != 0) {
                    fprintf(stderr, "corpus line %d: %s\n", n_items, st.msg);
                    n_failed++;
                    break;
                }
                if (pick == end || tide_cons_done(c)) break;
            }
            if (i < tokens) n_stop++;
            else n_length++;
            tide_cons_free(c);
        }
        tide_cons_grammar_unref(g);
    }
    free(allow);
    printf("corpus %s: %d constraints (%d failed), %lld generations ended, %lld at --tokens %lld\n", corpus, n_items,
           n_failed, (long long)n_stop, (long long)n_length, (long long)tokens);
    report("compile", &comp);
    report("mask (all)", &mask);
    report("mask (json schema)", &mask_s);
    report("mask (regex)", &mask_r);
    report("mask (gbnf, lark)", &mask_g);
    if (runs > 1) report("mask (warm: runs 2..)", &warm);
    ret = n_failed ? TIDE_EXIT_FAIL : TIDE_EXIT_OK;
done:
    if (f) fclose(f);
    free(comp.v), free(mask.v), free(mask_s.v), free(mask_r.v), free(mask_g.v), free(warm.v);
    tide_cons_vocab_free(v);
    tide_tokenizer_free(tok);
    return ret;
}
