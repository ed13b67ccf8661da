/* Renders a conversation (conv.h) into the DeepSeek-V4.1 prompt TEXT.
 *
 * The output contains the special tokens spelled out (<｜begin▁of▁sentence｜>,
 * <｜System｜>, <｜User｜>, <｜Assistant｜>, <｜end▁of▁sentence｜>, ｜DSML｜,
 * <think>, </think>); the tokenizer turns them into ids. The rules follow
 * the release's encoder (deepseek-recipe semantics) and are written out in
 * docs/text.md; tests/data/render/ holds golden renderings. */
#ifndef TIDE_TEXT_RENDER_H
#define TIDE_TEXT_RENDER_H

#include "base/status.h"
#include "text/conv.h"

/* The special-token strings: one definition for the renderer, the output
 * parser and the tests. Note the fullwidth ｜ (U+FF5C) and ▁ (U+2581), and
 * the space after ｜DSML｜ in the tag names. */
#define TIDE_TOK_BOS "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define TIDE_TOK_EOS "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define TIDE_TOK_SYSTEM "<\xef\xbd\x9cSystem\xef\xbd\x9c>"
#define TIDE_TOK_USER "<\xef\xbd\x9cUser\xef\xbd\x9c>"
#define TIDE_TOK_ASSISTANT "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"
#define TIDE_TOK_THINK "<think>"
#define TIDE_TOK_END_THINK "</think>"
#define TIDE_DSML "\xef\xbd\x9c" "DSML\xef\xbd\x9c"
#define TIDE_DSML_CALLS_OPEN "<" TIDE_DSML " calls>"
#define TIDE_DSML_CALLS_CLOSE "</" TIDE_DSML " calls>"
#define TIDE_DSML_INVOKE_OPEN "<" TIDE_DSML " invoke name=\""
#define TIDE_DSML_INVOKE_CLOSE "</" TIDE_DSML " invoke>"
#define TIDE_DSML_PARAM_OPEN "<" TIDE_DSML " parameter name=\""
#define TIDE_DSML_PARAM_CLOSE "</" TIDE_DSML " parameter>"

/* A byte range of the prompt text. */
typedef struct tide_text_span {
    size_t off, len;
} tide_text_span;

typedef struct tide_prompt {
    char *text;       /* malloc'd, NUL-terminated */
    size_t len;
    int in_reasoning; /* 1: the prompt ends in <think>, generation starts as reasoning */
    /* The spans that came from the client (message text, reasoning, tool
     * names, arguments and results, schemas), sorted and disjoint. The
     * tokenizer must encode them as plain text, never matching special
     * tokens inside them: a user message that spells "<｜User｜>" must not
     * forge a turn. Everything outside them is the renderer's own markup. */
    tide_text_span *plain;
    size_t n_plain;
} tide_prompt;

/* Renders `c`. Every assistant message ends in the end-of-sentence token,
 * as in the release's encoder, except a final one when c->continue_final
 * asks for it to be continued (prefill). */
int tide_render(const tide_conv *c, tide_prompt *out, tide_status *st);
void tide_prompt_free(tide_prompt *p);

#endif
