/* Rendered prompt -> ids; see prompt_tok.h. */
#include "text/prompt_tok.h"

#include <string.h>

/* The special tokens the renderer writes (render.h). Only those the
 * tokenizer has as special tokens cut the prompt; the others (<think>,
 * ｜DSML｜ are non-special added tokens) are matched inside the pieces
 * anyway, as SPLIT_SPECIAL keeps non-special added tokens. */
static const char *const MARKUP[] = {TIDE_TOK_BOS, TIDE_TOK_EOS, TIDE_TOK_SYSTEM, TIDE_TOK_USER, TIDE_TOK_ASSISTANT};
#define N_MARKUP (sizeof MARKUP / sizeof MARKUP[0])

/* The special token of the markup starting at text[at], or -1. */
static int32_t special_at(const tide_tokenizer *tok, const char *text, size_t len, size_t at, size_t *n) {
    for (size_t k = 0; k < N_MARKUP; k++) {
        size_t m = strlen(MARKUP[k]);
        if (m > len - at || memcmp(text + at, MARKUP[k], m) != 0) continue;
        int32_t id = tide_tokenizer_token_id(tok, MARKUP[k], m);
        if (id < 0 || !tide_tokenizer_is_special(tok, id)) return -1;
        *n = m;
        return id;
    }
    return -1;
}

static int encode_piece(const tide_tokenizer *tok, const char *s, size_t n, tide_tok_cache *cache, tide_tok_ids *out,
                        tide_status *st) {
    if (n == 0) return 0;
    return tide_tokenizer_encode(tok, s, n, TIDE_ENCODE_SPLIT_SPECIAL, cache, out, st);
}

int tide_prompt_tokenize(const tide_tokenizer *tok, const tide_prompt *p, tide_tok_cache *cache, tide_tok_ids *out,
                         tide_status *st) {
    size_t piece = 0, span = 0, at = 0;
    while (at < p->len) {
        while (span < p->n_plain && p->plain[span].off + p->plain[span].len <= at) span++;
        if (span < p->n_plain && at >= p->plain[span].off) { /* inside client text: skip it */
            at = p->plain[span].off + p->plain[span].len;
            continue;
        }
        size_t n = 0;
        int32_t id = p->text[at] == '<' ? special_at(tok, p->text, p->len, at, &n) : -1;
        if (id < 0) {
            at++;
            continue;
        }
        if (encode_piece(tok, p->text + piece, at - piece, cache, out, st) != 0 || tide_tok_ids_push(out, id, st) != 0)
            return tide_fail_ctx(st, "tokenizing the prompt at byte %zu", piece);
        at += n;
        piece = at;
    }
    if (encode_piece(tok, p->text + piece, p->len - piece, cache, out, st) != 0)
        return tide_fail_ctx(st, "tokenizing the prompt at byte %zu", piece);
    return 0;
}
