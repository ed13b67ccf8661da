/* The DSpark draft head: see dspark.h. The stages are ordinary blocks
 * (tide_block) with their own attention: the draft rows attend to the
 * stage's ring (slots 0 .. min(window, sp+1)-1, in slot order, as the
 * reference lists them) and to every draft row. */
#include "model/dspark.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/forward_internal.h"
#include "num/num.h"

/* main_x = main_norm(main_proj(main_hidden)) for n rows */
static float *main_x(tide_fwd_ctx *fx, const float *main_hidden, int64_t n) {
    const tide_model *m = fx->m;
    const tide_layer *L0 = &m->layers[m->n_backbone];
    int64_t D = m->cfg.text.hidden_size;
    float *x = tide_xmalloc((size_t)(n * D) * sizeof(float));
    fx->ops->linear(fx->ops, fx->pool, &L0->main_proj, main_hidden, n, x, TIDE_LIN_BF16_OUT);
    fx->ops->rmsnorm(fx->ops, fx->pool, x, n, D, L0->main_norm, m->cfg.text.rms_norm_eps, x);
    return x;
}

/* The stage's window KV of main_x rows into the rings: row t goes to
 * cache c[t] (or c[0] for every row when one) at position pos[t]. */
static void seed_stage(tide_fwd_ctx *fx, tide_seq_cache *const *c, int one, int layer, const float *mx, int64_t n,
                       const int64_t *pos) {
    const tide_model *m = fx->m;
    const tide_text_config *tc = &m->cfg.text;
    const tide_attn_weights *a = &m->layers[layer].attn;
    int64_t Dh = tc->head_dim;
    int rd = (int)tc->qk_rope_head_dim;
    float *kv = tide_xmalloc((size_t)(n * Dh) * sizeof(float));
    fx->ops->linear(fx->ops, fx->pool, &a->wkv, mx, n, kv, TIDE_LIN_BF16_OUT);
    fx->ops->rmsnorm(fx->ops, fx->pool, kv, n, Dh, a->kv_norm, tc->rms_norm_eps, kv);
    float cs[512];
    for (int64_t t = 0; t < n; t++) {
        tide_rope_cs(m->layers[layer].rope_freq, rd / 2, pos[t], cs);
        fx->ops->rope(fx->ops, kv + t * Dh + (Dh - rd), 1, Dh, rd / 2, cs, 0);
        tide_seq_ring_put(c[one ? 0 : t], layer, pos[t], kv + t * Dh); /* FP8 */
    }
    free(kv);
}

static int check(const tide_fwd_ctx *fx, const tide_seq_cache *c, tide_status *st) {
    if (!fx->m->has_dspark)
        return tide_fail(st, TIDE_ERR_UNSUPPORTED, "dspark: this checkpoint has no DSpark stages");
    if (c->n_layers != fx->m->n_layers)
        return tide_fail(st, TIDE_ERR_INVALID, "dspark: the sequence cache is for another model");
    return 0;
}

int tide_dspark_seed(tide_fwd_ctx *fx, tide_seq_cache *c, const float *main_hidden, int64_t n,
                     int64_t start, tide_status *st) {
    if (check(fx, c, st) != 0) return -1;
    if (n < 1 || start < 0) return tide_fail(st, TIDE_ERR_INVALID, "dspark seed: bad range");
    float *mx = main_x(fx, main_hidden, n);
    int64_t *pos = tide_xmalloc((size_t)n * sizeof(int64_t));
    for (int64_t t = 0; t < n; t++) pos[t] = start + t;
    for (int l = fx->m->n_backbone; l < fx->m->n_layers; l++) seed_stage(fx, &c, 1, l, mx, n, pos);
    free(pos);
    free(mx);
    return 0;
}

typedef struct {
    const tide_dspark_job *jobs; /* rows i*B .. i*B+B-1 are job i's block */
    int64_t B;
} draft_arg;

/* The stage attention of the draft rows (tide_attn_fn): each row attends
 * to its sequence's ring and to its own block's rows. */
static void draft_attn(tide_step *s, int layer, const float *x, float *out, void *varg) {
    const draft_arg *da = varg;
    const tide_model *m = s->m;
    const tide_text_config *c = &m->cfg.text;
    int64_t R = s->rows, B = da->B, n = R / B, H = c->num_attention_heads, Dh = c->head_dim, QL = c->q_lora_rank;
    int64_t win = c->sliding_window;
    float *qr = tide_xmalloc((size_t)(R * QL) * sizeof(float));
    float *q = tide_xmalloc((size_t)(R * H * Dh) * sizeof(float));
    float *kv = tide_xmalloc((size_t)(R * Dh) * sizeof(float));
    tide_attn_project(s, layer, x, qr, q, kv, NULL);
    int64_t per = win + B;
    const float **ents = tide_xmalloc((size_t)(R * per) * sizeof(float *));
    tide_attn_row *ar = tide_xmalloc((size_t)R * sizeof *ar);
    float *ring = tide_xmalloc((size_t)(n * win * Dh) * sizeof(float)); /* the packed slots decoded */
    for (int64_t i = 0; i < n; i++) {
        const tide_seq_cache *sc = da->jobs[i].cache;
        int64_t sp = da->jobs[i].sp, nr = sp + 1 < win ? sp + 1 : win;
        /* positions whose stage KV was never seeded (a restored sequence's
         * replay, the decoder variant's skipped rows) are empty slots */
        int64_t lo = sc->ring_lo > sc->tail_lo ? sc->ring_lo : sc->tail_lo;
        float *rg = ring + i * win * Dh;
        for (int64_t k = 0; k < nr; k++) tide_seq_ring_get(sc, layer, k, rg + k * Dh);
        for (int64_t r = i * B; r < (i + 1) * B; r++) {
            const float **e = ents + r * per;
            for (int64_t k = 0; k < nr; k++) {
                int64_t t = sp - (sp - k) % win; /* the position slot k holds */
                e[k] = t < lo ? NULL : rg + k * Dh;
            }
            for (int64_t k = 0; k < B; k++) e[nr + k] = kv + (i * B + k) * Dh;
            ar[r].kv = e;
            ar[r].n_idx = (int)(nr + B);
        }
    }
    float *o = tide_xmalloc((size_t)(R * H * Dh) * sizeof(float));
    tide_attn_output(s, layer, q, ar, o, out); /* as the backbone's attention */
    free(ring);
    free(qr);
    free(q);
    free(kv);
    free(ents);
    free(ar);
    free(o);
}

static void embed_rows(const tide_weight *w, const int32_t *ids, int64_t n, float *out) {
    for (int64_t r = 0; r < n; r++) tide_weight_row(w, ids[r], out + r * w->in);
}

int tide_dspark_draft(tide_fwd_ctx *fx, tide_seq_cache *c, const float *main_hidden_row, int64_t sp,
                      int32_t token, const int32_t *forced, tide_dspark_out *out, tide_status *st) {
    tide_dspark_job j = {c, main_hidden_row, sp, token, forced, *out};
    return tide_dspark_draft_many(fx, &j, 1, st);
}

int tide_dspark_draft_many(tide_fwd_ctx *fx, const tide_dspark_job *jobs, int n, tide_status *st) {
    const tide_model *m = fx->m;
    const tide_text_config *tc = &m->cfg.text;
    int64_t V = tc->vocab_size, D = tc->hidden_size, hc = tc->hc_mult, B = tc->dspark_block_size;
    int64_t MR = tc->dspark_markov_rank, T = tc->n_dspark_target_layer_ids * D;
    if (n < 1) return tide_fail(st, TIDE_ERR_INVALID, "dspark draft: no sequences");
    for (int i = 0; i < n; i++) {
        const tide_dspark_job *jb = &jobs[i];
        if (check(fx, jb->cache, st) != 0) return -1;
        if (jb->sp < 0)
            return tide_fail(st, TIDE_ERR_INVALID, "dspark draft: position %lld is negative", (long long)jb->sp);
        if (jb->token < 0 || jb->token >= V)
            return tide_fail(st, TIDE_ERR_INVALID, "dspark draft: token %d outside the vocabulary", jb->token);
        if (jb->forced)
            for (int64_t k = 0; k < B; k++)
                if (jb->forced[k] < 0 || jb->forced[k] >= V)
                    return tide_fail(st, TIDE_ERR_INVALID, "dspark draft: forced id %d outside the vocabulary",
                                     jb->forced[k]);
        for (int k = 0; k < i; k++)
            if (jobs[k].cache == jb->cache)
                return tide_fail(st, TIDE_ERR_INVALID, "dspark draft: sequence %d appears twice", i);
    }
    if (tide_fwd_reserve(fx, (int64_t)n * B, st) != 0) return tide_fail_ctx(st, "dspark draft");
    /* each sequence's ring takes position sp */
    float *hid = tide_xmalloc((size_t)(n * T) * sizeof(float));
    tide_seq_cache **cs = tide_xmalloc((size_t)n * sizeof *cs);
    int64_t *sps = tide_xmalloc((size_t)n * sizeof(int64_t));
    for (int i = 0; i < n; i++) {
        memcpy(hid + (int64_t)i * T, jobs[i].main_hidden_row, (size_t)T * sizeof(float));
        cs[i] = jobs[i].cache;
        sps[i] = jobs[i].sp;
    }
    float *mx = main_x(fx, hid, n);
    for (int l = m->n_backbone; l < m->n_layers; l++) seed_stage(fx, cs, 0, l, mx, n, sps);
    free(mx);
    free(hid);
    free(cs);
    free(sps);

    /* the draft blocks: [token, noise, ...] at sp+1 .. sp+B, B rows each */
    int64_t R = (int64_t)n * B;
    tide_step s;
    memset(&s, 0, sizeof s);
    s.fx = fx;
    s.m = m;
    s.ops = fx->ops;
    s.pool = fx->pool;
    s.rows = R;
    s.row_pos = tide_xmalloc((size_t)R * sizeof(int64_t));
    int32_t *ids = tide_xmalloc((size_t)R * sizeof(int32_t));
    for (int64_t r = 0; r < R; r++) {
        int64_t i = r / B, k = r % B;
        s.row_pos[r] = jobs[i].sp + 1 + k;
        ids[r] = k == 0 ? jobs[i].token : (int32_t)tc->dspark_noise_token_id;
    }
    /* the blocks' stream in the backend's memory (the forward's buffers) */
    float *h = fx->buf[FB_H], *pre_mix = fx->buf[FB_PRE_MIX];
    fx->ops->embed(fx->ops, &m->embed, ids, R, (int)hc, h);
    float *pm = calloc((size_t)(R * hc), sizeof(float));
    if (!pm) abort();
    for (int64_t r = 0; r < R; r++) pm[r * hc] = 1.0f;
    fx->ops->upload(fx->ops, pre_mix, pm, (size_t)(R * hc) * sizeof(float));
    free(pm);
    draft_arg da = {jobs, B};
    for (int l = m->n_backbone; l < m->n_layers; l++) tide_block(&s, l, h, pre_mix, draft_attn, &da);

    /* head, Markov bias (one row per sequence at a time), drafts, confidence */
    const tide_layer *last = &m->layers[m->n_layers - 1];
    float *xd = fx->buf[FB_X], *xn = fx->buf[FB_Y];
    float *lg = tide_xmalloc((size_t)(R * V) * sizeof(float));
    fx->ops->hc_pre(fx->ops, h, R, (int)hc, D, pre_mix, xd);
    fx->ops->rmsnorm(fx->ops, fx->pool, xd, R, D, last->final_norm, tc->rms_norm_eps, xn);
    fx->ops->linear(fx->ops, fx->pool, &m->head, xn, R, lg, 0);
    float *x = tide_xmalloc((size_t)(R * D) * sizeof(float)); /* the confidence input, on the host */
    fx->ops->download(fx->ops, x, xd, (size_t)(R * D) * sizeof(float));
    float *e = tide_xmalloc((size_t)(R * MR) * sizeof(float)); /* [n][B][MR] */
    float *ej = tide_xmalloc((size_t)(n * MR) * sizeof(float));
    float *bias = tide_xmalloc((size_t)(n * V) * sizeof(float));
    for (int i = 0; i < n; i++) jobs[i].out.draft_ids[0] = jobs[i].token;
    for (int64_t k = 0; k < B; k++) {
        for (int i = 0; i < n; i++) {
            embed_rows(&last->markov_embed, &jobs[i].out.draft_ids[k], 1, ej + (int64_t)i * MR);
            memcpy(e + ((int64_t)i * B + k) * MR, ej + (int64_t)i * MR, (size_t)MR * sizeof(float));
        }
        fx->ops->linear(fx->ops, fx->pool, &last->markov_head, ej, n, bias, 0);
        for (int i = 0; i < n; i++) {
            float *lj = lg + ((int64_t)i * B + k) * V, *bj = bias + (int64_t)i * V;
            int64_t best = 0;
            for (int64_t v = 0; v < V; v++) {
                lj[v] += bj[v];
                if (lj[v] > lj[best]) best = v;
            }
            jobs[i].out.draft_ids[k + 1] = jobs[i].forced ? jobs[i].forced[k] : (int32_t)best;
        }
    }
    float *cat = tide_xmalloc((size_t)(R * (D + MR)) * sizeof(float));
    float *conf = tide_xmalloc((size_t)R * sizeof(float));
    for (int64_t r = 0; r < R; r++) {
        memcpy(cat + r * (D + MR), x + r * D, (size_t)D * sizeof(float));
        memcpy(cat + r * (D + MR) + D, e + r * MR, (size_t)MR * sizeof(float));
    }
    fx->ops->linear(fx->ops, fx->pool, &last->conf_proj, cat, R, conf, 0);
    for (int i = 0; i < n; i++) {
        memcpy(jobs[i].out.confidence, conf + (int64_t)i * B, (size_t)B * sizeof(float));
        if (jobs[i].out.logits)
            memcpy(jobs[i].out.logits, lg + (int64_t)i * B * V, (size_t)(B * V) * sizeof(float));
    }
    free(s.row_pos);
    free(ids);
    free(x);
    free(lg);
    free(e);
    free(ej);
    free(bias);
    free(cat);
    free(conf);
    return 0;
}
