/* The tokenizer's hash tables and scratch containers.
 *
 * Two maps carry the hot path: spelling -> id (open addressing over ids whose
 * strings live in the tokenizer's arena, so the table is just an int array),
 * and merge pair -> (rank, merged id) keyed by the two ids packed in 64 bits.
 * Both are sized to a load factor of at most 1/2 and probed linearly. */
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer_internal.h"

/* ---- growable containers ---- */

int tok_buf_reserve(tok_buf *b, size_t extra, tide_status *st) {
    if (b->n + extra <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + extra) {
        if (cap > SIZE_MAX / 2) return tide_fail(st, TIDE_ERR_NOMEM, "tokenizer: buffer too large");
        cap *= 2;
    }
    char *p = realloc(b->p, cap);
    if (!p) return tide_fail(st, TIDE_ERR_NOMEM, "tokenizer: out of memory (%zu bytes)", cap);
    b->p = p;
    b->cap = cap;
    return 0;
}

int tok_buf_append(tok_buf *b, const void *p, size_t n, tide_status *st) {
    if (tok_buf_reserve(b, n, st) != 0) return -1;
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
    return 0;
}

void tok_buf_free(tok_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

int tok_spans_push(tok_spans *s, uint32_t off, uint32_t len, tide_status *st) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        tok_span *v = realloc(s->v, cap * sizeof *v);
        if (!v) return tide_fail(st, TIDE_ERR_NOMEM, "tokenizer: out of memory (%zu spans)", cap);
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = (tok_span){off, len};
    return 0;
}

void tok_spans_free(tok_spans *s) {
    free(s->v);
    memset(s, 0, sizeof *s);
}

void tide_tok_ids_free(tide_tok_ids *v) {
    free(v->ids);
    memset(v, 0, sizeof *v);
}

int tide_tok_ids_push(tide_tok_ids *v, int32_t id, tide_status *st) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        int32_t *p = realloc(v->ids, cap * sizeof *p);
        if (!p) return tide_fail(st, TIDE_ERR_NOMEM, "tokenizer: out of memory (%zu ids)", cap);
        v->ids = p;
        v->cap = cap;
    }
    v->ids[v->n++] = id;
    return 0;
}

/* ---- hashing: 64-bit FNV-1a over 8-byte words, finished with a mixer ---- */

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

uint64_t tok_hash_bytes(const void *p, size_t n) {
    const uint8_t *s = p;
    uint64_t h = 0xcbf29ce484222325ULL ^ n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0x100000001b3ULL;
        h ^= h >> 29;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ w) * 0x100000001b3ULL;
    return mix64(h);
}

static uint32_t table_size(size_t n) {
    uint32_t cap = 16;
    while (cap < 2 * n + 2) cap *= 2;
    return cap;
}

/* ---- spelling -> id ---- */

static const char *spell(const tok_strmap *m, const tide_tokenizer *tok, int32_t id, size_t *len) {
    *len = m->len[id];
    return tok->arena + m->off[id];
}

int tok_strmap_build(tok_strmap *m, const tide_tokenizer *tok, const uint32_t *offs, const uint32_t *lens,
                     const int32_t *ids, size_t n, bool later_wins, tide_status *st) {
    m->off = offs;
    m->len = lens;
    if (n > (1u << 30)) return tide_fail(st, TIDE_ERR_NOMEM, "tokenizer: %zu strings is too many", n);
    uint32_t cap = table_size(n);
    m->slot = malloc(cap * sizeof *m->slot);
    if (!m->slot) return tide_fail(st, TIDE_ERR_NOMEM, "tokenizer: out of memory (string map)");
    memset(m->slot, 0xFF, cap * sizeof *m->slot);
    m->mask = cap - 1;
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const char *s = spell(m, tok, ids[i], &len);
        uint32_t h = (uint32_t)tok_hash_bytes(s, len) & m->mask;
        for (;; h = (h + 1) & m->mask) {
            int32_t cur = m->slot[h];
            if (cur < 0) { m->slot[h] = ids[i]; break; }
            size_t clen;
            const char *cs = spell(m, tok, cur, &clen);
            if (clen == len && memcmp(cs, s, len) == 0) {
                if (later_wins) m->slot[h] = ids[i];
                break;
            }
        }
    }
    return 0;
}

int32_t tok_strmap_get(const tok_strmap *m, const tide_tokenizer *tok, const char *s, size_t n) {
    if (!m->slot) return -1;
    uint32_t h = (uint32_t)tok_hash_bytes(s, n) & m->mask;
    for (;; h = (h + 1) & m->mask) {
        int32_t cur = m->slot[h];
        if (cur < 0) return -1;
        size_t clen;
        const char *cs = spell(m, tok, cur, &clen);
        if (clen == n && memcmp(cs, s, n) == 0) return cur;
    }
}

void tok_strmap_free(tok_strmap *m) {
    free(m->slot);
    memset(m, 0, sizeof *m);
}

/* ---- merges ---- */

#define EMPTY_KEY UINT64_MAX

int tok_merges_init(tide_tokenizer *tok, size_t n, tide_status *st) {
    if (n > (1u << 30)) return tide_fail(st, TIDE_ERR_NOMEM, "tokenizer: %zu merges is too many", n);
    uint32_t cap = table_size(n);
    tok->merge_key = malloc(cap * sizeof *tok->merge_key);
    tok->merge_rank = malloc(cap * sizeof *tok->merge_rank);
    tok->merge_new = malloc(cap * sizeof *tok->merge_new);
    if (!tok->merge_key || !tok->merge_rank || !tok->merge_new)
        return tide_fail(st, TIDE_ERR_NOMEM, "tokenizer: out of memory (merge table)");
    memset(tok->merge_key, 0xFF, cap * sizeof *tok->merge_key);
    tok->merge_mask = cap - 1;
    return 0;
}

static uint64_t pair_key(int32_t a, int32_t b) {
    return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
}

int tok_merges_put(tide_tokenizer *tok, int32_t a, int32_t b, uint32_t rank, int32_t merged) {
    uint64_t key = pair_key(a, b);
    if (rank >= tok->merge_rank_end) tok->merge_rank_end = rank + 1;
    uint32_t h = (uint32_t)mix64(key) & tok->merge_mask;
    for (;; h = (h + 1) & tok->merge_mask) {
        if (tok->merge_key[h] == EMPTY_KEY) {
            tok->merge_key[h] = key;
            tok->merge_rank[h] = rank;
            tok->merge_new[h] = merged;
            tok->n_merges++;
            return 1;
        }
        if (tok->merge_key[h] == key) { /* HF builds a map: a later duplicate wins */
            tok->merge_rank[h] = rank;
            tok->merge_new[h] = merged;
            return 0;
        }
    }
}

bool tok_merges_get(const tide_tokenizer *tok, int32_t a, int32_t b, uint32_t *rank, int32_t *merged) {
    if (!tok->merge_key) return false;
    uint64_t key = pair_key(a, b);
    uint32_t h = (uint32_t)mix64(key) & tok->merge_mask;
    for (;; h = (h + 1) & tok->merge_mask) {
        uint64_t k = tok->merge_key[h];
        if (k == key) {
            *rank = tok->merge_rank[h];
            *merged = tok->merge_new[h];
            return true;
        }
        if (k == EMPTY_KEY) return false;
    }
}
