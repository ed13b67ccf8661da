/* One generation session (api/gen.h): a request's prompt, its n choices
 * (one engine request each) and their output streams:
 *
 *   token -> detokenizer (partial UTF-8 and partial added tokens held back)
 *         -> the API output (api/out.h: parser -> events)
 *
 * A choice whose output ended by itself (a stop string, the end-of-sentence
 * text, JSON mode's closed value) is cancelled after the step; the finish
 * reason stays the parser's. The session ends (done) when every choice has
 * finished. */
#include "api/gen_session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "constrain/constrain.h"
#include "base/log.h"
#include "text/prompt_tok.h"
#include "text/render.h"
#include "vision/image.h"

/* ---- building ---- */

static int tokenize_completion(const tide_gen_engine *g, const tide_api_req *req, tide_tok_ids *ids, tide_status *st) {
    if (req->prompt_ids) {
        for (size_t i = 0; i < req->n_prompt_ids; i++)
            if (tide_tok_ids_push(ids, req->prompt_ids[i], st) != 0) return -1;
        return 0;
    }
    const char *text = req->prompt ? req->prompt : "";
    size_t bos_len = strlen(TIDE_TOK_BOS);
    if (req->prompt_len < bos_len || memcmp(text, TIDE_TOK_BOS, bos_len) != 0) {
        int32_t bos = tide_tokenizer_token_id(g->tok, TIDE_TOK_BOS, bos_len);
        if (bos >= 0 && tide_tok_ids_push(ids, bos, st) != 0) return -1;
    }
    return tide_tokenizer_encode(g->tok, text, req->prompt_len, 0, NULL, ids, st);
}

/* The prompt's ids, and whether generation starts in the reasoning. */
static int prompt_ids(const tide_gen_engine *g, const tide_api_req *req, tide_tok_ids *ids, int *in_reasoning,
                      tide_status *st) {
    *in_reasoning = 0;
    if (req->kind == TIDE_API_COMPLETIONS) return tokenize_completion(g, req, ids, st);
    tide_prompt p = {0};
    if (tide_render(&req->conv, &p, st) != 0) return -1;
    *in_reasoning = p.in_reasoning;
    int rc = tide_prompt_tokenize(g->tok, &p, NULL, ids, st);
    tide_prompt_free(&p);
    return rc;
}

/* The prompt's images (docs/vision.md): each image part's bytes decoded
 * under the server's limits and planned, and the image token the renderer
 * put for it expanded into the image's span (every position the image
 * token: tide_image_plan_grid's length), the span's start recorded for the
 * engine, which encodes the pixels at submit. Any failure is the client's
 * (400). */
typedef struct img_out {
    tide_image *imgs;          /* [n_images] decoded */
    tide_request_image *rimgs; /* [n_images] for the engine */
    int n;                     /* decoded so far (to free) */
} img_out;

static void img_out_free(img_out *o) {
    for (int i = 0; i < o->n; i++) tide_image_free(&o->imgs[i]);
    free(o->imgs);
    free(o->rimgs);
    memset(o, 0, sizeof *o);
}

static int expand_images(const tide_gen_engine *g, const tide_conv *c, tide_tok_ids *ids, img_out *s,
                         tide_status *st) {
    const tide_gen_image_limits *L = &g->img_lim;
    int max = L->max_images > 0 ? L->max_images : TIDE_GEN_MAX_IMAGES;
    if (c->n_images == 0) return 0;
    if (!g->vision || g->image_token < 0)
        return tide_fail(st, TIDE_ERR_INVALID, "this model has no vision tower: image parts are not accepted");
    if (c->n_images > (size_t)max)
        return tide_fail(st, TIDE_ERR_INVALID, "%zu images: the server accepts at most %d per request", c->n_images,
                         max);
    s->imgs = calloc(c->n_images, sizeof *s->imgs);
    s->rimgs = calloc(c->n_images, sizeof *s->rimgs);
    if (!s->imgs || !s->rimgs) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    tide_image_limits lim = {L->max_bytes, L->max_pixels};
    int64_t extra = 0, len[TIDE_CONV_MAX_IMAGES];
    for (size_t i = 0; i < c->n_images; i++) {
        tide_status dst = {0};
        tide_image_plan pl;
        int rc = tide_image_decode(c->images[i].data, c->images[i].n, &lim, &s->imgs[i], &dst);
        if (rc == 0) s->n = (int)i + 1; /* freed by the caller */
        if (rc != 0 || tide_image_plan_grid(s->imgs[i].w, s->imgs[i].h, g->vision, &pl, &dst) != 0)
            /* over the limits is TIDE_ERR_NOMEM there: still the client's */
            return tide_fail(st, TIDE_ERR_INVALID, "image %zu: %s", i, dst.msg);
        len[i] = tide_image_span_len(&pl);
        extra += len[i] - 1;
    }
    size_t found = 0;
    for (size_t t = 0; t < ids->n; t++) found += ids->ids[t] == g->image_token;
    if (found != c->n_images)
        return tide_fail(st, TIDE_ERR_INTERNAL, "the prompt holds %zu image tokens for %zu images", found,
                         c->n_images);
    int32_t *out = malloc((ids->n + (size_t)extra) * sizeof *out);
    if (!out) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    size_t at = 0, k = 0;
    for (size_t t = 0; t < ids->n; t++) {
        if (ids->ids[t] != g->image_token) {
            out[at++] = ids->ids[t];
            continue;
        }
        s->rimgs[k] = (tide_request_image){(int64_t)at, s->imgs[k].w, s->imgs[k].h, s->imgs[k].rgb};
        for (int64_t j = 0; j < len[k]; j++) out[at++] = g->image_token;
        k++;
    }
    free(ids->ids);
    ids->ids = out;
    ids->n = ids->cap = at;
    return 0;
}

int tide_gen_prompt_ids(const tide_gen_engine *g, const tide_api_req *req, tide_tok_ids *ids, int *in_reasoning,
                        tide_status *st) {
    if (prompt_ids(g, req, ids, in_reasoning, st) != 0) return -1;
    if (req->kind == TIDE_API_COMPLETIONS || req->conv.n_images == 0) return 0;
    /* the spans as the engine will see them (/tokenize, count_tokens) */
    img_out o = {0};
    int rc = expand_images(g, &req->conv, ids, &o, st);
    img_out_free(&o);
    return rc;
}

/* The sampler's parameters from the request's settings; the arrays are the
 * session's own copies. */
static int sampling(gen_session *s, const tide_gen *gen, tide_status *st) {
    const tide_gen_engine *g = s->g;
    tide_sampling_params *p = &s->sp;
    *p = tide_sampling_params_default();
    p->temperature = (float)gen->temperature;
    p->top_p = (float)gen->top_p;
    p->top_k = gen->top_k;
    p->min_p = (float)gen->min_p;
    p->frequency_penalty = (float)gen->frequency_penalty;
    p->presence_penalty = (float)gen->presence_penalty;
    p->repetition_penalty = (float)gen->repetition_penalty;
    p->max_tokens = gen->max_tokens > 0 ? gen->max_tokens : 1;
    p->seed = gen->seed;
    p->want_logprobs = gen->logprobs;
    p->top_logprobs = gen->top_logprobs;
    s->has_seed = gen->has_seed;
    if (gen->n_logit_bias) {
        if (!(s->bias = malloc(gen->n_logit_bias * sizeof *s->bias))) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
        memcpy(s->bias, gen->logit_bias, gen->n_logit_bias * sizeof *s->bias);
        p->logit_bias = s->bias;
        p->n_logit_bias = (int32_t)gen->n_logit_bias;
    }
    size_t n_model = gen->ignore_eos ? 0 : g->n_stop_ids, n = n_model + gen->n_stop_token_ids;
    if (n) {
        if (!(s->stop_ids = malloc(n * sizeof *s->stop_ids))) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
        memcpy(s->stop_ids, g->stop_ids, n_model * sizeof *s->stop_ids);
        if (gen->n_stop_token_ids) memcpy(s->stop_ids + n_model, gen->stop_token_ids, gen->n_stop_token_ids * sizeof *s->stop_ids);
        p->stop_tokens = s->stop_ids;
        p->n_stop_tokens = (int32_t)n;
    }
    return tide_sampling_params_check(p, g->vocab, st);
}

/* The context checked here, so the caller gets the error at submission
 * (the server's 400). A request that did not name max_tokens got the
 * mode's default (text/conv.h: 8192, or 65536 when thinking), which may
 * exceed a small model's context: that default is cut to the room left. */
static int fit_context(gen_session *s, const tide_api_req *req, tide_status *st) {
    int64_t ctx = s->g->context;
    if (ctx <= 0) return 0;
    if (s->n_prompt >= ctx)
        return tide_fail(st, TIDE_ERR_INVALID, "the prompt is %lld tokens: the model's context is %lld",
                         (long long)s->n_prompt, (long long)ctx);
    int64_t room = ctx - s->n_prompt;
    int defaulted = req->kind != TIDE_API_COMPLETIONS && req->gen.max_tokens == tide_conv_default_max_tokens(&req->conv);
    if (s->sp.max_tokens > room) {
        if (!defaulted)
            return tide_fail(st, TIDE_ERR_INVALID,
                             "max_tokens %lld: the prompt (%lld tokens) leaves room for %lld in the context of %lld",
                             (long long)s->sp.max_tokens, (long long)s->n_prompt, (long long)room, (long long)ctx);
        s->sp.max_tokens = room;
    }
    return 0;
}

/* The request's output constraint (the guided_* extensions, else a JSON
 * response_format), compiled through the engine's cache; with the prompt
 * ending inside the thinking block it applies after </think>. */
static int constraint(gen_session *s, const tide_api_req *req, int in_reasoning, tide_status *st) {
    const tide_gen *gen = &req->gen;
    tide_gen_engine *g = s->g;
    s->cgate = -1;
    tide_cons_kind kind;
    const char *param;
    char *text = NULL;
    int forced = (gen->tool_choice == TIDE_TOOLS_REQUIRED || gen->tool_choice == TIDE_TOOLS_NAMED) &&
                 req->conv.n_tools > 0;
    if (forced && (gen->guided || gen->format != TIDE_FMT_TEXT))
        return tide_fail(st, TIDE_ERR_INVALID, "tool_choice: a forced tool call cannot be combined with another output "
                         "constraint (%s)", gen->guided ? gen->guided_param : "response_format");
    /* tool_choice auto with a strict tool (and no other constraint): text,
     * then maybe a calls block where strict tools' arguments follow their schemas */
    int strict_auto = 0;
    for (size_t i = 0; gen->tool_choice == TIDE_TOOLS_AUTO && !gen->guided && gen->format == TIDE_FMT_TEXT &&
                       i < req->conv.n_tools; i++)
        strict_auto |= req->conv.tools[i].strict;
    if (forced || strict_auto) { /* a forced call: its DSML block with arguments per the tools' schemas */
        kind = TIDE_CONS_TOOLS;
        param = "tools";
        json_t *spec = json_pack("{s:[], s:b, s:b}", "tools", "parallel", gen->parallel_tool_calls, "auto", !forced);
        for (size_t i = 0; spec && i < req->conv.n_tools; i++) {
            const tide_tool *t = &req->conv.tools[i];
            json_t *one = json_pack("{s:s, s:b}", "name", t->name, "strict", t->strict);
            if (one && t->parameters) json_object_set(one, "parameters", t->parameters);
            json_array_append_new(json_object_get(spec, "tools"), one);
        }
        text = spec ? json_dumps(spec, JSON_COMPACT) : NULL;
        json_decref(spec);
    } else if (gen->guided) {
        if (gen->format != TIDE_FMT_TEXT)
            return tide_fail(st, TIDE_ERR_INVALID, "%s: only one output constraint per request (a JSON response format "
                             "is given too)", gen->guided_param);
        kind = (tide_cons_kind)(gen->guided - 1);
        param = gen->guided_param;
        text = strdup(gen->guided_text);
    } else if (gen->format == TIDE_FMT_JSON_OBJECT) {
        kind = TIDE_CONS_JSON_OBJECT;
        param = "response_format";
        text = strdup("");
    } else if (gen->format == TIDE_FMT_JSON_SCHEMA) {
        kind = TIDE_CONS_JSON_SCHEMA;
        param = "response_format.json_schema.schema";
        text = json_dumps(gen->json_schema, JSON_COMPACT | JSON_ENCODE_ANY);
    } else return 0;
    if (!text) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    pthread_mutex_lock(&g->cmu);
    int rc = 0;
    if (!g->ccache && !(g->ccache = tide_cons_cache_new(64))) rc = tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    if (rc == 0 && !g->cvocab) rc = tide_cons_vocab_from_tokenizer(g->tok, g->vocab, &g->cvocab, st);
    tide_cons_cache *cache = g->ccache;
    pthread_mutex_unlock(&g->cmu);
    if (rc == 0 && tide_cons_cache_get(cache, kind, text, strlen(text), &s->cgram, st) != 0) {
        tide_fail_ctx(st, "%s", param);
        rc = -1;
    }
    free(text);
    if (rc == 0 && in_reasoning) {
        s->cgate = tide_tokenizer_token_id(g->tok, TIDE_TOK_END_THINK, strlen(TIDE_TOK_END_THINK));
        if (s->cgate < 0) return tide_fail(st, TIDE_ERR_FORMAT, "the tokenizer has no %s token", TIDE_TOK_END_THINK);
    }
    return rc;
}

static int on_parsed(void *ud, const tide_pev *ev, tide_status *st);
static void stream_failed(gen_session *s, const tide_status *st);

static int make_choice(gen_session *s, const tide_gen_input *in, int i, int in_reasoning, tide_status *st) {
    gen_choice *c = &s->ch[i];
    c->s = s;
    c->index = i;
    if (tide_api_out_new(in->req, in_reasoning, in->response_id, in->created, in->sink.sse, in->sink.ud, &c->out, st) != 0 ||
        tide_detok_new(s->g->tok, TIDE_DETOK_HOLD_ADDED, &c->detok, st) != 0)
        return -1;
    tide_api_out_set_choice(c->out, i, i == s->n - 1);
    tide_api_out_set_tap(c->out, on_parsed, c);
    return 0;
}

int tide_gen_session_new(tide_gen_engine *g, const tide_gen_input *in, gen_session **out, tide_status *st) {
    *out = NULL;
    if (!in->req) return tide_fail(st, TIDE_ERR_INVALID, "tide_gen_submit: no request");
    if (!in->sink.done) return tide_fail(st, TIDE_ERR_INVALID, "tide_gen_submit: the sink has no done callback");
    const tide_gen *gen = &in->req->gen;
    if (gen->n < 1 || gen->n > TIDE_GEN_MAX_N)
        return tide_fail(st, TIDE_ERR_INVALID, "n: must be 1..%d, got %d", TIDE_GEN_MAX_N, gen->n);
    gen_session *s = calloc(1, sizeof *s);
    if (!s) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    s->g = g;
    s->sink = in->sink;
    s->kind_stream = gen->stream;
    s->n = gen->n;
    s->cache_salt = in->cache_salt;
    s->kv_class = in->kv_class ? in->kv_class : gen->kv_class;
    tide_tok_ids ids = {0};
    int in_reasoning = 0, rc = -1;
    if (!(s->ch = calloc((size_t)s->n, sizeof *s->ch))) {
        tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (prompt_ids(g, in->req, &ids, &in_reasoning, st) != 0) goto done;
    if (in->req->kind != TIDE_API_COMPLETIONS && in->req->conv.n_images > 0) {
        img_out o = {0};
        rc = expand_images(g, &in->req->conv, &ids, &o, st);
        s->imgs = o.imgs, s->rimgs = o.rimgs, s->n_imgs = o.n; /* the session owns them */
        if (rc != 0) {
            rc = -1;
            goto done;
        }
        rc = -1;
    }
    if (ids.n == 0) {
        tide_fail(st, TIDE_ERR_INVALID, "the prompt is empty");
        goto done;
    }
    for (size_t i = 0; i < ids.n; i++)
        if (ids.ids[i] < 0 || ids.ids[i] >= g->vocab) {
            tide_fail(st, TIDE_ERR_INVALID, "prompt token %zu: id %d is outside the vocabulary of %d", i,
                      ids.ids[i], g->vocab);
            goto done;
        }
    s->prompt = ids.ids;
    s->n_prompt = (int64_t)ids.n;
    ids.ids = NULL;
    if (sampling(s, gen, st) != 0 || fit_context(s, in->req, st) != 0 || constraint(s, in->req, in_reasoning, st) != 0)
        goto done;
    for (int i = 0; i < s->n; i++)
        if (make_choice(s, in, i, in_reasoning, st) != 0) goto done;
    rc = 0;
done:
    tide_tok_ids_free(&ids);
    if (rc != 0) {
        tide_gen_session_free(s);
        return -1;
    }
    *out = s;
    return 0;
}

void tide_gen_session_free(gen_session *s) {
    if (!s) return;
    for (int i = 0; s->ch && i < s->n; i++) {
        tide_api_out_free(s->ch[i].out);
        tide_detok_free(s->ch[i].detok);
        free(s->ch[i].ids);
    }
    free(s->ch);
    free(s->error);
    free(s->prompt);
    for (int i = 0; i < s->n_imgs; i++) tide_image_free(&s->imgs[i]);
    free(s->imgs);
    free(s->rimgs);
    free(s->bias);
    free(s->stop_ids);
    tide_cons_grammar_unref(s->cgram);
    free(s);
}

/* ---- into the engine ---- */

int tide_gen_session_submit(gen_session *s, tide_status *st) {
    s->t_engine = tide_now_seconds();
    for (int i = 0; i < s->n; i++) {
        tide_request r = tide_request_default();
        r.prompt = s->prompt;
        r.n_prompt = s->n_prompt;
        r.sampling = s->sp;
        r.sampling.seed = s->sp.seed + (uint64_t)i; /* n > 1: a seed per choice */
        r.has_seed = s->has_seed;
        r.cache_salt = s->cache_salt;
        r.kv_class = s->kv_class;
        r.images = s->rimgs;
        r.n_images = s->n_imgs;
        r.user = &s->ch[i];
        if (s->cgram) {
            if (tide_cons_new(s->cgram, s->g->cvocab, &r.constraint, st) != 0) {
                for (int k = 0; k < i; k++) {
                    tide_engine_release(s->g->e, s->ch[k].rid);
                    s->ch[k].rid = 0;
                }
                return -1;
            }
            tide_cons_set_gate(r.constraint, s->cgate);
        }
        if (tide_engine_submit(s->g->e, &r, &s->ch[i].rid, st) != 0) {
            for (int k = 0; k < i; k++) { /* nothing half-queued */
                tide_engine_release(s->g->e, s->ch[k].rid);
                s->ch[k].rid = 0;
            }
            return -1;
        }
    }
    return 0;
}

/* ---- the end ---- */

static void set_error(gen_session *s, const char *msg) {
    if (!s->error) s->error = strdup(msg && *msg ? msg : "generation failed");
}

static tide_usage usage_of(const gen_session *s) {
    tide_usage u = {.prompt_tokens = s->n_prompt};
    int first = 1;
    for (int i = 0; i < s->n; i++) {
        const gen_choice *c = &s->ch[i];
        if (!c->finished) continue;
        u.completion_tokens += c->n_output;
        u.reasoning_tokens += c->reasoning_tokens;
        if (first) u.cached_tokens = c->n_cached, first = 0;
        u.spec_verified += c->n_spec_verified;
        u.spec_accepted += c->n_spec_accepted;
    }
    return u;
}

/* n > 1, not streaming: the last choice's response (it has the summed
 * usage) with every choice's entry, in index order. */
static char *merged_response(gen_session *s, tide_status *st) {
    char *base = tide_api_out_response(s->ch[s->last_finished].out, st);
    if (!base || s->n == 1) return base;
    json_t *r = json_loads(base, 0, NULL), *choices = json_array();
    free(base);
    for (int i = 0; r && choices && i < s->n; i++) {
        char *one = tide_api_out_response(s->ch[i].out, st);
        json_t *o = one ? json_loads(one, 0, NULL) : NULL;
        free(one);
        json_t *c = o ? json_array_get(json_object_get(o, "choices"), 0) : NULL;
        if (c) json_array_append(choices, c);
        json_decref(o);
    }
    char *out = NULL;
    if (r && choices && json_array_size(choices) == (size_t)s->n) {
        json_object_set(r, "choices", choices);
        out = json_dumps(r, JSON_COMPACT);
    }
    json_decref(choices);
    json_decref(r);
    if (!out) tide_fail(st, TIDE_ERR_NOMEM, "out of memory merging the choices");
    return out;
}

static void complete(gen_session *s) {
    tide_gen_engine *g = s->g;
    tide_gen_result r = {.id = s->id};
    tide_status st = {0};
    char *resp = NULL;
    const gen_choice *c0 = &s->ch[0];
    if (!s->error && !s->cancelled && !s->kind_stream && !(resp = merged_response(s, &st))) set_error(s, st.msg);
    r.error = s->error;
    r.response = resp;
    r.response_len = resp ? strlen(resp) : 0;
    r.cancelled = s->cancelled && !s->error;
    r.finish_reason = s->error ? "error" : s->cancelled ? "cancelled" : tide_api_out_finish_reason(c0->out);
    r.usage = usage_of(s);
    r.output = c0->ids;
    r.n_output = c0->n_output;
    r.content = tide_api_out_content(c0->out, &r.content_len);
    r.reasoning = tide_api_out_reasoning(c0->out, &r.reasoning_len);
    r.n_calls = tide_api_out_ncalls(c0->out);
    tide_gen_unlink_active(g, s);
    pthread_mutex_lock(&g->mu); /* before done: whoever done wakes sees the session counted */
    g->stats.sessions_active--;
    g->stats.sessions_done++;
    pthread_mutex_unlock(&g->mu);
    s->sink.done(s->sink.ud, &r);
    free(resp);
    tide_gen_session_free(s);
}

void tide_gen_session_abort(gen_session *s, const char *error) {
    if (error) set_error(s, error);
    else s->cancelled = 1;
    complete(s);
}

void tide_gen_session_cancel(gen_session *s) {
    s->cancelled = 1;
    s->cancel_pending = 0;
    /* The FINISHED events of the cancels end it; the last one frees s, so
     * the ids are taken first. */
    tide_request_id rids[TIDE_GEN_MAX_N];
    int n = 0;
    for (int i = 0; i < s->n; i++)
        if (s->ch[i].rid && !s->ch[i].finished) rids[n++] = s->ch[i].rid;
    if (n == 0) { /* never reached the engine */
        complete(s);
        return;
    }
    for (int i = 0; i < n; i++) {
        tide_status st = {0};
        (void)tide_engine_cancel(s->g->e, rids[i], &st); /* a known, unfinished id: cannot fail */
    }
}

/* ---- the stream ---- */

static int on_parsed(void *ud, const tide_pev *ev, tide_status *st) {
    gen_choice *c = ud;
    if (ev->kind == TIDE_PEV_REASONING) c->saw_reasoning = 1;
    if (c->index == 0 && c->s->sink.text) return c->s->sink.text(c->s->sink.ud, ev, st);
    return 0;
}

/* Stop ids and the model's end ids (even with ignore_eos) are never text. */
static int is_stop_id(const gen_session *s, int32_t t) {
    for (int32_t i = 0; i < s->sp.n_stop_tokens; i++)
        if (s->sp.stop_tokens[i] == t) return 1;
    for (size_t i = 0; i < s->g->n_stop_ids; i++)
        if (s->g->stop_ids[i] == t) return 1;
    return 0;
}

/* The token's log probability (and its alternatives') into the output, with
 * each token's raw bytes (a byte token may be part of a character). */
static void record_logprob(gen_choice *c, const tide_event *ev) {
    const tide_tokenizer *tok = c->s->g->tok;
    const uint8_t *b = NULL, *ab[TIDE_SAMPLING_MAX_TOP_LOGPROBS];
    size_t n = 0, an[TIDE_SAMPLING_MAX_TOP_LOGPROBS];
    int k = ev->n_top < TIDE_SAMPLING_MAX_TOP_LOGPROBS ? ev->n_top : TIDE_SAMPLING_MAX_TOP_LOGPROBS;
    (void)tide_tokenizer_token_bytes(tok, ev->token, &b, &n);
    for (int i = 0; i < k; i++) {
        ab[i] = NULL;
        an[i] = 0;
        (void)tide_tokenizer_token_bytes(tok, ev->top_ids[i], &ab[i], &an[i]);
        if (!ab[i]) ab[i] = (const uint8_t *)"";
    }
    tide_status st = {0};
    if (tide_api_out_logprob(c->out, b ? b : (const uint8_t *)"", n, ev->logprob, ab, an, ev->top_logprobs, k, &st) != 0)
        stream_failed(c->s, &st);
}

/* The output failed (the sink gave up, out of memory): the session is
 * cancelled after the step. */
static void stream_failed(gen_session *s, const tide_status *st) {
    if (st->code != TIDE_OK && st->code != TIDE_ERR_IO) set_error(s, st->msg);
    s->cancel_pending = 1;
}

static void feed(gen_choice *c, const char *text, size_t len) {
    gen_session *s = c->s;
    if (len == 0 || s->cancel_pending || s->cancelled) return;
    tide_status st = {0};
    if (tide_api_out_text(c->out, text, len, &st) != 0) stream_failed(s, &st);
    else if (!c->ended && tide_api_out_ended(c->out)) c->ended = 1;
}

static void on_token(gen_choice *c, const tide_event *ev) {
    gen_session *s = c->s;
    if (s->cancelled || c->ended) return;
    if (s->sink.token) {
        tide_gen_token t = {.id = ev->token, .logprob = ev->logprob, .n_top = ev->n_top, .top_ids = ev->top_ids,
                            .top_logprobs = ev->top_logprobs, .t_engine = s->t_engine};
        s->sink.token(s->sink.ud, c->index, &t);
    }
    if (is_stop_id(s, ev->token)) return; /* the engine ends it (unless ignore_eos); no text */
    if (s->sp.want_logprobs) record_logprob(c, ev);
    const char *text;
    size_t len;
    tide_status st = {0};
    c->saw_reasoning = 0;
    if (tide_detok_push(c->detok, ev->token, &text, &len, &st) != 0) {
        set_error(s, st.msg);
        s->cancel_pending = 1;
        return;
    }
    feed(c, text, len);
    c->reasoning_tokens += c->saw_reasoning;
}

static void on_finished(gen_choice *c, const tide_event *ev) {
    gen_session *s = c->s;
    tide_gen_defer_release(s->g, ev->id);
    c->finished = 1;
    c->reason = ev->reason;
    c->n_output = ev->n_output;
    c->n_cached = ev->n_cached;
    c->n_spec_verified = ev->n_spec_verified;
    c->n_spec_accepted = ev->n_spec_accepted;
    if (ev->n_output > 0 && (c->ids = malloc((size_t)ev->n_output * sizeof *c->ids)))
        memcpy(c->ids, ev->output, (size_t)ev->n_output * sizeof *c->ids);
    if (ev->reason == TIDE_FINISH_ERROR) {
        set_error(s, ev->error);
        s->cancel_pending = 1; /* the other choices stop too */
    }
    tide_status st = {0};
    const char *text;
    size_t len;
    if (tide_detok_finish(c->detok, &text, &len, &st) == 0) feed(c, text, len);
    s->last_finished = c->index;
    int last = s->n_finished + 1 == s->n;
    if (!s->cancelled && !s->error && !s->cancel_pending) {
        tide_usage u;
        s->n_finished++; /* counted in the usage */
        u = usage_of(s);
        s->n_finished--;
        tide_gen_end end = ev->reason == TIDE_FINISH_LENGTH && !c->ended ? TIDE_GEN_LENGTH : TIDE_GEN_STOP;
        tide_api_out_set_choice(c->out, c->index, last);
        if (tide_api_out_finish(c->out, end, &u, &st) != 0) stream_failed(s, &st);
    } else if (s->error && s->kind_stream && last) {
        (void)tide_api_out_fail(c->out, s->error, &st);
    }
    if (++s->n_finished == s->n) complete(s);
}

void tide_gen_on_event(void *ctx, const tide_event *ev) {
    (void)ctx;
    gen_choice *c = ev->user;
    if (!c) return;
    if (ev->kind == TIDE_EVENT_TOKEN) on_token(c, ev);
    else if (ev->kind == TIDE_EVENT_FINISHED) on_finished(c, ev);
}
