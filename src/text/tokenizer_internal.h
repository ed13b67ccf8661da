/* Private layout of tide_tokenizer, shared by the tokenizer_*.c files only.
 *
 * A tokenizer is a set of flat tables built once at load time:
 *   - per id: its tokenizer.json spelling, its raw bytes, flags;
 *   - a string -> id hash for the BPE vocabulary;
 *   - a (left id, right id) -> (rank, merged id) hash for the merges;
 *   - a byte trie of the added tokens (raw-matched and normalized-matched);
 *   - the normalizer and pre-tokenizer, flattened into arrays of steps. */
#ifndef TIDE_TEXT_TOKENIZER_INTERNAL_H
#define TIDE_TEXT_TOKENIZER_INTERNAL_H

#include <jansson.h>
#include <oniguruma.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "text/tokenizer.h"

/* ---- growable byte buffer and span list (scratch for encoding) ---- */

typedef struct {
    char *p;
    size_t n, cap;
} tok_buf;

typedef struct {
    uint32_t off, len;
} tok_span;

typedef struct {
    tok_span *v;
    size_t n, cap;
} tok_spans;

int tok_buf_reserve(tok_buf *b, size_t extra, tide_status *st);
int tok_buf_append(tok_buf *b, const void *p, size_t n, tide_status *st);
int tok_spans_push(tok_spans *s, uint32_t off, uint32_t len, tide_status *st);
void tok_buf_free(tok_buf *b);
void tok_spans_free(tok_spans *s);

/* ---- hashing ---- */

uint64_t tok_hash_bytes(const void *p, size_t n);

/* String -> id map over strings that live elsewhere: the key of id is
 * arena[off[id] .. off[id] + len[id]). */
typedef struct {
    int32_t *slot; /* id, or -1 when empty */
    uint32_t mask;
    const uint32_t *off, *len;
} tok_strmap;

/* ---- per-id flags ---- */
enum {
    TOK_F_DEFINED = 1, /* the id exists (vocab or added) */
    TOK_F_VOCAB = 2,   /* in the BPE model's vocab */
    TOK_F_ADDED = 4,
    TOK_F_SPECIAL = 8,
};

/* ---- added tokens ---- */
typedef struct {
    int32_t id;
    bool special, normalized, lstrip, rstrip, single_word;
    uint32_t content_off, content_len; /* in arena */
    uint32_t match_off, match_len;     /* normalized content for normalized tokens, else = content */
} tok_added;

/* Byte trie for leftmost-longest matching of added tokens. Node 0 is the
 * root; children are a sorted run in `edges`. */
typedef struct {
    uint32_t first_edge, n_edges;
    int32_t added; /* index into tok->added, or -1 */
} tok_trie_node;

typedef struct {
    uint8_t byte;
    uint32_t child;
} tok_trie_edge;

typedef struct {
    tok_trie_node *nodes;
    tok_trie_edge *edges;
    uint32_t n_nodes, n_edges;
    uint8_t first[32]; /* bitmap of bytes that start some token */
} tok_trie;

/* ---- normalizer steps ---- */
typedef enum {
    TOK_NORM_NFC, TOK_NORM_NFD, TOK_NORM_NFKC, TOK_NORM_NFKD,
    TOK_NORM_LOWERCASE, TOK_NORM_REPLACE, TOK_NORM_PREPEND, TOK_NORM_STRIP,
} tok_norm_type;

typedef struct {
    tok_norm_type type;
    OnigRegex re;        /* REPLACE with a Regex pattern */
    char *pat, *content; /* REPLACE literal pattern / replacement; PREPEND text */
    size_t pat_len, content_len;
    bool left, right; /* STRIP */
} tok_norm;

/* ---- pre-tokenizer steps ---- */
typedef enum {
    TOK_PRE_SPLIT,      /* regex or literal, with behaviour and invert */
    TOK_PRE_BYTELEVEL,  /* optional prefix space, optional GPT-2 regex, byte mapping */
    TOK_PRE_DIGITS,     /* numeric characters isolated or contiguous */
    TOK_PRE_WSPLIT,     /* WhitespaceSplit: drop Unicode whitespace */
} tok_pre_type;

typedef enum {
    TOK_SPLIT_REMOVED, TOK_SPLIT_ISOLATED, TOK_SPLIT_MERGED_PREV,
    TOK_SPLIT_MERGED_NEXT, TOK_SPLIT_CONTIGUOUS,
} tok_split_behavior;

/* Patterns with a hand-written matcher (tokenizer_fastre.c). */
typedef enum {
    TOK_FAST_NONE, TOK_FAST_DIGITS3, TOK_FAST_CJK, TOK_FAST_DEEPSEEK, TOK_FAST_LLAMA3, TOK_FAST_QWEN3,
} tok_fast_kind;

typedef struct {
    tok_pre_type type;
    tok_fast_kind fast; /* SPLIT: matcher used instead of `re` (same results) */
    OnigRegex re;    /* SPLIT regex (or the GPT-2 regex for BYTELEVEL use_regex) */
    char *re_src;    /* its pattern text, NUL-terminated (for error messages) */
    char *lit;       /* SPLIT literal string pattern */
    size_t lit_len;
    tok_split_behavior behavior;
    bool invert;
    bool add_prefix_space, use_regex; /* BYTELEVEL */
    bool individual_digits;           /* DIGITS */
} tok_pre;

/* ---- the tokenizer ---- */
struct tide_tokenizer {
    uint32_t n_ids;
    uint8_t *flags;           /* [n_ids] TOK_F_* */
    uint32_t *str_off;        /* [n_ids] spelling in arena (NUL-terminated): */
    uint32_t *str_len;        /*   added-token content, else the vocab key */
    uint32_t *voc_off;        /* [n_ids] BPE vocab key in arena (len 0: none) */
    uint32_t *voc_len;
    uint32_t *bytes_off;      /* [n_ids] raw bytes in `bytes` */
    uint32_t *bytes_len;
    char *arena;
    size_t arena_len;
    uint8_t *bytes;
    size_t bytes_total;

    tok_strmap vocab;         /* BPE vocab spelling -> id */
    tok_strmap all;           /* every spelling (added content wins) -> id */

    /* merges: open addressing on key (left << 32 | right) */
    uint64_t *merge_key;
    uint32_t *merge_rank;
    int32_t *merge_new;
    uint32_t merge_mask;
    size_t n_merges;
    uint32_t merge_rank_end;  /* 1 + the largest rank (ranks are merges[] indices) */

    /* BPE model options */
    bool byte_fallback, ignore_merges, fuse_unk;
    int32_t unk_id;           /* -1 when none */
    char *cont_prefix, *eow_suffix; /* NULL when absent or empty */
    int32_t byte_ids[256];    /* byte_fallback "<0xXX>" ids, -1 when missing */
    int32_t small_char_id[0x800]; /* single-character vocab entries by code point */

    tok_added *added;
    size_t n_added;
    size_t max_added_len;     /* longest added-token content, in bytes */
    tok_trie trie_raw;        /* added tokens with normalized = false */
    tok_trie trie_norm;       /* normalized = true, matched on normalized text */
    tok_trie trie_all;        /* every added token by its content (for detok hold-back) */

    uint8_t *fast_cls;        /* [0x10000] Oniguruma's classes per BMP code point, or NULL */
    OnigCtype fast_ctypes[5]; /* L, M, N, P, S: for code points above the BMP */

    tok_norm *norm;
    size_t n_norm;
    tok_pre *pre;
    size_t n_pre;
};

/* ---- functions shared across files ---- */

/* tokenizer_maps.c */
int tok_strmap_build(tok_strmap *m, const tide_tokenizer *tok, const uint32_t *off, const uint32_t *len,
                     const int32_t *ids, size_t n, bool later_wins, tide_status *st);
int32_t tok_strmap_get(const tok_strmap *m, const tide_tokenizer *tok, const char *s, size_t n);
void tok_strmap_free(tok_strmap *m);
int tok_merges_init(tide_tokenizer *tok, size_t n, tide_status *st);
/* Returns 1 if inserted, 0 if the pair was already present (then, as in HF,
 * the later rank replaces it). */
int tok_merges_put(tide_tokenizer *tok, int32_t a, int32_t b, uint32_t rank, int32_t merged);
bool tok_merges_get(const tide_tokenizer *tok, int32_t a, int32_t b, uint32_t *rank, int32_t *merged);

/* tokenizer_bytelevel.c */
extern const uint16_t tok_byte_to_cp[256];
int tok_cp_to_byte(uint32_t cp); /* -1 when cp is not in the byte alphabet */
int tok_build_bytes_table(tide_tokenizer *tok, bool byte_level, tide_status *st);
int tok_bytelevel_map(const char *s, size_t n, tok_buf *out, tide_status *st);

/* tokenizer_utf8.c */
/* Decodes one code point at s[0..n); returns its length (1..4) or 0 if the
 * bytes there are not valid UTF-8. */
int tok_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp);
int tok_utf8_encode(uint32_t cp, char *out);
/* Length of a trailing sequence that is a valid beginning of a character
 * but not a whole one (more bytes could complete it), else 0. */
size_t tok_utf8_incomplete_tail(const uint8_t *s, size_t n);
bool tok_is_whitespace(uint32_t cp); /* Unicode White_Space (Rust char::is_whitespace) */
bool tok_is_numeric(uint32_t cp);    /* general category N* (Rust char::is_numeric) */
bool tok_is_word(uint32_t cp);       /* letters, marks, digits, connector punctuation */

/* tokenizer_added.c */
int tok_trie_build(tok_trie *t, const tide_tokenizer *tok, bool want_normalized, bool all,
                   tide_status *st);
void tok_trie_free(tok_trie *t);
/* Longest added token starting at s[0..n): returns its index in tok->added
 * and sets *mlen, or -1. */
int32_t tok_trie_longest(const tok_trie *t, const tide_tokenizer *tok, const char *s, size_t n,
                         size_t *mlen);
/* Whether s[0..n) is a proper prefix of some token in the trie. */
bool tok_trie_is_prefix(const tok_trie *t, const char *s, size_t n);
/* Splits text into segments: plain text (added = -1) and added tokens, with
 * HF's lstrip/rstrip/single_word rules. Appends to segs/seg_added. */
typedef struct {
    tok_spans spans;
    int32_t *added; /* parallel to spans.v: index into tok->added or -1 */
    size_t cap;
} tok_segments;
int tok_split_added(const tide_tokenizer *tok, const tok_trie *t, const char *text, size_t len,
                    unsigned flags, tok_segments *out, tide_status *st);
void tok_segments_free(tok_segments *s);

/* tokenizer_normalize.c */
/* The normalized text of an n-byte piece may be at most TOK_NORM_GROWTH * n
 * + TOK_NORM_SLACK bytes (NFKD grows text at most 11 times; Replace has no
 * bound of its own); past that, encoding fails with a message. */
#define TOK_NORM_GROWTH 64u
#define TOK_NORM_SLACK 65536u
int tok_normalize(const tide_tokenizer *tok, const char *s, size_t n, tok_buf *out,
                  tide_status *st);

/* tokenizer_pretok.c: scratch owned by the encode call */
typedef struct {
    tok_buf text[2];
    tok_spans spans[2];
    tok_spans work;    /* (range, is_match) candidates for one piece */
    tok_buf prefixed;  /* ByteLevel: " " + piece */
    tok_spans sub;     /* ByteLevel: the piece's regex split */
    uint8_t *is_match; size_t is_match_cap;
    OnigRegion *region;
    OnigMatchParam *match_param;
    bool no_fast;      /* tests: always use Oniguruma */
    /* For error messages: where the text given to tok_pretokenize starts in
     * the caller's input, and whether it is normalized (offsets then count
     * in the normalized text of the segment starting there). */
    size_t err_off;
    bool err_normalized;
    size_t err_piece; /* ByteLevel: where its current piece is in the step's text */
} tok_pretok_scratch;
/* Pre-tokenizes s[0..n): on success *buf and *spans name the resulting pieces. */
int tok_pretokenize(const tide_tokenizer *tok, tok_pretok_scratch *sc, const char *s, size_t n,
                    const tok_buf **buf, const tok_spans **spans, tide_status *st);
void tok_pretok_scratch_free(tok_pretok_scratch *sc);

/* tokenizer_fastre.c */
tok_fast_kind tok_fast_lookup(const char *pat, size_t len);
int tok_fast_init(tide_tokenizer *tok, tide_status *st);
/* Leftmost match at or after `from` in s[0..n), as onig_search would find it. */
bool tok_fast_search(const tide_tokenizer *tok, tok_fast_kind kind, const char *s, size_t n, size_t from,
                     size_t *ms, size_t *me);

/* tokenizer_bpe.c */
typedef struct {
    int32_t id;
    uint32_t len;  /* bytes of the piece this symbol covers; 0 once merged away */
    int32_t prev, next;
} tok_sym;
/* One pending merge of the long-word loop: the pair starting at symbol `pos`
 * was expected to give `merged`; `next` links the entries of one rank. */
typedef struct {
    int32_t pos, merged, next;
} tok_bq_node;
typedef struct {
    tok_sym *syms; size_t syms_cap;
    /* The long-word loop's queue (tokenizer_bpe.c): a list of entries per
     * merge rank, and a min-heap of the ranks whose list is not empty.
     * Between words every list is empty (head -1). */
    int32_t *bq_head, *bq_tail; /* [bq_ranks] */
    uint8_t *bq_state;          /* [bq_ranks] its list is out of order / the rank is in the heap */
    size_t bq_ranks;
    tok_bq_node *bq_node; size_t bq_node_cap;
    uint32_t *bq_heap; size_t bq_heap_cap;
    tok_bq_node *bq_tmp; int32_t *bq_idx; size_t bq_tmp_cap; /* sorting one list */
    bool force_heap; /* tests: use the long-word loop for every word */
} tok_bpe_scratch;
int tok_bpe_word(const tide_tokenizer *tok, tok_bpe_scratch *sc, tide_tok_cache *cache,
                 const char *w, size_t n, tide_tok_ids *out, tide_status *st);
void tok_bpe_scratch_free(tok_bpe_scratch *sc);

/* tokenizer_encode.c: every buffer one encode call needs, kept in the
 * caller's tide_tok_cache between calls so steady-state encoding does not
 * allocate. */
typedef struct {
    tok_segments raw, norm;
    tok_buf normbuf;
    tok_pretok_scratch pre;
    tok_bpe_scratch bpe;
} tok_encode_scratch;
void tok_encode_scratch_free(tok_encode_scratch *sc);
int tok_encode_debug(const tide_tokenizer *tok, const char *text, size_t len, bool force_heap, bool no_fast,
                     tide_tok_ids *out, tide_status *st);

/* tokenizer_bpe.c: the per-word cache (see there) plus the scratch above.
 * One 32-byte slot per word holds key and ids, so a lookup touches one
 * cache line (two slots per line). */
#define TOK_CACHE_KEY 16
#define TOK_CACHE_IDS 3
typedef struct {
    uint16_t tag; /* high hash bits; 0 = empty slot */
    uint8_t key_len, n_ids;
    char key[TOK_CACHE_KEY]; /* zero-padded */
    int32_t ids[TOK_CACHE_IDS];
} tok_cache_slot;

struct tide_tok_cache {
    tok_cache_slot *slot;
    uint32_t n;
    tok_encode_scratch scratch;
};

/* tokenizer_normalize.c, tokenizer_pretok.c: parsing */
int tok_parse_normalizer(tide_tokenizer *tok, json_t *j, tide_status *st);
void tok_free_normalizer(tide_tokenizer *tok);
int tok_parse_pretokenizer(tide_tokenizer *tok, json_t *j, tide_status *st);
void tok_free_pretokenizer(tide_tokenizer *tok);
int tok_compile_regex(const char *pat, size_t len, OnigRegex *out, tide_status *st);
/* onig_search over s[from..n) with its work bounded by the length searched
 * (Oniguruma's retry limit per search, set through mp), so a regex with
 * catastrophic backtracking fails instead of hanging. Returns onig_search's
 * result. */
int tok_regex_search(OnigRegex re, const char *s, size_t n, size_t from, OnigRegion *region, OnigMatchParam *mp);
/* Fails with Oniguruma's message for error r of a search from `where` byte `at`. */
int tok_regex_fail(tide_status *st, int r, const char *where, size_t at);

#endif
