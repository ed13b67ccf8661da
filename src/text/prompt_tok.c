/* Rendered prompt -> ids; see prompt_tok.h. */
#include "text/prompt_tok.h"

static int piece(const tide_tokenizer *tok, const tide_prompt *p, size_t off, size_t len, unsigned flags,
                 tide_tok_cache *cache, tide_tok_ids *out, tide_status *st) {
    if (len == 0) return 0;
    if (tide_tokenizer_encode(tok, p->text + off, len, flags, cache, out, st) != 0)
        return tide_fail_ctx(st, "tokenizing the prompt at byte %zu", off);
    return 0;
}

int tide_prompt_tokenize(const tide_tokenizer *tok, const tide_prompt *p, tide_tok_cache *cache, tide_tok_ids *out,
                         tide_status *st) {
    size_t at = 0;
    for (size_t i = 0; i < p->n_plain; i++) {
        const tide_text_span *s = &p->plain[i];
        if (s->off < at || s->off + s->len > p->len)
            return tide_fail(st, TIDE_ERR_INTERNAL, "prompt span %zu (%zu+%zu) is out of order or outside the text", i,
                             s->off, s->len);
        if (piece(tok, p, at, s->off - at, 0, cache, out, st) != 0 ||
            piece(tok, p, s->off, s->len, TIDE_ENCODE_PLAIN, cache, out, st) != 0)
            return -1;
        at = s->off + s->len;
    }
    return piece(tok, p, at, p->len - at, 0, cache, out, st);
}
