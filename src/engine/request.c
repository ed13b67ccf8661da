/* Request validation and bookkeeping: see request.h. */
#include "engine/request.h"

#include "constrain/constrain.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cache/kvstore.h"
#include "cache/prefix.h"
#include "vision/image.h"

static int check(const tide_request *r, int64_t vocab, int32_t image_token, int64_t max_len, const int8_t *types,
                 tide_status *st) {
    if (!r->prompt || r->n_prompt < 1)
        return tide_fail(st, TIDE_ERR_INVALID, "request: the prompt is empty (need at least one token id)");
    if (r->kv_class < TIDE_KV_CLASS_DEFAULT || r->kv_class > TIDE_KV_CLASS_AGENT)
        return tide_fail(st, TIDE_ERR_INVALID, "request: kv_class %d is not 0 (default), 1 (chat) or 2 (agent)",
                         r->kv_class);
    for (int64_t i = 0; i < r->n_prompt; i++) {
        int32_t t = r->prompt[i];
        if (t < 0 || t >= vocab)
            return tide_fail(st, TIDE_ERR_INVALID,
                             "request: prompt token %lld: id %d is outside the vocabulary (0..%lld)",
                             (long long)i, t, (long long)(vocab - 1));
        if (image_token >= 0 && (t == image_token) != (types && types[i] >= 0))
            return tide_fail(st, TIDE_ERR_INVALID,
                             t == image_token
                                 ? "request: prompt token %lld is the image token %d outside an image's span"
                                 : "request: prompt token %lld is %d inside an image's span (the image token expected)",
                             (long long)i, t);
    }
    if (r->sampling.max_tokens < 1)
        return tide_fail(st, TIDE_ERR_INVALID, "request: max_tokens is %lld; it must be at least 1",
                         (long long)r->sampling.max_tokens);
    /* the forward pass's own limit, checked without overflow */
    int64_t limit = (int64_t)INT32_MAX / 2;
    if (max_len > 0 && max_len < limit) limit = max_len;
    if (r->n_prompt > limit || r->sampling.max_tokens > limit - r->n_prompt)
        return tide_fail(st, TIDE_ERR_INVALID,
                         "request: prompt (%lld tokens) + max_tokens (%lld) exceeds the context of %lld tokens",
                         (long long)r->n_prompt, (long long)r->sampling.max_tokens, (long long)limit);
    if (tide_sampling_params_check(&r->sampling, (int32_t)vocab, st) != 0)
        return tide_fail_ctx(st, "request");
    return 0;
}

static void *dup_array(const void *src, size_t n, size_t size) {
    if (n == 0 || !src) return NULL;
    void *d = malloc(n * size);
    if (d) memcpy(d, src, n * size);
    return d;
}

/* The stop list: the request's own ids, then the model's EOS ids if asked
 * (NULL when empty). */
static int32_t *stop_list(const tide_request *r, const tide_req_model *m, int32_t *n) {
    int32_t own = r->sampling.n_stop_tokens > 0 ? r->sampling.n_stop_tokens : 0;
    int32_t eos = r->stop_at_eos ? m->n_eos : 0;
    *n = own + eos;
    if (*n == 0) return NULL;
    int32_t *s = malloc((size_t)*n * sizeof *s);
    if (!s) return NULL;
    if (own) memcpy(s, r->sampling.stop_tokens, (size_t)own * sizeof *s);
    if (eos) memcpy(s + own, m->eos, (size_t)eos * sizeof *s);
    return s;
}

/* The image spans of r: q's img_types and img_row (rows counted in
 * n_img_rows, allocated by the engine) and its prefix-cache keys for the
 * prompt. Each image's span is its plan's (image.h), in prompt order. */
static int image_spans(const tide_request *r, const tide_req_model *m, tide_req *q, tide_status *st) {
    if (r->n_images < 0 || (r->n_images > 0 && !r->images))
        return tide_fail(st, TIDE_ERR_INVALID, "request: %d images with no array", r->n_images);
    if (!m->vision || m->image_token < 0)
        return tide_fail(st, TIDE_ERR_UNSUPPORTED, "request: the model has no vision tower: images are not accepted");
    size_t n = (size_t)r->n_prompt;
    q->img_types = malloc(n);
    q->img_row = malloc(n * sizeof *q->img_row);
    q->keys = malloc((size_t)q->cap_tokens * sizeof *q->keys);
    if (!q->img_types || !q->img_row || !q->keys) return tide_fail(st, TIDE_ERR_NOMEM, "request: out of memory");
    memset(q->img_types, 0xff, n); /* -1: text */
    memcpy(q->keys, r->prompt, n * sizeof *q->keys);
    int64_t end = 0, rows = 0;
    for (int i = 0; i < r->n_images; i++) {
        const tide_request_image *im = &r->images[i];
        tide_image_plan pl;
        if (!im->rgb || im->w < 1 || im->h < 1)
            return tide_fail(st, TIDE_ERR_INVALID, "request: image %d has no pixels", i);
        if (tide_image_plan_grid(im->w, im->h, m->vision, &pl, st) != 0)
            return tide_fail_ctx(st, "request: image %d", i);
        int64_t len = tide_image_span_len(&pl);
        if (im->pos < end || im->pos > r->n_prompt - len)
            return tide_fail(st, TIDE_ERR_INVALID,
                             "request: image %d's span [%lld, %lld) is outside the prompt (%lld tokens) or overlaps "
                             "the previous image's (images in prompt order)",
                             i, (long long)im->pos, (long long)(im->pos + len), (long long)r->n_prompt);
        tide_image_span_types(&pl, q->img_types + im->pos);
        /* the pixels' hash (and size), then one key per span position */
        uint64_t h = tide_prefix_root(((uint64_t)(uint32_t)im->w << 32) | (uint32_t)im->h);
        size_t nb = (size_t)im->w * (size_t)im->h * 3, whole = nb / 4;
        for (size_t o = 0; o < whole;) {
            int32_t chunk[4096];
            size_t k = whole - o < 4096 ? whole - o : 4096;
            memcpy(chunk, im->rgb + 4 * o, 4 * k);
            h = tide_prefix_page_hash(h, chunk, (int32_t)k);
            o += k;
        }
        int32_t tail = 0;
        memcpy(&tail, im->rgb + 4 * whole, nb - 4 * whole);
        h = tide_prefix_page_hash(h, &tail, 1);
        for (int64_t j = 0; j < len; j++) {
            int32_t at = (int32_t)j;
            q->keys[im->pos + j] = (int32_t)(0x80000000u | (uint32_t)tide_prefix_page_hash(h, &at, 1));
            q->img_row[im->pos + j] = (int32_t)rows++;
        }
        end = im->pos + len;
    }
    q->n_img_rows = rows;
    return 0;
}

int tide_req_create(const tide_request *r, const tide_req_model *m, uint64_t seed, tide_req **out,
                    tide_status *st) {
    *out = NULL;
    if (!r) return tide_fail(st, TIDE_ERR_INVALID, "request: NULL");
    if (r->sampling.n_stop_tokens > INT32_MAX - m->n_eos)
        return tide_fail(st, TIDE_ERR_INVALID, "request: %d stop tokens are too many", r->sampling.n_stop_tokens);
    tide_req *q = calloc(1, sizeof *q);
    if (!q) return tide_fail(st, TIDE_ERR_NOMEM, "request: out of memory");
    if (r->n_images != 0 && r->prompt && r->n_prompt >= 1 && r->sampling.max_tokens >= 1) {
        q->cap_tokens = r->n_prompt + (r->sampling.max_tokens < 64 ? r->sampling.max_tokens : 64);
        if (image_spans(r, m, q, st) != 0) {
            tide_req_free(q);
            return -1;
        }
    }
    if (check(r, m->vocab, m->image_token, m->max_len, q->img_types, st) != 0) {
        tide_req_free(q);
        return -1;
    }
    q->user = r->user;
    q->salt = r->cache_salt;
    q->kv_class = r->kv_class;
    _Static_assert(TIDE_KV_CLASS_CHAT - 1 == TIDE_KV_CHAT && TIDE_KV_CLASS_AGENT - 1 == TIDE_KV_AGENT,
                   "the scheduler hands kv_class - 1 to the tiers as the store's class");
    q->sp = r->sampling;
    if (!r->has_seed) q->sp.seed = seed;
    q->state = TIDE_REQ_WAITING;
    q->n_prompt = q->n_tokens = r->n_prompt;
    q->cap_tokens = r->n_prompt + (r->sampling.max_tokens < 64 ? r->sampling.max_tokens : 64);
    q->tokens = malloc((size_t)q->cap_tokens * sizeof *q->tokens);
    tide_logit_bias *bias = dup_array(r->sampling.logit_bias, (size_t)r->sampling.n_logit_bias, sizeof *bias);
    int32_t n_stop;
    int32_t *stop = stop_list(r, m, &n_stop);
    if (!q->tokens || (r->sampling.n_logit_bias > 0 && !bias) || (n_stop > 0 && !stop)) {
        free(bias);
        free(stop);
        tide_req_free(q);
        return tide_fail(st, TIDE_ERR_NOMEM, "request: out of memory");
    }
    memcpy(q->tokens, r->prompt, (size_t)r->n_prompt * sizeof *q->tokens);
    q->sp.logit_bias = bias;
    q->sp.stop_tokens = stop;
    q->sp.n_stop_tokens = n_stop;
    q->cons = r->constraint;
    *out = q;
    return 0;
}

void tide_req_free(tide_req *q) {
    if (!q) return;
    tide_cons_free(q->cons);
    free((void *)q->sp.logit_bias);
    free((void *)q->sp.stop_tokens);
    free(q->tokens);
    free(q->img_types);
    free(q->img_row);
    free(q->img_rows);
    free(q->keys);
    free(q->pages);
    free(q->error);
    tide_seq_ckpt_free(&q->ck);
    free(q);
}

int tide_req_push(tide_req *q, int32_t token, tide_status *st) {
    if (q->n_tokens == q->cap_tokens) {
        int64_t cap = 2 * q->cap_tokens;
        int64_t most = q->n_prompt + q->sp.max_tokens;
        if (cap > most) cap = most;
        if (cap <= q->n_tokens) cap = q->n_tokens + 1;
        int32_t *t = realloc(q->tokens, (size_t)cap * sizeof *t);
        if (!t) return tide_fail(st, TIDE_ERR_NOMEM, "request %lld: out of memory", (long long)q->id);
        q->tokens = t;
        if (q->keys) {
            int32_t *k = realloc(q->keys, (size_t)cap * sizeof *k);
            if (!k) return tide_fail(st, TIDE_ERR_NOMEM, "request %lld: out of memory", (long long)q->id);
            q->keys = k;
        }
        q->cap_tokens = cap;
    }
    if (q->keys) q->keys[q->n_tokens] = token;
    q->tokens[q->n_tokens++] = token;
    return 0;
}

void tide_req_set_error(tide_req *q, const char *msg) {
    if (q->error) return;
    size_t n = strlen(msg);
    q->error = malloc(n + 1);
    if (q->error) memcpy(q->error, msg, n + 1);
}
