/* Small helpers over jansson values shared by every JSON reader in tide
 * (config.json, safetensors headers, API requests, prompt rendering): the
 * names of value types for error messages, and nesting depth. */
#ifndef TIDE_BASE_JSON_H
#define TIDE_BASE_JSON_H

#include <jansson.h>

/* The value's type with an article, for prose messages: "an object",
 * "an array", "a string", "an integer", "a real number", "a boolean",
 * "null". */
const char *tide_json_kind(const json_t *v);

/* The value's type as a bare JSON Schema-like word, for API messages of the
 * form "expected X, got Y": "object", "array", "string", "integer",
 * "number", "boolean", "null". */
const char *tide_json_type_name(const json_t *v);

/* Depth of a JSON value (a scalar is 1). Stops counting past `limit`, so
 * hostile nesting costs at most `limit` levels of recursion. */
int tide_json_depth(const json_t *v, int limit);

#endif
