/* Byte-level BPE tokenizer driven by a Hugging Face tokenizer.json, as
 * DeepSeek, Qwen3 and Llama-3 ship it.
 *
 *     tide_tokenizer *tok;
 *     if (tide_tokenizer_load("tokenizer.json", &tok, &st) != 0) ...
 *     tide_tok_ids ids = {0};
 *     tide_tokenizer_encode(tok, text, strlen(text), 0, cache, &ids, &st);
 *
 * Encoding follows the Rust `tokenizers` crate step by step: added tokens are
 * cut out of the raw text, the rest is normalized, pre-tokenized (Split regexes
 * with Oniguruma, then ByteLevel) and each pre-token is merged by BPE rank.
 * Nothing is added around the text (no BOS/EOS): this equals HF's
 * encode(text, add_special_tokens=False). See docs/tokenizer.md.
 *
 * A loaded tokenizer is read-only: any number of threads may encode and decode
 * with it at once. The optional tide_tok_cache (per-word BPE results) is
 * mutable and belongs to one thread at a time. */
#ifndef TIDE_TEXT_TOKENIZER_H
#define TIDE_TEXT_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

typedef struct tide_tokenizer tide_tokenizer;
typedef struct tide_tok_cache tide_tok_cache;

/* A growable array of token ids; encode appends to it. Free with
 * tide_tok_ids_free (zero-initialise before first use). */
typedef struct tide_tok_ids {
    int32_t *ids;
    size_t n, cap;
} tide_tok_ids;

void tide_tok_ids_free(tide_tok_ids *v);
int tide_tok_ids_push(tide_tok_ids *v, int32_t id, tide_status *st);

/* Loading. `name` (may be NULL) only labels error messages. */
int tide_tokenizer_load(const char *path, tide_tokenizer **out, tide_status *st);
int tide_tokenizer_load_json(const char *json, size_t len, const char *name, tide_tokenizer **out,
                             tide_status *st);
void tide_tokenizer_free(tide_tokenizer *tok);

/* Number of ids: the largest id in the vocabulary or the added tokens, plus
 * one. Ids below it that nothing defines are "holes": they encode to nothing
 * and decode to no bytes. */
uint32_t tide_tokenizer_n_ids(const tide_tokenizer *tok);

/* The id whose tokenizer.json spelling is exactly s (added-token content, or
 * the model-vocabulary key, byte-level encoded), or -1. Use it to look up
 * special tokens by name: tide_tokenizer_token_id(tok, "<think>", 7). */
int32_t tide_tokenizer_token_id(const tide_tokenizer *tok, const char *s, size_t len);
/* The tokenizer.json spelling of id (NUL-terminated), or NULL for a hole or
 * an id out of range. */
const char *tide_tokenizer_token_str(const tide_tokenizer *tok, int32_t id);
/* The raw bytes that id contributes to decoded text (for a byte-level token,
 * its bytes after undoing the GPT-2 byte-to-unicode mapping; for an added
 * token, its content). Not NUL-terminated; may be a partial UTF-8 sequence.
 * Returns false (and *len = 0) for holes and ids out of range. Grammar masks
 * and the engram token map are built from this table. */
bool tide_tokenizer_token_bytes(const tide_tokenizer *tok, int32_t id, const uint8_t **bytes,
                                size_t *len);
/* Whether id is an added token, and whether it is flagged special (special
 * tokens are dropped by TIDE_DECODE_SKIP_SPECIAL). */
bool tide_tokenizer_is_added(const tide_tokenizer *tok, int32_t id);
bool tide_tokenizer_is_special(const tide_tokenizer *tok, int32_t id);

/* Encoding flags. */
enum {
    /* Treat special added tokens as plain text, as HF's split_special_tokens
     * does: "<｜User｜>" typed by a user is not the control token. Non-special
     * added tokens are still matched. */
    TIDE_ENCODE_SPLIT_SPECIAL = 1u << 0,
    /* Treat every added token as plain text, special or not: the client's
     * text in a rendered prompt (text/prompt_tok.h), where a user who types
     * "<｜User｜>" (a non-special added token in V4.1) must not forge a turn. */
    TIDE_ENCODE_PLAIN = 1u << 1,
};

/* Appends the ids of text[0..len) to out. The text must be valid UTF-8
 * (TIDE_ERR_INVALID with the byte offset otherwise). cache may be NULL. */
int tide_tokenizer_encode(const tide_tokenizer *tok, const char *text, size_t len, unsigned flags,
                          tide_tok_cache *cache, tide_tok_ids *out, tide_status *st);

/* Per-word BPE cache (a bounded map from pre-token to ids, about 4 MB) plus
 * the scratch buffers of encoding. Reusing one across the calls of one thread
 * makes English text several times faster. NULL on out-of-memory. */
tide_tok_cache *tide_tok_cache_new(void);
void tide_tok_cache_free(tide_tok_cache *cache);

/* Decoding flags. */
enum {
    TIDE_DECODE_SKIP_SPECIAL = 1u << 0, /* drop tokens flagged special */
};

/* Decodes ids into *out (malloc'd, NUL-terminated, *out_len bytes without the
 * NUL). The bytes are the exact concatenation of the tokens' raw bytes, so
 * they may end in (or, for odd id sequences, contain) incomplete UTF-8; see
 * tide_utf8_lossy. Ids out of range are an error. */
int tide_tokenizer_decode(const tide_tokenizer *tok, const int32_t *ids, size_t n, unsigned flags,
                          char **out, size_t *out_len, tide_status *st);

/* ---- streaming detokenizer ----
 * Turns tokens into text one at a time for streaming output. It holds back
 * bytes that end in the middle of a UTF-8 character until the character is
 * complete, and, with TIDE_DETOK_HOLD_ADDED, text that could still grow into
 * an added token's content (a lone "<" might become "<think>" once the next
 * token arrives), so output parsers never see a marker cut in two. What it
 * releases over a whole stream equals tide_tokenizer_decode followed by
 * tide_utf8_lossy. */
typedef struct tide_detok tide_detok;

enum {
    /* TIDE_DECODE_SKIP_SPECIAL (1) is accepted here too. */
    TIDE_DETOK_HOLD_ADDED = 1u << 1,
};

int tide_detok_new(const tide_tokenizer *tok, unsigned flags, tide_detok **out, tide_status *st);
void tide_detok_free(tide_detok *d);
/* Forgets pending bytes (a new sequence starts). */
void tide_detok_reset(tide_detok *d);
/* Feeds one id; *text / *len is the text releasable now (valid UTF-8, maybe
 * empty), valid until the next call on d. */
int tide_detok_push(tide_detok *d, int32_t id, const char **text, size_t *len, tide_status *st);
/* End of the stream: releases everything held (an unfinished character
 * becomes U+FFFD) and resets d. */
int tide_detok_finish(tide_detok *d, const char **text, size_t *len, tide_status *st);
/* Convenience (tests, CLI): streams ids through a detokenizer and returns the
 * concatenated output in *out (malloc'd, NUL-terminated). */
int tide_detok_decode_all(const tide_tokenizer *tok, unsigned flags, const int32_t *ids, size_t n, char **out,
                          size_t *out_len, tide_status *st);

/* Copies src into *out replacing each maximal invalid UTF-8 subpart by U+FFFD
 * (the WHATWG / Rust from_utf8_lossy rule). *out is malloc'd, NUL-terminated. */
int tide_utf8_lossy(const char *src, size_t len, char **out, size_t *out_len, tide_status *st);
/* Length of the longest prefix of s that is valid UTF-8. */
size_t tide_utf8_valid_prefix(const char *s, size_t len);

#endif
