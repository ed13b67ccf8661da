/* OpenAI Chat Completions request -> conversation + settings.
 * The field table is in docs/text.md. */
#include <stdlib.h>
#include <string.h>

#include "api/convert.h"
#include "api/jfield.h"
#include "api/req_common.h"
#include "text/pyjson.h"
#include "text/sbuf.h"

/* One content part: text, or an image (user messages). */
static int read_part(tide_api_req *req, json_t *part, const char *p, const char **text, tide_api_err *err) {
    static const char *const TEXT[] = {"text", NULL}, *const IMAGE[] = {"image_url", "image", "input_image", NULL};
    return tide_openai_text_part(req, part, p, TEXT, IMAGE, text, err);
}

/* Content: a string, null (when allowed) or an array of parts (images only
 * when req is given). */
static int read_content(tide_api_req *req, json_t *v, const char *path, int allow_null, tide_sb *out,
                        tide_api_err *err) {
    if (!v || json_is_null(v)) {
        if (allow_null) return 0;
        return tide_api_bad(err, path, "required");
    }
    return tide_read_text_parts(req, v, path, read_part, out, err);
}

static int read_calls(tide_api_req *req, json_t *calls, const char *path, tide_api_err *err) {
    size_t i;
    json_t *c;
    char p[160], q[160];
    json_array_foreach(calls, i, c) {
        tide_path_idx(p, sizeof p, path, i);
        if (!json_is_object(c)) return tide_api_bad(err, p, "expected object, got %s", tide_json_type_name(c));
        const char *id = NULL, *type = NULL, *name = NULL;
        json_t *fn;
        if (tide_get_string(c, "id", p, &id, err) || tide_get_string(c, "type", p, &type, err) ||
            tide_get_object(c, "function", p, &fn, err))
            return -1;
        if (type && strcmp(type, "function") != 0)
            return tide_api_unsupported(err, tide_path_key(q, sizeof q, p, "type"), "only function tool calls are supported");
        if (!fn) return tide_api_bad(err, tide_path_key(q, sizeof q, p, "function"), "required");
        tide_path_key(q, sizeof q, p, "function");
        if (tide_get_string(fn, "name", q, &name, err)) return -1;
        if (!name) return tide_api_bad(err, tide_path_key(p, sizeof p, q, "name"), "required");
        /* Required, as the release's encoder requires it: a JSON text (what
         * OpenAI sends) or, leniently, the object itself. */
        json_t *args = json_object_get(fn, "arguments");
        char *owned = NULL;
        const char *text = NULL;
        if (!args) return tide_api_bad(err, tide_path_key(p, sizeof p, q, "arguments"), "required");
        if (json_is_string(args)) text = json_string_value(args);
        else if (json_is_object(args)) text = owned = json_dumps(args, JSON_COMPACT | JSON_PRESERVE_ORDER);
        else
            return tide_api_bad(err, tide_path_key(p, sizeof p, q, "arguments"), "expected string or object, got %s",
                                tide_json_type_name(args));
        if (json_is_string(args) && strlen(text) != json_string_length(args))
            return tide_api_bad(err, tide_path_key(p, sizeof p, q, "arguments"), "string contains a NUL character");
        int rc = tide_conv_add_call(&req->conv, id, name, text ? text : "{}", &err->st);
        free(owned);
        if (rc != 0) return tide_api_bad(err, tide_path_key(p, sizeof p, q, "name"), "%s", err->st.msg);
    }
    return 0;
}

static int read_message(tide_api_req *req, json_t *m, const char *path, tide_api_err *err) {
    char p[160];
    if (!json_is_object(m)) return tide_api_bad(err, path, "expected object, got %s", tide_json_type_name(m));
    const char *role = NULL;
    if (tide_get_string(m, "role", path, &role, err)) return -1;
    if (!role) return tide_api_bad(err, tide_path_key(p, sizeof p, path, "role"), "required");
    tide_role r;
    if (!strcmp(role, "system") || !strcmp(role, "developer")) r = TIDE_ROLE_SYSTEM;
    else if (!strcmp(role, "user")) r = TIDE_ROLE_USER;
    else if (!strcmp(role, "assistant")) r = TIDE_ROLE_ASSISTANT;
    else if (!strcmp(role, "tool")) r = TIDE_ROLE_TOOL;
    else
        return tide_api_bad(err, tide_path_key(p, sizeof p, path, "role"),
                            "unknown role \"%.32s\" (expected system, developer, user, assistant or tool)", role);
    tide_sb text;
    tide_sb_init(&text);
    /* null content: an assistant's (with tool calls) or a system message's
     * reads as empty, as in the release's encoder. */
    int rc = read_content(r == TIDE_ROLE_USER ? req : NULL, json_object_get(m, "content"),
                          tide_path_key(p, sizeof p, path, "content"),
                          r == TIDE_ROLE_ASSISTANT || r == TIDE_ROLE_SYSTEM, &text, err);
    if (!rc && tide_sb_check(&text, "reading content", &err->st)) rc = -1;
    if (!rc) rc = tide_api_conv_add(req, r, text.s, text.len, tide_path_key(p, sizeof p, path, "content"), err);
    tide_sb_free(&text);
    if (rc) return -1;
    if (r == TIDE_ROLE_ASSISTANT) {
        const char *reasoning = NULL;
        json_t *calls;
        if (tide_get_string(m, "reasoning_content", path, &reasoning, err) ||
            (!reasoning && tide_get_string(m, "reasoning", path, &reasoning, err)) ||
            tide_get_array(m, "tool_calls", path, &calls, err))
            return -1;
        if (reasoning && tide_conv_set_reasoning(&req->conv, reasoning, strlen(reasoning), &err->st))
            return tide_api_bad(err, tide_path_key(p, sizeof p, path, "reasoning_content"), "%s", err->st.msg);
        if (calls && read_calls(req, calls, tide_path_key(p, sizeof p, path, "tool_calls"), err)) return -1;
    } else if (r == TIDE_ROLE_TOOL) {
        const char *id = NULL;
        if (tide_get_string(m, "tool_call_id", path, &id, err)) return -1;
        if (id && tide_conv_set_call_id(&req->conv, id, &err->st)) return -1;
    }
    return 0;
}

/* tool_choice {"type": "function", "function": {"name"}}. */
static int read_named_choice(tide_api_req *req, json_t *choice, tide_api_err *err) {
    json_t *fn;
    const char *name = NULL;
    if (tide_get_object(choice, "function", "tool_choice", &fn, err) ||
        tide_get_string(fn, "name", "tool_choice.function", &name, err))
        return -1;
    if (!name) return tide_api_bad(err, "tool_choice.function.name", "required");
    return tide_set_named_tool(req, name, err);
}

/* tools[i]: {"type": "function", "function": {name, description, parameters}}. */
static int read_tool(tide_api_req *req, json_t *t, const char *p, tide_api_err *err) {
    const char *type = NULL;
    json_t *fn;
    char q[160];
    if (tide_get_string(t, "type", p, &type, err) || tide_get_object(t, "function", p, &fn, err)) return -1;
    if (type && strcmp(type, "function") != 0)
        return tide_api_unsupported(err, tide_path_key(q, sizeof q, p, "type"), "only function tools are supported");
    if (!fn) return tide_api_bad(err, tide_path_key(q, sizeof q, p, "function"), "required");
    if (tide_add_tool(req, fn, tide_path_key(q, sizeof q, p, "function"), "parameters", err)) return -1;
    tide_conv_set_tool_shown(&req->conv, fn); /* the release writes the function object as sent */
    return 0;
}

static int read_tools(tide_api_req *req, json_t *root, tide_api_err *err) {
    if (tide_read_tool_list(req, root, read_tool, err)) return -1;
    return tide_read_tool_choice(req, root, read_named_choice, err);
}

static int read_format(tide_api_req *req, json_t *root, tide_api_err *err) {
    json_t *rf;
    const char *type = NULL;
    if (tide_get_object(root, "response_format", "", &rf, err)) return -1;
    if (!rf) return 0;
    if (tide_get_string(rf, "type", "response_format", &type, err)) return -1;
    if (!type) return tide_api_bad(err, "response_format.type", "required");
    if (!strcmp(type, "text")) return 0;
    if (!strcmp(type, "json_object")) return tide_set_format(req, TIDE_FMT_JSON_OBJECT, NULL, rf, err);
    if (strcmp(type, "json_schema") != 0)
        return tide_api_bad(err, "response_format.type", "expected text, json_object or json_schema, got \"%.32s\"", type);
    json_t *js, *schema;
    if (tide_get_object(rf, "json_schema", "response_format", &js, err)) return -1;
    if (!js) return tide_api_bad(err, "response_format.json_schema", "required");
    if (tide_get_object(js, "schema", "response_format.json_schema", &schema, err)) return -1;
    if (!schema) return tide_api_bad(err, "response_format.json_schema.schema", "required");
    return tide_set_format(req, TIDE_FMT_JSON_SCHEMA, schema, rf, err);
}

static int read_sampling(tide_api_req *req, json_t *root, int *max_given, tide_api_err *err) {
    tide_gen *g = &req->gen;
    long long top_k = 0, max_tokens = 0;
    int logprobs = 0;
    json_t *so;
    const char *model = NULL;
    if (tide_get_string(root, "model", "", &model, err) ||
        tide_get_number(root, "temperature", "", 0, 2, &g->temperature, err) ||
        tide_get_number(root, "top_p", "", 0, 1, &g->top_p, err) ||
        tide_get_int(root, "top_k", "", -1, 1 << 20, &top_k, err) ||
        tide_get_int(root, "max_tokens", "", 1, 1 << 24, &max_tokens, err) ||
        tide_get_int(root, "max_completion_tokens", "", 1, 1 << 24, &max_tokens, err) ||
        tide_get_stops(root, "stop", g, err) ||
        tide_get_bool(root, "stream", "", &g->stream, err) ||
        tide_get_object(root, "stream_options", "", &so, err) ||
        tide_get_bool(so, "include_usage", "stream_options", &g->include_usage, err) ||
        tide_get_bool(root, "parallel_tool_calls", "", &g->parallel_tool_calls, err) ||
        tide_get_bool(root, "logprobs", "", &logprobs, err) || tide_read_sampling_extras(root, g, 1, err))
        return -1;
    if (tide_read_chat_logprobs(root, g, logprobs, err)) return -1;
    if (tide_get_seed(root, g, err)) return -1;
    if (tide_get_bool(root, "continue_final_message", "", &req->conv.continue_final, err)) return -1;
    g->top_k = top_k < 0 ? 0 : (int)top_k;
    *max_given = max_tokens > 0;
    g->max_tokens = (int)max_tokens;
    if (model && !(g->model = strdup(model))) return tide_fail(&err->st, TIDE_ERR_NOMEM, "out of memory");
    return 0;
}

/* thinking: {"type": "enabled"|"disabled"} (DeepSeek), chat_template_kwargs
 * {"thinking"|"enable_thinking": bool, "reasoning_effort"} (vLLM / SGLang),
 * reasoning_effort (OpenAI). The explicit switches win over an effort. */
static int read_thinking(tide_api_req *req, json_t *root, tide_api_err *err) {
    int think = -1;
    json_t *th, *kw;
    if (tide_get_object(root, "thinking", "", &th, err) || tide_get_object(root, "chat_template_kwargs", "", &kw, err))
        return -1;
    if (th) {
        const char *type = NULL;
        if (tide_get_string(th, "type", "thinking", &type, err)) return -1;
        if (!type || (strcmp(type, "enabled") && strcmp(type, "disabled")))
            return tide_api_bad(err, "thinking.type", "expected \"enabled\" or \"disabled\"");
        think = !strcmp(type, "enabled");
    } else if (kw) {
        if (tide_get_bool(kw, "enable_thinking", "chat_template_kwargs", &think, err) ||
            tide_get_bool(kw, "thinking", "chat_template_kwargs", &think, err))
            return -1;
    }
    json_t *effort = json_object_get(root, "reasoning_effort");
    const char *where = "reasoning_effort";
    if ((!effort || json_is_null(effort)) && kw) {
        effort = json_object_get(kw, "reasoning_effort");
        where = "chat_template_kwargs.reasoning_effort";
    }
    return tide_set_thinking(req, think, effort, where, err);
}

int tide_convert_chat(json_t *root, tide_api_req *req, tide_api_err *err) {
    int max_given = 0;
    json_t *msgs;
    if (read_sampling(req, root, &max_given, err) || read_thinking(req, root, err)) return -1;
    if (tide_get_messages(root, &msgs, err)) return -1;
    size_t i;
    json_t *m;
    char p[160];
    json_array_foreach(msgs, i, m) if (read_message(req, m, tide_path_idx(p, sizeof p, "messages", i), err)) return -1;
    if (read_tools(req, root, err) || read_format(req, root, err)) return -1;
    return tide_finish_request(req, max_given, err);
}
