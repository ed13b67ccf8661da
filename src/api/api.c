/* Request parsing entry point and error bodies; see api.h. */
#include "api/api.h"

#include <stdlib.h>
#include <string.h>

#include "api/convert.h"
#include "api/jfield.h"
#include "text/pyjson.h"
#include "tide.h"

const char *tide_api_kind_name(tide_api_kind kind) {
    switch (kind) {
    case TIDE_API_CHAT: return "chat completions";
    case TIDE_API_RESPONSES: return "responses";
    case TIDE_API_MESSAGES: return "messages";
    case TIDE_API_COMPLETIONS: return "completions";
    }
    return "?";
}

void tide_api_req_init(tide_api_req *req, tide_api_kind kind) {
    memset(req, 0, sizeof *req);
    req->kind = kind;
    tide_conv_init(&req->conv);
    req->gen.temperature = 1.0;
    req->gen.top_p = 1.0;
    req->gen.parallel_tool_calls = 1;
    req->gen.n = 1;
    req->gen.repetition_penalty = 1.0;
}

void tide_api_req_free(tide_api_req *req) {
    tide_conv_free(&req->conv);
    free(req->gen.model);
    for (size_t i = 0; i < req->gen.n_stop; i++) free(req->gen.stop[i]);
    free(req->gen.tool_name);
    json_decref(req->gen.json_schema);
    free(req->gen.logit_bias);
    free(req->gen.stop_token_ids);
    free(req->gen.guided_text);
    free(req->prompt);
    free(req->prompt_ids);
    memset(req, 0, sizeof *req);
}

/* "kv_class": the persistent KV store's traffic class (an extension that
 * every API takes the same way). */
static int read_kv_class(json_t *root, tide_gen *g, tide_api_err *err) {
    const char *c = NULL;
    if (tide_get_string(root, "kv_class", "", &c, err)) return -1;
    if (!c) return 0;
    if (!strcmp(c, "chat")) g->kv_class = TIDE_KV_CLASS_CHAT;
    else if (!strcmp(c, "agent")) g->kv_class = TIDE_KV_CLASS_AGENT;
    else return tide_api_bad(err, "kv_class", "expected \"chat\" or \"agent\", got \"%.32s\"", c);
    return 0;
}

int tide_api_parse(tide_api_kind kind, const char *body, size_t len, tide_api_req *req, tide_api_err *err) {
    memset(err, 0, sizeof *err);
    tide_api_req_init(req, kind);
    if (len > TIDE_API_MAX_BODY) {
        tide_api_bad(err, "", "request body of %zu bytes exceeds the limit of %u", len, TIDE_API_MAX_BODY);
        err->http_status = 413;
        err->type = kind == TIDE_API_MESSAGES ? "request_too_large" : "invalid_request_error";
        return -1;
    }
    json_error_t jerr;
    json_t *root = json_loadb(body, len, 0, &jerr);
    if (!root) return tide_api_bad(err, "", "invalid JSON at line %d column %d: %s", jerr.line, jerr.column, jerr.text);
    int rc = -1;
    if (!json_is_object(root)) {
        tide_api_bad(err, "", "the request body must be a JSON object, got %s", tide_json_type_name(root));
    } else if (tide_json_depth(root, TIDE_API_MAX_DEPTH + 1) > TIDE_API_MAX_DEPTH) {
        tide_api_bad(err, "", "JSON nested deeper than %d levels", TIDE_API_MAX_DEPTH);
    } else {
        switch (kind) {
        case TIDE_API_CHAT: rc = tide_convert_chat(root, req, err); break;
        case TIDE_API_RESPONSES: rc = tide_convert_responses(root, req, err); break;
        case TIDE_API_MESSAGES: rc = tide_convert_messages(root, req, err); break;
        case TIDE_API_COMPLETIONS: rc = tide_convert_completions(root, req, err); break;
        }
        if (rc == 0) rc = read_kv_class(root, &req->gen, err);
    }
    json_decref(root);
    if (rc != 0) {
        if (!err->http_status) { /* a failure without a located error (out of memory) */
            err->http_status = err->st.code == TIDE_ERR_NOMEM ? 500 : 400;
            err->type = err->st.code == TIDE_ERR_NOMEM ? "api_error" : "invalid_request_error";
        }
        tide_api_req_free(req);
        tide_api_req_init(req, kind);
    }
    return rc;
}

char *tide_api_error_json(tide_api_kind kind, const tide_api_err *err) {
    const char *type = err->type ? err->type : "invalid_request_error";
    json_t *o;
    if (kind == TIDE_API_MESSAGES) {
        o = json_pack("{s:s, s:{s:s, s:o}}", "type", "error", "error", "type", type, "message",
                      tide_jstr(err->st.msg, strlen(err->st.msg)));
    } else {
        o = json_pack("{s:{s:o, s:s, s:o, s:o}}", "error", "message", tide_jstr(err->st.msg, strlen(err->st.msg)),
                      "type", type, "param", err->param[0] ? tide_jstr(err->param, strlen(err->param)) : json_null(), "code",
                      err->st.code == TIDE_ERR_UNSUPPORTED ? json_string("unsupported") : json_null());
    }
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}
