/* A rendered prompt (render.h) -> token ids.
 *
 * The renderer's markup holds the special tokens it means; the client's
 * text (tide_prompt.plain spans) must never turn into one: a user message
 * that spells "<｜User｜>" would forge a turn (in the V4.1 vocabulary that
 * token is not even flagged special, so HF's split_special_tokens would not
 * stop it). The prompt is encoded piece by piece: the markup between client
 * spans with its added tokens matched, each client span with
 * TIDE_ENCODE_PLAIN (every added token's text is plain text). Spans meet
 * the markup at added tokens or line breaks, where the pre-tokenizer cuts
 * anyway, so for client text without added tokens the ids are those of
 * tide_tokenizer_encode on the whole text (tests/test_gen.c checks it). */
#ifndef TIDE_TEXT_PROMPT_TOK_H
#define TIDE_TEXT_PROMPT_TOK_H

#include "base/status.h"
#include "text/render.h"
#include "text/tokenizer.h"

/* Appends the ids of p to out. cache may be NULL. */
int tide_prompt_tokenize(const tide_tokenizer *tok, const tide_prompt *p, tide_tok_cache *cache, tide_tok_ids *out,
                         tide_status *st);

#endif
