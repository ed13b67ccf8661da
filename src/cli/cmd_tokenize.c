/* tide tokenize / tide detokenize: the tokenizer on the command line.
 *
 *   tide tokenize --tokenizer FILE [--jsonl] [--split-special]  < text > ids
 *   tide detokenize --tokenizer FILE [--jsonl] [--skip-special] < ids > text
 *   tide tokenize --tokenizer FILE --bench [TEXTFILE]   (bench_tokenize.c)
 *
 * One input line gives one output line. With --jsonl each text line is a JSON
 * string, so texts can hold newlines; detokenize then writes JSON strings
 * (invalid UTF-8 replaced by U+FFFD), otherwise the raw bytes. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench_tokenize.h"
#include "cli/cli.h"
#include "text/tokenizer.h"

#ifndef TIDE_DEFAULT_TOKENIZER
#define TIDE_DEFAULT_TOKENIZER ""
#endif

typedef struct {
    const char *tokenizer, *bench_file; /* bench_file: NULL for the built-in corpus */
    bool bench, jsonl, split_special, skip_special, stream;
} opts;

static void usage(FILE *f, bool detok) {
    if (!detok)
        fprintf(f,
                "usage: tide tokenize [--tokenizer FILE] [--jsonl] [--split-special] < text\n"
                "       tide tokenize [--tokenizer FILE] --bench [TEXTFILE]\n\n"
                "Reads text on stdin and prints, for each input line, one line of space-separated\n"
                "token ids (the line's newline is not encoded; no BOS/EOS is added).\n\n"
                "  --tokenizer FILE   a Hugging Face tokenizer.json (default: %s)\n"
                "  --jsonl            each input line is a JSON string (texts with newlines)\n"
                "  --split-special    encode special tokens' text as plain text\n"
                "  --bench [TEXTFILE] encode TEXTFILE line by line (newlines included), print MB/s;\n"
                "                     without TEXTFILE, a built-in corpus: English-like text and\n"
                "                     worst cases (long runs, one long line), and the time to the\n"
                "                     error of inputs that must fail fast\n",
                *TIDE_DEFAULT_TOKENIZER ? TIDE_DEFAULT_TOKENIZER : "none compiled in");
    else
        fprintf(f,
                "usage: tide detokenize [--tokenizer FILE] [--jsonl] [--skip-special] [--stream] < ids\n\n"
                "Reads lines of space-separated token ids on stdin and prints each line's text.\n\n"
                "  --tokenizer FILE   a Hugging Face tokenizer.json (default: %s)\n"
                "  --jsonl            print each text as a JSON string\n"
                "  --skip-special     drop tokens flagged special\n"
                "  --stream           decode through the streaming detokenizer, token by token\n",
                *TIDE_DEFAULT_TOKENIZER ? TIDE_DEFAULT_TOKENIZER : "none compiled in");
}

static int parse(int argc, char **argv, bool detok, opts *o) {
    memset(o, 0, sizeof *o);
    o->tokenizer = TIDE_DEFAULT_TOKENIZER;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout, detok); return 1; }
        if (!strcmp(a, "--tokenizer") && i + 1 < argc) o->tokenizer = argv[++i];
        else if (!strcmp(a, "--jsonl")) o->jsonl = true;
        else if (!detok && !strcmp(a, "--split-special")) o->split_special = true;
        else if (!detok && !strcmp(a, "--bench")) {
            o->bench = true;
            if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) o->bench_file = argv[++i];
        }
        else if (detok && !strcmp(a, "--skip-special")) o->skip_special = true;
        else if (detok && !strcmp(a, "--stream")) o->stream = true;
        else {
            fprintf(stderr, "tide %s: unknown or incomplete option '%s'\n\n", detok ? "detokenize" : "tokenize", a);
            usage(stderr, detok);
            return 2;
        }
    }
    if (!*o->tokenizer) {
        fprintf(stderr, "tide: no --tokenizer given and no default compiled in\n");
        return 2;
    }
    return 0;
}

static tide_tokenizer *load(const char *path) {
    tide_status st = {0};
    tide_tokenizer *tok;
    if (tide_tokenizer_load(path, &tok, &st) != 0) {
        fprintf(stderr, "tide: %s\n", st.msg);
        return NULL;
    }
    return tok;
}

/* Reads one line (without its '\n') into *buf; returns its length or -1 at EOF. */
static ssize_t read_line(FILE *f, char **buf, size_t *cap) {
    ssize_t n = getline(buf, cap, f);
    if (n < 0) return -1;
    if (n > 0 && (*buf)[n - 1] == '\n') (*buf)[--n] = 0;
    return n;
}

/* Every write goes through stdio; a failed one (a full disk, a closed pipe)
 * sets the stream's error flag, so checking it after each line and closing
 * stdout at the end catches them all. Returns 0, or -1 after saying why. */
static int output_ok(const char *cmd) {
    if (!ferror(stdout)) return 0;
    fprintf(stderr, "tide %s: writing to standard output failed: %s\n", cmd, strerror(errno));
    return -1;
}

static int close_output(const char *cmd) {
    int bad = ferror(stdout);
    if (fclose(stdout) != 0 || bad) {
        fprintf(stderr, "tide %s: writing to standard output failed: %s\n", cmd, strerror(errno));
        return -1;
    }
    return 0;
}

static int json_line(const char *line, size_t n, size_t lineno, char **text, size_t *len) {
    json_error_t err;
    json_t *j = json_loadb(line, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
    if (!json_is_string(j)) {
        fprintf(stderr, "tide tokenize: line %zu is not a JSON string%s%s\n", lineno, j ? "" : ": ", j ? "" : err.text);
        json_decref(j);
        return -1;
    }
    *len = json_string_length(j);
    *text = malloc(*len + 1);
    if (*text) memcpy(*text, json_string_value(j), *len + 1);
    json_decref(j);
    return *text ? 0 : -1;
}

int tide_cmd_tokenize(int argc, char **argv) {
    opts o;
    int pr = parse(argc, argv, false, &o);
    if (pr) return pr == 1 ? TIDE_EXIT_OK : TIDE_EXIT_USAGE;
    tide_tokenizer *tok = load(o.tokenizer);
    if (!tok) return TIDE_EXIT_FAIL;
    if (o.bench) {
        int rc = tide_tokenize_bench(tok, o.bench_file);
        tide_tokenizer_free(tok);
        if (rc == TIDE_EXIT_OK && close_output("tokenize") != 0) rc = TIDE_EXIT_FAIL;
        return rc;
    }
    tide_tok_cache *cache = tide_tok_cache_new();
    tide_tok_ids ids = {0};
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    ssize_t n;
    int rc = TIDE_EXIT_OK;
    while ((n = read_line(stdin, &line, &cap)) >= 0) {
        lineno++;
        char *text = line;
        size_t len = (size_t)n;
        if (o.jsonl && json_line(line, len, lineno, &text, &len) != 0) { rc = TIDE_EXIT_FAIL; break; }
        tide_status st = {0};
        ids.n = 0;
        int e = tide_tokenizer_encode(tok, text, len, o.split_special ? TIDE_ENCODE_SPLIT_SPECIAL : 0, cache, &ids, &st);
        if (text != line) free(text);
        if (e != 0) {
            fprintf(stderr, "tide tokenize: line %zu: %s\n", lineno, st.msg);
            rc = TIDE_EXIT_FAIL;
            break;
        }
        for (size_t i = 0; i < ids.n; i++) printf(i ? " %d" : "%d", ids.ids[i]);
        putchar('\n');
        if (output_ok("tokenize") != 0) { rc = TIDE_EXIT_FAIL; break; }
    }
    free(line);
    tide_tok_ids_free(&ids);
    tide_tok_cache_free(cache);
    tide_tokenizer_free(tok);
    if (rc == TIDE_EXIT_OK && close_output("tokenize") != 0) rc = TIDE_EXIT_FAIL;
    return rc;
}

static int parse_ids(const char *line, size_t len, size_t lineno, tide_tok_ids *ids) {
    const char *nul = memchr(line, 0, len);
    if (nul) {
        /* The parser below would stop there and drop the rest of the line. */
        fprintf(stderr, "tide detokenize: line %zu: NUL byte at offset %zu\n", lineno, (size_t)(nul - line));
        return -1;
    }
    const char *p = line;
    tide_status st = {0};
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\r') p++;
        if (!*p) return 0;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ' ' && *end != '\t' && *end != '\r')) {
            fprintf(stderr, "tide detokenize: line %zu: '%.20s' is not a token id\n", lineno, p);
            return -1;
        }
        if (tide_tok_ids_push(ids, (int32_t)v, &st) != 0) { fprintf(stderr, "tide detokenize: %s\n", st.msg); return -1; }
        p = end;
    }
}

static int write_text(const char *s, size_t n, bool jsonl) {
    if (!jsonl) return fwrite(s, 1, n, stdout) == n ? 0 : -1;
    char *fixed;
    size_t fl;
    tide_status st = {0};
    if (tide_utf8_lossy(s, n, &fixed, &fl, &st) != 0) return -1;
    json_t *j = json_stringn(fixed, fl);
    free(fixed);
    char *enc = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
    json_decref(j);
    if (!enc) return -1;
    int rc = fputs(enc, stdout) < 0 ? -1 : 0;
    free(enc);
    return rc;
}

static int decode_line(const tide_tokenizer *tok, const opts *o, const tide_tok_ids *ids, size_t lineno) {
    tide_status st = {0};
    char *text = NULL;
    size_t len = 0;
    int rc;
    if (o->stream) {
        rc = tide_detok_decode_all(tok, o->skip_special ? TIDE_DECODE_SKIP_SPECIAL : 0, ids->ids, ids->n, &text, &len, &st);
    } else {
        rc = tide_tokenizer_decode(tok, ids->ids, ids->n, o->skip_special ? TIDE_DECODE_SKIP_SPECIAL : 0, &text, &len, &st);
    }
    if (rc != 0) {
        fprintf(stderr, "tide detokenize: line %zu: %s\n", lineno, st.msg);
        return -1;
    }
    rc = write_text(text, len, o->jsonl);
    free(text);
    if (rc != 0 && output_ok("detokenize") == 0) fprintf(stderr, "tide detokenize: line %zu: out of memory\n", lineno);
    return rc;
}

int tide_cmd_detokenize(int argc, char **argv) {
    opts o;
    int pr = parse(argc, argv, true, &o);
    if (pr) return pr == 1 ? TIDE_EXIT_OK : TIDE_EXIT_USAGE;
    tide_tokenizer *tok = load(o.tokenizer);
    if (!tok) return TIDE_EXIT_FAIL;
    tide_tok_ids ids = {0};
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    int rc = TIDE_EXIT_OK;
    ssize_t n;
    while ((n = read_line(stdin, &line, &cap)) >= 0) {
        lineno++;
        ids.n = 0;
        if (parse_ids(line, (size_t)n, lineno, &ids) != 0 || decode_line(tok, &o, &ids, lineno) != 0) {
            rc = TIDE_EXIT_FAIL;
            break;
        }
        putchar('\n');
        if (output_ok("detokenize") != 0) { rc = TIDE_EXIT_FAIL; break; }
    }
    free(line);
    tide_tok_ids_free(&ids);
    tide_tokenizer_free(tok);
    if (rc == TIDE_EXIT_OK && close_output("detokenize") != 0) rc = TIDE_EXIT_FAIL;
    return rc;
}
