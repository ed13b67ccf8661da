/* Decoding and lookups: ids -> bytes through the token -> raw bytes table
 * built at load time, plus the small accessors other layers use (special
 * token ids by name, the bytes of one token for grammar masks). */
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer_internal.h"

uint32_t tide_tokenizer_n_ids(const tide_tokenizer *tok) { return tok->n_ids; }

static bool defined(const tide_tokenizer *tok, int32_t id) {
    return id >= 0 && (uint32_t)id < tok->n_ids && (tok->flags[id] & TOK_F_DEFINED);
}

int32_t tide_tokenizer_token_id(const tide_tokenizer *tok, const char *s, size_t len) {
    int32_t id = tok_strmap_get(&tok->all, tok, s, len);
    return id >= 0 ? id : tok_strmap_get(&tok->vocab, tok, s, len);
}

const char *tide_tokenizer_token_str(const tide_tokenizer *tok, int32_t id) {
    return defined(tok, id) ? tok->arena + tok->str_off[id] : NULL;
}

bool tide_tokenizer_token_bytes(const tide_tokenizer *tok, int32_t id, const uint8_t **bytes, size_t *len) {
    if (!defined(tok, id)) {
        *bytes = NULL;
        *len = 0;
        return false;
    }
    *bytes = tok->bytes + tok->bytes_off[id];
    *len = tok->bytes_len[id];
    return true;
}

bool tide_tokenizer_is_added(const tide_tokenizer *tok, int32_t id) {
    return defined(tok, id) && (tok->flags[id] & TOK_F_ADDED);
}

bool tide_tokenizer_is_special(const tide_tokenizer *tok, int32_t id) {
    return defined(tok, id) && (tok->flags[id] & TOK_F_SPECIAL);
}

int tide_tokenizer_decode(const tide_tokenizer *tok, const int32_t *ids, size_t n, unsigned flags, char **out,
                          size_t *out_len, tide_status *st) {
    *out = NULL;
    *out_len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || (uint32_t)ids[i] >= tok->n_ids)
            return tide_fail(st, TIDE_ERR_INVALID, "decode: id %d at position %zu is out of range [0, %u)", ids[i], i, tok->n_ids);
        total += tok->bytes_len[ids[i]];
    }
    char *o = malloc(total + 1);
    if (!o) return tide_fail(st, TIDE_ERR_NOMEM, "decode: out of memory (%zu bytes)", total + 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if ((flags & TIDE_DECODE_SKIP_SPECIAL) && (tok->flags[id] & TOK_F_SPECIAL)) continue;
        memcpy(o + k, tok->bytes + tok->bytes_off[id], tok->bytes_len[id]);
        k += tok->bytes_len[id];
    }
    o[k] = 0;
    *out = o;
    *out_len = k;
    return 0;
}
