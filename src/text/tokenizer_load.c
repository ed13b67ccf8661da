/* Loading tokenizer.json into the flat tables of tokenizer_internal.h.
 *
 * Order matters: the model (vocab, merges) fixes the id space; added tokens
 * may extend it; the normalizer must exist before normalized added tokens
 * get their match strings; the decoder decides how token bytes are derived.
 * Keys that do not change ids (truncation, padding, post_processor) are
 * ignored: tide never adds BOS/EOS itself, the prompt renderer does. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fs.h"
#include "text/tokenizer_internal.h"

#define TOK_MAX_IDS (1u << 22) /* 4M: far above any real vocabulary (~260K); bounds allocations */
#define TOK_MAX_FILE (1ull << 30)

typedef struct {
    tide_tokenizer *tok;
    tok_buf arena;
} loader;

/* Appends s (plus a NUL) to the arena; returns its offset through *off. */
static int arena_add(loader *L, const char *s, size_t n, uint32_t *off, tide_status *st) {
    if (L->arena.n + n + 1 > UINT32_MAX) return tide_fail(st, TIDE_ERR_NOMEM, "tokenizer strings exceed 4 GB");
    *off = (uint32_t)L->arena.n;
    if (tok_buf_append(&L->arena, s, n, st) != 0) return -1;
    return tok_buf_append(&L->arena, "", 1, st);
}

/* ---- model ---- */

static int max_id_of(json_t *vocab, json_t *added, uint32_t *n_ids, tide_status *st) {
    json_int_t max = -1;
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) {
        if (!json_is_integer(v)) return tide_fail(st, TIDE_ERR_FORMAT, "model.vocab[\"%.60s\"] is not an integer", key);
        json_int_t id = json_integer_value(v);
        if (id < 0 || id >= TOK_MAX_IDS) return tide_fail(st, TIDE_ERR_FORMAT, "model.vocab[\"%.60s\"] = %lld is out of range", key, (long long)id);
        if (id > max) max = id;
    }
    size_t i;
    json_array_foreach(added, i, v) {
        json_t *jid = json_object_get(v, "id");
        if (!json_is_integer(jid)) return tide_fail(st, TIDE_ERR_FORMAT, "added_tokens[%zu].id is missing or not an integer", i);
        json_int_t id = json_integer_value(jid);
        if (id < 0 || id >= TOK_MAX_IDS) return tide_fail(st, TIDE_ERR_FORMAT, "added_tokens[%zu].id = %lld is out of range", i, (long long)id);
        if (id > max) max = id;
    }
    *n_ids = (uint32_t)(max + 1);
    return 0;
}

static int alloc_tables(tide_tokenizer *tok, tide_status *st) {
    size_t n = tok->n_ids ? tok->n_ids : 1;
    tok->flags = calloc(n, 1);
    tok->str_off = calloc(n, sizeof(uint32_t));
    tok->str_len = calloc(n, sizeof(uint32_t));
    tok->voc_off = calloc(n, sizeof(uint32_t));
    tok->voc_len = calloc(n, sizeof(uint32_t));
    if (!tok->flags || !tok->str_off || !tok->str_len || !tok->voc_off || !tok->voc_len)
        return tide_fail(st, TIDE_ERR_NOMEM, "out of memory for %u ids", tok->n_ids);
    return 0;
}

static int load_vocab(loader *L, json_t *vocab, tide_status *st) {
    tide_tokenizer *tok = L->tok;
    const char *key;
    json_t *v;
    void *iter;
    for (iter = json_object_iter(vocab); iter; iter = json_object_iter_next(vocab, iter)) {
        key = json_object_iter_key(iter);
        v = json_object_iter_value(iter);
        size_t klen = json_object_iter_key_len(iter);
        uint32_t id = (uint32_t)json_integer_value(v);
        if (tok->flags[id] & TOK_F_VOCAB)
            return tide_fail(st, TIDE_ERR_FORMAT, "model.vocab: id %u is used by two tokens (\"%.60s\" and \"%.60s\")",
                             id, L->arena.p + tok->voc_off[id], key);
        uint32_t off = 0;
        if (arena_add(L, key, klen, &off, st) != 0) return -1;
        tok->voc_off[id] = tok->str_off[id] = off;
        tok->voc_len[id] = tok->str_len[id] = (uint32_t)klen;
        tok->flags[id] |= TOK_F_VOCAB | TOK_F_DEFINED;
    }
    return 0;
}

/* The merged token of a pair: a + b, with b's continuing-subword prefix removed. */
static int merge_one(loader *L, const char *a, size_t al, const char *b, size_t bl, uint32_t rank,
                     tok_buf *tmp, tide_status *st) {
    tide_tokenizer *tok = L->tok;
    int32_t ia = tok_strmap_get(&tok->vocab, tok, a, al), ib = tok_strmap_get(&tok->vocab, tok, b, bl);
    if (ia < 0) return tide_fail(st, TIDE_ERR_FORMAT, "merge %u: \"%.*s\" is not in the vocab", rank, (int)(al > 60 ? 60 : al), a);
    if (ib < 0) return tide_fail(st, TIDE_ERR_FORMAT, "merge %u: \"%.*s\" is not in the vocab", rank, (int)(bl > 60 ? 60 : bl), b);
    size_t pl = tok->cont_prefix ? strlen(tok->cont_prefix) : 0;
    if (pl && bl >= pl && memcmp(b, tok->cont_prefix, pl) == 0) { b += pl; bl -= pl; }
    tmp->n = 0;
    if (tok_buf_append(tmp, a, al, st) != 0 || tok_buf_append(tmp, b, bl, st) != 0) return -1;
    int32_t m = tok_strmap_get(&tok->vocab, tok, tmp->p, tmp->n);
    if (m < 0) return tide_fail(st, TIDE_ERR_FORMAT, "merge %u: the merged token \"%.*s\" is not in the vocab", rank,
                                (int)(tmp->n > 60 ? 60 : tmp->n), tmp->p);
    tok_merges_put(tok, ia, ib, rank, m);
    return 0;
}

static int load_merges(loader *L, json_t *merges, tide_status *st) {
    if (!merges || json_is_null(merges)) return tok_merges_init(L->tok, 0, st);
    if (!json_is_array(merges)) return tide_fail(st, TIDE_ERR_FORMAT, "model.merges must be an array");
    if (tok_merges_init(L->tok, json_array_size(merges), st) != 0) return -1;
    /* The strmap reads keys from the arena, which must not move any more. */
    L->tok->arena = L->arena.p;
    tok_buf tmp = {0};
    size_t i;
    json_t *m;
    int rc = 0;
    json_array_foreach(merges, i, m) {
        if (json_is_string(m)) { /* "a b": exactly one space */
            const char *s = json_string_value(m);
            size_t n = json_string_length(m);
            const char *sp = memchr(s, ' ', n);
            if (!sp || memchr(sp + 1, ' ', n - (size_t)(sp + 1 - s)))
                rc = tide_fail(st, TIDE_ERR_FORMAT, "model.merges[%zu] = \"%.60s\" is not \"left right\"", i, s);
            else
                rc = merge_one(L, s, (size_t)(sp - s), sp + 1, n - (size_t)(sp + 1 - s), (uint32_t)i, &tmp, st);
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            json_t *a = json_array_get(m, 0), *b = json_array_get(m, 1);
            rc = merge_one(L, json_string_value(a), json_string_length(a), json_string_value(b),
                           json_string_length(b), (uint32_t)i, &tmp, st);
        } else {
            rc = tide_fail(st, TIDE_ERR_FORMAT, "model.merges[%zu] is neither \"a b\" nor [\"a\", \"b\"]", i);
        }
        if (rc != 0) break;
    }
    tok_buf_free(&tmp);
    return rc;
}

static int opt_string(json_t *j, const char *key, char **out, tide_status *st) {
    json_t *v = json_object_get(j, key);
    *out = NULL;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v)) return tide_fail(st, TIDE_ERR_FORMAT, "model.%s must be a string or null", key);
    if (json_string_length(v) == 0) return 0; /* "" means none (Qwen3 writes that) */
    if (json_string_length(v) > 64) return tide_fail(st, TIDE_ERR_FORMAT, "model.%s is longer than 64 bytes", key);
    *out = strdup(json_string_value(v));
    if (!*out) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    return 0;
}

static int model_options(tide_tokenizer *tok, json_t *model, tide_status *st) {
    json_t *type = json_object_get(model, "type");
    if (type && !(json_is_string(type) && !strcmp(json_string_value(type), "BPE")))
        return tide_fail(st, TIDE_ERR_UNSUPPORTED, "model.type \"%s\" is not supported (tide handles BPE)",
                         json_is_string(type) ? json_string_value(type) : "?");
    json_t *drop = json_object_get(model, "dropout");
    if (drop && !json_is_null(drop) && !(json_is_number(drop) && json_number_value(drop) == 0.0))
        return tide_fail(st, TIDE_ERR_UNSUPPORTED, "model.dropout is set: tide tokenizes deterministically");
    tok->byte_fallback = json_is_true(json_object_get(model, "byte_fallback"));
    tok->ignore_merges = json_is_true(json_object_get(model, "ignore_merges"));
    tok->fuse_unk = json_is_true(json_object_get(model, "fuse_unk"));
    if (opt_string(model, "continuing_subword_prefix", &tok->cont_prefix, st) != 0) return -1;
    return opt_string(model, "end_of_word_suffix", &tok->eow_suffix, st);
}

/* ---- added tokens ---- */

static bool jflag(json_t *o, const char *k, bool dflt) {
    json_t *v = json_object_get(o, k);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

static int load_added(loader *L, json_t *added, tide_status *st) {
    tide_tokenizer *tok = L->tok;
    size_t n = json_array_size(added);
    tok->added = calloc(n ? n : 1, sizeof *tok->added);
    if (!tok->added) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory (added tokens)");
    size_t i;
    json_t *a;
    json_array_foreach(added, i, a) {
        json_t *c = json_object_get(a, "content");
        if (!json_is_string(c)) return tide_fail(st, TIDE_ERR_FORMAT, "added_tokens[%zu].content is missing", i);
        if (json_string_length(c) == 0) return tide_fail(st, TIDE_ERR_FORMAT, "added_tokens[%zu].content is empty", i);
        tok_added *t = &tok->added[tok->n_added++];
        t->id = (int32_t)json_integer_value(json_object_get(a, "id"));
        t->special = jflag(a, "special", false);
        t->normalized = jflag(a, "normalized", !t->special);
        t->lstrip = jflag(a, "lstrip", false);
        t->rstrip = jflag(a, "rstrip", false);
        t->single_word = jflag(a, "single_word", false);
        if (arena_add(L, json_string_value(c), json_string_length(c), &t->content_off, st) != 0) return -1;
        t->content_len = (uint32_t)json_string_length(c);
        if (t->content_len > tok->max_added_len) tok->max_added_len = t->content_len;
        t->match_off = t->content_off;
        t->match_len = t->content_len;
        tok->str_off[t->id] = t->content_off;
        tok->str_len[t->id] = t->content_len;
        tok->flags[t->id] |= TOK_F_DEFINED | TOK_F_ADDED | (t->special ? TOK_F_SPECIAL : 0);
    }
    return 0;
}

/* Normalized added tokens are matched by their normalized content. */
static int normalize_added(loader *L, tide_status *st) {
    tide_tokenizer *tok = L->tok;
    if (tok->n_norm == 0) return 0;
    tok_buf out = {0};
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < tok->n_added; i++) {
        tok_added *t = &tok->added[i];
        if (!t->normalized) continue;
        /* Copy: normalizing reads the arena while arena_add may move it. */
        tok_buf in = {0};
        rc = tok_buf_append(&in, L->arena.p + t->content_off, t->content_len, st);
        if (rc == 0) rc = tok_normalize(tok, in.p, in.n, &out, st);
        if (rc == 0) rc = arena_add(L, out.p ? out.p : "", out.n, &t->match_off, st);
        t->match_len = (uint32_t)out.n;
        tok_buf_free(&in);
        if (rc != 0) tide_fail_ctx(st, "normalizing added token %d", t->id);
    }
    tok_buf_free(&out);
    return rc;
}

/* ---- decoder ---- */

static int decoder_is_byte_level(json_t *d, int depth, bool *byte_level, tide_status *st) {
    if (depth > 16) return tide_fail(st, TIDE_ERR_FORMAT, "decoder nesting deeper than 16");
    const char *type = json_string_value(json_object_get(d, "type"));
    if (!type) return tide_fail(st, TIDE_ERR_FORMAT, "decoder has no \"type\"");
    if (!strcmp(type, "ByteLevel")) { *byte_level = true; return 0; }
    if (!strcmp(type, "ByteFallback") || !strcmp(type, "Fuse")) return 0;
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(d, "decoders");
        if (!json_is_array(list)) return tide_fail(st, TIDE_ERR_FORMAT, "Sequence decoder needs a \"decoders\" array");
        size_t i;
        json_t *v;
        json_array_foreach(list, i, v) {
            if (decoder_is_byte_level(v, depth + 1, byte_level, st) != 0) return -1;
        }
        return 0;
    }
    return tide_fail(st, TIDE_ERR_UNSUPPORTED, "decoder type \"%s\" is not supported (tide decodes byte-level "
                     "BPE: ByteLevel, optionally with ByteFallback and Fuse)", type);
}

/* ---- assembling ---- */

static int build_lookups(tide_tokenizer *tok, tide_status *st) {
    int32_t *ids = malloc((tok->n_ids ? tok->n_ids : 1) * sizeof *ids);
    if (!ids) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    size_t n = 0;
    for (uint32_t id = 0; id < tok->n_ids; id++)
        if (tok->flags[id] & TOK_F_VOCAB) ids[n++] = (int32_t)id;
    int rc = tok_strmap_build(&tok->vocab, tok, tok->voc_off, tok->voc_len, ids, n, false, st);
    /* Spellings: vocab first, then added tokens, so a name lookup prefers the added token. */
    n = 0;
    for (uint32_t id = 0; id < tok->n_ids; id++)
        if ((tok->flags[id] & TOK_F_DEFINED) && !(tok->flags[id] & TOK_F_ADDED)) ids[n++] = (int32_t)id;
    for (uint32_t id = 0; id < tok->n_ids; id++)
        if (tok->flags[id] & TOK_F_ADDED) ids[n++] = (int32_t)id;
    if (rc == 0) rc = tok_strmap_build(&tok->all, tok, tok->str_off, tok->str_len, ids, n, true, st);
    free(ids);
    return rc;
}

static void build_char_tables(tide_tokenizer *tok) {
    for (size_t i = 0; i < 0x800; i++) tok->small_char_id[i] = -1;
    for (uint32_t id = 0; id < tok->n_ids; id++) {
        if (!(tok->flags[id] & TOK_F_VOCAB)) continue;
        const uint8_t *s = (const uint8_t *)tok->arena + tok->voc_off[id];
        uint32_t cp;
        int l = tok_utf8_decode(s, tok->voc_len[id], &cp);
        if (l && (uint32_t)l == tok->voc_len[id] && cp < 0x800) tok->small_char_id[cp] = (int32_t)id;
    }
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        tok->byte_ids[b] = tok_strmap_get(&tok->vocab, tok, name, 6);
    }
}

static int load_root(loader *L, json_t *root, tide_status *st) {
    tide_tokenizer *tok = L->tok;
    if (!json_is_object(root)) return tide_fail(st, TIDE_ERR_FORMAT, "top level is not a JSON object");
    json_t *model = json_object_get(root, "model");
    if (!json_is_object(model)) return tide_fail(st, TIDE_ERR_MISSING, "no \"model\" object");
    json_t *vocab = json_object_get(model, "vocab");
    if (!json_is_object(vocab)) return tide_fail(st, TIDE_ERR_MISSING, "model.vocab is missing or not an object");
    json_t *added = json_object_get(root, "added_tokens");
    if (added && !json_is_null(added) && !json_is_array(added))
        return tide_fail(st, TIDE_ERR_FORMAT, "added_tokens must be an array");
    if (!json_is_array(added)) added = NULL;
    json_t *empty = json_array();
    if (!empty) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    if (!added) added = empty;
    int rc = model_options(tok, model, st);
    if (rc == 0) rc = max_id_of(vocab, added, &tok->n_ids, st);
    if (rc == 0) rc = alloc_tables(tok, st);
    if (rc == 0) rc = load_vocab(L, vocab, st);
    if (rc == 0) rc = load_added(L, added, st);
    json_decref(empty);
    if (rc != 0) return -1;
    /* Arena is final for vocab keys; the vocab map is needed by the merges. */
    tok->arena = L->arena.p;
    if (build_lookups(tok, st) != 0) return -1;
    json_t *unk = json_object_get(model, "unk_token");
    tok->unk_id = json_is_string(unk) ? tok_strmap_get(&tok->vocab, tok, json_string_value(unk), json_string_length(unk)) : -1;
    if (load_merges(L, json_object_get(model, "merges"), st) != 0) return -1;
    if (tok_parse_normalizer(tok, json_object_get(root, "normalizer"), st) != 0) return -1;
    if (tok_parse_pretokenizer(tok, json_object_get(root, "pre_tokenizer"), st) != 0) return -1;
    json_t *dec = json_object_get(root, "decoder");
    bool byte_level = false;
    if (!dec || json_is_null(dec))
        return tide_fail(st, TIDE_ERR_UNSUPPORTED, "decoder is null: tide needs a ByteLevel decoder");
    if (decoder_is_byte_level(dec, 0, &byte_level, st) != 0) return -1;
    if (normalize_added(L, st) != 0) return -1;
    /* From here on the arena does not grow: fix the pointer for good. */
    tok->arena = L->arena.p;
    tok->arena_len = L->arena.n;
    L->arena.p = NULL;
    build_char_tables(tok);
    if (tok_trie_build(&tok->trie_raw, tok, false, false, st) != 0) return -1;
    if (tok_trie_build(&tok->trie_norm, tok, true, false, st) != 0) return -1;
    if (tok_trie_build(&tok->trie_all, tok, false, true, st) != 0) return -1;
    return tok_build_bytes_table(tok, byte_level, st);
}

int tide_tokenizer_load_json(const char *json, size_t len, const char *name, tide_tokenizer **out, tide_status *st) {
    *out = NULL;
    if (!name) name = "tokenizer.json";
    json_error_t err;
    json_t *root = json_loadb(json, len, JSON_ALLOW_NUL, &err);
    if (!root)
        return tide_fail(st, TIDE_ERR_FORMAT, "%s: bad JSON at line %d column %d: %s", name, err.line, err.column, err.text);
    loader L = {0};
    L.tok = calloc(1, sizeof *L.tok);
    if (!L.tok) {
        json_decref(root);
        return tide_fail(st, TIDE_ERR_NOMEM, "%s: out of memory", name);
    }
    L.tok->unk_id = -1;
    int rc = load_root(&L, root, st);
    json_decref(root);
    if (L.arena.p) { /* not yet handed over */
        L.tok->arena = L.arena.p;
        L.tok->arena_len = L.arena.n;
    }
    if (rc != 0) {
        tide_tokenizer_free(L.tok);
        return tide_fail_ctx(st, "%s", name);
    }
    *out = L.tok;
    return 0;
}

int tide_tokenizer_load(const char *path, tide_tokenizer **out, tide_status *st) {
    *out = NULL;
    FILE *f = tide_fopen_regular(path, st); /* a FIFO or a directory is refused, never blocks */
    if (!f) return -1;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 1 << 20;
            if (cap > TOK_MAX_FILE) { free(buf); fclose(f); return tide_fail(st, TIDE_ERR_FORMAT, "%s: larger than 1 GB", path); }
            char *p = realloc(buf, cap);
            if (!p) { free(buf); fclose(f); return tide_fail(st, TIDE_ERR_NOMEM, "%s: out of memory", path); }
            buf = p;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) { free(buf); return tide_fail(st, TIDE_ERR_IO, "%s: read error", path); }
    int rc = tide_tokenizer_load_json(buf, n, path, out, st);
    free(buf);
    return rc;
}

void tide_tokenizer_free(tide_tokenizer *tok) {
    if (!tok) return;
    free(tok->flags);
    free(tok->str_off);
    free(tok->str_len);
    free(tok->voc_off);
    free(tok->voc_len);
    free(tok->bytes_off);
    free(tok->bytes_len);
    free(tok->bytes);
    free(tok->arena);
    tok_strmap_free(&tok->vocab);
    tok_strmap_free(&tok->all);
    free(tok->merge_key);
    free(tok->merge_rank);
    free(tok->merge_new);
    free(tok->cont_prefix);
    free(tok->eow_suffix);
    free(tok->added);
    free(tok->fast_cls);
    tok_trie_free(&tok->trie_raw);
    tok_trie_free(&tok->trie_norm);
    tok_trie_free(&tok->trie_all);
    tok_free_normalizer(tok);
    tok_free_pretokenizer(tok);
    free(tok);
}
