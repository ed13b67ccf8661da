/* OpenAI Responses request -> conversation + settings.
 * Input items map onto messages: message items by role, a reasoning item
 * opens an assistant turn that the following message and function_call
 * items of the same turn attach to, function_call_output items become tool
 * results. The field table is in docs/text.md. */
#include <stdlib.h>
#include <string.h>

#include "api/convert.h"
#include "api/jfield.h"
#include "api/req_common.h"
#include "text/sbuf.h"

/* One content part: input, output, reasoning or summary text. */
static int read_part(tide_api_req *req, json_t *part, const char *p, const char **text, tide_api_err *err) {
    static const char *const TEXT[] = {"input_text", "output_text", "text", "reasoning_text", "summary_text", NULL},
                             *const IMAGE[] = {"input_image", "image_url", NULL};
    return tide_openai_text_part(req, part, p, TEXT, IMAGE, text, err);
}

/* Text of a content field: a string or an array of parts (images only when
 * req is given). */
static int read_parts(tide_api_req *req, json_t *v, const char *path, tide_sb *out, tide_api_err *err) {
    return tide_read_text_parts(req, v, path, read_part, out, err);
}

/* The open assistant turn: the last message, when it is an assistant's
 * that has said nothing yet but reasoning (or, for calls, anything). */
static int open_assistant(tide_conv *c, int for_call) {
    if (c->n_msgs == 0) return 0;
    const tide_msg *m = &c->msgs[c->n_msgs - 1];
    if (m->role != TIDE_ROLE_ASSISTANT) return 0;
    return for_call || (m->content[0] == 0 && m->n_calls == 0);
}

static int add_text(tide_api_req *req, tide_role r, tide_sb *text, const char *path, tide_api_err *err) {
    if (tide_sb_check(text, "reading input", &err->st)) return -1;
    if (r == TIDE_ROLE_ASSISTANT && open_assistant(&req->conv, 0)) {
        tide_msg *m = &req->conv.msgs[req->conv.n_msgs - 1];
        char *s = strdup(text->s ? text->s : "");
        if (!s) return tide_fail(&err->st, TIDE_ERR_NOMEM, "out of memory");
        free(m->content);
        m->content = s;
        return 0;
    }
    return tide_api_conv_add(req, r, text->s, text->len, path, err);
}

static int read_item(tide_api_req *req, json_t *it, const char *path, tide_api_err *err) {
    char p[160];
    if (!json_is_object(it)) return tide_api_bad(err, path, "expected object, got %s", tide_json_type_name(it));
    const char *type = NULL, *role = NULL;
    if (tide_get_string(it, "type", path, &type, err) || tide_get_string(it, "role", path, &role, err)) return -1;
    if (!type) type = "message";
    tide_sb text;
    tide_sb_init(&text);
    int rc = 0;
    if (!strcmp(type, "message")) {
        tide_role r;
        if (!role) return tide_api_bad(err, tide_path_key(p, sizeof p, path, "role"), "required");
        if (!strcmp(role, "user")) r = TIDE_ROLE_USER;
        else if (!strcmp(role, "system") || !strcmp(role, "developer")) r = TIDE_ROLE_SYSTEM;
        else if (!strcmp(role, "assistant")) r = TIDE_ROLE_ASSISTANT;
        else return tide_api_bad(err, tide_path_key(p, sizeof p, path, "role"), "unknown role \"%.32s\"", role);
        json_t *content = json_object_get(it, "content");
        if (!content) return tide_api_bad(err, tide_path_key(p, sizeof p, path, "content"), "required");
        rc = read_parts(r == TIDE_ROLE_USER ? req : NULL, content, tide_path_key(p, sizeof p, path, "content"), &text,
                        err);
        if (!rc) rc = add_text(req, r, &text, p, err);
    } else if (!strcmp(type, "reasoning")) {
        json_t *content = json_object_get(it, "content"), *summary = json_object_get(it, "summary");
        if (content && !json_is_null(content)) rc = read_parts(NULL, content, tide_path_key(p, sizeof p, path, "content"), &text, err);
        else if (summary) rc = read_parts(NULL, summary, tide_path_key(p, sizeof p, path, "summary"), &text, err);
        if (!rc && tide_sb_check(&text, "reading input", &err->st)) rc = -1;
        if (!rc) rc = tide_api_conv_add(req, TIDE_ROLE_ASSISTANT, "", 0, path, err);
        if (!rc && tide_conv_set_reasoning(&req->conv, text.s ? text.s : "", text.len, &err->st)) rc = -1;
    } else if (!strcmp(type, "function_call")) {
        const char *call_id = NULL, *name = NULL, *args = NULL;
        if (tide_get_string(it, "call_id", path, &call_id, err) || tide_get_string(it, "name", path, &name, err) ||
            tide_get_string(it, "arguments", path, &args, err))
            return -1;
        if (!name) return tide_api_bad(err, tide_path_key(p, sizeof p, path, "name"), "required");
        if (!open_assistant(&req->conv, 1) && tide_api_conv_add(req, TIDE_ROLE_ASSISTANT, "", 0, path, err)) return -1;
        if (tide_conv_add_call(&req->conv, call_id, name, args ? args : "{}", &err->st))
            return tide_api_bad(err, tide_path_key(p, sizeof p, path, "name"), "%s", err->st.msg);
    } else if (!strcmp(type, "function_call_output")) {
        const char *call_id = NULL;
        json_t *out = json_object_get(it, "output");
        if (tide_get_string(it, "call_id", path, &call_id, err)) return -1;
        if (!out) return tide_api_bad(err, tide_path_key(p, sizeof p, path, "output"), "required");
        rc = read_parts(NULL, out, tide_path_key(p, sizeof p, path, "output"), &text, err);
        if (!rc) rc = add_text(req, TIDE_ROLE_TOOL, &text, p, err);
        if (!rc && call_id && tide_conv_set_call_id(&req->conv, call_id, &err->st)) rc = -1;
    } else {
        rc = tide_api_unsupported(err, tide_path_key(p, sizeof p, path, "type"), "input item type \"%.40s\" is not supported",
                                  type);
    }
    tide_sb_free(&text);
    return rc;
}

/* tool_choice {"type": "function", "name"}. */
static int read_named_choice(tide_api_req *req, json_t *choice, tide_api_err *err) {
    const char *type = NULL, *name = NULL;
    if (tide_get_string(choice, "type", "tool_choice", &type, err) ||
        tide_get_string(choice, "name", "tool_choice", &name, err))
        return -1;
    if (!type || strcmp(type, "function") != 0)
        return tide_api_unsupported(err, "tool_choice.type", "only function tool choices are supported");
    if (!name) return tide_api_bad(err, "tool_choice.name", "required");
    return tide_set_named_tool(req, name, err);
}

/* tools[i]: {"type": "function", name, description, parameters}. */
static int read_tool(tide_api_req *req, json_t *t, const char *p, tide_api_err *err) {
    const char *type = NULL;
    char q[160];
    if (tide_get_string(t, "type", p, &type, err)) return -1;
    if (!type || strcmp(type, "function") != 0)
        return tide_api_unsupported(err, tide_path_key(q, sizeof q, p, "type"), "only function tools are supported");
    if (tide_add_tool(req, t, p, "parameters", err)) return -1;
    /* Shown as sent, less the "type" that Chat Completions keeps outside
     * the function object: the release writes the client's definition. */
    json_t *shown = json_deep_copy(t);
    if (!shown) return tide_fail(&err->st, TIDE_ERR_NOMEM, "out of memory");
    json_object_del(shown, "type");
    tide_conv_set_tool_shown(&req->conv, shown);
    json_decref(shown);
    return 0;
}

static int read_tools(tide_api_req *req, json_t *root, tide_api_err *err) {
    if (tide_read_tool_list(req, root, read_tool, err)) return -1;
    return tide_read_tool_choice(req, root, read_named_choice, err);
}

/* text.format, shown to the model in Chat Completions' response_format
 * shape so that all three APIs render the same prompt. */
static int read_format(tide_api_req *req, json_t *root, tide_api_err *err) {
    json_t *text, *fmt, *schema;
    const char *type = NULL;
    if (tide_get_object(root, "text", "", &text, err) || tide_get_object(text, "format", "text", &fmt, err)) return -1;
    if (!fmt) return 0;
    if (tide_get_string(fmt, "type", "text.format", &type, err)) return -1;
    if (!type) return tide_api_bad(err, "text.format.type", "required");
    if (!strcmp(type, "text")) return 0;
    if (!strcmp(type, "json_object")) {
        json_t *shown = json_pack("{s:s}", "type", "json_object");
        int rc = tide_set_format(req, TIDE_FMT_JSON_OBJECT, NULL, shown, err);
        json_decref(shown);
        return rc;
    }
    if (strcmp(type, "json_schema") != 0)
        return tide_api_bad(err, "text.format.type", "expected text, json_object or json_schema, got \"%.32s\"", type);
    if (tide_get_object(fmt, "schema", "text.format", &schema, err)) return -1;
    if (!schema) return tide_api_bad(err, "text.format.schema", "required");
    json_t *inner = json_object();
    static const char *const KEYS[] = {"name", "description", "schema", "strict"};
    for (size_t i = 0; i < 4; i++)
        if (json_object_get(fmt, KEYS[i])) json_object_set(inner, KEYS[i], json_object_get(fmt, KEYS[i]));
    json_t *shown = json_pack("{s:s, s:o}", "type", "json_schema", "json_schema", inner);
    int rc = shown ? tide_set_format(req, TIDE_FMT_JSON_SCHEMA, schema, shown, err)
                   : tide_fail(&err->st, TIDE_ERR_NOMEM, "out of memory");
    json_decref(shown);
    return rc;
}

static int read_settings(tide_api_req *req, json_t *root, int *max_given, tide_api_err *err) {
    tide_gen *g = &req->gen;
    long long top_k = 0, max_tokens = 0;
    int background = 0;
    const char *model = NULL, *prev = NULL;
    json_t *reasoning;
    if (tide_get_string(root, "model", "", &model, err) ||
        tide_get_number(root, "temperature", "", 0, 2, &g->temperature, err) ||
        tide_get_number(root, "top_p", "", 0, 1, &g->top_p, err) ||
        tide_get_int(root, "top_k", "", -1, 1 << 20, &top_k, err) ||
        tide_get_int(root, "max_output_tokens", "", 1, 1 << 24, &max_tokens, err) ||
        tide_get_stops(root, "stop", g, err) || tide_get_bool(root, "stream", "", &g->stream, err) ||
        tide_get_bool(root, "parallel_tool_calls", "", &g->parallel_tool_calls, err) ||
        tide_get_bool(root, "background", "", &background, err) ||
        tide_get_string(root, "previous_response_id", "", &prev, err) ||
        tide_get_object(root, "reasoning", "", &reasoning, err))
        return -1;
    if (prev) return tide_api_unsupported(err, "previous_response_id", "not supported: tide keeps no response state");
    if (background) return tide_api_unsupported(err, "background", "background responses are not supported");
    if (tide_get_seed(root, g, err) || tide_read_responses_logprobs(root, g, err)) return -1;
    if (tide_get_bool(root, "continue_final_message", "", &req->conv.continue_final, err)) return -1;
    g->top_k = top_k < 0 ? 0 : (int)top_k;
    g->max_tokens = (int)max_tokens;
    *max_given = max_tokens > 0;
    g->include_usage = 1; /* response.completed always carries usage */
    if (model && !(g->model = strdup(model))) return tide_fail(&err->st, TIDE_ERR_NOMEM, "out of memory");
    /* A reasoning object turns thinking on; its effort "none" turns it off. */
    if (!reasoning) return tide_set_thinking(req, 0, NULL, "reasoning.effort", err);
    json_t *effort = json_object_get(reasoning, "effort");
    return tide_set_thinking(req, effort && !json_is_null(effort) ? -1 : 1, effort, "reasoning.effort", err);
}

int tide_convert_responses(json_t *root, tide_api_req *req, tide_api_err *err) {
    int max_given = 0;
    const char *instructions = NULL;
    if (read_settings(req, root, &max_given, err) || tide_get_string(root, "instructions", "", &instructions, err))
        return -1;
    if (instructions && tide_api_conv_add(req, TIDE_ROLE_SYSTEM, instructions, strlen(instructions), "instructions", err))
        return -1;
    json_t *input = json_object_get(root, "input");
    if (!input || json_is_null(input)) return tide_api_bad(err, "input", "required");
    if (json_is_string(input)) {
        if (tide_api_conv_add(req, TIDE_ROLE_USER, json_string_value(input), json_string_length(input), "input", err))
            return -1;
    } else if (json_is_array(input)) {
        if (json_array_size(input) > TIDE_CONV_MAX_MESSAGES)
            return tide_api_bad(err, "input", "more than %d items", TIDE_CONV_MAX_MESSAGES);
        size_t i;
        json_t *it;
        char p[160];
        json_array_foreach(input, i, it) if (read_item(req, it, tide_path_idx(p, sizeof p, "input", i), err)) return -1;
    } else {
        return tide_api_bad(err, "input", "expected string or array, got %s", tide_json_type_name(input));
    }
    if (read_tools(req, root, err) || read_format(req, root, err)) return -1;
    return tide_finish_request(req, max_given, err);
}
