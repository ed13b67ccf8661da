/* Grammar front ends: GBNF (llama.cpp's documented syntax, gbnf.c) and
 * Lark-style EBNF (lark.c), both to grammar rules (cgram.h). */
#ifndef TIDE_CONSTRAIN_GBNF_H
#define TIDE_CONSTRAIN_GBNF_H

#include <stddef.h>

#include "constrain/cgram.h"

/* Parses text into g (rules named as in the text; the start rule is
 * "root"). Errors give the line and column. */
int tide_gbnf_parse(cg *g, const char *text, size_t len, tide_status *st);

/* Lark-style EBNF (lark.c), the start rule "start". */
int tide_lark_parse(cg *g, const char *text, size_t len, tide_status *st);

/* Shared by both: one character of a literal or class at s[*i] (escapes
 * \n \r \t \f \xHH \uHHHH \UHHHHHHHH and escaped punctuation, else one
 * UTF-8 character), advancing *i; -1 with *why on an error. The error
 * "grammar line L, column C: what" for offset at. */
int32_t tide_gram_char(const char *s, size_t n, size_t *i, const char **why);
int tide_gram_fail(tide_status *st, const char *s, size_t n, size_t at, const char *what);
/* A decimal number at s[*i] (capped at 1,000,000), *i moved past it; 0 when
 * there is no digit there. Shared by the GBNF and Lark readers. */
int tide_gram_int(const char *s, size_t n, size_t *i, long *out);

#endif
