/* /tokenize, /detokenize and Anthropic's /v1/messages/count_tokens.
 * /tokenize takes {"prompt": TEXT} (tokenized as is, special tokens
 * matched) or a chat body with "messages" (rendered with the V4.1 template
 * first, as the chat route would); it answers {"tokens", "count"}. /detokenize takes {"tokens": [ids]} -> {"prompt"}. */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "api/gen_session.h" /* tide_gen_prompt_ids */
#include "serve/serve_internal.h"

static json_t *load_object(const char *body, size_t len, serve_api api, serve_reply *rp) {
    json_error_t je;
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (o && json_is_object(o)) return o;
    json_decref(o);
    serve_error(rp, api, 400, "invalid_request_error", NULL, "body: %s", o ? "expected a JSON object" : je.text);
    return NULL;
}

static void ids_reply(const int32_t *ids, size_t n, serve_reply *rp) {
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) json_array_append_new(a, json_integer(ids[i]));
    json_t *o = a ? json_pack("{s:o, s:I}", "tokens", a, "count", (json_int_t)n) : NULL;
    serve_reply_json(rp, 200, o ? json_dumps(o, JSON_COMPACT) : NULL);
    json_decref(o);
}

void serve_tokenize(tide_server *srv, const char *body, size_t len, serve_reply *rp) {
    json_t *o = load_object(body, len, SERVE_CHAT, rp);
    if (!o) return;
    json_t *p = json_object_get(o, "prompt");
    if (json_is_string(p)) {
        tide_tok_ids ids = {0};
        tide_status st = {0};
        if (tide_tokenizer_encode(tide_gen_tokenizer(srv->gen), json_string_value(p), json_string_length(p), 0, NULL,
                                  &ids, &st) != 0)
            serve_error(rp, SERVE_CHAT, 400, "invalid_request_error", "prompt", "prompt: %s", st.msg);
        else ids_reply(ids.ids, ids.n, rp);
        tide_tok_ids_free(&ids);
    } else if (json_object_get(o, "messages")) {
        tide_api_req req;
        tide_api_err ae;
        memset(&ae, 0, sizeof ae);
        tide_tok_ids ids = {0};
        int in_reasoning;
        tide_status st = {0};
        if (tide_api_parse(TIDE_API_CHAT, body, len, &req, &ae) != 0)
            serve_error(rp, SERVE_CHAT, 400, "invalid_request_error", ae.param[0] ? ae.param : NULL, "%s", ae.st.msg);
        else {
            if (tide_gen_prompt_ids(srv->gen, &req, &ids, &in_reasoning, &st) != 0)
                serve_error(rp, SERVE_CHAT, 400, "invalid_request_error", "messages", "%s", st.msg);
            else ids_reply(ids.ids, ids.n, rp);
            tide_api_req_free(&req);
        }
        tide_tok_ids_free(&ids);
    } else {
        serve_error(rp, SERVE_CHAT, 400, "invalid_request_error", "prompt", "expected \"prompt\" (a string) or \"messages\"");
    }
    json_decref(o);
}

void serve_detokenize(tide_server *srv, const char *body, size_t len, serve_reply *rp) {
    json_t *o = load_object(body, len, SERVE_CHAT, rp);
    if (!o) return;
    json_t *a = json_object_get(o, "tokens");
    size_t n = json_is_array(a) ? json_array_size(a) : 0;
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    const tide_tokenizer *tok = tide_gen_tokenizer(srv->gen);
    uint32_t vocab = tide_tokenizer_n_ids(tok);
    int ok = json_is_array(a) && ids;
    for (size_t i = 0; ok && i < n; i++) {
        json_t *x = json_array_get(a, i);
        ok = json_is_integer(x) && json_integer_value(x) >= 0 && json_integer_value(x) < (json_int_t)vocab;
        if (ok) ids[i] = (int32_t)json_integer_value(x);
    }
    char *text = NULL;
    size_t tlen = 0;
    tide_status st = {0};
    if (!ok)
        serve_error(rp, SERVE_CHAT, 400, "invalid_request_error", "tokens",
                    "tokens: expected an array of token ids in [0, %u)", vocab);
    else if (tide_detok_decode_all(tok, 0, ids, n, &text, &tlen, &st) != 0)
        serve_error(rp, SERVE_CHAT, 400, "invalid_request_error", "tokens", "tokens: %s", st.msg);
    else {
        json_t *r = json_pack("{s:s%}", "prompt", text, tlen);
        serve_reply_json(rp, 200, r ? json_dumps(r, JSON_COMPACT) : NULL);
        json_decref(r);
    }
    free(text);
    free(ids);
    json_decref(o);
}

void serve_count_tokens(tide_server *srv, const char *body, size_t len, serve_reply *rp) {
    tide_api_req req;
    tide_api_err ae;
    memset(&ae, 0, sizeof ae);
    if (tide_api_parse(TIDE_API_MESSAGES, body, len, &req, &ae) != 0) {
        serve_error(rp, SERVE_MESSAGES, ae.http_status ? ae.http_status : 400, "invalid_request_error", NULL, "%s",
                    ae.st.msg);
        return;
    }
    int64_t n = 0;
    tide_status st = {0};
    if (tide_gen_count_tokens(srv->gen, &req, &n, &st) != 0) {
        serve_error(rp, SERVE_MESSAGES, 400, "invalid_request_error", NULL, "%s", st.msg);
    } else {
        json_t *o = json_pack("{s:I}", "input_tokens", (json_int_t)n);
        serve_reply_json(rp, 200, o ? json_dumps(o, JSON_COMPACT) : NULL);
        json_decref(o);
    }
    tide_api_req_free(&req);
}
