/* tide tokenize --bench [FILE]: how fast encoding is, on a file or on a
 * built-in corpus of ordinary text and worst cases (bench_tokenize.h).
 *
 * Figures are CPU seconds of this process (clock()) as well as wall time:
 * on a shared machine the wall clock includes waiting for a core. Only
 * encoding is timed; loading and generating the inputs are not. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "cli/bench_tokenize.h"
#include "cli/cli.h"

#define BENCH_CASE_BYTES (4u << 20) /* each generated case */

typedef struct {
    char *p;
    size_t n, cap;
} gbuf;

static int gb_put(gbuf *b, const char *s, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 1 << 16;
        while (cap < b->n + n) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return -1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    return 0;
}

static uint64_t next_rand(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* ---- the generated cases ---- */

static const char *const common_words[] = {
    "the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on", "not",
    "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they", "you", "were",
    "their", "one", "all", "we", "can", "her", "has", "there", "been", "if", "more", "when", "will", "would",
    "who", "so", "no", "time", "people", "into", "could", "than", "first", "water", "after", "called", "little",
    "house", "world", "between", "country", "children", "without", "morning", "however", "question", "together",
    "government", "something", "understand", "remember", "different", "important", "thought", "through",
};

/* A word: mostly common ones (so the per-word cache hits as in real text),
 * else made of random syllables (so it also misses, and BPE runs). */
static int put_word(gbuf *b, uint64_t *rng) {
    uint64_t r = next_rand(rng);
    if (r % 10 < 7) {
        const char *w = common_words[(r >> 8) % (sizeof common_words / sizeof common_words[0])];
        return gb_put(b, w, strlen(w));
    }
    static const char cons[] = "bcdfghjklmnprstvwz", vow[] = "aeiou";
    int syl = 1 + (int)((r >> 8) % 4);
    for (int i = 0; i < syl; i++) {
        char s[2] = {cons[next_rand(rng) % (sizeof cons - 1)], vow[next_rand(rng) % (sizeof vow - 1)]};
        if (gb_put(b, s, 2) != 0) return -1;
    }
    return 0;
}

/* English-like lines of 5 to 40 words with capitals, punctuation and numbers. */
static int gen_english(gbuf *b, size_t target, char line_end) {
    uint64_t rng = 42;
    while (b->n < target) {
        int words = 5 + (int)(next_rand(&rng) % 36);
        for (int w = 0; w < words; w++) {
            if (w && gb_put(b, " ", 1) != 0) return -1;
            size_t start = b->n;
            uint64_t r = next_rand(&rng);
            if (r % 50 == 0) {
                char num[24];
                int k = snprintf(num, sizeof num, "%u", (unsigned)(r >> 16) % 100000);
                if (gb_put(b, num, (size_t)k) != 0) return -1;
            } else if (put_word(b, &rng) != 0) {
                return -1;
            }
            if (w == 0 && b->p[start] >= 'a' && b->p[start] <= 'z') b->p[start] = (char)(b->p[start] - 'a' + 'A');
            if (r % 9 == 0 && gb_put(b, ",", 1) != 0) return -1;
        }
        static const char *const ends[] = {".", ".", "?", "!", "\"", ";"};
        const char *e = ends[next_rand(&rng) % 6];
        if (gb_put(b, e, strlen(e)) != 0 || gb_put(b, &line_end, 1) != 0) return -1;
    }
    return 0;
}

/* Units (each one character or cluster) picked at random, back to back. */
static int gen_pick(gbuf *b, size_t target, const char *const *units, size_t n_units, uint64_t seed) {
    while (b->n < target) {
        const char *u = units[next_rand(&seed) % n_units];
        if (gb_put(b, u, strlen(u)) != 0) return -1;
    }
    return 0;
}

static const char *const one_letter[] = {"a"};
static const char *const one_space[] = {" "};
static const char *const digits[] = {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"};
static const char *const punct[] = {"!", "\"", "#", "$", "%", "&", "(", ")", "*", "+", ",", "-", ".", "/", ":",
                                    ";", "<", "=", ">", "?", "@", "[", "]", "^", "_", "{", "|", "}", "~"};
static const char *const cjk[] = {"的", "一", "是", "不", "了", "人", "我", "在", "有", "他", "这", "中", "大",
                                  "来", "上", "国", "个", "到", "说", "们", "为", "子", "和", "你", "地", "出",
                                  "道", "也", "时", "年", "の", "に", "は", "を", "た", "が", "で", "カ", "タ", "ナ"};
static const char *const mixed[] = {
    "a", "Z", " ", "  ", "\n", "\t", "7", "é", "ß", "ø", "ж", "Ω", "α", "ש", "ع", "क", "ท", "한", "中", "に",
    "👍", "👍🏽", "👨‍👩‍👧", "🇫🇷", "e\xcc\x81", "\xe2\x80\x8b", "\xc2\xa0", "\xe3\x80\x80", "’", "…", "—", "\xef\xbf\xbd",
    "<", "｜", "'s", "(", "}", "١", "٣", "\xf0\x9d\x9f\x98",
};

typedef struct {
    const char *name;
    const char *const *units; /* NULL: English-like text */
    size_t n_units;
    char line_end; /* English-like text: '\n' (one encode per line) or ' ' (one line) */
} gen_case;

static int generate(const gen_case *c, gbuf *b) {
    b->n = 0;
    if (!c->units) return gen_english(b, BENCH_CASE_BYTES, c->line_end);
    return gen_pick(b, BENCH_CASE_BYTES, c->units, c->n_units, 7);
}

/* ---- timing ---- */

typedef struct {
    size_t bytes, tokens;
    double wall, cpu;
} bench_res;

/* Encodes data line by line (each line with its newline) with one cache. */
static int time_encode(const tide_tokenizer *tok, tide_tok_cache *cache, const char *data, size_t n, bench_res *r,
                       tide_status *st) {
    tide_tok_ids ids = {0};
    int rc = 0;
    *r = (bench_res){.bytes = n};
    double t0 = tide_now_seconds();
    clock_t c0 = clock();
    for (size_t i = 0; i < n && rc == 0;) {
        const char *nl = memchr(data + i, '\n', n - i);
        size_t end = nl ? (size_t)(nl - data) + 1 : n;
        ids.n = 0;
        rc = tide_tokenizer_encode(tok, data + i, end - i, 0, cache, &ids, st);
        r->tokens += ids.n;
        i = end;
    }
    r->wall = tide_now_seconds() - t0;
    r->cpu = (double)(clock() - c0) / CLOCKS_PER_SEC;
    tide_tok_ids_free(&ids);
    return rc;
}

static double per_s(double x, double s) { return s > 0 ? x / s : 0.0; }

static void print_row(const char *name, const bench_res *r) {
    printf("%-22s %10zu %10zu %8.3f %8.3f %8.1f %12.0f\n", name, r->bytes, r->tokens, r->wall, r->cpu,
           per_s((double)r->bytes, r->cpu) / 1e6, per_s((double)r->tokens, r->cpu));
}

static int bench_file(const tide_tokenizer *tok, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "tide tokenize: %s: %s\n", path, strerror(errno));
        return TIDE_EXIT_FAIL;
    }
    gbuf data = {0};
    char chunk[1 << 16];
    size_t got;
    int bad = 0;
    while (!bad && (got = fread(chunk, 1, sizeof chunk, f)) > 0) bad = gb_put(&data, chunk, got);
    bad = bad || ferror(f);
    fclose(f);
    if (bad) {
        fprintf(stderr, "tide tokenize: reading %s failed\n", path);
        free(data.p);
        return TIDE_EXIT_FAIL;
    }
    tide_tok_cache *cache = tide_tok_cache_new();
    tide_status st = {0};
    bench_res r;
    int rc = cache ? time_encode(tok, cache, data.p, data.n, &r, &st) : tide_fail(&st, TIDE_ERR_NOMEM, "out of memory");
    if (rc != 0)
        fprintf(stderr, "tide tokenize: %s\n", st.msg);
    else
        printf("%zu bytes, %zu tokens; wall %.3f s: %.1f MB/s; cpu %.3f s: %.1f MB/s, %.0f tokens/s\n", r.bytes,
               r.tokens, r.wall, per_s((double)r.bytes, r.wall) / 1e6, r.cpu, per_s((double)r.bytes, r.cpu) / 1e6,
               per_s((double)r.tokens, r.cpu));
    tide_tok_cache_free(cache);
    free(data.p);
    return rc ? TIDE_EXIT_FAIL : TIDE_EXIT_OK;
}

/* ---- inputs that must fail fast ---- */

/* A char-level tokenizer with the given normalizer and pre-tokenizer. */
static const char error_tok_fmt[] =
    "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"c\": 2, \"l\": 3}, \"merges\": []},"
    " \"added_tokens\": [], \"normalizer\": %s, \"pre_tokenizer\": %s, \"decoder\": {\"type\": \"ByteFallback\"}}";

static const char growth_norm[] =
    "{\"type\": \"Sequence\", \"normalizers\": ["
    "{\"type\": \"Replace\", \"pattern\": {\"String\": \"l\"}, \"content\": \"llllllll\"},"
    "{\"type\": \"Replace\", \"pattern\": {\"String\": \"l\"}, \"content\": \"llllllll\"},"
    "{\"type\": \"Replace\", \"pattern\": {\"String\": \"l\"}, \"content\": \"llllllll\"},"
    "{\"type\": \"Replace\", \"pattern\": {\"String\": \"l\"}, \"content\": \"llllllll\"},"
    "{\"type\": \"Replace\", \"pattern\": {\"String\": \"l\"}, \"content\": \"llllllll\"},"
    "{\"type\": \"Replace\", \"pattern\": {\"String\": \"l\"}, \"content\": \"llllllll\"},"
    "{\"type\": \"Replace\", \"pattern\": {\"String\": \"l\"}, \"content\": \"llllllll\"},"
    "{\"type\": \"Replace\", \"pattern\": {\"String\": \"l\"}, \"content\": \"llllllll\"}]}";

static const char backtrack_pre[] =
    "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(a+)+b|c\"}, \"behavior\": \"Isolated\"}";

/* Times the encode of text with a tokenizer built from (normalizer,
 * pre_tokenizer); it must fail. */
static int error_case(const char *name, const char *norm, const char *pre, const char *text, size_t len) {
    char json[4096];
    int jl = snprintf(json, sizeof json, error_tok_fmt, norm, pre);
    tide_status st = {0};
    tide_tokenizer *tok;
    if (jl < 0 || (size_t)jl >= sizeof json || tide_tokenizer_load_json(json, (size_t)jl, name, &tok, &st) != 0) {
        fprintf(stderr, "tide tokenize: %s: %s\n", name, st.msg);
        return -1;
    }
    tide_tok_ids ids = {0};
    double t0 = tide_now_seconds();
    clock_t c0 = clock();
    int rc = tide_tokenizer_encode(tok, text, len, 0, NULL, &ids, &st);
    double wall = tide_now_seconds() - t0, cpu = (double)(clock() - c0) / CLOCKS_PER_SEC;
    tide_tok_ids_free(&ids);
    tide_tokenizer_free(tok);
    if (rc == 0) {
        fprintf(stderr, "tide tokenize: %s: encoding did not fail\n", name);
        return -1;
    }
    printf("%-22s %10zu   fails after wall %.3f s, cpu %.3f s: %s\n", name, len, wall, cpu, st.msg);
    return 0;
}

static int bench_builtin(const tide_tokenizer *tok) {
    static const gen_case cases[] = {
        {"english lines", NULL, 0, '\n'},
        {"english one line", NULL, 0, ' '},
        {"run of one letter", one_letter, 1, 0},
        {"run of spaces", one_space, 1, 0},
        {"digits", digits, sizeof digits / sizeof digits[0], 0},
        {"punctuation", punct, sizeof punct / sizeof punct[0], 0},
        {"CJK and kana", cjk, sizeof cjk / sizeof cjk[0], 0},
        {"mixed Unicode", mixed, sizeof mixed / sizeof mixed[0], 0},
    };
    tide_tok_cache *cache = tide_tok_cache_new();
    gbuf b = {0};
    int rc = cache ? 0 : -1;
    printf("%-22s %10s %10s %8s %8s %8s %12s\n", "case", "bytes", "tokens", "wall s", "cpu s", "MB/s", "tokens/s");
    for (size_t i = 0; rc == 0 && i < sizeof cases / sizeof cases[0]; i++) {
        tide_status st = {0};
        bench_res r;
        if (generate(&cases[i], &b) != 0) {
            fprintf(stderr, "tide tokenize: out of memory\n");
            rc = -1;
        } else if (time_encode(tok, cache, b.p, b.n, &r, &st) != 0) {
            fprintf(stderr, "tide tokenize: %s: %s\n", cases[i].name, st.msg);
            rc = -1;
        } else {
            print_row(cases[i].name, &r);
        }
    }
    free(b.p);
    tide_tok_cache_free(cache);
    if (rc == 0) {
        char bt[64] = "cc";
        memset(bt + 2, 'a', 40);
        rc = error_case("normalizer growth", growth_norm, "null", "hello", 5);
        if (rc == 0) rc = error_case("regex backtracking", "null", backtrack_pre, bt, 42);
    }
    return rc ? TIDE_EXIT_FAIL : TIDE_EXIT_OK;
}

int tide_tokenize_bench(const tide_tokenizer *tok, const char *path) {
    return path ? bench_file(tok, path) : bench_builtin(tok);
}
