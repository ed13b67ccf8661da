/* Request-reading pieces shared by the three converters (see
 * api/req_common.h). */
#include "api/req_common.h"

#include <stdlib.h>
#include <string.h>

#include "api/jfield.h"

int tide_read_text_parts(tide_api_req *req, json_t *v, const char *path, tide_text_part_fn part, tide_sb *out,
                         tide_api_err *err) {
    if (json_is_string(v)) {
        tide_sb_addn(out, json_string_value(v), json_string_length(v));
        return 0;
    }
    if (!json_is_array(v)) return tide_api_bad(err, path, "expected string or array, got %s", tide_json_type_name(v));
    size_t i;
    json_t *x;
    char p[160];
    json_array_foreach(v, i, x) {
        tide_path_idx(p, sizeof p, path, i);
        const char *text = NULL;
        if (!json_is_object(x)) return tide_api_bad(err, p, "expected object, got %s", tide_json_type_name(x));
        if (part(req, x, p, &text, err)) return -1;
        if (i) tide_sb_add(out, "\n\n");
        tide_sb_add(out, text);
    }
    return 0;
}

static int listed(const char *s, const char *const *list) {
    for (; *list; list++)
        if (!strcmp(s, *list)) return 1;
    return 0;
}

int tide_openai_text_part(tide_api_req *req, json_t *part, const char *p, const char *const *text_types,
                          const char *const *image_types, const char **text, tide_api_err *err) {
    const char *type = NULL;
    char q[160];
    if (tide_get_string(part, "type", p, &type, err)) return -1;
    if (!type) return tide_api_bad(err, tide_path_key(q, sizeof q, p, "type"), "required");
    if (listed(type, image_types)) {
        if (!req) return tide_api_unsupported(err, p, "images are accepted only in user messages");
        /* chat: {"image_url": {"url": ...}}; responses: {"image_url": "..."} */
        json_t *u = json_object_get(part, "image_url");
        tide_path_key(q, sizeof q, p, "image_url");
        if (json_is_object(u)) {
            char r[160];
            const char *url = NULL;
            if (tide_get_string(u, "url", q, &url, err)) return -1;
            if (!url) return tide_api_bad(err, tide_path_key(r, sizeof r, q, "url"), "required");
            if (tide_api_image_url(req, url, tide_path_key(r, sizeof r, q, "url"), err)) return -1;
        } else if (json_is_string(u)) {
            if (tide_api_image_url(req, json_string_value(u), q, err)) return -1;
        } else if (!u) {
            return tide_api_bad(err, q, json_object_get(part, "file_id") ? "file ids are not supported (no file "
                                "store): send the image as a data: URL" : "required");
        } else {
            return tide_api_bad(err, q, "expected string or object, got %s", tide_json_type_name(u));
        }
        *text = TIDE_CONV_IMAGE_PLACEHOLDER;
        return 0;
    }
    if (!listed(type, text_types))
        return tide_api_unsupported(err, tide_path_key(q, sizeof q, p, "type"),
                                    "content part type \"%.40s\" is not supported", type);
    if (tide_get_string(part, "text", p, text, err)) return -1;
    if (!*text) return tide_api_bad(err, tide_path_key(q, sizeof q, p, "text"), "required");
    return 0;
}

int tide_api_conv_add(tide_api_req *req, tide_role r, const char *s, size_t n, const char *path, tide_api_err *err) {
    if (tide_conv_add(&req->conv, r, s, n, &err->st)) return tide_api_bad(err, path, "%s", err->st.msg);
    return 0;
}

int tide_get_seed(json_t *root, tide_gen *g, tide_api_err *err) {
    long long seed = 0;
    json_t *sv = json_object_get(root, "seed");
    if (!sv || json_is_null(sv)) return 0;
    if (tide_get_int(root, "seed", "", INT64_MIN, INT64_MAX, &seed, err)) return -1;
    g->has_seed = 1;
    g->seed = (uint64_t)seed;
    return 0;
}

int tide_set_named_tool(tide_api_req *req, const char *name, tide_api_err *err) {
    req->gen.tool_choice = TIDE_TOOLS_NAMED;
    if (!(req->gen.tool_name = strdup(name))) return tide_fail(&err->st, TIDE_ERR_NOMEM, "out of memory");
    return 0;
}

int tide_read_tool_choice(tide_api_req *req, json_t *root, tide_named_choice_fn named, tide_api_err *err) {
    json_t *choice = json_object_get(root, "tool_choice");
    if (!choice || json_is_null(choice)) return 0;
    if (json_is_string(choice)) {
        const char *c = json_string_value(choice);
        if (!strcmp(c, "none")) req->gen.tool_choice = TIDE_TOOLS_NONE;
        else if (!strcmp(c, "auto")) req->gen.tool_choice = TIDE_TOOLS_AUTO;
        else if (!strcmp(c, "required")) req->gen.tool_choice = TIDE_TOOLS_REQUIRED;
        else return tide_api_bad(err, "tool_choice", "expected none, auto, required or an object, got \"%.32s\"", c);
    } else if (json_is_object(choice)) {
        if (named(req, choice, err)) return -1;
    } else {
        return tide_api_bad(err, "tool_choice", "expected string or object, got %s", tide_json_type_name(choice));
    }
    return tide_apply_tool_choice(req, "tool_choice", err);
}

int tide_read_tool_list(tide_api_req *req, json_t *root, tide_tool_fn one, tide_api_err *err) {
    json_t *tools, *t;
    size_t i;
    char p[160];
    if (tide_get_array(root, "tools", "", &tools, err)) return -1;
    json_array_foreach(tools, i, t) {
        tide_path_idx(p, sizeof p, "tools", i);
        if (!json_is_object(t)) return tide_api_bad(err, p, "expected object, got %s", tide_json_type_name(t));
        if (one(req, t, p, err)) return -1;
    }
    return 0;
}

int tide_get_messages(json_t *root, json_t **msgs, tide_api_err *err) {
    if (tide_get_array(root, "messages", "", msgs, err)) return -1;
    if (!*msgs) return tide_api_bad(err, "messages", "required");
    if (json_array_size(*msgs) > TIDE_CONV_MAX_MESSAGES)
        return tide_api_bad(err, "messages", "more than %d messages", TIDE_CONV_MAX_MESSAGES);
    return 0;
}
