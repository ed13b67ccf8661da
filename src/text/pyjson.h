/* JSON text exactly as Python's json.dumps(value, ensure_ascii=False) writes
 * it, because the V4.1 prompt embeds tool schemas, response formats and
 * non-string tool arguments in that form: ", " and ": " separators, keys in
 * their given order, non-ASCII left as UTF-8, control characters escaped
 * with lowercase \u00xx, and floats in Python's shortest repr ("0.1",
 * "1e-05", "1e+16", "2.0"). Also used for the JSON fragments the output
 * parser streams (tool-call arguments). */
#ifndef TIDE_TEXT_PYJSON_H
#define TIDE_TEXT_PYJSON_H

#include <jansson.h>

#include "base/json.h" /* tide_json_depth */
#include "base/status.h"
#include "text/sbuf.h"

/* Deepest nesting accepted; deeper values are rejected (hostile input). */
#define TIDE_PYJSON_MAX_DEPTH 64

int tide_pyjson_dump(tide_sb *out, const json_t *v, tide_status *st);
/* Appends s (n bytes) as the body of a JSON string (no quotes). */
void tide_pyjson_escape(tide_sb *out, const char *s, size_t n);
/* Appends a quoted JSON string. */
void tide_pyjson_string(tide_sb *out, const char *s, size_t n);
/* Python's repr() of a finite double. */
void tide_pyjson_float(tide_sb *out, double d);

#endif
