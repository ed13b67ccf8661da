/* Engram token map: tokenizer id -> compressed id (reference:
 * build_compressed_token_map in inference/engram.py).
 *
 * For every id the reference decodes the single token with the tokenizer's
 * ByteLevel decoder (no clean-up), then picks a key:
 *   - the decoded bytes are not valid UTF-8, or contain U+FFFD: the key is
 *     the raw vocabulary string (a partial byte token, e.g. "âĢ");
 *   - otherwise the key is the normalised text (text/normalize.h), or the
 *     decoded text itself when normalisation leaves nothing.
 * Both kinds of key live in ONE dictionary, and ids get compressed ids in
 * order of first appearance of their key. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "base/fs.h"
#include "model/engram.h"
#include "text/normalize.h"

/* ---- GPT-2 byte-level alphabet ------------------------------------------ */

enum { ALPHA_END = 256 + 68 }; /* alphabet code points are all below this */

/* Fills cp -> byte of the GPT-2 bytes_to_unicode table for cp < ALPHA_END;
 * -1 where the code point is not in the alphabet. Printable Latin-1 bytes
 * stand for themselves; the 68 others (controls, space, DEL, NBSP, soft
 * hyphen) were moved to 256.. in byte order. */
static void byte_alphabet(int16_t table[ALPHA_END]) {
    int extra = 0;
    for (int c = 0; c < ALPHA_END; c++) table[c] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        table[printable ? b : 256 + extra++] = (int16_t)b;
    }
}

/* Strict UTF-8 decode of one code point (Rust's from_utf8 rules: no
 * overlongs, no surrogates, <= U+10FFFF). Returns its length, 0 if invalid. */
static size_t utf8_next(const uint8_t *s, size_t n, int32_t *cp) {
    uint8_t b = s[0];
    if (b < 0x80) {
        *cp = b;
        return 1;
    }
    size_t len;
    int32_t c, min;
    if ((b & 0xE0) == 0xC0) { len = 2; c = b & 0x1F; min = 0x80; }
    else if ((b & 0xF0) == 0xE0) { len = 3; c = b & 0x0F; min = 0x800; }
    else if ((b & 0xF8) == 0xF0) { len = 4; c = b & 0x07; min = 0x10000; }
    else return 0;
    if (len > n) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        c = (c << 6) | (s[i] & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
    *cp = c;
    return len;
}

/* ByteLevel decoding of one token into out (room for len bytes: every
 * alphabet character is >= 1 UTF-8 byte and yields one byte). A token with
 * any character outside the alphabet is kept as its own bytes. */
static size_t bytelevel_decode(const int16_t *alphabet, const char *tok, size_t len, uint8_t *out) {
    const uint8_t *s = (const uint8_t *)tok;
    size_t o = 0;
    for (size_t p = 0; p < len;) {
        int32_t cp;
        size_t k = utf8_next(s + p, len - p, &cp);
        int b = k && cp < ALPHA_END ? alphabet[cp] : -1;
        if (b < 0) {
            memcpy(out, tok, len);
            return len;
        }
        out[o++] = (uint8_t)b;
        p += k;
    }
    return o;
}

/* Valid UTF-8 without U+FFFD: what the reference's `"\ufffd" not in text`
 * means after from_utf8_lossy. */
static int clean_text(const uint8_t *s, size_t n) {
    for (size_t p = 0; p < n;) {
        int32_t cp;
        size_t k = utf8_next(s + p, n - p, &cp);
        if (!k || cp == 0xFFFD) return 0;
        p += k;
    }
    return 1;
}

/* ---- key dictionary: open addressing over owned byte strings ------------- */

typedef struct key_slot {
    char *key; /* NULL = empty slot */
    size_t len;
    int32_t id;
} key_slot;

typedef struct key_dict {
    key_slot *slots;
    size_t cap, count;
} key_dict;

static uint64_t fnv1a(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

static void dict_free(key_dict *d) {
    for (size_t i = 0; i < d->cap; i++) free(d->slots[i].key);
    free(d->slots);
    d->slots = NULL;
    d->cap = d->count = 0;
}

/* The compressed id of key, adding it with the next id when new. Takes
 * ownership of key (frees it when already present). The table has room for
 * twice the vocabulary, so it never fills. */
static int64_t dict_intern(key_dict *d, char *key, size_t len) {
    size_t mask = d->cap - 1, i = (size_t)fnv1a(key, len) & mask;
    while (d->slots[i].key) {
        if (d->slots[i].len == len && memcmp(d->slots[i].key, key, len) == 0) {
            free(key);
            return d->slots[i].id;
        }
        i = (i + 1) & mask;
    }
    d->slots[i] = (key_slot){key, len, (int32_t)d->count};
    return (int64_t)d->count++;
}

/* ---- the map ------------------------------------------------------------- */

/* The key of one token (malloc'd, *klen bytes). */
static int token_key(const int16_t *alphabet, const char *tok, size_t len, int64_t id, char **key,
                     size_t *klen, tide_status *st) {
    uint8_t *text = malloc(len + 1);
    if (!text) return tide_fail(st, TIDE_ERR_NOMEM, "engram token map: out of memory");
    size_t tlen = tok ? bytelevel_decode(alphabet, tok, len, text) : 0;
    if (!clean_text(text, tlen)) { /* a partial UTF-8 byte token: key by its raw form */
        memcpy(text, tok, len);
        *key = (char *)text;
        *klen = len;
        return 0;
    }
    char *norm;
    size_t nlen;
    if (tide_engram_normalize((const char *)text, tlen, &norm, &nlen, st) != 0) {
        free(text);
        return tide_fail_ctx(st, "engram token map: token %lld", (long long)id);
    }
    if (nlen > 0) {
        free(text);
        *key = norm;
        *klen = nlen;
    } else {
        free(norm);
        *key = (char *)text;
        *klen = tlen;
    }
    return 0;
}

int tide_engram_token_map_build(const char *const *tokens, const size_t *lens, int64_t n,
                                tide_engram_token_map *out, tide_status *st) {
    memset(out, 0, sizeof *out);
    if (n <= 0 || n > INT32_MAX / 2 || !tokens || !lens)
        return tide_fail(st, TIDE_ERR_INVALID, "engram token map: bad vocabulary (%lld ids)",
                         (long long)n);
    int16_t alphabet[ALPHA_END];
    byte_alphabet(alphabet);
    key_dict d = {0};
    d.cap = 16;
    while (d.cap < (size_t)n * 2) d.cap *= 2;
    d.slots = calloc(d.cap, sizeof *d.slots);
    out->map = malloc((size_t)n * sizeof *out->map);
    if (!d.slots || !out->map) {
        free(d.slots);
        free(out->map);
        out->map = NULL;
        return tide_fail(st, TIDE_ERR_NOMEM, "engram token map: out of memory");
    }
    for (int64_t i = 0; i < n; i++) {
        char *key = NULL;
        size_t klen = 0;
        if (token_key(alphabet, tokens[i], tokens[i] ? lens[i] : 0, i, &key, &klen, st) != 0) {
            dict_free(&d);
            tide_engram_token_map_free(out);
            return -1;
        }
        out->map[i] = (int32_t)dict_intern(&d, key, klen);
    }
    out->n_tokens = n;
    out->n_compressed = (int64_t)d.count;
    dict_free(&d);
    return 0;
}

int tide_engram_token_map_synthetic(int64_t n_tokens, int64_t n_compressed,
                                    tide_engram_token_map *out, tide_status *st) {
    memset(out, 0, sizeof *out);
    if (n_tokens <= 0 || n_tokens > INT32_MAX || n_compressed <= 0 || n_compressed > n_tokens)
        return tide_fail(st, TIDE_ERR_INVALID,
                         "engram synthetic token map: need 0 < n_compressed (%lld) <= n_tokens (%lld)",
                         (long long)n_compressed, (long long)n_tokens);
    out->map = malloc((size_t)n_tokens * sizeof *out->map);
    if (!out->map) return tide_fail(st, TIDE_ERR_NOMEM, "engram synthetic token map: out of memory");
    for (int64_t i = 0; i < n_tokens; i++) out->map[i] = (int32_t)(i % n_compressed);
    out->n_tokens = n_tokens;
    out->n_compressed = n_compressed;
    return 0;
}

void tide_engram_token_map_free(tide_engram_token_map *m) {
    if (!m) return;
    free(m->map);
    memset(m, 0, sizeof *m);
}

/* ---- tokenizer.json ------------------------------------------------------ */

/* Records (str, len) as id's string. The vocabulary goes in first (its first
 * string per id stays); added tokens then replace it, as added_vocabulary
 * wins in the tokenizer's id_to_token. */
static int put_token(const char **toks, size_t *lens, int64_t cap, json_int_t id, const char *s,
                     size_t len, int added, const char *path, tide_status *st) {
    if (id < 0 || id >= cap)
        return tide_fail(st, TIDE_ERR_FORMAT, "%s: token id %lld out of range", path, (long long)id);
    if (toks[id] && !added) return 0; /* added_vocabulary wins in id_to_token */
    toks[id] = s;
    lens[id] = len;
    return 0;
}

/* Number of distinct token strings of vocab + added (tokenizers'
 * get_vocab_size(with_added_tokens=True), i.e. len(tokenizer)). */
static int64_t distinct_count(json_t *vocab, json_t *added) {
    int64_t n = (int64_t)json_object_size(vocab);
    size_t i;
    json_t *a;
    json_array_foreach(added, i, a) {
        json_t *c = json_object_get(a, "content");
        if (!json_is_string(c) || !json_object_get(vocab, json_string_value(c))) n++;
        else continue;
        /* an added string seen twice in added_tokens counts once */
        for (size_t j = 0; j < i; j++) {
            json_t *p = json_object_get(json_array_get(added, j), "content");
            if (json_is_string(p) && json_equal(p, c)) {
                n--;
                break;
            }
        }
    }
    return n;
}

static int read_file(const char *path, char **text, size_t *len, tide_status *st) {
    FILE *f = tide_fopen_regular(path, st);
    if (!f) return -1;
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        char *nb = cap > ((size_t)1 << 32) ? NULL : realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf) return tide_fail(st, TIDE_ERR_NOMEM, "%s: out of memory (or larger than 4 GiB)", path);
    if (bad) {
        free(buf);
        return tide_fail(st, TIDE_ERR_IO, "%s: read error", path);
    }
    *text = buf;
    *len = n;
    return 0;
}

static int check_decoder(json_t *root, const char *path, tide_status *st) {
    json_t *dec = json_object_get(root, "decoder");
    if (!dec || json_is_null(dec)) return 0;
    const char *type = json_string_value(json_object_get(dec, "type"));
    if (type && strcmp(type, "ByteLevel") == 0) return 0;
    return tide_fail(st, TIDE_ERR_UNSUPPORTED,
                     "%s: engram token map needs a ByteLevel decoder, found %s", path,
                     type ? type : "(no type)");
}

int tide_engram_token_map_from_tokenizer_json(const char *path, tide_engram_token_map *out,
                                              tide_status *st) {
    memset(out, 0, sizeof *out);
    char buf[4096];
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        snprintf(buf, sizeof buf, "%s/tokenizer.json", path);
        path = buf;
    }
    char *text = NULL;
    size_t text_len = 0;
    if (read_file(path, &text, &text_len, st) != 0) return -1;
    int rc = tide_engram_token_map_from_tokenizer_text(text, text_len, path, out, st);
    free(text);
    return rc;
}

int tide_engram_token_map_from_tokenizer_text(const char *text, size_t text_len, const char *path,
                                              tide_engram_token_map *out, tide_status *st) {
    memset(out, 0, sizeof *out);
    json_error_t err;
    /* from memory: json_load_file reads with getc and takes several times longer */
    json_t *root = json_loadb(text, text_len, JSON_ALLOW_NUL, &err);
    if (!root)
        return tide_fail(st, TIDE_ERR_FORMAT, "%s:%d: %s", path, err.line, err.text);
    int rc = -1;
    const char **toks = NULL;
    size_t *lens = NULL;
    json_t *vocab = json_object_get(json_object_get(root, "model"), "vocab");
    json_t *added = json_object_get(root, "added_tokens");
    if (!json_is_object(vocab)) {
        tide_fail(st, TIDE_ERR_FORMAT, "%s: model.vocab is missing or not an object", path);
        goto done;
    }
    if (added && !json_is_array(added)) {
        tide_fail(st, TIDE_ERR_FORMAT, "%s: added_tokens is not an array", path);
        goto done;
    }
    if (check_decoder(root, path, st) != 0) goto done;
    /* Ids live in [0, max id]; the map covers the first len(tokenizer) of them. */
    json_int_t max_id = -1;
    const char *k;
    json_t *v;
    json_object_foreach(vocab, k, v) {
        if (!json_is_integer(v)) {
            tide_fail(st, TIDE_ERR_FORMAT, "%s: model.vocab[\"%s\"] is not an integer", path, k);
            goto done;
        }
        if (json_integer_value(v) > max_id) max_id = json_integer_value(v);
    }
    size_t i;
    json_array_foreach(added, i, v) {
        json_t *id = json_object_get(v, "id"), *c = json_object_get(v, "content");
        if (!json_is_integer(id) || !json_is_string(c)) {
            tide_fail(st, TIDE_ERR_FORMAT, "%s: added_tokens[%zu] needs an integer id and a string content",
                      path, i);
            goto done;
        }
        if (json_integer_value(id) > max_id) max_id = json_integer_value(id);
    }
    if (max_id < 0 || max_id >= INT32_MAX / 2) {
        tide_fail(st, TIDE_ERR_FORMAT, "%s: bad vocabulary (largest id %lld)", path, (long long)max_id);
        goto done;
    }
    int64_t cap = (int64_t)max_id + 1;
    toks = calloc((size_t)cap, sizeof *toks);
    lens = calloc((size_t)cap, sizeof *lens);
    if (!toks || !lens) {
        tide_fail(st, TIDE_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    json_object_foreach(vocab, k, v)
        if (put_token(toks, lens, cap, json_integer_value(v), k, strlen(k), 0, path, st) != 0) goto done;
    json_array_foreach(added, i, v) {
        json_t *c = json_object_get(v, "content");
        if (put_token(toks, lens, cap, json_integer_value(json_object_get(v, "id")),
                      json_string_value(c), json_string_length(c), 1, path, st) != 0)
            goto done;
    }
    int64_t n = distinct_count(vocab, added); /* NULL added: json_array_size is 0 */
    if (n > cap) n = cap;
    rc = tide_engram_token_map_build(toks, lens, n, out, st);
    if (rc != 0) tide_fail_ctx(st, "%s", path);
done:
    free(toks);
    free(lens);
    json_decref(root);
    return rc;
}
