/* tide run with text (run_text.c): --prompt, --chat and text JSONL through
 * the generation layer (api/gen.h). cmd_run.c parses the flags and hands
 * over here. */
#ifndef TIDE_CLI_RUN_TEXT_H
#define TIDE_CLI_RUN_TEXT_H

#include <stdio.h>

#include "tide.h"

typedef struct tide_run_text_opts {
    const char *prompt;        /* --prompt TEXT: one user turn (or a raw prompt with --raw) */
    int chat;                  /* --chat: interactive, one user turn per stdin line */
    const char *input;         /* --input FILE ('-' = stdin): a text JSONL batch */
    const char *output;        /* --output FILE ('-' / NULL = stdout) */
    const char *system;        /* --system TEXT: a system message first */
    int raw;                   /* --raw: --prompt is a raw completion prompt (no template) */
    int thinking;              /* --thinking: thinking mode (reasoning on stderr) */
    int effort;                /* --effort N|NAME, with --thinking; 0 = default */
    int show_reasoning;        /* --show-reasoning: reasoning on stdout too */
    double temperature;        /* --temperature T (default 0: greedy) */
    long long max_tokens;
    int ignore_eos;
    int text_input;            /* --text: --input is a text batch (for stdin) */
} tide_run_text_opts;

/* Reads the text flag at argv[*i] (and its value, advancing *i): 1 when it
 * was one, 0 when it is not a text flag, -1 for a bad value (said on
 * stderr). */
int tide_run_text_arg(int argc, char **argv, int *i, tide_run_text_opts *t);

/* Whether an --input file is a text batch: its first line has "messages" or
 * "prompt" (a regular file; stdin needs --text). */
int tide_run_text_is_text_input(const char *path);

int tide_run_text(const tide_run_text_opts *o, const tide_engine_config *cfg);

#endif
