/* `tide tokenize --bench [FILE]`: encoding speed (bench_tokenize.c). */
#ifndef TIDE_CLI_BENCH_TOKENIZE_H
#define TIDE_CLI_BENCH_TOKENIZE_H

#include "text/tokenizer.h"

/* With a path: encodes the file line by line (newlines included, one cache,
 * as a server thread would) and prints one line of figures. Without: the
 * built-in corpus (generated English-like text, the same as one long line,
 * and the worst cases: runs of one letter, of spaces, digits, CJK,
 * punctuation, random Unicode) plus the time to the error of the two inputs
 * that used to hang (a normalizer that multiplies the text, a regex with
 * catastrophic backtracking). Returns a process exit code. */
int tide_tokenize_bench(const tide_tokenizer *tok, const char *path);

#endif
