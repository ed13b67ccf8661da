/* JSON Schema to grammar (schema.c), and JSON.stringify's serialisation. */
#ifndef TIDE_CONSTRAIN_SCHEMA_H
#define TIDE_CONSTRAIN_SCHEMA_H

#include <jansson.h>

#include "constrain/cgram.h"

/* Compiles schema into g's rules; returns the root tree (-1 and st: the
 * keyword and where, e.g. "#/properties/a: keyword \"not\" is not
 * supported"). The caller makes it the root rule. */
int32_t tide_schema_compile(cg *g, json_t *schema, tide_status *st);
/* Tool calls in DSML (text/render.h): spec is {"tools": [{"name",
 * "parameters"}...], "parallel": bool}; one call of one of the tools (or
 * several, parallel). String-only parameters are raw (string="true"), the
 * others JSON; only declared parameters are written. */
int32_t tide_schema_tool_calls(cg *g, json_t *spec, tide_status *st);
/* Any JSON object (response_format json_object). */
int32_t tide_schema_any_object(cg *g, tide_status *st);
/* 1 when no two oneOf branches can match the same value (by type or by
 * const/enum values), else 0. */
int tide_schema_branches_disjoint(const json_t *list);

/* The text JSON.stringify gives v (compact; members in their order;
 * numbers as JavaScript prints them). malloc'd, NULL when out of memory. */
char *tide_json_canon(const json_t *v, size_t *len);
void tide_json_number_js(double v, char *out, size_t cap);

/* Whether the ECMAScript regex re matches somewhere in s: 1 yes, 0 no,
 * -1 bad regex. (constrain.c) */
int tide_regex_search(const char *re, const char *s);

#endif
