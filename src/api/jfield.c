/* Field readers with located errors; see jfield.h. */
#include "api/jfield.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "text/pyjson.h"
#include "text/sbuf.h"

static int vbad(tide_api_err *err, tide_code code, const char *type, const char *path, const char *fmt,
                va_list ap) {
    char what[TIDE_STATUS_MSG];
    vsnprintf(what, sizeof what, fmt, ap);
    err->http_status = 400;
    err->type = type;
    snprintf(err->param, sizeof err->param, "%s", path ? path : "");
    if (path && *path) return tide_fail(&err->st, code, "%s: %s", path, what);
    return tide_fail(&err->st, code, "%s", what);
}

int tide_api_bad(tide_api_err *err, const char *path, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vbad(err, TIDE_ERR_INVALID, "invalid_request_error", path, fmt, ap);
    va_end(ap);
    return -1;
}

int tide_api_unsupported(tide_api_err *err, const char *path, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vbad(err, TIDE_ERR_UNSUPPORTED, "invalid_request_error", path, fmt, ap);
    va_end(ap);
    return -1;
}

const char *tide_path_key(char *buf, size_t size, const char *parent, const char *key) {
    if (parent && *parent) snprintf(buf, size, "%s.%s", parent, key);
    else snprintf(buf, size, "%s", key);
    return buf;
}

const char *tide_path_idx(char *buf, size_t size, const char *parent, size_t i) {
    snprintf(buf, size, "%s[%zu]", parent, i);
    return buf;
}

#define PATH(key) tide_path_key(path, sizeof path, parent, key)

int tide_get_string(json_t *obj, const char *key, const char *parent, const char **out, tide_api_err *err) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    char path[160];
    if (!json_is_string(v)) return tide_api_bad(err, PATH(key), "expected string, got %s", tide_json_type_name(v));
    if (strlen(json_string_value(v)) != json_string_length(v))
        return tide_api_bad(err, PATH(key), "string contains a NUL character");
    *out = json_string_value(v);
    return 0;
}

int tide_get_bool(json_t *obj, const char *key, const char *parent, int *out, tide_api_err *err) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    char path[160];
    if (!json_is_boolean(v)) return tide_api_bad(err, PATH(key), "expected boolean, got %s", tide_json_type_name(v));
    *out = json_is_true(v);
    return 0;
}

int tide_get_number(json_t *obj, const char *key, const char *parent, double lo, double hi, double *out,
                    tide_api_err *err) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    char path[160];
    if (!json_is_number(v)) return tide_api_bad(err, PATH(key), "expected number, got %s", tide_json_type_name(v));
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi)) return tide_api_bad(err, PATH(key), "%g is outside [%g, %g]", d, lo, hi);
    *out = d;
    return 0;
}

int tide_get_int(json_t *obj, const char *key, const char *parent, long long lo, long long hi, long long *out,
                 tide_api_err *err) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    char path[160];
    if (!json_is_integer(v)) return tide_api_bad(err, PATH(key), "expected integer, got %s", tide_json_type_name(v));
    long long x = json_integer_value(v);
    if (x < lo || x > hi) return tide_api_bad(err, PATH(key), "%lld is outside [%lld, %lld]", x, lo, hi);
    *out = x;
    return 0;
}

int tide_get_object(json_t *obj, const char *key, const char *parent, json_t **out, tide_api_err *err) {
    json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (!v || json_is_null(v)) return 0;
    char path[160];
    if (!json_is_object(v)) return tide_api_bad(err, PATH(key), "expected object, got %s", tide_json_type_name(v));
    *out = v;
    return 0;
}

int tide_get_array(json_t *obj, const char *key, const char *parent, json_t **out, tide_api_err *err) {
    json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (!v || json_is_null(v)) return 0;
    char path[160];
    if (!json_is_array(v)) return tide_api_bad(err, PATH(key), "expected array, got %s", tide_json_type_name(v));
    *out = v;
    return 0;
}

static int add_stop(tide_gen *gen, json_t *s, const char *path, tide_api_err *err) {
    if (!json_is_string(s)) return tide_api_bad(err, path, "expected string, got %s", tide_json_type_name(s));
    size_t n = json_string_length(s);
    if (n == 0 || n > TIDE_OUTPARSE_MAX_STOP_LEN || strlen(json_string_value(s)) != n)
        return tide_api_bad(err, path, "a stop sequence must be 1 to %d bytes without NUL", TIDE_OUTPARSE_MAX_STOP_LEN);
    if (gen->n_stop >= TIDE_OUTPARSE_MAX_STOPS)
        return tide_api_bad(err, path, "at most %d stop sequences", TIDE_OUTPARSE_MAX_STOPS);
    if (!(gen->stop[gen->n_stop] = strdup(json_string_value(s))))
        return tide_fail(&err->st, TIDE_ERR_NOMEM, "out of memory");
    gen->n_stop++;
    return 0;
}

int tide_get_stops(json_t *obj, const char *key, tide_gen *gen, tide_api_err *err) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    if (json_is_string(v)) return add_stop(gen, v, key, err);
    if (!json_is_array(v)) return tide_api_bad(err, key, "expected string or array, got %s", tide_json_type_name(v));
    if (json_array_size(v) > TIDE_OUTPARSE_MAX_STOPS)
        return tide_api_bad(err, key, "at most %d stop sequences", TIDE_OUTPARSE_MAX_STOPS);
    size_t i;
    json_t *s;
    char path[160];
    json_array_foreach(v, i, s) if (add_stop(gen, s, tide_path_idx(path, sizeof path, key, i), err) != 0) return -1;
    return 0;
}

int tide_set_format(tide_api_req *req, tide_out_format fmt, json_t *schema, json_t *shown, tide_api_err *err) {
    req->gen.format = fmt;
    json_decref(req->gen.json_schema);
    req->gen.json_schema = schema ? json_incref(schema) : NULL;
    json_decref(req->conv.response_format);
    req->conv.response_format = shown ? json_incref(shown) : NULL;
    (void)err;
    return 0;
}

int tide_add_tool(tide_api_req *req, json_t *fn, const char *path, const char *params_key, tide_api_err *err) {
    const char *name = NULL, *desc = NULL;
    json_t *params = NULL;
    if (tide_get_string(fn, "name", path, &name, err) || tide_get_string(fn, "description", path, &desc, err) ||
        tide_get_object(fn, params_key, path, &params, err))
        return -1;
    char p[160];
    if (!name) return tide_api_bad(err, tide_path_key(p, sizeof p, path, "name"), "required");
    if (params && tide_json_depth(params, TIDE_PYJSON_MAX_DEPTH + 1) > TIDE_PYJSON_MAX_DEPTH)
        return tide_api_bad(err, tide_path_key(p, sizeof p, path, params_key), "nested deeper than %d levels",
                            TIDE_PYJSON_MAX_DEPTH);
    if (tide_conv_add_tool(&req->conv, name, desc, params, &err->st) != 0)
        return tide_api_bad(err, tide_path_key(p, sizeof p, path, "name"), "%s", err->st.msg);
    req->conv.tools[req->conv.n_tools - 1].strict = json_is_true(json_object_get(fn, "strict"));
    return 0;
}

int tide_apply_tool_choice(tide_api_req *req, const char *path, tide_api_err *err) {
    switch (req->gen.tool_choice) {
    case TIDE_TOOLS_NONE: tide_conv_clear_tools(&req->conv); return 0;
    case TIDE_TOOLS_REQUIRED:
        if (req->conv.n_tools == 0) return tide_api_bad(err, path, "requires a tool but the request defines none");
        return 0;
    case TIDE_TOOLS_NAMED:
        if (tide_conv_keep_tool(&req->conv, req->gen.tool_name, &err->st) != 0)
            return tide_api_bad(err, path, "%s", err->st.msg);
        return 0;
    case TIDE_TOOLS_AUTO: return 0;
    }
    return 0;
}

int tide_finish_request(tide_api_req *req, int max_tokens_given, tide_api_err *err) {
    if (req->conv.n_msgs == 0) return tide_api_bad(err, "messages", "at least one message is required");
    if (!max_tokens_given) req->gen.max_tokens = tide_conv_default_max_tokens(&req->conv);
    if (!req->gen.model && !(req->gen.model = strdup("")))
        return tide_fail(&err->st, TIDE_ERR_NOMEM, "out of memory");
    return 0;
}

int tide_set_thinking(tide_api_req *req, int think, json_t *effort, const char *path, tide_api_err *err) {
    if (effort && !json_is_null(effort)) {
        if (json_is_integer(effort)) {
            long long e = json_integer_value(effort);
            if (e < 1 || e > 100) return tide_api_bad(err, path, "an integer effort must be in 1..100, got %lld", e);
            req->conv.effort = (int)e;
            if (think < 0) think = 1;
        } else if (json_is_string(effort)) {
            const char *name = json_string_value(effort);
            if (strcmp(name, "none") == 0) {
                if (think < 0) think = 0;
            } else {
                if (tide_effort_from_name(name, &req->conv.effort, &err->st) != 0)
                    return tide_api_bad(err, path, "%s", err->st.msg);
                if (think < 0) think = 1;
            }
        } else {
            return tide_api_bad(err, path, "expected string or integer, got %s", tide_json_type_name(effort));
        }
    }
    req->conv.thinking = think > 0;
    return 0;
}

json_t *tide_jstr(const char *s, size_t n) {
    json_t *v = json_stringn(s, n);
    if (v) return v;
    /* Invalid UTF-8: rebuild with U+FFFD for each bad byte. */
    tide_sb b;
    tide_sb_init(&b);
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t len = c < 0x80 ? 1 : (c >= 0xC2 && c < 0xE0) ? 2 : (c >= 0xE0 && c < 0xF0) ? 3 : (c >= 0xF0 && c < 0xF5) ? 4 : 0;
        if (c == 0) len = 0; /* NUL is legal JSON but not in our strings */
        json_t *probe = (len && i + len <= n) ? json_stringn(s + i, len) : NULL;
        if (probe) {
            tide_sb_addn(&b, s + i, len);
            json_decref(probe);
            i += len;
        } else {
            tide_sb_add(&b, "\xef\xbf\xbd");
            i++;
        }
    }
    v = b.oom ? NULL : json_stringn(b.s ? b.s : "", b.len);
    tide_sb_free(&b);
    return v;
}
