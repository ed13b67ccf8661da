/* gpu_test_model: the whole model on the GPU kernels (the CUDA ops table,
 * src/backend/cuda/cuda_ops.h) against the CPU ops, through tide_forward.
 *
 * For the tiny and small synthetic checkpoints (written to a temporary
 * directory from a fresh seed) and both forward modes (the reference's
 * layouts + index-key quirk; canonical), three prompts of fresh random ids
 * (short; longer than the sliding window in one chunk; the same in chunks
 * with a decode step among them) are run through two forward contexts in
 * lockstep, one on tide_cpu_ops(), one on the CUDA table. Each step's
 * last-row logits are compared, then both are fed the CPU's greedy token
 * (argmax, ties toward the lower id, never the image token) for 32 steps.
 *
 * Asserted per model and mode: the GPU's greedy token equals the CPU's at
 * every step, every logit is finite, and no CUDA error happened. Reported:
 * max and mean |logit difference|, the share of bit-identical logits, and the
 * ops that ran on the CPU (fallbacks) with their counts.
 *
 * Op-level checks of the table itself follow (tiny model only): sparse
 * attention, rope with gaps, top-k edge cases, two contexts at once.
 *
 * TIDE_GPU_SMALL=1 (compute-sanitizer): tiny only, one mode, one chunked
 * prompt, 2 generated tokens. Exit 0 pass, 1 fail, 2 setup error, 77 no GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_ops.h"
#include "gpu_util.h"
#include "shadow_ops.h"
#include "model/config.h"
#include "model/dspark.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/synth.h"
#include "num/num.h"

#define GEN_TOKENS 32
#define GEN_TOKENS_SMALL 2
/* threads of each forward context's pool: the machine's cores, at most 16
 * (results do not depend on it; the CPU side is most of the run time) */
static int n_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 16 ? 16 : (int)n;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct {
    double max_err, sum_err;
    uint64_t n, same, nonfinite;
    int steps, token_mismatch, first_bad_step;
    float first_bad_gap; /* the CPU's top-2 logit gap where tokens first differed */
    int cuda_failed;
    double cpu_s, gpu_s; /* wall time in tide_forward, per side */
    char cuda_msg[TIDE_STATUS_MSG];
} acc;

static void die(const char *what, const tide_status *st) {
    fprintf(stderr, "gpu_test_model: %s: %s\n", what, st->msg);
    exit(2);
}

/* argmax with ties toward the lower id, skipping `skip` (the image token,
 * which the forward rejects); *gap = best - second best. */
static int32_t argmax(const float *x, int64_t n, int64_t skip, float *gap) {
    int64_t b = -1, s = -1;
    for (int64_t i = 0; i < n; i++) {
        if (i == skip) continue;
        if (b < 0 || x[i] > x[b]) {
            s = b;
            b = i;
        } else if (s < 0 || x[i] > x[s]) {
            s = i;
        }
    }
    if (gap) *gap = s >= 0 ? x[b] - x[s] : INFINITY;
    return (int32_t)b;
}

static void compare_logits(acc *a, const float *cpu, const float *gpu, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float c = cpu[i], g = gpu[i];
        if (!isfinite(c) || !isfinite(g)) {
            a->nonfinite++;
            continue;
        }
        double d = fabs((double)g - (double)c);
        a->max_err = d > a->max_err ? d : a->max_err;
        a->sum_err += d;
        a->same += memcmp(&c, &g, sizeof c) == 0;
        a->n++;
    }
}

typedef struct {
    const tide_model *m;
    tide_cuda_ops_ctx *cx;
    tide_fwd_ctx *fc, *fg;
    tide_seq_cache sc, sg;
    float *lc, *lg;
    shadow_ops *shadow; /* TIDE_GPU_SHADOW=1: every GPU op compared with the CPU's */
} pair;

static void pair_open(pair *p, const tide_model *m, tide_cuda_ops_ctx *cx, const tide_fwd_opts *o) {
    tide_status st = {0};
    memset(p, 0, sizeof *p);
    p->m = m;
    p->cx = cx;
    if (tide_fwd_ctx_create(m, tide_cpu_ops(), n_threads(), o, &p->fc, &st) != 0) die("cpu context", &st);
    const tide_ops *gt = tide_cuda_ops_table(cx);
    const char *sh = getenv("TIDE_GPU_SHADOW");
    if (sh && *sh && strcmp(sh, "0") != 0) {
        p->shadow = shadow_ops_create(gt, tide_cpu_ops(), "model");
        if (!p->shadow) {
            fprintf(stderr, "gpu_test_model: shadow table: out of memory\n");
            exit(2);
        }
        gt = shadow_ops_table(p->shadow);
    }
    if (tide_fwd_ctx_create(m, gt, n_threads(), o, &p->fg, &st) != 0) die("gpu context", &st);
    if (tide_fwd_seq_init(p->fc, &p->sc, &st) != 0 || tide_fwd_seq_init(p->fg, &p->sg, &st) != 0)
        die("sequence", &st);
    int64_t V = m->cfg.text.vocab_size;
    p->lc = gu_xmalloc((size_t)V * sizeof(float));
    p->lg = gu_xmalloc((size_t)V * sizeof(float));
}

static void pair_close(pair *p) {
    tide_fwd_seq_free(p->fc, &p->sc);
    tide_fwd_seq_free(p->fg, &p->sg);
    tide_fwd_ctx_free(p->fc);
    tide_fwd_ctx_free(p->fg);
    free(p->lc);
    free(p->lg);
    if (p->shadow) {
        shadow_ops_report(p->shadow);
        shadow_ops_destroy(p->shadow);
    }
}

/* One step of n tokens on both; compares the last row's logits. Returns 0,
 * or -1 after a CUDA error (recorded in a). */
static int pair_step(pair *p, const int32_t *tok, int64_t n, acc *a) {
    tide_status st = {0};
    tide_step_seq sc = {&p->sc, tok, n, TIDE_LOGITS_LAST}, sg = {&p->sg, tok, n, TIDE_LOGITS_LAST};
    tide_step_out oc = {p->lc, NULL}, og = {p->lg, NULL};
    double t0 = now_s();
    if (tide_forward(p->fc, &sc, 1, &oc, &st) != 0) die("cpu forward", &st);
    double t1 = now_s();
    if (tide_forward(p->fg, &sg, 1, &og, &st) != 0) die("gpu forward", &st);
    a->cpu_s += t1 - t0;
    a->gpu_s += now_s() - t1;
    if (tide_cuda_ops_error(p->cx, &st) != 0) {
        a->cuda_failed = 1;
        snprintf(a->cuda_msg, sizeof a->cuda_msg, "%s", st.msg);
        return -1;
    }
    compare_logits(a, p->lc, p->lg, p->m->cfg.text.vocab_size);
    return 0;
}

/* Prompt in the given chunks, then gen greedy steps. */
static void run_case(const tide_model *m, tide_cuda_ops_ctx *cx, const tide_fwd_opts *o, const int32_t *prompt,
                     int len, const int *chunks, int n_chunks, int gen, acc *a) {
    pair p;
    pair_open(&p, m, cx, o);
    int64_t V = m->cfg.text.vocab_size, img = m->cfg.image_token_id;
    int ok = 0;
    for (int off = 0, k = 0; off < len && ok == 0; k++) {
        int c = chunks[k % n_chunks];
        if (c > len - off) c = len - off;
        ok = pair_step(&p, prompt + off, c, a);
        off += c;
    }
    for (int i = 0; i < gen && ok == 0; i++) {
        float gap;
        int32_t tc = argmax(p.lc, V, img, &gap), tg = argmax(p.lg, V, img, NULL);
        a->steps++;
        if (tc != tg) {
            if (!a->token_mismatch) {
                a->first_bad_step = a->steps;
                a->first_bad_gap = gap;
            }
            a->token_mismatch++;
        }
        ok = pair_step(&p, &tc, 1, a); /* both follow the CPU, so logits stay comparable */
    }
    pair_close(&p);
}

/* DSpark: the prompt prefilled (recording the target layers' inputs), the
 * stage rings seeded, then `steps` decode steps each followed by a draft
 * block, on both contexts. The GPU's draft is forced to the CPU's draft ids
 * so that its logits stay comparable; what is checked is that the GPU's own
 * greedy choice (argmax of each of its draft logit rows, Markov bias
 * included) equals the CPU's draft id. */
static void run_dspark(const tide_model *m, tide_cuda_ops_ctx *cx, const tide_fwd_opts *o, const int32_t *prompt,
                       int len, int steps, acc *a) {
    const tide_text_config *c = &m->cfg.text;
    int64_t V = c->vocab_size, B = c->dspark_block_size, T = c->n_dspark_target_layer_ids * c->hidden_size;
    pair p;
    pair_open(&p, m, cx, o);
    float *hc_ = gu_xmalloc((size_t)(len * T) * sizeof(float)), *hg = gu_xmalloc((size_t)(len * T) * sizeof(float));
    float *dc = gu_xmalloc((size_t)(B * V) * sizeof(float)), *dg = gu_xmalloc((size_t)(B * V) * sizeof(float));
    int32_t *idc = gu_xmalloc((size_t)(B + 1) * sizeof(int32_t)), *idg = gu_xmalloc((size_t)(B + 1) * sizeof(int32_t));
    float *cc = gu_xmalloc((size_t)B * sizeof(float)), *cg = gu_xmalloc((size_t)B * sizeof(float));
    tide_status st = {0};
    tide_step_seq sc = {&p.sc, prompt, len, TIDE_LOGITS_LAST}, sg = {&p.sg, prompt, len, TIDE_LOGITS_LAST};
    tide_step_out oc = {p.lc, hc_}, og = {p.lg, hg};
    if (tide_forward(p.fc, &sc, 1, &oc, &st) != 0) die("cpu forward", &st);
    if (tide_forward(p.fg, &sg, 1, &og, &st) != 0) die("gpu forward", &st);
    if (tide_dspark_seed(p.fc, &p.sc, hc_, len, 0, &st) != 0) die("cpu dspark seed", &st);
    if (tide_dspark_seed(p.fg, &p.sg, hg, len, 0, &st) != 0) die("gpu dspark seed", &st);
    for (int k = 0; k < steps && !a->cuda_failed; k++) {
        int32_t tok = argmax(p.lc, V, m->cfg.image_token_id, NULL);
        int64_t pos = p.sc.pos;
        sc.tokens = sg.tokens = &tok;
        sc.n_tokens = sg.n_tokens = 1;
        if (tide_forward(p.fc, &sc, 1, &oc, &st) != 0) die("cpu forward", &st);
        if (tide_forward(p.fg, &sg, 1, &og, &st) != 0) die("gpu forward", &st);
        int32_t next = argmax(p.lc, V, m->cfg.image_token_id, NULL);
        tide_dspark_out outc = {idc, dc, cc}, outg = {idg, dg, cg};
        if (tide_dspark_draft(p.fc, &p.sc, hc_, pos, next, NULL, &outc, &st) != 0) die("cpu dspark draft", &st);
        if (tide_dspark_draft(p.fg, &p.sg, hg, pos, next, idc + 1, &outg, &st) != 0) die("gpu dspark draft", &st);
        if (tide_cuda_ops_error(cx, &st) != 0) {
            a->cuda_failed = 1;
            snprintf(a->cuda_msg, sizeof a->cuda_msg, "%s", st.msg);
            break;
        }
        for (int64_t j = 0; j < B; j++) {
            float gap;
            int32_t want = idc[j + 1], got = argmax(dg + j * V, V, -1, NULL);
            argmax(dc + j * V, V, -1, &gap);
            a->steps++;
            if (got != want) {
                if (!a->token_mismatch) {
                    a->first_bad_step = a->steps;
                    a->first_bad_gap = gap;
                }
                a->token_mismatch++;
            }
        }
        compare_logits(a, dc, dg, B * V);
        compare_logits(a, cc, cg, B);
    }
    free(hc_);
    free(hg);
    free(dc);
    free(dg);
    free(idc);
    free(idg);
    free(cc);
    free(cg);
    pair_close(&p);
}

/* ---- the table's own edge cases, op level, against the CPU ops ---- */

/* Sparse attention through the table: rows with 0, 1, 63, 64, 65 and 130
 * entries (so several launches per call), entries shared between rows,
 * NULL entries, a 64-entry chunk that is all NULL. Bit-identical expected
 * (the kernel is, cuda_kernels.h). */
static void table_attn(gu_ctx *g, tide_cuda_ops_ctx *cx, uint64_t seed) {
    enum { ROWS = 24, HEADS = 3, DIM = 96, POOL = 50, MAXE = 130 };
    static const int counts[] = {0, 1, 63, 64, 65, 130};
    gu_rng r = {seed};
    float *pool = gu_xmalloc(POOL * DIM * sizeof(float)), *q = gu_xmalloc(ROWS * HEADS * DIM * sizeof(float));
    float *oc = gu_xmalloc(ROWS * HEADS * DIM * sizeof(float)), *og = gu_xmalloc(ROWS * HEADS * DIM * sizeof(float));
    const float **ptr = gu_xmalloc(ROWS * MAXE * sizeof(float *));
    tide_attn_row rows[ROWS];
    float sink[HEADS];
    for (int i = 0; i < POOL * DIM; i++) pool[i] = tide_round_bf16((float)gu_normal(&r));
    for (int i = 0; i < ROWS * HEADS * DIM; i++) q[i] = tide_round_bf16((float)gu_normal(&r));
    for (int h = 0; h < HEADS; h++) sink[h] = (float)gu_normal(&r);
    for (int i = 0; i < ROWS; i++) {
        int n = counts[(i + (int)(gu_next(&r) % 6)) % 6];
        for (int e = 0; e < n; e++) {
            int null = gu_next(&r) % 5 == 0 || (i % 4 == 3 && e >= 64 && e < 128);
            ptr[i * MAXE + e] = null ? NULL : pool + (gu_next(&r) % POOL) * DIM;
        }
        rows[i].kv = ptr + i * MAXE;
        rows[i].n_idx = n;
    }
    float scale = 1.0f / sqrtf((float)DIM);
    tide_cpu_ops()->sparse_attn(tide_cpu_ops(), NULL, q, ROWS, HEADS, DIM, rows, sink, scale, oc);
    memset(og, 0xff, ROWS * HEADS * DIM * sizeof(float));
    tide_cuda_ops_table(cx)->sparse_attn(tide_cuda_ops_table(cx), NULL, q, ROWS, HEADS, DIM, rows, sink, scale, og);
    tide_status st = {0};
    int err = tide_cuda_ops_error(cx, &st);
    size_t differ = 0;
    for (int i = 0; i < ROWS * HEADS * DIM; i++) differ += memcmp(&oc[i], &og[i], sizeof(float)) != 0;
    gu_result(g, "table/sparse_attn", !err && differ == 0, "%d rows x %d heads x %d, entry counts 0..130: %zu of %d "
              "outputs differ%s%s", ROWS, HEADS, DIM, differ, ROWS * HEADS * DIM, err ? "; CUDA error: " : "",
              err ? st.msg : "");
    free(pool);
    free(q);
    free(oc);
    free(og);
    free(ptr);
}

/* RoPE through the table on vectors with gaps between them (stride >
 * 2*n_freq): rotated bit for bit, the gaps untouched. */
static void table_rope(gu_ctx *g, tide_cuda_ops_ctx *cx, uint64_t seed) {
    enum { NV = 5, STRIDE = 160, NF = 32, OFF = 96 };
    gu_rng r = {seed};
    float *a = gu_xmalloc(NV * STRIDE * sizeof(float)), *b = gu_xmalloc(NV * STRIDE * sizeof(float)), cs[2 * NF];
    for (int i = 0; i < NV * STRIDE; i++) a[i] = b[i] = tide_round_bf16((float)gu_normal(&r));
    for (int f = 0; f < NF; f++) {
        double t = gu_uniform(&r) * 6.283185307179586;
        cs[2 * f] = (float)cos(t);
        cs[2 * f + 1] = (float)sin(t);
    }
    int pass = 1;
    for (int inv = 0; inv < 2; inv++) {
        tide_cpu_ops()->rope(tide_cpu_ops(), a + OFF - 2 * NF, NV, STRIDE, NF, cs, inv);
        tide_cuda_ops_table(cx)->rope(tide_cuda_ops_table(cx), b + OFF - 2 * NF, NV, STRIDE, NF, cs, inv);
        pass &= memcmp(a, b, NV * STRIDE * sizeof(float)) == 0;
    }
    tide_status st = {0};
    int err = tide_cuda_ops_error(cx, &st);
    gu_result(g, "table/rope_gaps", pass && !err, "%d vectors of %d at stride %d, forward and inverse: %s%s", NV,
              2 * NF, STRIDE, pass ? "bit-identical, gaps untouched" : "DIFFER", err ? st.msg : "");
    free(a);
    free(b);
}

/* Top-k through the table: n = 1, small n with ties, a NaN score (the
 * table must hand that call to the CPU), k > n. */
static void table_topk(gu_ctx *g, tide_cuda_ops_ctx *cx, uint64_t seed) {
    gu_rng r = {seed};
    enum { N = 300 };
    float s[N];
    int32_t oc[N], og[N];
    int pass = 1;
    tide_cuda_ops_stats before, after;
    tide_cuda_ops_get_stats(cx, &before);
    static const int ns[] = {1, 7, N, N, N}, ks[] = {1, 9, 12, 1, N};
    for (int c = 0; c < 5; c++) {
        for (int i = 0; i < ns[c]; i++) s[i] = (float)(gu_next(&r) % 5) - 2.0f; /* heavy ties */
        if (c == 3) s[17] = NAN;
        int a = tide_cpu_ops()->topk_sorted(tide_cpu_ops(), s, ns[c], ks[c], oc, NULL);
        int b = tide_cuda_ops_table(cx)->topk_sorted(tide_cuda_ops_table(cx), s, ns[c], ks[c], og, NULL);
        pass &= a == b && memcmp(oc, og, (size_t)a * sizeof(int32_t)) == 0;
    }
    tide_cuda_ops_get_stats(cx, &after);
    uint64_t fb = after.cpu_fallbacks[TIDE_CUDA_OP_TOPK] - before.cpu_fallbacks[TIDE_CUDA_OP_TOPK];
    tide_status st = {0};
    int err = tide_cuda_ops_error(cx, &st);
    gu_result(g, "table/topk", pass && fb == 1 && !err, "5 cases (n 1..300, ties, k > n, one NaN): %s; %llu CPU "
              "fallback (want 1: the NaN case)%s", pass ? "identical" : "DIFFER", (unsigned long long)fb,
              err ? st.msg : "");
}

/* Two contexts at once: each has its own table (self->ctx), weight map,
 * arena and stats. The same F32 linear + rmsnorm through cx and a second
 * context must give the same bits; each context counts only its own calls
 * and caches the weight once; destroying the second leaves cx working (its
 * copy of the shared host weight stays valid). */
static void table_two_contexts(gu_ctx *g, tide_cuda_ops_ctx *cx, uint64_t seed) {
    enum { ROWS = 5, IN = 64, OUT = 48 };
    gu_rng r = {seed};
    float *wd = gu_xmalloc(OUT * IN * sizeof(float)), *x = gu_xmalloc(ROWS * IN * sizeof(float)), nw[OUT];
    float *y1 = gu_xmalloc(ROWS * OUT * sizeof(float)), *y2 = gu_xmalloc(ROWS * OUT * sizeof(float));
    float *y3 = gu_xmalloc(ROWS * OUT * sizeof(float));
    for (int i = 0; i < OUT * IN; i++) wd[i] = (float)gu_normal(&r);
    for (int i = 0; i < ROWS * IN; i++) x[i] = tide_round_bf16((float)gu_normal(&r));
    for (int i = 0; i < OUT; i++) nw[i] = (float)gu_uniform(&r) + 0.5f;
    tide_weight w = {TIDE_W_F32, OUT, IN, wd, NULL};
    tide_status st = {0};
    tide_cuda_ops_ctx *cx2;
    if (tide_cuda_ops_create(&cx2, &st) != 0) {
        gu_result(g, "table/two_contexts", 0, "a second context while one exists: %s", st.msg);
        goto done;
    }
    const tide_ops *t1 = tide_cuda_ops_table(cx), *t2 = tide_cuda_ops_table(cx2);
    int own = t1 != t2 && t1->ctx == (void *)cx && t2->ctx == (void *)cx2;
    tide_cuda_ops_stats b1, a1, a2;
    memset(&a2, 0, sizeof a2);
    tide_cuda_ops_get_stats(cx, &b1);
    float *ys[3] = {y1, y2, y3};
    const tide_ops *ts[3] = {t1, t2, t1};
    for (int k = 0; k < 3; k++) {
        if (k == 2) { /* stats of cx2 before it goes */
            tide_cuda_ops_get_stats(cx2, &a2);
            own &= tide_cuda_ops_error(cx2, &st) == 0;
            tide_cuda_ops_destroy(cx2);
        }
        memset(ys[k], 0xff, ROWS * OUT * sizeof(float));
        ts[k]->linear(ts[k], NULL, &w, x, ROWS, ys[k], TIDE_LIN_BF16_OUT);
        ts[k]->rmsnorm(ts[k], NULL, ys[k], ROWS, OUT, nw, 1e-6, ys[k]);
    }
    tide_cuda_ops_get_stats(cx, &a1);
    int err = tide_cuda_ops_error(cx, &st);
    int same = !memcmp(y1, y2, ROWS * OUT * sizeof(float)) && !memcmp(y1, y3, ROWS * OUT * sizeof(float));
    uint64_t c1 = a1.gpu_calls[TIDE_CUDA_OP_LINEAR_F32] - b1.gpu_calls[TIDE_CUDA_OP_LINEAR_F32];
    uint64_t n1 = a1.gpu_calls[TIDE_CUDA_OP_RMSNORM] - b1.gpu_calls[TIDE_CUDA_OP_RMSNORM];
    uint64_t c2 = a2.gpu_calls[TIDE_CUDA_OP_LINEAR_F32], n2 = a2.gpu_calls[TIDE_CUDA_OP_RMSNORM];
    /* the second context caches the linear weight and the norm weight once each */
    int counted = c1 == 2 && n1 == 2 && c2 == 1 && n2 == 1 && a2.weights_cached == 2;
    gu_result(g, "table/two_contexts", own && same && counted && !err,
              "linear f32 + rmsnorm on cx, a second context, cx after the second is destroyed: %s; own tables %s; "
              "calls counted per context %s (cx %llu+%llu, second %llu+%llu)%s%s",
              same ? "bit-identical" : "DIFFER", own ? "yes" : "NO", counted ? "yes" : "NO", (unsigned long long)c1,
              (unsigned long long)n1, (unsigned long long)c2, (unsigned long long)n2, err ? "; CUDA error: " : "",
              err ? st.msg : "");
done:
    free(wd);
    free(x);
    free(y1);
    free(y2);
    free(y3);
}

static void random_prompt(gu_rng *r, const tide_model *m, int32_t *p, int n) {
    for (int i = 0; i < n; i++) {
        do p[i] = (int32_t)(gu_next(r) % (uint64_t)m->cfg.text.vocab_size);
        while (p[i] == m->cfg.image_token_id);
    }
}

static void report_fallbacks(gu_ctx *g, const char *shape, tide_cuda_ops_ctx *cx) {
    tide_cuda_ops_stats s;
    tide_cuda_ops_get_stats(cx, &s);
    char buf[400] = "";
    size_t used = 0;
    for (int op = 0; op < TIDE_CUDA_OP_COUNT && used < sizeof buf; op++)
        if (s.cpu_fallbacks[op])
            used += (size_t)snprintf(buf + used, sizeof buf - used, "%s%s %llu", used ? ", " : "",
                                     tide_cuda_op_name(op), (unsigned long long)s.cpu_fallbacks[op]);
    uint64_t gpu = 0;
    for (int op = 0; op < TIDE_CUDA_OP_COUNT; op++) gpu += s.gpu_calls[op];
    char name[64];
    snprintf(name, sizeof name, "%s/ops", shape);
    gu_result(g, name, 1, "%llu GPU op calls, %llu kernel launches, %.1f MB up (%.1f MB weights, %llu tensors), "
                          "%.1f MB down; CPU fallbacks: %s",
              (unsigned long long)gpu, (unsigned long long)s.kernel_launches, (double)s.bytes_uploaded / 1e6,
              (double)s.weight_bytes / 1e6, (unsigned long long)s.weights_cached, (double)s.bytes_downloaded / 1e6,
              used ? buf : "none");
}

/* Batch invariance on the GPU: each of NB requests run alone (prefill in one
 * chunk, then greedy decode) and all of them together, one ragged batch per
 * step, through the CUDA table: every logits row must be bit-identical. The
 * batched run is fed the tokens the solo runs chose, so rows stay comparable. */
enum { NB = 4, NB_STEPS = 6 };
static void batch_invariance(gu_ctx *g, const tide_model *m, tide_cuda_ops_ctx *cx, const tide_fwd_opts *o,
                             const char *name, gu_rng *r) {
    tide_status st = {0};
    int64_t V = m->cfg.text.vocab_size, img = m->cfg.image_token_id;
    int W = (int)m->cfg.text.sliding_window;
    int len[NB] = {3, W + 1, 2 * W + 5, 1};
    int32_t *prompt[NB], tok[NB][NB_STEPS];
    float *solo = gu_xmalloc((size_t)(NB * (NB_STEPS + 1)) * (size_t)V * sizeof(float));
    float *batch = gu_xmalloc((size_t)NB * (size_t)V * sizeof(float));
    tide_fwd_ctx *fx;
    if (tide_fwd_ctx_create(m, tide_cuda_ops_table(cx), n_threads(), o, &fx, &st) != 0) die("gpu context", &st);
    for (int q = 0; q < NB; q++) {
        prompt[q] = gu_xmalloc((size_t)len[q] * sizeof(int32_t));
        random_prompt(r, m, prompt[q], len[q]);
        tide_seq_cache sc;
        if (tide_fwd_seq_init(fx, &sc, &st) != 0) die("sequence", &st);
        for (int t = 0; t <= NB_STEPS; t++) {
            float *row = solo + ((size_t)q * (NB_STEPS + 1) + (size_t)t) * (size_t)V;
            tide_step_seq ss = {&sc, t == 0 ? prompt[q] : &tok[q][t - 1], t == 0 ? len[q] : 1, TIDE_LOGITS_LAST};
            tide_step_out so = {row, NULL};
            if (tide_forward(fx, &ss, 1, &so, &st) != 0) die("gpu forward (solo)", &st);
            if (t < NB_STEPS) tok[q][t] = argmax(row, V, img, NULL);
        }
        tide_fwd_seq_free(fx, &sc);
    }
    tide_seq_cache sc[NB];
    for (int q = 0; q < NB; q++)
        if (tide_fwd_seq_init(fx, &sc[q], &st) != 0) die("sequence", &st);
    int64_t rows = 0, same = 0;
    for (int t = 0; t <= NB_STEPS; t++) {
        tide_step_seq ss[NB];
        for (int q = 0; q < NB; q++) {
            tide_step_seq one = {&sc[q], t == 0 ? prompt[q] : &tok[q][t - 1], t == 0 ? len[q] : 1, TIDE_LOGITS_LAST};
            ss[q] = one;
        }
        tide_step_out so = {batch, NULL};
        if (tide_forward(fx, ss, NB, &so, &st) != 0) die("gpu forward (batch)", &st);
        for (int q = 0; q < NB; q++) {
            const float *a = solo + ((size_t)q * (NB_STEPS + 1) + (size_t)t) * (size_t)V;
            rows++;
            same += memcmp(a, batch + (size_t)q * (size_t)V, (size_t)V * sizeof(float)) == 0;
        }
    }
    int failed = tide_cuda_ops_error(cx, &st) != 0;
    gu_result(g, name, !failed && same == rows,
              "%lld of %lld logits rows bit-identical alone and in a batch of %d (prompts %d, %d, %d, %d; %d decode "
              "steps)%s%s",
              (long long)same, (long long)rows, NB, len[0], len[1], len[2], len[3], NB_STEPS,
              failed ? "; CUDA error: " : "", failed ? st.msg : "");
    for (int q = 0; q < NB; q++) {
        tide_fwd_seq_free(fx, &sc[q]);
        free(prompt[q]);
    }
    tide_fwd_ctx_free(fx);
    free(solo);
    free(batch);
}

static void run_model(gu_ctx *g, const char *shape, uint64_t seed) {
    tide_status st = {0};
    tide_config cfg;
    if (tide_config_preset(shape, &cfg, &st) != 0) die("preset", &st);
    char dir[4096];
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/tide-gpumodel-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        fprintf(stderr, "gpu_test_model: mkdtemp %s failed\n", dir);
        exit(2);
    }
    tide_synth_opts so;
    memset(&so, 0, sizeof so);
    so.out_dir = dir;
    so.shape = shape;
    so.seed = seed & ((1ull << 62) - 1);
    so.threads = n_threads();
    if (tide_synth_write(&cfg, &so, NULL, &st) != 0) die("synth", &st);
    tide_model *m;
    if (tide_model_load(dir, &m, &st) != 0) die("load", &st);
    /* a fresh context per model: the weight map is keyed by host address */
    tide_cuda_ops_ctx *cx;
    if (tide_cuda_ops_create(&cx, &st) != 0) die("cuda ops", &st);

    int W = (int)m->cfg.text.sliding_window, long_len = 3 * W + 5;
    int32_t *prompt = gu_xmalloc((size_t)long_len * sizeof(int32_t));
    gu_rng r = {seed ^ 0x5eedull};
    static const struct {
        const char *name;
        int ref_layout, quirk;
    } modes[] = {{"ref", 1, 1}, {"canonical", 0, 0}};
    int n_modes = g->small ? 1 : 2, gen = g->small ? GEN_TOKENS_SMALL : GEN_TOKENS;
    for (int mi = 0; mi < n_modes; mi++) {
        tide_fwd_opts o = tide_fwd_default_opts();
        o.ref_layout = modes[mi].ref_layout;
        o.index_key_quirk = modes[mi].quirk;
        acc a;
        memset(&a, 0, sizeof a);
        int chunked[] = {7, 1, W + 2, 1000};
        if (g->small) {
            int two[] = {W, 1000};
            random_prompt(&r, m, prompt, W + 3);
            run_case(m, cx, &o, prompt, W + 3, two, 2, gen, &a);
        } else {
            int whole[] = {1000};
            random_prompt(&r, m, prompt, 5);
            run_case(m, cx, &o, prompt, 5, whole, 1, gen, &a);
            random_prompt(&r, m, prompt, long_len);
            if (!a.cuda_failed) run_case(m, cx, &o, prompt, long_len, whole, 1, gen, &a);
            random_prompt(&r, m, prompt, long_len);
            if (!a.cuda_failed) run_case(m, cx, &o, prompt, long_len, chunked, 4, gen, &a);
        }
        char name[64];
        snprintf(name, sizeof name, "%s/%s", shape, modes[mi].name);
        int pass = !a.cuda_failed && a.token_mismatch == 0 && a.nonfinite == 0 && a.n > 0;
        if (a.cuda_failed)
            gu_result(g, name, 0, "CUDA error: %s", a.cuda_msg);
        else
            gu_result(g, name, pass,
                      "greedy tokens %d/%d identical%s; logits: max |gpu-cpu| %.3g, mean %.3g, %.4f%% bit-identical, "
                      "%llu non-finite; forward time cpu %.1f s, cuda table %.1f s",
                      a.steps - a.token_mismatch, a.steps,
                      a.token_mismatch ? " (mismatch line below)" : "", a.max_err, a.n ? a.sum_err / (double)a.n : 0.0,
                      a.n ? 100.0 * (double)a.same / (double)a.n : 0.0, (unsigned long long)a.nonfinite, a.cpu_s,
                      a.gpu_s);
        if (a.token_mismatch)
            printf("gpu_test_model: %s: first token mismatch at generated step %d, CPU top-2 gap there %.3g\n", name,
                   a.first_bad_step, (double)a.first_bad_gap);
    }
    if (m->has_dspark && !g->small) {
        tide_fwd_opts o = tide_fwd_default_opts();
        acc a;
        memset(&a, 0, sizeof a);
        random_prompt(&r, m, prompt, long_len);
        run_dspark(m, cx, &o, prompt, long_len, 4, &a);
        char name[64];
        snprintf(name, sizeof name, "%s/dspark", shape);
        if (a.cuda_failed)
            gu_result(g, name, 0, "CUDA error: %s", a.cuda_msg);
        else
            gu_result(g, name, a.token_mismatch == 0 && a.nonfinite == 0 && a.n > 0,
                      "draft choices %d/%d identical; draft + confidence logits: max |gpu-cpu| %.3g, mean %.3g, "
                      "%.4f%% bit-identical, %llu non-finite",
                      a.steps - a.token_mismatch, a.steps, a.max_err, a.n ? a.sum_err / (double)a.n : 0.0,
                      a.n ? 100.0 * (double)a.same / (double)a.n : 0.0, (unsigned long long)a.nonfinite);
    }
    for (int mi = g->small ? 1 : 0; mi < 2; mi++) { /* small: the canonical mode only */
        tide_fwd_opts o = tide_fwd_default_opts();
        o.ref_layout = modes[mi].ref_layout;
        o.index_key_quirk = modes[mi].quirk;
        char name[64];
        snprintf(name, sizeof name, "%s/batch-invariance/%s", shape, modes[mi].name);
        tide_status fe = {0};
        if (tide_cuda_ops_error(cx, &fe) != 0) { /* a failed context allocates nothing: the forward refuses */
            gu_result(g, name, 0, "not run: the context failed earlier (%s)", fe.msg);
            continue;
        }
        batch_invariance(g, m, cx, &o, name, &r);
    }
    report_fallbacks(g, shape, cx);
    if (!strcmp(shape, "tiny")) { /* op-level edge cases, once */
        table_attn(g, cx, seed + 11);
        table_rope(g, cx, seed + 12);
        table_topk(g, cx, seed + 13);
        table_two_contexts(g, cx, seed + 14);
    }
    free(prompt);
    tide_cuda_ops_destroy(cx);
    tide_model_free(m);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "gpu_test_model: warning: could not remove %s\n", dir);
}

int main(void) {
    gu_ctx g;
    gu_init(&g, "gpu_test_model");
    run_model(&g, "tiny", g.seed);
    if (!g.small) run_model(&g, "small", g.seed + 1);
    return gu_finish(&g);
}
