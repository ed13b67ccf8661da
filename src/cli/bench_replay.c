/* tide bench replay: how far bounded SWA replay (and the decoder variant)
 * moves the model's outputs from a full prefill (docs/replay.md).
 *
 * For each random prompt of L tokens, with a prefix-cache hit of F tokens
 * (F rounded down to the compress ratios; at most L - 1):
 *   - the reference: one full prefill of [0, L), then G - 1 decode steps
 *     feeding its own greedy tokens;
 *   - bounded replay R: a sequence restored at frozen F, start F - R
 *     (full: 0), sharing the reference's blocks of [0, F) (kv_block 1), fed
 *     [start, L) and the same G - 1 tokens (teacher-forced);
 *   - decoder variant T: a prefill of [0, L) with tail_lo = L - T (full: 0),
 *     then the same decode tokens.
 * Measured at the last prompt row ("first": the logits of the first token
 * after the hit's suffix) and over the G rows (that row and the G - 1
 * decode steps): max and mean |logit difference|, and greedy agreement:
 * the fraction of prompts whose G argmax tokens all match the reference's
 * and the mean length of the matching prefix. Both layouts: canonical
 * (ref_layout 0, intended index keys) and the reference's (the defaults). */
#include "cli/bench_replay.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/model_spec.h"
#include "cli/cli.h"
#include "model/forward.h"
#include "model/model.h"
#include "text/render.h"
#include "text/tokenizer.h"

#define MAX_VARIANTS 16
#define FULL (-1) /* a replay / tail length meaning "everything" */

typedef struct {
    const char *model, *text;
    int32_t *text_ids; /* --text: the file's ids (BOS first) */
    int64_t n_text;
    int prompts, len_lo, len_hi, hit, gen, threads;
    uint64_t seed;
    int n_replay, n_decoder;
    int64_t replay[MAX_VARIANTS], decoder[MAX_VARIANTS];
    int modes; /* bit 0 canonical, bit 1 reference layout */
} opts;

/* Accumulated differences of one variant over the prompts. */
typedef struct {
    double max_first, sum_first, max_gen, sum_gen;
    int all_match;
    double sum_prefix;
} acc;

static void usage(FILE *f) {
    fprintf(f,
            "usage: tide bench replay --model DIR|synth:SHAPE [options]\n"
            "\n"
            "Accuracy of bounded SWA replay on prefix-cache hits (docs/replay.md): for\n"
            "random prompts, a full prefill against a sequence restored from a hit of F\n"
            "tokens that recomputes only the last R tokens before it, and against the\n"
            "decoder variant (layers above the last KV source run only on the last T\n"
            "prompt tokens). Reports max / mean |logit difference| at the last prompt row\n"
            "and over G greedy (teacher-forced) steps, and greedy agreement, in the\n"
            "canonical and the reference attention layouts.\n"
            "\n"
            "options:\n"
            "  --model SPEC       checkpoint directory, or synth:tiny|small|...\n"
            "  --prompts N        random prompts (default 8)\n"
            "  --len L|L1:L2      prompt length, or a range drawn per prompt (default 64)\n"
            "  --hit P            cached prefix length, rounded down to the compress ratios\n"
            "                     and capped at L - 1 (default: L - 1)\n"
            "  --replay LIST      replay lengths R, 'full' = the whole prefix (default 8,16,24,full)\n"
            "  --decoder LIST     decoder-variant tails T, 'full' = the whole prompt\n"
            "                     (default 8,16,24,full; 'none' for none)\n"
            "  --gen G            greedy tokens compared (default 8)\n"
            "  --layout WHICH     canonical, reference or both (default both)\n"
            "  --seed N           prompts (default 1)\n"
            "  --text FILE        prompts from this text instead of random ids: consecutive\n"
            "                     slices of its tokens (the model's tokenizer.json), BOS first\n"
            "  --threads N        worker threads (default 2)\n");
}

static int parse_list(const char *s, int64_t *out, int *n) {
    *n = 0;
    if (!strcmp(s, "none")) return 0;
    char buf[512];
    if (strlen(s) >= sizeof buf) return -1;
    strcpy(buf, s);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (*n == MAX_VARIANTS) return -1;
        if (!strcmp(t, "full")) out[(*n)++] = FULL;
        else if (tide_cli_parse_i64(t, 0, 1 << 30, &out[*n]) == 0) (*n)++;
        else return -1;
    }
    return *n > 0 ? 0 : -1;
}

static int parse_args(int argc, char **argv, opts *o) {
    *o = (opts){.prompts = 8, .len_lo = 64, .len_hi = 64, .hit = -1, .gen = 8, .threads = 2, .seed = 1,
                .modes = 3};
    parse_list("8,16,24,full", o->replay, &o->n_replay);
    parse_list("8,16,24,full", o->decoder, &o->n_decoder);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t x, y;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return 1;
        if (!v) goto bad;
        i++;
        if (!strcmp(a, "--model")) o->model = v;
        else if (!strcmp(a, "--text")) o->text = v;
        else if (!strcmp(a, "--prompts") && tide_cli_parse_i64(v, 1, 100000, &x) == 0) o->prompts = (int)x;
        else if (!strcmp(a, "--gen") && tide_cli_parse_i64(v, 1, 4096, &x) == 0) o->gen = (int)x;
        else if (!strcmp(a, "--threads") && tide_cli_parse_i64(v, 1, 256, &x) == 0) o->threads = (int)x;
        else if (!strcmp(a, "--seed") && tide_cli_parse_i64(v, 0, INT64_MAX, &x) == 0) o->seed = (uint64_t)x;
        else if (!strcmp(a, "--hit") && tide_cli_parse_i64(v, 0, 1 << 30, &x) == 0) o->hit = (int)x;
        else if (!strcmp(a, "--replay") && parse_list(v, o->replay, &o->n_replay) == 0) {
        } else if (!strcmp(a, "--decoder") && parse_list(v, o->decoder, &o->n_decoder) == 0) {
        } else if (!strcmp(a, "--layout") && !strcmp(v, "canonical")) o->modes = 1;
        else if (!strcmp(a, "--layout") && !strcmp(v, "reference")) o->modes = 2;
        else if (!strcmp(a, "--layout") && !strcmp(v, "both")) o->modes = 3;
        else if (!strcmp(a, "--len")) {
            const char *colon = strchr(v, ':');
            char lo[32];
            if (!colon) {
                if (tide_cli_parse_i64(v, 2, 1 << 20, &x) != 0) goto bad_value;
                o->len_lo = o->len_hi = (int)x;
                continue;
            }
            if ((size_t)(colon - v) >= sizeof lo) goto bad_value;
            memcpy(lo, v, (size_t)(colon - v));
            lo[colon - v] = 0;
            if (tide_cli_parse_i64(lo, 2, 1 << 20, &x) != 0 || tide_cli_parse_i64(colon + 1, x, 1 << 20, &y) != 0)
                goto bad_value;
            o->len_lo = (int)x;
            o->len_hi = (int)y;
        } else goto bad_value;
        continue;
    bad_value:
        fprintf(stderr, "tide bench replay: bad value for %s: '%s'\n", a, v);
        return -1;
    bad:
        fprintf(stderr, "tide bench replay: unknown option or missing value: %s\n", a);
        return -1;
    }
    if (!o->model) {
        fprintf(stderr, "tide bench replay: --model is required\n");
        return -1;
    }
    return 0;
}

static uint64_t next_rand(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int64_t argmax(const float *x, int64_t n) {
    int64_t b = 0;
    for (int64_t i = 1; i < n; i++) b = x[i] > x[b] ? i : b;
    return b;
}

/* Least common multiple of the backbone's compress ratios. */
static int64_t ratio_lcm(const tide_model *m) {
    int64_t l = 1;
    for (int i = 0; i < m->n_backbone; i++) {
        int64_t r = m->cfg.roles[i].compress_ratio, a = l, b = r;
        if (r <= 0) continue;
        while (b) {
            int64_t t = a % b;
            a = b;
            b = t;
        }
        l = l / a * r;
    }
    return l;
}

/* One run: optional restore, a prefill of p[start..L) (tail_lo applied),
 * then G - 1 decode tokens dec[]; logits [G][V] of the last prompt row and
 * of each decode step. ref (may be NULL) lends its frozen blocks. */
typedef struct {
    tide_fwd_ctx *fx;
    const int32_t *p;
    int64_t L, frozen, start, tail_lo;
    const int32_t *dec;
    int gen;
} run_spec;

static int run(const run_spec *r, tide_seq_cache *c, const tide_seq_cache *ref, float *logits, tide_status *st) {
    const tide_model *m = tide_fwd_model(r->fx);
    int64_t V = m->cfg.text.vocab_size;
    if (tide_fwd_seq_init(r->fx, c, st) != 0) return -1;
    if (ref) {
        for (int k = 0; k < c->n_src; k++)
            if (tide_kv_share(tide_fwd_kv(r->fx), &c->tables[k], ref->tables[k].blocks, r->frozen / c->src[k].ratio,
                              st) != 0)
                return -1;
        if (tide_fwd_seq_restore(r->fx, c, r->p, r->frozen, r->start, st) != 0) return -1;
    }
    c->tail_lo = r->tail_lo;
    tide_step_seq s = {c, r->p + c->pos, r->L - c->pos, TIDE_LOGITS_LAST};
    tide_step_out out = {logits, NULL};
    if (tide_forward(r->fx, &s, 1, &out, st) != 0) return -1;
    for (int i = 0; i + 1 < r->gen; i++) {
        tide_step_seq d = {c, &r->dec[i], 1, TIDE_LOGITS_LAST};
        tide_step_out o = {logits + (int64_t)(i + 1) * V, NULL};
        if (tide_forward(r->fx, &d, 1, &o, st) != 0) return -1;
    }
    return 0;
}

static void compare(const float *got, const float *want, int64_t V, int gen, acc *a) {
    int prefix = 0, matching = 1;
    for (int g = 0; g < gen; g++) {
        const float *x = got + (int64_t)g * V, *y = want + (int64_t)g * V;
        double mx = 0, sum = 0;
        for (int64_t v = 0; v < V; v++) {
            double d = fabs((double)x[v] - (double)y[v]);
            if (!(d == d)) d = INFINITY; /* NaN counts as unbounded */
            mx = d > mx ? d : mx;
            sum += d;
        }
        if (g == 0) {
            a->max_first = mx > a->max_first ? mx : a->max_first;
            a->sum_first += sum / (double)V;
        }
        a->max_gen = mx > a->max_gen ? mx : a->max_gen;
        a->sum_gen += sum / (double)V / gen;
        if (matching && argmax(x, V) == argmax(y, V)) prefix++;
        else matching = 0;
    }
    a->all_match += prefix == gen;
    a->sum_prefix += prefix;
}

static void print_row(const char *mode, const char *variant, int64_t len, const acc *a, int n, int gen) {
    char l[16];
    if (len == FULL) snprintf(l, sizeof l, "full");
    else snprintf(l, sizeof l, "%lld", (long long)len);
    printf("%-9s  %-7s  %5s  %11.3g  %11.3g  %11.3g  %11.3g  %9.2f  %9.2f/%d\n", mode, variant, l, a->max_first,
           a->sum_first / n, a->max_gen, a->sum_gen / n, (double)a->all_match / n, a->sum_prefix / n, gen);
}

/* The study in one layout mode. */
static int study(const tide_model *m, const opts *o, int canonical, tide_status *st) {
    int64_t V = m->cfg.text.vocab_size, lcm = ratio_lcm(m);
    tide_fwd_opts fo = tide_fwd_default_opts();
    fo.kv_block = 1; /* any frozen length is whole blocks */
    if (canonical) fo.ref_layout = fo.index_key_quirk = 0;
    tide_fwd_ctx *fx;
    if (tide_fwd_ctx_create(m, tide_cpu_ops(), o->threads, &fo, &fx, st) != 0) return -1;
    acc ar[MAX_VARIANTS] = {{0}}, ad[MAX_VARIANTS] = {{0}};
    float *want = malloc((size_t)(o->gen * V) * sizeof(float)), *got = malloc((size_t)(o->gen * V) * sizeof(float));
    int32_t *p = malloc((size_t)o->len_hi * sizeof(int32_t)), *dec = malloc((size_t)o->gen * sizeof(int32_t));
    int rc = want && got && p && dec ? 0 : tide_fail(st, TIDE_ERR_NOMEM, "bench replay: out of memory");
    uint64_t rng = o->seed * 0x2545f4914f6cdd1dull + 17;
    int64_t text_off = 0;
    for (int i = 0; i < o->prompts && rc == 0; i++) {
        int64_t L = o->len_lo + (int64_t)(next_rand(&rng) % (uint64_t)(o->len_hi - o->len_lo + 1));
        for (int64_t t = 0; t < L && o->text_ids; t++) /* the next slice of the text, BOS first */
            p[t] = t == 0 ? o->text_ids[0] : o->text_ids[1 + (text_off++ % (o->n_text - 1))];
        for (int64_t t = 0; t < L && !o->text_ids; t++) {
            do p[t] = (int32_t)(next_rand(&rng) % (uint64_t)V);
            while (p[t] == m->cfg.image_token_id);
        }
        int64_t hit = o->hit < 0 || o->hit > L - 1 ? L - 1 : o->hit, F = hit / lcm * lcm;
        /* the reference, and the greedy tokens every run is fed */
        tide_seq_cache ref;
        run_spec rs = {fx, p, L, 0, 0, 0, dec, 1};
        rc = run(&rs, &ref, NULL, want, st);
        for (int g = 1; g < o->gen && rc == 0; g++) {
            dec[g - 1] = (int32_t)argmax(want + (int64_t)(g - 1) * V, V);
            tide_step_seq d = {&ref, &dec[g - 1], 1, TIDE_LOGITS_LAST};
            tide_step_out out = {want + (int64_t)g * V, NULL};
            rc = tide_forward(fx, &d, 1, &out, st);
        }
        rs.gen = o->gen;
        for (int k = 0; k < o->n_replay && rc == 0; k++) {
            tide_seq_cache c;
            run_spec r = rs;
            r.frozen = F;
            r.start = o->replay[k] == FULL || o->replay[k] > F ? 0 : F - o->replay[k];
            rc = run(&r, &c, &ref, got, st);
            tide_fwd_seq_free(fx, &c);
            if (rc == 0) compare(got, want, V, o->gen, &ar[k]);
        }
        for (int k = 0; k < o->n_decoder && rc == 0; k++) {
            tide_seq_cache c;
            run_spec r = rs;
            r.tail_lo = o->decoder[k] == FULL || o->decoder[k] > L ? 0 : L - o->decoder[k];
            if (r.tail_lo == L) r.tail_lo = L - 1; /* the last row always runs */
            rc = run(&r, &c, NULL, got, st);
            tide_fwd_seq_free(fx, &c);
            if (rc == 0) compare(got, want, V, o->gen, &ad[k]);
        }
        tide_fwd_seq_free(fx, &ref);
    }
    const char *mode = canonical ? "canonical" : "reference";
    for (int k = 0; k < o->n_replay && rc == 0; k++) print_row(mode, "replay", o->replay[k], &ar[k], o->prompts, o->gen);
    for (int k = 0; k < o->n_decoder && rc == 0; k++)
        print_row(mode, "decoder", o->decoder[k], &ad[k], o->prompts, o->gen);
    free(want);
    free(got);
    free(p);
    free(dec);
    tide_fwd_ctx_free(fx);
    return rc;
}

/* --text: the file's tokens through MODEL/tokenizer.json, BOS first. */
static int text_prompts(opts *o, tide_status *st) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", o->model);
    tide_tokenizer *tok = NULL;
    size_t len = 0;
    char *text = NULL;
    tide_tok_ids ids = {0};
    int rc = tide_tokenizer_load(path, &tok, st);
    int32_t bos = rc == 0 ? tide_tokenizer_token_id(tok, TIDE_TOK_BOS, strlen(TIDE_TOK_BOS)) : -1;
    if (rc == 0 && bos < 0) rc = tide_fail(st, TIDE_ERR_INVALID, "%s has no %s token", path, TIDE_TOK_BOS);
    if (rc == 0 && tide_tok_ids_push(&ids, bos, st) != 0) rc = -1;
    if (rc == 0 && !(text = tide_cli_read_file(o->text, &len, st))) rc = -1;
    if (rc == 0) rc = tide_tokenizer_encode(tok, text, len, 0, NULL, &ids, st);
    if (rc == 0 && ids.n < 2) rc = tide_fail(st, TIDE_ERR_INVALID, "%s holds no tokens", o->text);
    free(text);
    tide_tokenizer_free(tok);
    if (rc != 0) {
        tide_tok_ids_free(&ids);
        return -1;
    }
    o->text_ids = ids.ids;
    o->n_text = (int64_t)ids.n;
    return 0;
}

int tide_bench_replay(int argc, char **argv) {
    opts o;
    int a = parse_args(argc, argv, &o);
    if (a != 0) {
        usage(a > 0 ? stdout : stderr);
        return a > 0 ? TIDE_EXIT_OK : TIDE_EXIT_USAGE;
    }
    tide_status st = {0};
    tide_model *m;
    if (tide_bench_load_model(o.model, o.threads, &m, &st) != 0) {
        fprintf(stderr, "tide bench replay: %s\n", st.msg);
        return TIDE_EXIT_FAIL;
    }
    if (o.text && text_prompts(&o, &st) != 0) {
        fprintf(stderr, "tide bench replay: --text: %s\n", st.msg);
        tide_model_free(m);
        return TIDE_EXIT_FAIL;
    }
    if (o.text) printf("# prompts: consecutive slices of %s (%lld tokens)\n", o.text, (long long)o.n_text);
    printf("# model %s, %d prompts of %d..%d tokens, hit %s, %d greedy tokens, window %lld, seed %llu\n", o.model,
           o.prompts, o.len_lo, o.len_hi, o.hit < 0 ? "L-1" : "as given", o.gen,
           (long long)m->cfg.text.sliding_window, (unsigned long long)o.seed);
    printf("%-9s  %-7s  %5s  %11s  %11s  %11s  %11s  %9s  %11s\n", "layout", "variant", "R/T", "max|d|first",
           "mean|d|1st", "max|d|gen", "mean|d|gen", "all-match", "prefix");
    int rc = 0;
    for (int canonical = 1; canonical >= 0 && rc == 0; canonical--)
        if (o.modes & (canonical ? 1 : 2)) rc = study(m, &o, canonical, &st);
    if (rc != 0) fprintf(stderr, "tide bench replay: %s\n", st.msg);
    free(o.text_ids);
    tide_model_free(m);
    return rc == 0 ? TIDE_EXIT_OK : TIDE_EXIT_FAIL;
}
