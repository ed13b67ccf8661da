/* Anthropic Messages request -> conversation + settings.
 * User content blocks become user texts and tool results (in order);
 * assistant blocks become reasoning (thinking), content (text) and tool
 * calls (tool_use). The field table is in docs/text.md. */
#include <stdlib.h>
#include <string.h>

#include "api/convert.h"
#include "api/jfield.h"
#include "api/req_common.h"
#include "text/sbuf.h"

static int is_image(const char *type) { return !strcmp(type, "image") || !strcmp(type, "document"); }

/* An image block's source: {"type": "base64", "media_type": "image/...",
 * "data": ...}; a "url" source is refused (no network). */
static int read_image(tide_api_req *req, json_t *b, const char *p, tide_api_err *err) {
    char q[160], r[160];
    json_t *src;
    const char *type = NULL, *media = NULL, *data = NULL;
    if (tide_get_object(b, "source", p, &src, err)) return -1;
    tide_path_key(q, sizeof q, p, "source");
    if (!src) return tide_api_bad(err, q, "required");
    if (tide_get_string(src, "type", q, &type, err) || tide_get_string(src, "media_type", q, &media, err)) return -1;
    if (type && !strcmp(type, "url"))
        return tide_api_bad(err, tide_path_key(r, sizeof r, q, "type"),
                            "remote image URLs are not fetched: this server has no network access; send the image "
                            "as a base64 source");
    if (!type || strcmp(type, "base64") != 0)
        return tide_api_bad(err, tide_path_key(r, sizeof r, q, "type"), "expected \"base64\"");
    if (!media || strncmp(media, "image/", 6) != 0)
        return tide_api_bad(err, tide_path_key(r, sizeof r, q, "media_type"), "expected an image media type");
    json_t *d = json_object_get(src, "data");
    if (!json_is_string(d)) return tide_api_bad(err, tide_path_key(r, sizeof r, q, "data"), "expected string");
    data = json_string_value(d);
    return tide_api_image_b64(req, data, json_string_length(d), tide_path_key(r, sizeof r, q, "data"), err);
}

/* One text block (the only kind allowed in system prompts and tool results). */
static int read_text_block(tide_api_req *req, json_t *b, const char *p, const char **text, tide_api_err *err) {
    (void)req;
    const char *type = NULL;
    char q[160];
    if (tide_get_string(b, "type", p, &type, err) || tide_get_string(b, "text", p, text, err)) return -1;
    if (type && is_image(type)) return tide_api_unsupported(err, p, "images are accepted only in user messages");
    if (!type || strcmp(type, "text") != 0)
        return tide_api_bad(err, tide_path_key(q, sizeof q, p, "type"), "expected \"text\"");
    if (!*text) return tide_api_bad(err, tide_path_key(q, sizeof q, p, "text"), "required");
    return 0;
}

/* A string or an array of text blocks, joined with blank lines. */
static int read_text_blocks(json_t *v, const char *path, tide_sb *out, tide_api_err *err) {
    return tide_read_text_parts(NULL, v, path, read_text_block, out, err);
}

static int read_user(tide_api_req *req, json_t *content, const char *path, tide_api_err *err) {
    if (json_is_string(content))
        return tide_api_conv_add(req, TIDE_ROLE_USER, json_string_value(content), json_string_length(content), path, err);
    if (!json_is_array(content)) return tide_api_bad(err, path, "expected string or array, got %s", tide_json_type_name(content));
    size_t i;
    json_t *b;
    char p[160], q[160];
    json_array_foreach(content, i, b) {
        tide_path_idx(p, sizeof p, path, i);
        const char *type = NULL;
        if (!json_is_object(b)) return tide_api_bad(err, p, "expected object, got %s", tide_json_type_name(b));
        if (tide_get_string(b, "type", p, &type, err)) return -1;
        if (!type) return tide_api_bad(err, tide_path_key(q, sizeof q, p, "type"), "required");
        if (!strcmp(type, "document")) return tide_api_unsupported(err, p, "documents are not supported");
        if (!strcmp(type, "image")) {
            if (read_image(req, b, p, err) ||
                tide_api_conv_add(req, TIDE_ROLE_USER, TIDE_CONV_IMAGE_PLACEHOLDER, strlen(TIDE_CONV_IMAGE_PLACEHOLDER),
                                  p, err))
                return -1;
        } else if (!strcmp(type, "text")) {
            const char *text = NULL;
            if (tide_get_string(b, "text", p, &text, err)) return -1;
            if (!text) return tide_api_bad(err, tide_path_key(q, sizeof q, p, "text"), "required");
            if (tide_api_conv_add(req, TIDE_ROLE_USER, text, strlen(text), p, err)) return -1;
        } else if (!strcmp(type, "tool_result")) {
            const char *id = NULL;
            if (tide_get_string(b, "tool_use_id", p, &id, err)) return -1;
            tide_sb text;
            tide_sb_init(&text);
            json_t *c = json_object_get(b, "content");
            int rc = (c && !json_is_null(c)) ? read_text_blocks(c, tide_path_key(q, sizeof q, p, "content"), &text, err) : 0;
            if (!rc && tide_sb_check(&text, "reading a tool result", &err->st)) rc = -1;
            if (!rc) rc = tide_api_conv_add(req, TIDE_ROLE_TOOL, text.s, text.len, p, err);
            tide_sb_free(&text);
            if (rc) return -1;
            if (id && tide_conv_set_call_id(&req->conv, id, &err->st)) return -1;
        } else {
            return tide_api_unsupported(err, tide_path_key(q, sizeof q, p, "type"), "content block type \"%.40s\" is not supported in a user message", type);
        }
    }
    return 0;
}

static int read_assistant(tide_api_req *req, json_t *content, const char *path, tide_api_err *err) {
    if (json_is_string(content))
        return tide_api_conv_add(req, TIDE_ROLE_ASSISTANT, json_string_value(content), json_string_length(content), path, err);
    if (!json_is_array(content)) return tide_api_bad(err, path, "expected string or array, got %s", tide_json_type_name(content));
    tide_sb body, reasoning;
    tide_sb_init(&body);
    tide_sb_init(&reasoning);
    size_t i;
    json_t *b;
    char p[160], q[160];
    int rc = 0, has_reasoning = 0;
    json_array_foreach(content, i, b) { /* first pass: text and thinking */
        tide_path_idx(p, sizeof p, path, i);
        const char *type = NULL, *text = NULL;
        if (!json_is_object(b)) { rc = tide_api_bad(err, p, "expected object, got %s", tide_json_type_name(b)); break; }
        if ((rc = tide_get_string(b, "type", p, &type, err))) break;
        if (!type) { rc = tide_api_bad(err, tide_path_key(q, sizeof q, p, "type"), "required"); break; }
        if (!strcmp(type, "text")) {
            if ((rc = tide_get_string(b, "text", p, &text, err))) break;
            if (body.len) tide_sb_add(&body, "\n\n");
            tide_sb_add(&body, text ? text : "");
        } else if (!strcmp(type, "thinking")) {
            if ((rc = tide_get_string(b, "thinking", p, &text, err))) break;
            tide_sb_add(&reasoning, text ? text : "");
            has_reasoning = 1;
        } else if (strcmp(type, "tool_use") && strcmp(type, "redacted_thinking")) {
            rc = tide_api_unsupported(err, tide_path_key(q, sizeof q, p, "type"),
                                      "content block type \"%.40s\" is not supported in an assistant message", type);
            break;
        }
    }
    if (!rc && (tide_sb_check(&body, "reading content", &err->st) || tide_sb_check(&reasoning, "reading content", &err->st)))
        rc = -1;
    if (!rc) rc = tide_api_conv_add(req, TIDE_ROLE_ASSISTANT, body.s, body.len, path, err);
    if (!rc && has_reasoning && tide_conv_set_reasoning(&req->conv, reasoning.s ? reasoning.s : "", reasoning.len, &err->st))
        rc = -1;
    tide_sb_free(&body);
    tide_sb_free(&reasoning);
    if (rc) return -1;
    json_array_foreach(content, i, b) { /* second pass: tool calls in order */
        const char *type = json_string_value(json_object_get(b, "type"));
        if (strcmp(type, "tool_use") != 0) continue;
        tide_path_idx(p, sizeof p, path, i);
        const char *id = NULL, *name = NULL;
        json_t *input;
        if (tide_get_string(b, "id", p, &id, err) || tide_get_string(b, "name", p, &name, err) ||
            tide_get_object(b, "input", p, &input, err))
            return -1;
        if (!name) return tide_api_bad(err, tide_path_key(q, sizeof q, p, "name"), "required");
        char *args = input ? json_dumps(input, JSON_COMPACT) : NULL;
        rc = tide_conv_add_call(&req->conv, id, name, args ? args : "{}", &err->st);
        free(args);
        if (rc) return tide_api_bad(err, tide_path_key(q, sizeof q, p, "name"), "%s", err->st.msg);
    }
    return 0;
}

/* tools[i]: a client tool {name, description, input_schema}, "type" absent or
 * "custom"; server tools are refused. */
static int read_tool(tide_api_req *req, json_t *t, const char *p, tide_api_err *err) {
    const char *type = NULL;
    char q[160];
    if (tide_get_string(t, "type", p, &type, err)) return -1;
    if (type && strcmp(type, "custom") != 0)
        return tide_api_unsupported(err, tide_path_key(q, sizeof q, p, "type"), "server tool \"%.40s\" is not supported",
                                    type);
    return tide_add_tool(req, t, p, "input_schema", err);
}

static int read_tools(tide_api_req *req, json_t *root, tide_api_err *err) {
    json_t *tools, *choice;
    /* The order (tools' type, tool_choice's type, then each tool) decides
     * which of several errors is reported. */
    if (tide_get_array(root, "tools", "", &tools, err) || tide_get_object(root, "tool_choice", "", &choice, err) ||
        tide_read_tool_list(req, root, read_tool, err))
        return -1;
    if (!choice) return 0;
    const char *type = NULL, *name = NULL;
    int no_parallel = 0;
    if (tide_get_string(choice, "type", "tool_choice", &type, err) ||
        tide_get_string(choice, "name", "tool_choice", &name, err) ||
        tide_get_bool(choice, "disable_parallel_tool_use", "tool_choice", &no_parallel, err))
        return -1;
    if (!type) return tide_api_bad(err, "tool_choice.type", "required");
    req->gen.parallel_tool_calls = !no_parallel;
    if (!strcmp(type, "auto")) req->gen.tool_choice = TIDE_TOOLS_AUTO;
    else if (!strcmp(type, "any")) req->gen.tool_choice = TIDE_TOOLS_REQUIRED;
    else if (!strcmp(type, "none")) req->gen.tool_choice = TIDE_TOOLS_NONE;
    else if (!strcmp(type, "tool")) {
        if (!name) return tide_api_bad(err, "tool_choice.name", "required");
        if (tide_set_named_tool(req, name, err)) return -1;
    } else {
        return tide_api_bad(err, "tool_choice.type", "expected auto, any, tool or none, got \"%.32s\"", type);
    }
    return tide_apply_tool_choice(req, "tool_choice", err);
}

static int read_format(tide_api_req *req, json_t *root, tide_api_err *err) {
    json_t *fmt, *schema;
    const char *type = NULL;
    if (tide_get_object(root, "output_format", "", &fmt, err)) return -1;
    if (!fmt) return 0;
    if (tide_get_string(fmt, "type", "output_format", &type, err) ||
        tide_get_object(fmt, "schema", "output_format", &schema, err))
        return -1;
    if (!type || strcmp(type, "json_schema") != 0) return tide_api_bad(err, "output_format.type", "expected \"json_schema\"");
    if (!schema) return tide_api_bad(err, "output_format.schema", "required");
    json_t *shown = json_pack("{s:s, s:{s:O}}", "type", "json_schema", "json_schema", "schema", schema);
    int rc = shown ? tide_set_format(req, TIDE_FMT_JSON_SCHEMA, schema, shown, err)
                   : tide_fail(&err->st, TIDE_ERR_NOMEM, "out of memory");
    json_decref(shown);
    return rc;
}

/* thinking {"type": "enabled"|"adaptive"|"disabled"}; output_config.effort. */
static int read_thinking(tide_api_req *req, json_t *root, tide_api_err *err) {
    json_t *th, *oc;
    int think = -1;
    if (tide_get_object(root, "thinking", "", &th, err) || tide_get_object(root, "output_config", "", &oc, err)) return -1;
    if (th) {
        const char *type = NULL;
        if (tide_get_string(th, "type", "thinking", &type, err)) return -1;
        if (!type || (strcmp(type, "enabled") && strcmp(type, "adaptive") && strcmp(type, "disabled")))
            return tide_api_bad(err, "thinking.type", "expected \"enabled\", \"adaptive\" or \"disabled\"");
        think = strcmp(type, "disabled") != 0;
    }
    return tide_set_thinking(req, think, oc ? json_object_get(oc, "effort") : NULL, "output_config.effort", err);
}

static int read_settings(tide_api_req *req, json_t *root, int *max_given, tide_api_err *err) {
    tide_gen *g = &req->gen;
    long long top_k = 0, max_tokens = 0;
    const char *model = NULL;
    if (tide_get_string(root, "model", "", &model, err) ||
        tide_get_number(root, "temperature", "", 0, 1, &g->temperature, err) ||
        tide_get_number(root, "top_p", "", 0, 1, &g->top_p, err) ||
        tide_get_int(root, "top_k", "", 0, 1 << 20, &top_k, err) ||
        tide_get_int(root, "max_tokens", "", 1, 1 << 24, &max_tokens, err) ||
        tide_get_stops(root, "stop_sequences", g, err) || tide_get_bool(root, "stream", "", &g->stream, err))
        return -1;
    g->top_k = (int)top_k;
    g->max_tokens = (int)max_tokens;
    *max_given = max_tokens > 0;
    g->include_usage = 1; /* message_start and message_delta always carry usage */
    if (model && !(g->model = strdup(model))) return tide_fail(&err->st, TIDE_ERR_NOMEM, "out of memory");
    return 0;
}

int tide_convert_messages(json_t *root, tide_api_req *req, tide_api_err *err) {
    int max_given = 0;
    json_t *msgs, *system = json_object_get(root, "system");
    if (read_settings(req, root, &max_given, err) || read_thinking(req, root, err)) return -1;
    if (system && !json_is_null(system)) {
        tide_sb text;
        tide_sb_init(&text);
        int rc = read_text_blocks(system, "system", &text, err);
        if (!rc && tide_sb_check(&text, "reading system", &err->st)) rc = -1;
        if (!rc) rc = tide_api_conv_add(req, TIDE_ROLE_SYSTEM, text.s, text.len, "system", err);
        tide_sb_free(&text);
        if (rc) return -1;
    }
    if (tide_get_messages(root, &msgs, err)) return -1;
    size_t i;
    json_t *m;
    char p[160], q[160];
    json_array_foreach(msgs, i, m) {
        tide_path_idx(p, sizeof p, "messages", i);
        const char *role = NULL;
        if (!json_is_object(m)) return tide_api_bad(err, p, "expected object, got %s", tide_json_type_name(m));
        if (tide_get_string(m, "role", p, &role, err)) return -1;
        json_t *content = json_object_get(m, "content");
        if (!role) return tide_api_bad(err, tide_path_key(q, sizeof q, p, "role"), "required");
        if (!content) return tide_api_bad(err, tide_path_key(q, sizeof q, p, "content"), "required");
        tide_path_key(q, sizeof q, p, "content");
        if (!strcmp(role, "user")) {
            if (read_user(req, content, q, err)) return -1;
        } else if (!strcmp(role, "assistant")) {
            if (read_assistant(req, content, q, err)) return -1;
        } else {
            return tide_api_bad(err, tide_path_key(q, sizeof q, p, "role"), "expected \"user\" or \"assistant\", got \"%.32s\"", role);
        }
    }
    if (read_tools(req, root, err) || read_format(req, root, err)) return -1;
    req->conv.continue_final = 1; /* a final assistant message is a prefill, continued */
    return tide_finish_request(req, max_given, err);
}
