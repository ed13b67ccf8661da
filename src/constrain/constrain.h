/* Output constraints: regex, JSON Schema, GBNF grammar -> a token mask
 * for every position (docs/structured.md).
 *
 *   tide_cons_vocab    the tokenizer's token -> bytes table as a trie
 *                      (immutable, shared by every request of an engine)
 *   tide_cons_grammar  a compiled constraint (immutable, reference counted,
 *                      shareable between requests and threads)
 *   tide_cons          one request's position in it: gives the allowed-token
 *                      mask for the next position, advances on an accepted
 *                      token, rolls back n tokens (speculative decoding)
 *
 * A tide_cons is used by one thread at a time. Masks are cached per parser
 * state, so the common case is a lookup; the first visit of a state walks
 * the token trie from it, pruning every subtree whose prefix is dead. */
#ifndef TIDE_CONSTRAIN_CONSTRAIN_H
#define TIDE_CONSTRAIN_CONSTRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

typedef enum tide_cons_kind {
    TIDE_CONS_REGEX,       /* text: an ECMAScript regex, matched in full */
    TIDE_CONS_JSON_SCHEMA, /* text: a JSON Schema */
    TIDE_CONS_JSON_OBJECT, /* any JSON object (text ignored) */
    TIDE_CONS_GBNF,        /* text: a grammar in llama.cpp's GBNF, start rule "root" */
    TIDE_CONS_TOOLS,       /* text: {"tools": [{"name", "parameters", "strict"}...], "parallel": bool,
                            * "auto": bool}: a DSML block of calls to those tools, arguments per
                            * their schemas; with auto, text without "<｜" then maybe the block,
                            * and only strict tools' arguments follow their schemas */
    TIDE_CONS_LARK,        /* text: a Lark-style EBNF grammar, start rule "start" */
} tide_cons_kind;

/* A grammar given without its syntax (vLLM's guided_grammar): GBNF when it
 * has a "::=" definition, else Lark. */
tide_cons_kind tide_cons_grammar_kind(const char *text, size_t len);

#define TIDE_CONS_MAX_TEXT (1u << 20) /* constraint text bytes */

typedef struct tide_cons_vocab tide_cons_vocab;
typedef struct tide_cons_grammar tide_cons_grammar;
typedef struct tide_cons tide_cons;

/* A vocabulary of n tokens: token i is bytes[i][0..lens[i]). Tokens with
 * skip[i] set (added / special tokens) or no bytes are never allowed by a
 * constraint (stop tokens are given to tide_cons_mask separately). */
int tide_cons_vocab_new(const uint8_t *const *bytes, const uint32_t *lens, const uint8_t *skip, int32_t n,
                        tide_cons_vocab **out, tide_status *st);
struct tide_tokenizer;
/* From a tokenizer: every id below n_vocab (ids the tokenizer lacks and
 * added tokens are skipped). */
int tide_cons_vocab_from_tokenizer(const struct tide_tokenizer *tok, int32_t n_vocab, tide_cons_vocab **out,
                                   tide_status *st);
void tide_cons_vocab_free(tide_cons_vocab *v);
int32_t tide_cons_vocab_size(const tide_cons_vocab *v);

/* Compiles a constraint. Errors name what is wrong and where (a schema
 * keyword and its JSON pointer, a regex offset, a grammar line); code
 * TIDE_ERR_UNSUPPORTED for valid input tide does not enforce. */
int tide_cons_compile(tide_cons_kind kind, const char *text, size_t len, tide_cons_grammar **out, tide_status *st);
tide_cons_grammar *tide_cons_grammar_ref(tide_cons_grammar *g);
void tide_cons_grammar_unref(tide_cons_grammar *g);

/* A compile cache keyed by (kind, text): owned by a long-lived object (the
 * generation engine), safe to use from several threads. */
typedef struct tide_cons_cache tide_cons_cache;
tide_cons_cache *tide_cons_cache_new(int capacity);
void tide_cons_cache_free(tide_cons_cache *c);
/* As tide_cons_compile, through the cache (a new reference in *out). */
int tide_cons_cache_get(tide_cons_cache *c, tide_cons_kind kind, const char *text, size_t len,
                        tide_cons_grammar **out, tide_status *st);

/* A request's cursor at the start of the constraint. */
int tide_cons_new(tide_cons_grammar *g, const tide_cons_vocab *v, tide_cons **out, tide_status *st);
void tide_cons_free(tide_cons *c);
/* Free until `token` is accepted (e.g. the end of the thinking block): until
 * then every token is allowed and nothing is checked. */
void tide_cons_set_gate(tide_cons *c, int32_t token);

/* The mask for the next token: bit (t & 31) of allow[t >> 5] set = token t
 * allowed; allow has (n_vocab + 31) / 32 words (the vocabulary's size). The
 * end tokens are allowed exactly when the text so far is complete. While
 * the gate is closed (the thinking block), every token but the end tokens.
 * Returns 0; -1 (st) on a matcher limit, or when nothing at all is allowed. */
int tide_cons_mask(tide_cons *c, uint32_t *allow, const int32_t *end, int n_end, tide_status *st);
/* Advances past token t (an end token: only where the text is complete;
 * the cursor is then finished). Fails when t is not allowed. */
int tide_cons_accept(tide_cons *c, int32_t t, const int32_t *end, int n_end, tide_status *st);
/* Undoes the last n accepted tokens (n <= tokens accepted). */
int tide_cons_rollback(tide_cons *c, int n, tide_status *st);
/* Whether the text so far is a complete match; whether nothing but an end
 * can follow (the generation must stop). */
int tide_cons_complete(const tide_cons *c);
int tide_cons_done(const tide_cons *c);
/* Tokens accepted so far. */
int64_t tide_cons_n_accepted(const tide_cons *c);
/* The size of the vocabulary the cursor masks. */
int32_t tide_cons_vocab_size_of(const tide_cons *c);

/* Slices on (the default) or off, process-wide: the same masks either way,
 * off walks every live trie node (the tests compare the two). */
void tide_cons_set_slices(int on);

/* Byte-level checks (tests, tools): whether text is a complete match. */
int tide_cons_grammar_matches(tide_cons_grammar *g, const char *text, size_t len, tide_status *st);

#endif
