/* Helpers for reading request JSON with errors that name the field, shared
 * by the three request converters (internal to src/api/). Each getter
 * returns 0 when the field is absent or valid, -1 with err filled when it
 * is present but wrong. Paths are built with tide_path(). */
#ifndef TIDE_API_JFIELD_H
#define TIDE_API_JFIELD_H

#include <jansson.h>

#include "api/api.h"
#include "base/json.h" /* tide_json_type_name */

/* Fails with param = path and message "<path>: <fmt...>". */
int tide_api_bad(tide_api_err *err, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* As tide_api_bad, for valid input tide does not handle (images, n > 1). */
int tide_api_unsupported(tide_api_err *err, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* "parent.key" / "parent[i]" into buf (cut at its size). */
const char *tide_path_key(char *buf, size_t size, const char *parent, const char *key);
const char *tide_path_idx(char *buf, size_t size, const char *parent, size_t i);

/* Typed optional getters: absent or null leaves *out unchanged. */
int tide_get_string(json_t *obj, const char *key, const char *parent, const char **out, tide_api_err *err);
int tide_get_bool(json_t *obj, const char *key, const char *parent, int *out, tide_api_err *err);
int tide_get_number(json_t *obj, const char *key, const char *parent, double lo, double hi, double *out,
                    tide_api_err *err);
int tide_get_int(json_t *obj, const char *key, const char *parent, long long lo, long long hi, long long *out,
                 tide_api_err *err);
/* An object or absent; *out = NULL when absent. */
int tide_get_object(json_t *obj, const char *key, const char *parent, json_t **out, tide_api_err *err);
int tide_get_array(json_t *obj, const char *key, const char *parent, json_t **out, tide_api_err *err);

/* Stop sequences: a string or an array of at most 16 non-empty strings. */
int tide_get_stops(json_t *obj, const char *key, tide_gen *gen, tide_api_err *err);
/* A response format or JSON schema object for the prompt and the constraint. */
int tide_set_format(tide_api_req *req, tide_out_format fmt, json_t *schema, json_t *shown, tide_api_err *err);
/* Adds a tool with name, description and parameters from `fn`'s given keys. */
int tide_add_tool(tide_api_req *req, json_t *fn, const char *path, const char *params_key, tide_api_err *err);
/* Applies the tool choice: drops tools for "none", keeps the named one. */
int tide_apply_tool_choice(tide_api_req *req, const char *path, tide_api_err *err);
/* Thinking mode and effort. `think`: 1 on, 0 off, -1 not said. `effort`:
 * a name from the one table (text/conv.h), "none" (thinking off unless
 * `think` says on), an integer 1..100, or NULL. An effort turns thinking
 * on unless `think` is 0. */
int tide_set_thinking(tide_api_req *req, int think, json_t *effort, const char *path, tide_api_err *err);
/* A JSON string from possibly invalid UTF-8 (bad bytes become U+FFFD). */
json_t *tide_jstr(const char *s, size_t n);
/* Final checks and defaults once a converter has filled the request. */
int tide_finish_request(tide_api_req *req, int max_tokens_given, tide_api_err *err);

#endif
