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

/* JSON as Python's json.loads reads it (pyjson_load.c): integers of any
 * size, numbers beyond a double (infinity) and the NaN / Infinity /
 * -Infinity literals, which jansson refuses, are kept as "raw" nodes that
 * tide_pyjson_doc_dump writes as Python does ("123...890", "Infinity"); a
 * duplicated key keeps its first place and its last value. */
typedef struct tide_pyjson_doc {
    json_t *root;
    json_t **raw; /* the raw number nodes, sorted by address */
    size_t n_raw, cap_raw;
    int has_nul;        /* a string holds U+0000 */
    int lone_surrogate; /* a string holds an unpaired surrogate (no valid UTF-8) */
} tide_pyjson_doc;

/* 0 and *doc filled; -1 with st->code TIDE_ERR_FORMAT when Python would not
 * read s as JSON, another code (nesting beyond TIDE_PYJSON_MAX_DEPTH, out of
 * memory) when tide refuses to. */
int tide_pyjson_load(const char *s, size_t n, tide_pyjson_doc *doc, tide_status *st);
void tide_pyjson_doc_free(tide_pyjson_doc *doc);
/* 1 when v is one of doc's raw number nodes. */
int tide_pyjson_doc_is_raw(const tide_pyjson_doc *doc, const json_t *v);
/* tide_pyjson_dump for a value inside doc (raw numbers written bare). */
int tide_pyjson_doc_dump(tide_sb *out, const tide_pyjson_doc *doc, const json_t *v, tide_status *st);
/* Appends s (n bytes) as the body of a JSON string (no quotes). */
void tide_pyjson_escape(tide_sb *out, const char *s, size_t n);
/* Appends a quoted JSON string. */
void tide_pyjson_string(tide_sb *out, const char *s, size_t n);
/* Python's repr() of a finite double. */
void tide_pyjson_float(tide_sb *out, double d);

#endif
