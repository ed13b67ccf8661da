/* Encoding: text -> ids, in the order of HF's TokenizerImpl::encode:
 *   1. cut out added tokens whose normalized flag is false, on the raw text;
 *   2. normalize each remaining piece, then cut out normalized added tokens;
 *   3. pre-tokenize each remaining piece into words;
 *   4. BPE each word (through the per-word cache). */
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer_internal.h"

typedef tok_encode_scratch encode_scratch;

void tok_encode_scratch_free(encode_scratch *sc) {
    tok_segments_free(&sc->raw);
    tok_segments_free(&sc->norm);
    tok_buf_free(&sc->normbuf);
    tok_pretok_scratch_free(&sc->pre);
    tok_bpe_scratch_free(&sc->bpe);
}

static int encode_plain(const tide_tokenizer *tok, encode_scratch *sc, const char *s, size_t n,
                        tide_tok_cache *cache, tide_tok_ids *out, tide_status *st) {
    const tok_buf *buf;
    const tok_spans *pieces;
    if (tok_pretokenize(tok, &sc->pre, s, n, &buf, &pieces, st) != 0) return -1;
    for (size_t i = 0; i < pieces->n; i++)
        if (tok_bpe_word(tok, &sc->bpe, cache, buf->p + pieces->v[i].off, pieces->v[i].len, out, st) != 0) return -1;
    return 0;
}

/* s[0..n) is the segment at byte `at` of the caller's text (for messages). */
static int encode_segment(const tide_tokenizer *tok, encode_scratch *sc, const char *s, size_t n, size_t at,
                          unsigned flags, tide_tok_cache *cache, tide_tok_ids *out, tide_status *st) {
    const char *t = s; /* the normalized text: s itself when there is no normalizer */
    size_t tn = n;
    if (tok->n_norm) {
        if (tok_normalize(tok, s, n, &sc->normbuf, st) != 0) return tide_fail_ctx(st, "segment at input byte %zu", at);
        t = sc->normbuf.p;
        tn = sc->normbuf.n;
    }
    sc->norm.spans.n = 0;
    sc->pre.err_off = at;
    sc->pre.err_normalized = tok->n_norm > 0;
    if (tn == 0) return 0;
    if (!tok->trie_norm.n_nodes || tok->trie_norm.n_nodes == 1) return encode_plain(tok, sc, t, tn, cache, out, st);
    if (tok_split_added(tok, &tok->trie_norm, t, tn, flags, &sc->norm, st) != 0) return -1;
    for (size_t i = 0; i < sc->norm.spans.n; i++) {
        tok_span sp = sc->norm.spans.v[i];
        int32_t a = sc->norm.added[i];
        if (!tok->n_norm) sc->pre.err_off = at + sp.off; /* normalized: the segment's offset is all we know */
        int rc = a >= 0 ? tide_tok_ids_push(out, tok->added[a].id, st) : encode_plain(tok, sc, t + sp.off, sp.len, cache, out, st);
        if (rc != 0) return -1;
    }
    return 0;
}

int tide_tokenizer_encode(const tide_tokenizer *tok, const char *text, size_t len, unsigned flags,
                          tide_tok_cache *cache, tide_tok_ids *out, tide_status *st) {
    if (len && !text) return tide_fail(st, TIDE_ERR_INVALID, "encode: NULL text");
    size_t ok = tide_utf8_valid_prefix(text, len);
    if (ok != len) return tide_fail(st, TIDE_ERR_INVALID, "encode: text is not valid UTF-8 at byte %zu", ok);
    if (len == 0) return 0;
    encode_scratch local = {0};
    encode_scratch *sc = cache ? &cache->scratch : &local;
    sc->raw.spans.n = 0;
    int rc = tok_split_added(tok, &tok->trie_raw, text, len, flags, &sc->raw, st);
    for (size_t i = 0; rc == 0 && i < sc->raw.spans.n; i++) {
        tok_span sp = sc->raw.spans.v[i];
        int32_t a = sc->raw.added[i];
        rc = a >= 0 ? tide_tok_ids_push(out, tok->added[a].id, st)
                    : encode_segment(tok, sc, text + sp.off, sp.len, sp.off, flags, cache, out, st);
    }
    if (!cache) tok_encode_scratch_free(&local);
    return rc;
}

/* Tests only: encode without the cache, optionally with the heap merge loop
 * for every word and/or Oniguruma instead of the hand-written matchers, to
 * check that every path gives the same ids. */
int tok_encode_debug(const tide_tokenizer *tok, const char *text, size_t len, bool force_heap, bool no_fast,
                     tide_tok_ids *out, tide_status *st) {
    size_t ok = tide_utf8_valid_prefix(text, len);
    if (ok != len) return tide_fail(st, TIDE_ERR_INVALID, "encode: text is not valid UTF-8 at byte %zu", ok);
    encode_scratch sc = {0};
    sc.bpe.force_heap = force_heap;
    sc.pre.no_fast = no_fast;
    int rc = tok_split_added(tok, &tok->trie_raw, text, len, 0, &sc.raw, st);
    for (size_t i = 0; rc == 0 && i < sc.raw.spans.n; i++) {
        tok_span sp = sc.raw.spans.v[i];
        int32_t a = sc.raw.added[i];
        rc = a >= 0 ? tide_tok_ids_push(out, tok->added[a].id, st)
                    : encode_segment(tok, &sc, text + sp.off, sp.len, sp.off, 0, NULL, out, st);
    }
    tok_encode_scratch_free(&sc);
    return rc;
}
