/* A rendered prompt (render.h) -> token ids.
 *
 * The renderer's markup holds the special tokens it means; the client's
 * text (tide_prompt.plain spans) must never turn into one (a user message
 * that spells "<｜User｜>" would forge a turn). The prompt is cut at each
 * special token of the markup; each piece between cuts is encoded with
 * TIDE_ENCODE_SPLIT_SPECIAL, so the client's text is plain while the pieces
 * stay as long as a whole-text encode sees them: the ids equal
 * tide_tokenizer_encode of the whole text whenever no client span spells a
 * special token. */
#ifndef TIDE_TEXT_PROMPT_TOK_H
#define TIDE_TEXT_PROMPT_TOK_H

#include "base/status.h"
#include "text/render.h"
#include "text/tokenizer.h"

/* Appends the ids of p to out. cache may be NULL. */
int tide_prompt_tokenize(const tide_tokenizer *tok, const tide_prompt *p, tide_tok_cache *cache, tide_tok_ids *out,
                         tide_status *st);

#endif
