/* Fuzz target: encoding arbitrary text with two small fixed tokenizers that
 * use DeepSeek's and Llama-3's pre-tokenizer regexes. Checks, on every input:
 *   - invalid UTF-8 is refused, valid text encodes;
 *   - the hand-written regex matchers give the same ids as Oniguruma, and the
 *     heap merge loop the same as the short-word loop;
 *   - decode(encode(x)) == x, and the streaming detokenizer agrees.
 * The two tokenizers are built once per process (a fuzz harness may keep
 * state; the library itself keeps none). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"
#include "text/tokenizer_internal.h"

static const char deepseek_pre[] =
    "{\"type\":\"Sequence\",\"pretokenizers\":["
    "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\p{N}{1,3}\"},\"behavior\":\"Isolated\",\"invert\":false},"
    "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"[\\u4e00-\\u9fa5\\u3040-\\u309f\\u30a0-\\u30ff]+\"},\"behavior\":\"Isolated\",\"invert\":false},"
    "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"[!\\\"#$%&'()*+,\\\\-./:;<=>?@\\\\[\\\\\\\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\\\p{L}\\\\p{P}\\\\p{S}]?[\\\\p{L}\\\\p{M}]+| ?[\\\\p{P}\\\\p{S}]+[\\r\\n]*|\\\\s*[\\r\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},\"behavior\":\"Isolated\",\"invert\":false},"
    "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":false}]}";

static const char llama_pre[] =
    "{\"type\":\"Sequence\",\"pretokenizers\":["
    "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},\"behavior\":\"Isolated\",\"invert\":false},"
    "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":false}]}";

/* Byte alphabet (ids 0..255) + a few merges + two added tokens. */
static tide_tokenizer *build(const char *pre) {
    size_t cap = 1 << 16, n = 0;
    char *j = malloc(cap);
    if (!j) abort();
    n += (size_t)snprintf(j + n, cap - n, "{\"model\":{\"type\":\"BPE\",\"vocab\":{");
    for (int b = 0; b < 256; b++) {
        char s[4];
        int l = tok_utf8_encode(tok_byte_to_cp[b], s);
        const char *esc = (s[0] == '"' || s[0] == '\\') ? "\\" : "";
        n += (size_t)snprintf(j + n, cap - n, "\"%s%.*s\":%d,", esc, l, s, b);
    }
    n += (size_t)snprintf(j + n, cap - n,
                          "\"he\":256,\"ll\":257,\"hell\":258,\"hello\":259,\"\xc4\xa0t\":260,\"\xc4\xa0th\":261,\"\xc4\xa0the\":262},"
                          "\"merges\":[\"h e\",\"l l\",\"he ll\",\"hell o\",[\"\xc4\xa0\",\"t\"],\"\xc4\xa0t h\",\"\xc4\xa0th e\"]},"
                          "\"added_tokens\":[{\"id\":263,\"content\":\"<think>\",\"special\":false,\"normalized\":true},"
                          "{\"id\":264,\"content\":\"<|s|>\",\"special\":true,\"normalized\":false}],"
                          "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[]},\"pre_tokenizer\":%s,"
                          "\"decoder\":{\"type\":\"ByteLevel\"}}",
                          pre);
    tide_status st = {0};
    tide_tokenizer *tok = NULL;
    if (tide_tokenizer_load_json(j, n, "fuzz_encode", &tok, &st) != 0) {
        fprintf(stderr, "%s\n", st.msg);
        abort();
    }
    free(j);
    return tok;
}

static void same(const tide_tok_ids *a, const tide_tok_ids *b) {
    if (a->n != b->n || (a->n && memcmp(a->ids, b->ids, a->n * sizeof *a->ids) != 0)) abort();
}

static void check(const tide_tokenizer *tok, const char *text, size_t len) {
    tide_status st = {0};
    tide_tok_ids a = {0}, b = {0}, c = {0};
    bool valid = tide_utf8_valid_prefix(text, len) == len;
    int rc = tide_tokenizer_encode(tok, text, len, 0, NULL, &a, &st);
    if ((rc == 0) != valid) abort();
    if (rc == 0) {
        if (tok_encode_debug(tok, text, len, false, true, &b, &st) != 0) abort();
        if (tok_encode_debug(tok, text, len, true, false, &c, &st) != 0) abort();
        same(&a, &b);
        same(&a, &c);
        char *dec, *streamed;
        size_t dl, sl;
        if (tide_tokenizer_decode(tok, a.ids, a.n, 0, &dec, &dl, &st) != 0) abort();
        if (dl != len || memcmp(dec, text, len) != 0) abort();
        if (tide_detok_decode_all(tok, TIDE_DETOK_HOLD_ADDED, a.ids, a.n, &streamed, &sl, &st) != 0) abort();
        if (sl != len || memcmp(streamed, text, len) != 0) abort();
        free(dec);
        free(streamed);
    }
    tide_tok_ids_free(&a);
    tide_tok_ids_free(&b);
    tide_tok_ids_free(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static tide_tokenizer *deepseek, *llama;
    if (!deepseek) {
        deepseek = build(deepseek_pre);
        llama = build(llama_pre);
    }
    if (size > 4096) return 0;
    check(deepseek, (const char *)data, size);
    check(llama, (const char *)data, size);
    return 0;
}
