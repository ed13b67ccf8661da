/* A job: one generation request from its body to the engine's request.
 * Everything that can refuse a request (the body, the prompt's length, the
 * sampling settings) is checked here, on the HTTP thread, so that the client
 * gets a 400 naming the field before any stream starts. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve/serve_internal.h"
#include "text/render.h"

/* The prompt text into ids: the renderer's markup with special tokens
 * matched, the client's spans as plain text (a user who types
 * "<｜User｜>" does not forge a turn; docs/text.md "Client spans"). */
static int encode_prompt(const tide_tokenizer *tok, const tide_prompt *p, tide_tok_ids *ids, tide_status *st) {
    size_t pos = 0;
    for (size_t i = 0; i <= p->n_plain; i++) {
        size_t end = i < p->n_plain ? p->plain[i].off : p->len;
        if (end > pos && tide_tokenizer_encode(tok, p->text + pos, end - pos, 0, NULL, ids, st) != 0) return -1;
        if (i == p->n_plain) break;
        const tide_text_span *sp = &p->plain[i];
        if (sp->len &&
            tide_tokenizer_encode(tok, p->text + sp->off, sp->len, TIDE_ENCODE_SPLIT_SPECIAL, NULL, ids, st) != 0)
            return -1;
        pos = sp->off + sp->len;
    }
    return 0;
}

static void job_free(serve_job *j) {
    if (j->has_req) tide_api_req_free(&j->req);
    for (size_t i = 0; i < j->cgen.n_stop; i++) free(j->cgen.stop[i]);
    free(j->cgen.model);
    tide_outparse_free(j->cparse);
    tide_sb_free(&j->ctext);
    free(j->c_prompt);
    free(j->prompt);
    tide_api_out_free(j->out);
    tide_detok_free(j->detok);
    tide_sb_free(&j->buf);
    free(j);
}

void serve_job_unref(serve_job *j) {
    if (j && --j->refs == 0) job_free(j);
}

int serve_job_sse(void *ud, const char *event, const char *data, size_t len, tide_status *st) {
    serve_job *j = ud;
    pthread_mutex_t *mu = &j->srv->mu;
    pthread_mutex_lock(mu);
    if (!j->stream) { /* non-streaming formatters write nothing here */
        pthread_mutex_unlock(mu);
        return 0;
    }
    if (event) tide_sb_addf(&j->buf, "event: %s\n", event);
    tide_sb_add(&j->buf, "data: ");
    tide_sb_addn(&j->buf, data, len);
    tide_sb_add(&j->buf, "\n\n");
    int rc = tide_sb_check(&j->buf, "SSE buffer", st);
    pthread_mutex_unlock(mu);
    return rc;
}

static const char *id_prefix(serve_api api) {
    switch (api) {
    case SERVE_CHAT: return "chatcmpl-";
    case SERVE_RESPONSES: return "resp_";
    case SERVE_MESSAGES: return "msg_";
    default: return "cmpl-";
    }
}

/* The request's settings as the engine's sampling parameters. */
static void sampling_from_gen(tide_server *srv, serve_job *j, const tide_gen *g) {
    tide_request *r = &j->ereq;
    *r = tide_request_default();
    r->sampling.temperature = (float)g->temperature;
    r->sampling.top_p = (float)g->top_p;
    r->sampling.top_k = g->top_k > 0 ? g->top_k : 0;
    int64_t room = srv->ctx_len - j->n_prompt;
    int64_t max = g->max_tokens > 0 ? g->max_tokens : room;
    r->sampling.max_tokens = max < room ? max : room;
    r->sampling.seed = g->seed;
    r->has_seed = g->has_seed;
    int32_t eos = tide_tokenizer_token_id(srv->tok, TIDE_TOK_EOS, strlen(TIDE_TOK_EOS));
    int n = 0;
    if (eos >= 0) j->stop_ids[n++] = eos;
    r->sampling.stop_tokens = j->stop_ids;
    r->sampling.n_stop_tokens = n;
    r->prompt = j->prompt;
    r->n_prompt = j->n_prompt;
    r->user = j;
}

/* Renders and tokenizes the conversation of an API request. */
static int prompt_from_req(tide_server *srv, serve_job *j, serve_reply *err) {
    tide_prompt p = {0};
    tide_status st = {0};
    if (tide_render(&j->req.conv, &p, &st) != 0) {
        serve_error(err, j->api, 400, "invalid_request_error", NULL, "%s", st.msg);
        return -1;
    }
    tide_tok_ids ids = {0};
    int bad = encode_prompt(srv->tok, &p, &ids, &st);
    j->in_reasoning = p.in_reasoning;
    tide_prompt_free(&p);
    if (bad) {
        tide_tok_ids_free(&ids);
        serve_error(err, j->api, 400, "invalid_request_error", NULL, "prompt: %s", st.msg);
        return -1;
    }
    j->prompt = ids.ids;
    j->n_prompt = (int64_t)ids.n;
    return 0;
}

static int check_prompt_len(tide_server *srv, serve_job *j, int64_t max_tokens, serve_reply *err) {
    int64_t lim = srv->cfg.max_prompt > 0 && srv->cfg.max_prompt < srv->ctx_len ? srv->cfg.max_prompt : srv->ctx_len - 1;
    if (j->n_prompt < 1) {
        serve_error(err, j->api, 400, "invalid_request_error", "messages", "the prompt is empty");
        return -1;
    }
    if (j->n_prompt > lim) {
        serve_error(err, j->api, 400, "invalid_request_error", "messages",
                    "the prompt has %" PRId64 " tokens, more than this server's limit of %" PRId64, j->n_prompt, lim);
        return -1;
    }
    if (max_tokens > 0 && j->n_prompt + max_tokens > srv->ctx_len && j->n_prompt >= srv->ctx_len) {
        serve_error(err, j->api, 400, "invalid_request_error", "max_tokens", "no room for output in the context of %" PRId64,
                    srv->ctx_len);
        return -1;
    }
    return 0;
}

int serve_job_new(tide_server *srv, serve_api api, const char *body, size_t len, serve_job **out, serve_reply *err) {
    *out = NULL;
    serve_job *j = calloc(1, sizeof *j);
    if (!j) {
        serve_error(err, api, 500, "api_error", NULL, "out of memory");
        return -1;
    }
    j->srv = srv;
    j->refs = 1;
    j->api = api;
    j->t_arrive = serve_now();
    tide_sb_init(&j->buf);
    tide_sb_init(&j->ctext);
    const tide_gen *g;
    if (api == SERVE_COMPLETIONS) {
        if (serve_completions_parse(j, body, len, err) != 0) goto fail;
        g = &j->cgen;
    } else {
        tide_api_err ae;
        memset(&ae, 0, sizeof ae);
        if (tide_api_parse((tide_api_kind)api, body, len, &j->req, &ae) != 0) {
            serve_error(err, api, ae.http_status ? ae.http_status : 400, ae.type ? ae.type : "invalid_request_error",
                        ae.param[0] ? ae.param : NULL, "%s", ae.st.msg);
            goto fail;
        }
        j->has_req = 1;
        if (prompt_from_req(srv, j, err) != 0) goto fail;
        g = &j->req.gen;
    }
    if (check_prompt_len(srv, j, g->max_tokens, err) != 0) goto fail;
    j->stream = g->stream;
    pthread_mutex_lock(&srv->mu);
    int64_t seq = ++srv->id_seq;
    pthread_mutex_unlock(&srv->mu);
    snprintf(j->id, sizeof j->id, "%s%08" PRIx64 "%08" PRIx64, id_prefix(api), (uint64_t)seq,
             (uint64_t)(j->t_arrive * 1e6));
    j->created = (int64_t)time(NULL);
    sampling_from_gen(srv, j, g);
    tide_status st = {0};
    if (tide_detok_new(srv->tok, TIDE_DETOK_HOLD_ADDED, &j->detok, &st) != 0 ||
        (api != SERVE_COMPLETIONS &&
         tide_api_out_new(&j->req, j->in_reasoning, j->id, j->created, serve_job_sse, j, &j->out, &st) != 0)) {
        serve_error(err, api, 500, "api_error", NULL, "%s", st.msg);
        goto fail;
    }
    *out = j;
    return 0;
fail:
    job_free(j);
    return -1;
}
