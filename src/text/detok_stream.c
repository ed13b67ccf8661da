/* Streaming detokenizer: tokens in, displayable text out, one token at a time.
 *
 * Byte-level BPE tokens are byte strings, so one character can be split over
 * several tokens ("é" = 0xC3 0xA9 may arrive as two tokens, an emoji as up to
 * four). Each push appends the token's bytes to a pending buffer and releases
 * the longest prefix that can no longer change:
 *   - a trailing incomplete UTF-8 sequence stays pending;
 *   - bytes that can never become valid are released as U+FFFD, with the
 *     same maximal-subpart rule as tide_utf8_lossy, so the streamed text is
 *     exactly the lossy decoding of all bytes at once;
 *   - with TIDE_DETOK_HOLD_ADDED, a suffix that is a proper prefix of an
 *     added token's content stays pending too ("<｜DS" may still become
 *     "<｜DSML｜"), so parsers looking for markers see them whole. */
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer_internal.h"

struct tide_detok {
    const tide_tokenizer *tok;
    unsigned flags;
    tok_buf pend;
    char *out;
    size_t out_len;
};

int tide_detok_new(const tide_tokenizer *tok, unsigned flags, tide_detok **out, tide_status *st) {
    *out = calloc(1, sizeof **out);
    if (!*out) return tide_fail(st, TIDE_ERR_NOMEM, "detok: out of memory");
    (*out)->tok = tok;
    (*out)->flags = flags;
    return 0;
}

void tide_detok_free(tide_detok *d) {
    if (!d) return;
    tok_buf_free(&d->pend);
    free(d->out);
    free(d);
}

void tide_detok_reset(tide_detok *d) { d->pend.n = 0; }

/* Start of the longest pending suffix that is a proper prefix of an added
 * token (or len if none). Only the last max_added_len bytes can matter. */
static size_t added_prefix_start(const tide_detok *d, size_t len) {
    const tok_trie *t = &d->tok->trie_all;
    const char *p = d->pend.p;
    size_t span = d->tok->max_added_len;
    for (size_t j = len > span ? len - span : 0; j < len; j++) {
        uint8_t c = (uint8_t)p[j];
        if (!(t->first[c >> 3] & (1u << (c & 7)))) continue;
        if (tok_trie_is_prefix(t, p + j, len - j)) return j;
    }
    return len;
}

/* Releases pend[0..n) as lossy UTF-8 into d->out and keeps the rest. */
static int release(tide_detok *d, size_t n, const char **text, size_t *len, tide_status *st) {
    free(d->out);
    d->out = NULL;
    if (tide_utf8_lossy(d->pend.p ? d->pend.p : "", n, &d->out, &d->out_len, st) != 0) return -1;
    if (d->pend.n > n) memmove(d->pend.p, d->pend.p + n, d->pend.n - n);
    d->pend.n -= n;
    *text = d->out;
    *len = d->out_len;
    return 0;
}

int tide_detok_push(tide_detok *d, int32_t id, const char **text, size_t *len, tide_status *st) {
    *text = "";
    *len = 0;
    const uint8_t *b;
    size_t bl;
    if (!tide_tokenizer_token_bytes(d->tok, id, &b, &bl)) {
        if (id < 0 || (uint32_t)id >= d->tok->n_ids)
            return tide_fail(st, TIDE_ERR_INVALID, "detok: id %d is out of range [0, %u)", id, d->tok->n_ids);
        return 0; /* a hole decodes to nothing */
    }
    if ((d->flags & TIDE_DECODE_SKIP_SPECIAL) && tide_tokenizer_is_special(d->tok, id)) return 0;
    if (tok_buf_append(&d->pend, b, bl, st) != 0) return -1;
    size_t n = d->pend.n - tok_utf8_incomplete_tail((const uint8_t *)d->pend.p, d->pend.n);
    if (d->flags & TIDE_DETOK_HOLD_ADDED) {
        size_t j = added_prefix_start(d, d->pend.n);
        if (j < n) n = j;
    }
    return release(d, n, text, len, st);
}

int tide_detok_finish(tide_detok *d, const char **text, size_t *len, tide_status *st) {
    return release(d, d->pend.n, text, len, st);
}

int tide_detok_decode_all(const tide_tokenizer *tok, unsigned flags, const int32_t *ids, size_t n, char **out,
                          size_t *out_len, tide_status *st) {
    *out = NULL;
    *out_len = 0;
    tide_detok *d;
    if (tide_detok_new(tok, flags, &d, st) != 0) return -1;
    tok_buf acc = {0};
    int rc = 0;
    const char *t;
    size_t tl;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        rc = tide_detok_push(d, ids[i], &t, &tl, st);
        if (rc == 0) rc = tok_buf_append(&acc, t, tl, st);
    }
    if (rc == 0) rc = tide_detok_finish(d, &t, &tl, st);
    if (rc == 0) rc = tok_buf_append(&acc, t, tl, st);
    if (rc == 0) rc = tok_buf_append(&acc, "", 1, st);
    tide_detok_free(d);
    if (rc != 0) {
        tok_buf_free(&acc);
        return -1;
    }
    *out = acc.p;
    *out_len = acc.n - 1;
    return 0;
}
