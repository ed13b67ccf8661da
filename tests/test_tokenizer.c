/* Tokenizer unit tests on small synthetic tokenizer.json files built here:
 * the byte alphabet, merges in both formats, HF's split behaviours, added
 * token flags, normalizers, byte fallback / unk, ignore_merges, decode and
 * the streaming detokenizer, and the error messages of bad files. The
 * comparison with Hugging Face on real vocabularies is in
 * test_tokenizer_real.c and sh_tokenizer_oracle.sh. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "text/tokenizer.h"
#include "text/tokenizer_internal.h"

/* ---- building small tokenizers ---- */

/* The 256 byte-alphabet characters get ids 0..255 (id = byte value); extra
 * merges are "a b" strings; their results get ids 256.. in order. */
static json_t *base_json(const char *const *merges, size_t n_merges, bool array_merges) {
    json_t *vocab = json_object(), *jm = json_array();
    for (int b = 0; b < 256; b++) {
        char s[4];
        int l = tok_utf8_encode(tok_byte_to_cp[b], s);
        json_object_setn_new(vocab, s, (size_t)l, json_integer(b));
    }
    int next = 256;
    for (size_t i = 0; i < n_merges; i++) {
        const char *sp = strchr(merges[i], ' ');
        char merged[64];
        snprintf(merged, sizeof merged, "%.*s%s", (int)(sp - merges[i]), merges[i], sp + 1);
        if (!json_object_get(vocab, merged)) json_object_set_new(vocab, merged, json_integer(next++));
        if (array_merges) {
            json_t *pair = json_array();
            json_array_append_new(pair, json_stringn(merges[i], (size_t)(sp - merges[i])));
            json_array_append_new(pair, json_string(sp + 1));
            json_array_append_new(jm, pair);
        } else {
            json_array_append_new(jm, json_string(merges[i]));
        }
    }
    json_t *model = json_pack("{s:s, s:o, s:o}", "type", "BPE", "vocab", vocab, "merges", jm);
    return json_pack("{s:o, s:[], s:n, s:{s:s, s:b, s:b}, s:{s:s}}", "model", model, "added_tokens", "normalizer",
                     "pre_tokenizer", "type", "ByteLevel", "add_prefix_space", 0, "use_regex", 1, "decoder", "type",
                     "ByteLevel");
}

static tide_tokenizer *load_json(json_t *j) {
    char *s = json_dumps(j, 0);
    json_decref(j);
    tide_status st = {0};
    tide_tokenizer *tok = NULL;
    int rc = tide_tokenizer_load_json(s, strlen(s), "test", &tok, &st);
    free(s);
    if (rc != 0) fprintf(stderr, "load failed: %s\n", st.msg);
    assert_int_equal(rc, 0);
    return tok;
}

static void load_fails(json_t *j, const char *needle) {
    char *s = json_dumps(j, 0);
    json_decref(j);
    tide_status st = {0};
    tide_tokenizer *tok = NULL;
    assert_int_equal(tide_tokenizer_load_json(s, strlen(s), "bad.json", &tok, &st), -1);
    assert_null(tok);
    free(s);
    if (!strstr(st.msg, needle)) fprintf(stderr, "message '%s' lacks '%s'\n", st.msg, needle);
    assert_non_null(strstr(st.msg, needle));
    assert_non_null(strstr(st.msg, "bad.json"));
}

/* Encodes text and compares with the expected ids (terminated by -1). */
static void expect_ids(const tide_tokenizer *tok, const char *text, unsigned flags, const int32_t *want) {
    tide_tok_ids ids = {0};
    tide_status st = {0};
    assert_int_equal(tide_tokenizer_encode(tok, text, strlen(text), flags, NULL, &ids, &st), 0);
    size_t n = 0;
    while (want[n] >= 0) n++;
    if (ids.n != n || (n && memcmp(ids.ids, want, n * sizeof *want) != 0)) {
        fprintf(stderr, "encode(\"%s\"): got", text);
        for (size_t i = 0; i < ids.n; i++) fprintf(stderr, " %d", ids.ids[i]);
        fprintf(stderr, ", want");
        for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", want[i]);
        fprintf(stderr, "\n");
        fail();
    }
    /* And it decodes back (none of these tests normalize). */
    char *dec;
    size_t dl;
    assert_int_equal(tide_tokenizer_decode(tok, ids.ids, ids.n, 0, &dec, &dl, &st), 0);
    assert_int_equal(dl, strlen(text));
    assert_memory_equal(dec, text, dl);
    free(dec);
    tide_tok_ids_free(&ids);
}

#define IDS(...) ((const int32_t[]){__VA_ARGS__, -1})
#define NO_IDS ((const int32_t[]){-1})

/* ---- tests ---- */

static void test_byte_alphabet(void **state) {
    (void)state;
    bool seen[0x200] = {0};
    for (int b = 0; b < 256; b++) {
        uint32_t cp = tok_byte_to_cp[b];
        assert_true(cp < 0x200);
        assert_false(seen[cp]);
        seen[cp] = true;
        assert_int_equal(tok_cp_to_byte(cp), b);
        bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        assert_int_equal(cp == (uint32_t)b, printable);
    }
    assert_int_equal(tok_byte_to_cp[' '], 0x120);
    assert_int_equal(tok_byte_to_cp['\n'], 0x10A);
    assert_int_equal(tok_byte_to_cp[0xAD], 0x143);
    assert_int_equal(tok_cp_to_byte(0x144), -1);
    assert_int_equal(tok_cp_to_byte('A'), 'A');
}

static const char *const hello_merges[] = {"h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "Ġwor l", "Ġworl d"};

static void test_merges_both_formats(void **state) {
    (void)state;
    for (int fmt = 0; fmt < 2; fmt++) {
        tide_tokenizer *tok = load_json(base_json(hello_merges, 9, fmt == 1));
        /* hello = 259, Ġworld = 264 (he 256, ll 257, hell 258, hello 259, Ġw 260, or 261, Ġwor 262, Ġworl 263) */
        expect_ids(tok, "hello world", 0, IDS(259, 264));
        expect_ids(tok, "hell", 0, IDS(258));
        expect_ids(tok, "ll", 0, IDS(257));
        expect_ids(tok, "olleh", 0, IDS('o', 257, 'e', 'h'));
        expect_ids(tok, "", 0, NO_IDS);
        expect_ids(tok, "\xc3\xa9!", 0, IDS(0xC3, 0xA9, '!'));
        assert_int_equal(tide_tokenizer_token_id(tok, "hello", 5), 259);
        assert_int_equal(tide_tokenizer_token_id(tok, "\xc4\xa0world", 7), 264);
        assert_string_equal(tide_tokenizer_token_str(tok, 264), "\xc4\xa0world");
        const uint8_t *b;
        size_t bl;
        assert_true(tide_tokenizer_token_bytes(tok, 264, &b, &bl));
        assert_int_equal(bl, 6);
        assert_memory_equal(b, " world", 6);
        assert_false(tide_tokenizer_token_bytes(tok, 100000, &b, &bl));
        assert_int_equal(tide_tokenizer_n_ids(tok), 265);
        tide_tokenizer_free(tok);
    }
}

/* Merge order is by rank, not by position: with "b c" ranked before "a b",
 * "abc" becomes a + bc. Long words go through the heap loop: same answer. */
static void test_merge_rank_order(void **state) {
    (void)state;
    static const char *const m[] = {"b c", "a b", "a bc"};
    tide_tokenizer *tok = load_json(base_json(m, 3, false));
    /* bc 256, ab 257, abc 258 */
    expect_ids(tok, "abc", 0, IDS(258));
    expect_ids(tok, "abab", 0, IDS(257, 257));
    expect_ids(tok, "abcbc", 0, IDS(258, 256));
    /* 100 x "abc": one long word, heap path. */
    char text[301];
    int32_t want[101];
    for (int i = 0; i < 100; i++) { memcpy(text + 3 * i, "abc", 3); want[i] = 258; }
    text[300] = 0;
    want[100] = -1;
    expect_ids(tok, text, 0, want);
    tide_tokenizer_free(tok);
}

/* Pre-tokenizes with a single Split step on "-" and returns the pieces joined by '|'. */
static char *split_with(const char *behavior, bool invert, const char *text) {
    json_t *j = base_json(NULL, 0, false);
    json_object_set_new(j, "pre_tokenizer", json_pack("{s:s, s:{s:s}, s:s, s:b}", "type", "Split", "pattern", "String", "-",
                                                      "behavior", behavior, "invert", invert));
    tide_tokenizer *tok = load_json(j);
    tok_pretok_scratch sc = {0};
    const tok_buf *buf;
    const tok_spans *sp;
    tide_status st = {0};
    assert_int_equal(tok_pretokenize(tok, &sc, text, strlen(text), &buf, &sp, &st), 0);
    char *out = calloc(1, 2 * strlen(text) + 2);
    for (size_t i = 0; i < sp->n; i++) {
        if (i) strcat(out, "|");
        strncat(out, buf->p + sp->v[i].off, sp->v[i].len);
    }
    tok_pretok_scratch_free(&sc);
    tide_tokenizer_free(tok);
    return out;
}

static void expect_split(const char *behavior, bool invert, const char *text, const char *want) {
    char *got = split_with(behavior, invert, text);
    if (strcmp(got, want)) fprintf(stderr, "%s%s: got '%s', want '%s'\n", behavior, invert ? " inverted" : "", got, want);
    assert_string_equal(got, want);
    free(got);
}

/* The examples of HF's SplitDelimiterBehavior documentation. */
static void test_split_behaviors(void **state) {
    (void)state;
    const char *t = "the-final--countdown";
    expect_split("Removed", false, t, "the|final|countdown");
    expect_split("Isolated", false, t, "the|-|final|-|-|countdown");
    expect_split("MergedWithPrevious", false, t, "the-|final-|-|countdown");
    expect_split("MergedWithNext", false, t, "the|-final|-|-countdown");
    expect_split("Contiguous", false, t, "the|-|final|--|countdown");
    expect_split("Removed", true, t, "-|-|-");
    expect_split("Isolated", false, "-a-", "-|a|-");
    expect_split("Removed", false, "---", "");
}

static void test_regex_split_and_digits(void **state) {
    (void)state;
    json_t *j = base_json(NULL, 0, false);
    json_object_set_new(j, "pre_tokenizer",
                        json_pack("{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, {s:s, s:b}, {s:s, s:b, s:b}]}", "type", "Sequence",
                                  "pretokenizers", "type", "Split", "pattern", "Regex", "\\s+", "behavior", "Removed",
                                  "invert", 0, "type", "Digits", "individual_digits", 1, "type", "ByteLevel",
                                  "add_prefix_space", 0, "use_regex", 0));
    tide_tokenizer *tok = load_json(j);
    tok_pretok_scratch sc = {0};
    const tok_buf *buf;
    const tok_spans *sp;
    tide_status st = {0};
    const char *text = "ab 12  c3";
    assert_int_equal(tok_pretokenize(tok, &sc, text, strlen(text), &buf, &sp, &st), 0);
    const char *want[] = {"ab", "1", "2", "c", "3"};
    assert_int_equal(sp->n, 5);
    for (size_t i = 0; i < 5; i++) {
        assert_int_equal(sp->v[i].len, strlen(want[i]));
        assert_memory_equal(buf->p + sp->v[i].off, want[i], strlen(want[i]));
    }
    tok_pretok_scratch_free(&sc);
    tide_tokenizer_free(tok);
}

static json_t *added(int id, const char *content, bool special, bool lstrip, bool rstrip, bool single_word, bool normalized) {
    return json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", id, "content", content, "special", special, "lstrip",
                     lstrip, "rstrip", rstrip, "single_word", single_word, "normalized", normalized);
}

static void test_added_tokens(void **state) {
    (void)state;
    json_t *j = base_json(NULL, 0, false);
    json_t *a = json_object_get(j, "added_tokens");
    json_array_append_new(a, added(300, "<s>", true, false, false, false, false));
    json_array_append_new(a, added(301, "<sep>", true, false, false, false, false)); /* longest wins over <s>? no: differs at 3rd byte */
    json_array_append_new(a, added(302, "[L]", false, true, false, false, true));
    json_array_append_new(a, added(303, "[R]", false, false, true, false, true));
    json_array_append_new(a, added(304, "cat", false, false, false, true, true));
    json_array_append_new(a, added(305, "<s>x", false, false, false, false, false));
    tide_tokenizer *tok = load_json(j);
    expect_ids(tok, "<s>a", 0, IDS(300, 'a'));
    expect_ids(tok, "<s>x", 0, IDS(305));               /* leftmost-longest */
    expect_ids(tok, "a<sep>", 0, IDS('a', 301));
    expect_ids(tok, "<s>a", TIDE_ENCODE_SPLIT_SPECIAL, IDS('<', 's', '>', 'a'));
    expect_ids(tok, "cat", 0, IDS(304));
    expect_ids(tok, "a cat.", 0, IDS('a', 0x20, 304, '.')); /* byte-level: ' ' is id 0x20 */
    expect_ids(tok, "cats", 0, IDS('c', 'a', 't', 's'));  /* single_word: touches a word character */
    expect_ids(tok, "_cat", 0, IDS('_', 'c', 'a', 't'));
    /* lstrip / rstrip swallow whitespace: encode is then not invertible, check ids only. */
    tide_tok_ids ids = {0};
    tide_status st = {0};
    assert_int_equal(tide_tokenizer_encode(tok, "a  [L]  [R]  b", 14, 0, NULL, &ids, &st), 0);
    const int32_t want[] = {'a', 302, 0x20, 0x20, 303, 'b'};
    assert_int_equal(ids.n, 6);
    assert_memory_equal(ids.ids, want, sizeof want);
    /* Decoding: special tokens can be skipped; added tokens decode to their content. */
    char *dec;
    size_t dl;
    const int32_t seq[] = {300, 'a', 302, 301};
    assert_int_equal(tide_tokenizer_decode(tok, seq, 4, TIDE_DECODE_SKIP_SPECIAL, &dec, &dl, &st), 0);
    assert_string_equal(dec, "a[L]");
    free(dec);
    assert_true(tide_tokenizer_is_special(tok, 300));
    assert_false(tide_tokenizer_is_special(tok, 302));
    assert_true(tide_tokenizer_is_added(tok, 302));
    assert_false(tide_tokenizer_is_added(tok, 'a'));
    assert_int_equal(tide_tokenizer_token_id(tok, "<sep>", 5), 301);
    assert_int_equal(tide_tokenizer_token_id(tok, "nope", 4), -1);
    tide_tok_ids_free(&ids);
    tide_tokenizer_free(tok);
}

static void test_normalizers(void **state) {
    (void)state;
    json_t *j = base_json(NULL, 0, false);
    json_object_set_new(j, "normalizer",
                        json_pack("{s:s, s:[{s:s}, {s:s}, {s:s, s:{s:s}, s:s}, {s:s, s:s}]}", "type", "Sequence",
                                  "normalizers", "type", "NFC", "type", "Lowercase", "type", "Replace", "pattern",
                                  "String", "x", "content", "yy", "type", "Prepend", "prepend", ">"));
    json_array_append_new(json_object_get(j, "added_tokens"), added(300, "TAG", false, false, false, false, true));
    tide_tokenizer *tok = load_json(j);
    tide_tok_ids ids = {0};
    tide_status st = {0};
    /* "E\u0301X" -> NFC "ÉX" -> "éx" -> "éyy" -> ">éyy" */
    assert_int_equal(tide_tokenizer_encode(tok, "E\xcc\x81X", 4, 0, NULL, &ids, &st), 0);
    const int32_t want[] = {'>', 0xC3, 0xA9, 'y', 'y'};
    assert_int_equal(ids.n, 5);
    assert_memory_equal(ids.ids, want, sizeof want);
    /* A normalized added token matches by its normalized content ("tag" after
     * Lowercase; Prepend applies to it too, so ">tag"): typed as ">tag" it is found. */
    ids.n = 0;
    assert_int_equal(tide_tokenizer_encode(tok, "a>TAG", 5, 0, NULL, &ids, &st), 0);
    const int32_t want2[] = {'>', 'a', 300};
    assert_int_equal(ids.n, 3);
    assert_memory_equal(ids.ids, want2, sizeof want2);
    tide_tok_ids_free(&ids);
    tide_tokenizer_free(tok);
}

static void test_byte_fallback_unk_ignore_merges(void **state) {
    (void)state;
    /* A tiny char-level vocabulary without byte-level mapping. */
    json_t *j = json_pack("{s:{s:s, s:{s:i, s:i, s:i, s:i, s:i, s:i}, s:[s], s:b, s:s, s:b}, s:n, s:n, s:{s:s}}",
                          "model", "type", "BPE", "vocab", "a", 0, "b", 1, "ab", 2, "<unk>", 3, "<0xC3>", 4, "<0xA9>", 5,
                          "merges", "a b", "byte_fallback", 1, "unk_token", "<unk>", "fuse_unk", 1, "normalizer",
                          "pre_tokenizer", "decoder", "type", "ByteFallback");
    tide_tokenizer *tok = load_json(j);
    tide_tok_ids ids = {0};
    tide_status st = {0};
    assert_int_equal(tide_tokenizer_encode(tok, "ab\xc3\xa9zzb", 7, 0, NULL, &ids, &st), 0);
    const int32_t want[] = {2, 4, 5, 3, 1}; /* ab, é as bytes, zz fused to one <unk>, b */
    assert_int_equal(ids.n, 5);
    assert_memory_equal(ids.ids, want, sizeof want);
    char *dec;
    size_t dl;
    assert_int_equal(tide_tokenizer_decode(tok, want, 3, 0, &dec, &dl, &st), 0);
    assert_string_equal(dec, "ab\xc3\xa9");
    free(dec);
    tide_tok_ids_free(&ids);
    tide_tokenizer_free(tok);

    /* ignore_merges: a word that is in the vocabulary is taken whole even
     * when the merges could not build it. */
    static const char *const m[] = {"a b"};
    j = base_json(m, 1, false);
    json_t *model = json_object_get(j, "model");
    json_object_set_new(json_object_get(model, "vocab"), "abc", json_integer(400));
    tok = load_json(json_deep_copy(j));
    expect_ids(tok, "abc", 0, IDS(256, 'c'));
    tide_tokenizer_free(tok);
    json_object_set_new(model, "ignore_merges", json_true());
    tok = load_json(j);
    expect_ids(tok, "abc", 0, IDS(400));
    tide_tokenizer_free(tok);
}

/* A word whose characters are all missing from the vocabulary (no byte
 * fallback, no unk) maps to no token. Through the cache, the first encode
 * stores an empty entry and the second reads it back, both into an empty id
 * list whose array is still NULL: no memcpy on NULL (UBSan), no ids, and the
 * words around it still encode. */
static void test_word_without_tokens(void **state) {
    (void)state;
    json_t *j = json_pack("{s:{s:s, s:{s:i, s:i}, s:[]}, s:n, s:{s:s}, s:{s:s}}", "model", "type", "BPE", "vocab", "a",
                          0, " ", 1, "merges", "normalizer", "pre_tokenizer", "type", "WhitespaceSplit", "decoder",
                          "type", "ByteFallback");
    tide_tokenizer *tok = load_json(j);
    tide_tok_cache *cache = tide_tok_cache_new();
    assert_non_null(cache);
    tide_status st = {0};
    for (int round = 0; round < 2; round++) {
        tide_tok_ids ids = {0};
        assert_int_equal(tide_tokenizer_encode(tok, "zz", 2, 0, cache, &ids, &st), 0);
        assert_int_equal(ids.n, 0);
        assert_int_equal(tide_tokenizer_encode(tok, "zz a zz", 7, 0, cache, &ids, &st), 0);
        assert_int_equal(ids.n, 1);
        assert_int_equal(ids.ids[0], 0);
        tide_tok_ids_free(&ids);
    }
    tide_tok_cache_free(cache);
    tide_tokenizer_free(tok);
}

static void encode_fails(const tide_tokenizer *tok, const char *text, size_t len, const char *const *needles) {
    tide_tok_ids ids = {0};
    tide_status st = {0};
    assert_int_equal(tide_tokenizer_encode(tok, text, len, 0, NULL, &ids, &st), -1);
    for (size_t i = 0; needles[i]; i++) {
        if (!strstr(st.msg, needles[i])) fprintf(stderr, "message '%s' lacks '%s'\n", st.msg, needles[i]);
        assert_non_null(strstr(st.msg, needles[i]));
    }
    tide_tok_ids_free(&ids);
}

/* Work bounded by an error, not by time: a normalizer whose replacements
 * multiply the text (here 8^8 times) stops at the growth limit, a regex
 * with catastrophic backtracking at Oniguruma's retry limit; both messages
 * say which step and where. Ordinary growth still encodes. */
static void test_encode_limits(void **state) {
    (void)state;
    json_t *j = base_json(NULL, 0, false), *steps = json_array();
    for (int i = 0; i < 8; i++)
        json_array_append_new(steps, json_pack("{s:s, s:{s:s}, s:s}", "type", "Replace", "pattern", "String", "a",
                                               "content", "aaaaaaaa"));
    json_object_set_new(j, "normalizer", json_pack("{s:s, s:o}", "type", "Sequence", "normalizers", steps));
    json_array_append_new(json_object_get(j, "added_tokens"), added(300, "<t>", true, false, false, false, false));
    tide_tokenizer *tok = load_json(j);
    encode_fails(tok, "<t>xaaaa", 8,
                 (const char *const[]){"normalizer step ", "(Replace)", "grows past the limit", "input byte 3", NULL});
    tide_tok_ids ids = {0};
    tide_status st = {0};
    assert_int_equal(tide_tokenizer_encode(tok, "x", 1, 0, NULL, &ids, &st), 0); /* no 'a': nothing grows */
    assert_int_equal(ids.n, 1);
    tide_tok_ids_free(&ids);
    tide_tokenizer_free(tok);

    /* An empty regex match inserts a long replacement at every character. */
    char *big = malloc(200001);
    assert_non_null(big);
    memset(big, 'z', 200000);
    big[200000] = 0;
    j = base_json(NULL, 0, false);
    json_object_set_new(j, "normalizer",
                        json_pack("{s:s, s:{s:s}, s:s}", "type", "Replace", "pattern", "Regex", "", "content", big));
    free(big);
    tok = load_json(j);
    encode_fails(tok, "hello", 5, (const char *const[]){"normalizer step 0 (Replace)", "grows past", NULL});
    tide_tokenizer_free(tok);

    j = base_json(NULL, 0, false);
    json_object_set_new(j, "pre_tokenizer",
                        json_pack("{s:s, s:{s:s}, s:s}", "type", "Split", "pattern", "Regex", "(a+)+b|c", "behavior",
                                  "Isolated"));
    tok = load_json(j);
    char text[64] = "cc";
    memset(text + 2, 'a', 40);
    encode_fails(tok, text, 42,
                 (const char *const[]){"pre_tokenizer step 0 (Split /(a+)+b|c/)", "input byte 2", "retry", NULL});
    expect_ids(tok, "aab", 0, IDS('a', 'a', 'b'));
    tide_tokenizer_free(tok);
}

/* The reference: merge the adjacent pair of lowest rank, leftmost first,
 * until none has a merge (what the short-word loop and HF's heap compute). */
static size_t naive_bpe(const tide_tokenizer *tok, int32_t *s, size_t n) {
    for (;;) {
        size_t best = n;
        uint32_t best_rank = UINT32_MAX, rank;
        int32_t best_id = -1, merged;
        for (size_t i = 0; i + 1 < n; i++)
            if (tok_merges_get(tok, s[i], s[i + 1], &rank, &merged) && rank < best_rank) {
                best = i;
                best_rank = rank;
                best_id = merged;
            }
        if (best == n) return n;
        s[best] = best_id;
        memmove(s + best + 1, s + best + 2, (n - best - 2) * sizeof *s);
        n--;
    }
}

/* Random merge lists over "abcd", in training order or shuffled (then a
 * merge can use a token that a later merge makes, which sends the long-word
 * loop down its put-back path), and random words, long ones too: both merge
 * loops must give the reference's ids. */
static void test_bpe_loops_agree(void **state) {
    (void)state;
    tu_rng rng = {tu_seed()};
    for (int round = 0; round < 40; round++) {
        char toks[64][8] = {"a", "b", "c", "d"};
        size_t nt = 4;
        json_t *vocab = json_object(), *merges = json_array();
        for (size_t i = 0; i < 4; i++) json_object_set_new(vocab, toks[i], json_integer((json_int_t)i));
        for (int m = 0; m < 40 && nt < 64; m++) {
            const char *x = toks[tu_next(&rng) % nt], *y = toks[tu_next(&rng) % nt];
            if (strlen(x) + strlen(y) > 6) continue;
            char pair[16], cat[8];
            snprintf(pair, sizeof pair, "%s %s", x, y);
            snprintf(cat, sizeof cat, "%s%s", x, y);
            bool dup = false;
            for (size_t i = 0; i < json_array_size(merges); i++)
                dup = dup || !strcmp(json_string_value(json_array_get(merges, i)), pair);
            if (dup) continue;
            if (!json_object_get(vocab, cat)) {
                json_object_set_new(vocab, cat, json_integer((json_int_t)nt));
                memcpy(toks[nt++], cat, sizeof cat);
            }
            json_array_append_new(merges, json_string(pair));
        }
        if (round % 2) /* shuffle */
            for (size_t i = json_array_size(merges); i > 1; i--) {
                size_t j = tu_next(&rng) % i;
                json_t *a = json_incref(json_array_get(merges, i - 1)), *b = json_incref(json_array_get(merges, j));
                json_array_set_new(merges, i - 1, b);
                json_array_set_new(merges, j, a);
            }
        json_t *j = json_pack("{s:{s:s, s:o, s:o}, s:n, s:n, s:{s:s}}", "model", "type", "BPE", "vocab", vocab,
                              "merges", merges, "normalizer", "pre_tokenizer", "decoder", "type", "ByteFallback");
        tide_tokenizer *tok = load_json(j);
        for (int w = 0; w < 20; w++) {
            size_t n = w < 15 ? 2 + tu_next(&rng) % 47 : 49 + tu_next(&rng) % 400;
            char text[512];
            int32_t ref[512];
            for (size_t i = 0; i < n; i++) {
                text[i] = (char)('a' + (w % 3 == 0 ? tu_next(&rng) % 2 : tu_next(&rng) % 4)); /* some near-runs */
                ref[i] = (int32_t)(text[i] - 'a');
            }
            size_t rn = naive_bpe(tok, ref, n);
            tide_status st = {0};
            for (int force = 0; force < 2; force++) {
                tide_tok_ids ids = {0};
                assert_int_equal(tok_encode_debug(tok, text, n, force, false, &ids, &st), 0);
                if (ids.n != rn || memcmp(ids.ids, ref, rn * sizeof *ref) != 0) {
                    fprintf(stderr, "round %d word \"%.*s\" (force %d): %zu ids, reference %zu\n", round, (int)n,
                            text, force, ids.n, rn);
                    fail();
                }
                tide_tok_ids_free(&ids);
            }
        }
        tide_tokenizer_free(tok);
    }
}

static void test_streaming_detok(void **state) {
    (void)state;
    json_t *j = base_json(NULL, 0, false);
    json_array_append_new(json_object_get(j, "added_tokens"), added(300, "<think>", false, false, false, false, false));
    tide_tokenizer *tok = load_json(j);
    tide_detok *d;
    tide_status st = {0};
    const char *t;
    size_t tl;
    /* "é" split over two tokens is held, then released whole. */
    assert_int_equal(tide_detok_new(tok, 0, &d, &st), 0);
    assert_int_equal(tide_detok_push(d, 0xC3, &t, &tl, &st), 0);
    assert_int_equal(tl, 0);
    assert_int_equal(tide_detok_push(d, 0xA9, &t, &tl, &st), 0);
    assert_int_equal(tl, 2);
    assert_memory_equal(t, "\xc3\xa9", 2);
    /* An invalid byte is released at once as U+FFFD; an unfinished one at the end too. */
    assert_int_equal(tide_detok_push(d, 0xFF, &t, &tl, &st), 0);
    assert_memory_equal(t, "\xef\xbf\xbd", 3);
    assert_int_equal(tide_detok_push(d, 0xE2, &t, &tl, &st), 0);
    assert_int_equal(tl, 0);
    assert_int_equal(tide_detok_finish(d, &t, &tl, &st), 0);
    assert_int_equal(tl, 3);
    assert_memory_equal(t, "\xef\xbf\xbd", 3);
    assert_int_equal(tide_detok_push(d, 100000, &t, &tl, &st), -1);
    tide_detok_free(d);
    /* With HOLD_ADDED, "<th" is held until it can no longer become "<think>". */
    assert_int_equal(tide_detok_new(tok, TIDE_DETOK_HOLD_ADDED, &d, &st), 0);
    assert_int_equal(tide_detok_push(d, 'a', &t, &tl, &st), 0);
    assert_int_equal(tl, 1);
    assert_int_equal(tide_detok_push(d, '<', &t, &tl, &st), 0);
    assert_int_equal(tl, 0);
    assert_int_equal(tide_detok_push(d, 't', &t, &tl, &st), 0);
    assert_int_equal(tl, 0);
    assert_int_equal(tide_detok_push(d, 'x', &t, &tl, &st), 0);
    assert_int_equal(tl, 3);
    assert_memory_equal(t, "<tx", 3);
    assert_int_equal(tide_detok_push(d, '<', &t, &tl, &st), 0);
    assert_int_equal(tide_detok_push(d, 300, &t, &tl, &st), 0); /* "<" + "<think>": the second may still grow? no: complete */
    assert_int_equal(tide_detok_finish(d, &t, &tl, &st), 0);
    tide_detok_free(d);
    tide_tokenizer_free(tok);
}

/* Random byte-level id sequences: the stream equals lossy(decode(ids)), with
 * or without holding, and every released piece is valid UTF-8. */
static void test_streaming_random(void **state) {
    (void)state;
    tide_tokenizer *tok = load_json(base_json(hello_merges, 9, false));
    tu_rng r = {tu_seed()};
    tide_status st = {0};
    for (int it = 0; it < 300; it++) {
        int32_t ids[40];
        size_t n = 1 + tu_next(&r) % 40;
        for (size_t i = 0; i < n; i++) {
            uint64_t k = tu_next(&r) % 10;
            /* Mostly bytes that form or break UTF-8 sequences. */
            ids[i] = k < 3 ? (int32_t)(0x80 + tu_next(&r) % 0x40) : k < 5 ? (int32_t)(0xC2 + tu_next(&r) % 0x33)
                   : k < 7 ? (int32_t)(tu_next(&r) % 0x80) : (int32_t)(tu_next(&r) % tide_tokenizer_n_ids(tok));
        }
        char *whole, *fixed, *streamed;
        size_t wl, fl, sl;
        assert_int_equal(tide_tokenizer_decode(tok, ids, n, 0, &whole, &wl, &st), 0);
        assert_int_equal(tide_utf8_lossy(whole, wl, &fixed, &fl, &st), 0);
        for (unsigned flags = 0; flags <= TIDE_DETOK_HOLD_ADDED; flags += TIDE_DETOK_HOLD_ADDED) {
            tide_detok *d;
            assert_int_equal(tide_detok_new(tok, flags, &d, &st), 0);
            tok_buf acc = {0};
            for (size_t i = 0; i < n; i++) {
                const char *t;
                size_t tl;
                assert_int_equal(tide_detok_push(d, ids[i], &t, &tl, &st), 0);
                assert_int_equal(tide_utf8_valid_prefix(t, tl), tl);
                tok_buf_append(&acc, t, tl, &st);
            }
            const char *t;
            size_t tl;
            assert_int_equal(tide_detok_finish(d, &t, &tl, &st), 0);
            tok_buf_append(&acc, t, tl, &st);
            assert_int_equal(acc.n, fl);
            assert_memory_equal(acc.p ? acc.p : "", fixed, fl);
            tok_buf_free(&acc);
            tide_detok_free(d);
        }
        assert_int_equal(tide_detok_decode_all(tok, 0, ids, n, &streamed, &sl, &st), 0);
        assert_int_equal(sl, fl);
        assert_memory_equal(streamed, fixed, fl);
        free(whole);
        free(fixed);
        free(streamed);
    }
    tide_tokenizer_free(tok);
}

static void test_utf8_lossy(void **state) {
    (void)state;
    static const struct { const char *in; size_t n; const char *out; } cases[] = {
        {"abc", 3, "abc"},
        {"\xc3", 1, "\xef\xbf\xbd"},
        {"\xe2\x82", 2, "\xef\xbf\xbd"},              /* one maximal subpart */
        {"\xe2\x82x", 3, "\xef\xbf\xbdx"},
        {"\xed\xa0\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* surrogate: 3 subparts */
        {"\xf0\x9f\x98\x80", 4, "\xf0\x9f\x98\x80"},
        {"\xc0\xaf", 2, "\xef\xbf\xbd\xef\xbf\xbd"},  /* overlong */
        {"\xf4\x90\x80\x80", 4, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
    };
    tide_status st = {0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *o;
        size_t ol;
        assert_int_equal(tide_utf8_lossy(cases[i].in, cases[i].n, &o, &ol, &st), 0);
        assert_string_equal(o, cases[i].out);
        free(o);
    }
    assert_int_equal(tide_utf8_valid_prefix("ab\xc3", 3), 2);
    assert_int_equal(tok_utf8_incomplete_tail((const uint8_t *)"ab\xe2\x82", 4), 2);
    assert_int_equal(tok_utf8_incomplete_tail((const uint8_t *)"ab\xe2\x28", 4), 0);
    assert_int_equal(tok_utf8_incomplete_tail((const uint8_t *)"\xf0\x9f\x98", 3), 3);
}

static void test_encode_errors(void **state) {
    (void)state;
    tide_tokenizer *tok = load_json(base_json(NULL, 0, false));
    tide_tok_ids ids = {0};
    tide_status st = {0};
    assert_int_equal(tide_tokenizer_encode(tok, "ok\xff", 3, 0, NULL, &ids, &st), -1);
    assert_int_equal(st.code, TIDE_ERR_INVALID);
    assert_non_null(strstr(st.msg, "byte 2"));
    char *dec;
    size_t dl;
    const int32_t bad[] = {1, -5};
    assert_int_equal(tide_tokenizer_decode(tok, bad, 2, 0, &dec, &dl, &st), -1);
    assert_non_null(strstr(st.msg, "position 1"));
    tide_tok_ids_free(&ids);
    tide_tokenizer_free(tok);
}

static void test_load_errors(void **state) {
    (void)state;
    tide_status st = {0};
    tide_tokenizer *tok;
    assert_int_equal(tide_tokenizer_load_json("{", 1, "bad.json", &tok, &st), -1);
    assert_non_null(strstr(st.msg, "bad JSON"));
    assert_int_equal(tide_tokenizer_load("/nonexistent/tokenizer.json", &tok, &st), -1);
    assert_int_equal(st.code, TIDE_ERR_MISSING);

    json_t *j = base_json(NULL, 0, false);
    json_object_set_new(j, "normalizer", json_pack("{s:s}", "type", "Precompiled"));
    load_fails(j, "normalizer type \"Precompiled\" is not supported");
    j = base_json(NULL, 0, false);
    json_object_set_new(j, "pre_tokenizer", json_pack("{s:s}", "type", "Metaspace"));
    load_fails(j, "pre_tokenizer type \"Metaspace\"");
    j = base_json(NULL, 0, false);
    json_object_set_new(j, "decoder", json_pack("{s:s}", "type", "WordPiece"));
    load_fails(j, "decoder type \"WordPiece\"");
    j = base_json(NULL, 0, false);
    json_object_set_new(j, "pre_tokenizer", json_pack("{s:s, s:{s:s}, s:s}", "type", "Split", "pattern", "Regex", "(a",
                                                      "behavior", "Isolated"));
    load_fails(j, "bad regex");
    j = base_json(NULL, 0, false);
    json_object_set_new(j, "pre_tokenizer", json_pack("{s:s, s:{s:s}, s:s}", "type", "Split", "pattern", "Regex", "a",
                                                      "behavior", "Sideways"));
    load_fails(j, "Sideways");
    static const char *const m[] = {"q z"};
    j = base_json(m, 1, false);
    json_object_del(json_object_get(json_object_get(j, "model"), "vocab"), "qz");
    load_fails(j, "merged token \"qz\" is not in the vocab");
    j = base_json(NULL, 0, false);
    json_array_append_new(json_object_get(json_object_get(j, "model"), "merges"), json_string("a b c"));
    load_fails(j, "merges[0]");
    j = base_json(NULL, 0, false);
    json_object_set_new(json_object_get(json_object_get(j, "model"), "vocab"), "big", json_integer(1LL << 40));
    load_fails(j, "out of range");
    j = base_json(NULL, 0, false);
    json_object_set_new(json_object_get(j, "model"), "type", json_string("Unigram"));
    load_fails(j, "model.type \"Unigram\"");
    j = base_json(NULL, 0, false);
    json_array_append_new(json_object_get(j, "added_tokens"), json_pack("{s:s}", "content", "x"));
    load_fails(j, "added_tokens[0].id");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_byte_alphabet),
        cmocka_unit_test(test_merges_both_formats),
        cmocka_unit_test(test_merge_rank_order),
        cmocka_unit_test(test_split_behaviors),
        cmocka_unit_test(test_regex_split_and_digits),
        cmocka_unit_test(test_added_tokens),
        cmocka_unit_test(test_normalizers),
        cmocka_unit_test(test_byte_fallback_unk_ignore_merges),
        cmocka_unit_test(test_word_without_tokens),
        cmocka_unit_test(test_encode_limits),
        cmocka_unit_test(test_bpe_loops_agree),
        cmocka_unit_test(test_streaming_detok),
        cmocka_unit_test(test_streaming_random),
        cmocka_unit_test(test_utf8_lossy),
        cmocka_unit_test(test_encode_errors),
        cmocka_unit_test(test_load_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
