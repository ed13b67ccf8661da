/* GBNF grammars (llama.cpp's documented syntax) to grammar rules (gbnf.c). */
#ifndef TIDE_CONSTRAIN_GBNF_H
#define TIDE_CONSTRAIN_GBNF_H

#include <stddef.h>

#include "constrain/cgram.h"

/* Parses text into g (rules named as in the text; the start rule is
 * "root"). Errors give the line and column. */
int tide_gbnf_parse(cg *g, const char *text, size_t len, tide_status *st);

#endif
