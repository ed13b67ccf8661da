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

/* The stage's window KV of main_x rows at positions pos0.. into the ring. */
static void seed_stage(tide_fwd_ctx *fx, tide_seq_cache *c, int layer, const float *mx, int64_t n,
                       int64_t pos0) {
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
        tide_rope_cs(m->layers[layer].rope_freq, rd / 2, pos0 + t, cs);
        fx->ops->rope(fx->ops, kv + t * Dh + (Dh - rd), 1, Dh, rd / 2, cs, 0);
        tide_seq_ring_put(c, layer, pos0 + t, kv + t * Dh); /* FP8 */
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
    for (int l = fx->m->n_backbone; l < fx->m->n_layers; l++) seed_stage(fx, c, l, mx, n, start);
    free(mx);
    return 0;
}

typedef struct {
    tide_seq_cache *c;
    int64_t sp;
} draft_arg;

/* The stage attention of the draft rows (tide_attn_fn). */
static void draft_attn(tide_step *s, int layer, const float *x, float *out, void *varg) {
    const draft_arg *da = varg;
    const tide_model *m = s->m;
    const tide_text_config *c = &m->cfg.text;
    int64_t B = s->rows, H = c->num_attention_heads, Dh = c->head_dim, QL = c->q_lora_rank;
    int64_t win = c->sliding_window;
    float *qr = tide_xmalloc((size_t)(B * QL) * sizeof(float));
    float *q = tide_xmalloc((size_t)(B * H * Dh) * sizeof(float));
    float *kv = tide_xmalloc((size_t)(B * Dh) * sizeof(float));
    tide_attn_project(s, layer, x, qr, q, kv, NULL);
    int64_t nr = da->sp + 1 < win ? da->sp + 1 : win, per = nr + B;
    /* positions whose stage KV was never seeded (a restored sequence's
     * replay, the decoder variant's skipped rows) are empty slots */
    int64_t lo = da->c->ring_lo > da->c->tail_lo ? da->c->ring_lo : da->c->tail_lo;
    const float **ents = tide_xmalloc((size_t)(B * per) * sizeof(float *));
    tide_attn_row *ar = tide_xmalloc((size_t)B * sizeof *ar);
    float *ring = tide_xmalloc((size_t)(nr * Dh) * sizeof(float)); /* the packed slots decoded */
    for (int64_t i = 0; i < nr; i++) tide_seq_ring_get(da->c, layer, i, ring + i * Dh);
    for (int64_t r = 0; r < B; r++) {
        const float **e = ents + r * per;
        for (int64_t i = 0; i < nr; i++) {
            int64_t t = da->sp - (da->sp - i) % win; /* the position slot i holds */
            e[i] = t < lo ? NULL : ring + i * Dh;
        }
        for (int64_t i = 0; i < B; i++) e[nr + i] = kv + i * Dh;
        ar[r].kv = e;
        ar[r].n_idx = (int)per;
    }
    float *o = tide_xmalloc((size_t)(B * H * Dh) * sizeof(float));
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
    if (check(fx, c, st) != 0) return -1;
    const tide_model *m = fx->m;
    const tide_text_config *tc = &m->cfg.text;
    int64_t V = tc->vocab_size, D = tc->hidden_size, hc = tc->hc_mult, B = tc->dspark_block_size;
    int64_t MR = tc->dspark_markov_rank;
    if (sp < 0) return tide_fail(st, TIDE_ERR_INVALID, "dspark draft: position %lld is negative", (long long)sp);
    if (token < 0 || token >= V)
        return tide_fail(st, TIDE_ERR_INVALID, "dspark draft: token %d outside the vocabulary", token);
    if (forced)
        for (int64_t i = 0; i < B; i++)
            if (forced[i] < 0 || forced[i] >= V)
                return tide_fail(st, TIDE_ERR_INVALID, "dspark draft: forced id %d outside the vocabulary", forced[i]);
    float *mx = main_x(fx, main_hidden_row, 1);
    for (int l = m->n_backbone; l < m->n_layers; l++) seed_stage(fx, c, l, mx, 1, sp);
    free(mx);

    /* the draft block: [token, noise, ...] at sp+1 .. sp+B */
    tide_step s;
    memset(&s, 0, sizeof s);
    s.fx = fx;
    s.m = m;
    s.ops = fx->ops;
    s.pool = fx->pool;
    s.rows = B;
    s.row_pos = tide_xmalloc((size_t)B * sizeof(int64_t));
    int32_t *ids = tide_xmalloc((size_t)B * sizeof(int32_t));
    for (int64_t i = 0; i < B; i++) {
        s.row_pos[i] = sp + 1 + i;
        ids[i] = i == 0 ? token : (int32_t)tc->dspark_noise_token_id;
    }
    float *h = tide_xmalloc((size_t)(B * hc * D) * sizeof(float));
    embed_rows(&m->embed, ids, B, h);
    for (int64_t r = B - 1; r >= 0; r--)
        for (int64_t k = 0; k < hc; k++) memmove(h + (r * hc + k) * D, h + r * D, (size_t)D * sizeof(float));
    float *pre_mix = calloc((size_t)(B * hc), sizeof(float));
    if (!pre_mix) abort();
    for (int64_t r = 0; r < B; r++) pre_mix[r * hc] = 1.0f;
    draft_arg da = {c, sp};
    for (int l = m->n_backbone; l < m->n_layers; l++) tide_block(&s, l, h, pre_mix, draft_attn, &da);

    /* head, Markov bias, drafts, confidence */
    const tide_layer *last = &m->layers[m->n_layers - 1];
    float *x = tide_xmalloc((size_t)(B * D) * sizeof(float));
    float *xn = tide_xmalloc((size_t)(B * D) * sizeof(float));
    fx->ops->hc_pre(fx->ops, h, B, (int)hc, D, pre_mix, x);
    fx->ops->rmsnorm(fx->ops, fx->pool, x, B, D, last->final_norm, tc->rms_norm_eps, xn);
    fx->ops->linear(fx->ops, fx->pool, &m->head, xn, B, out->logits, 0);
    float *e = tide_xmalloc((size_t)(B * MR) * sizeof(float));
    float *bias = tide_xmalloc((size_t)V * sizeof(float));
    out->draft_ids[0] = token;
    for (int64_t j = 0; j < B; j++) {
        embed_rows(&last->markov_embed, &out->draft_ids[j], 1, e + j * MR);
        fx->ops->linear(fx->ops, fx->pool, &last->markov_head, e + j * MR, 1, bias, 0);
        float *lj = out->logits + j * V;
        int64_t best = 0;
        for (int64_t v = 0; v < V; v++) {
            lj[v] += bias[v];
            if (lj[v] > lj[best]) best = v;
        }
        out->draft_ids[j + 1] = forced ? forced[j] : (int32_t)best;
    }
    float *cat = tide_xmalloc((size_t)(B * (D + MR)) * sizeof(float));
    for (int64_t j = 0; j < B; j++) {
        memcpy(cat + j * (D + MR), x + j * D, (size_t)D * sizeof(float));
        memcpy(cat + j * (D + MR) + D, e + j * MR, (size_t)MR * sizeof(float));
    }
    fx->ops->linear(fx->ops, fx->pool, &last->conf_proj, cat, B, out->confidence, 0);
    free(s.row_pos);
    free(ids);
    free(h);
    free(pre_mix);
    free(x);
    free(xn);
    free(e);
    free(bias);
    free(cat);
    return 0;
}
