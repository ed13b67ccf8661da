/* Pre-tokenizers: cut normalized text into the pieces BPE merges within.
 *
 * The tokenizer.json "pre_tokenizer" is flattened into steps; each step maps
 * a list of pieces to a finer list, exactly as the Rust `tokenizers` crate
 * does with PreTokenizedString::split:
 *   Split       regex (Oniguruma, HF's engine, so \p{..}, lookahead and
 *               possessive semantics are the same) or literal string; the
 *               (range, is_match) list is optionally inverted, then shaped by
 *               the behaviour: Removed, Isolated, MergedWithPrevious,
 *               MergedWithNext, Contiguous. Empty pieces are dropped.
 *   ByteLevel   optional prefix space, optional GPT-2 regex split, then every
 *               byte replaced by its printable stand-in (tokenizer_bytelevel.c).
 *   Digits      numeric characters isolated or grouped.
 *   WhitespaceSplit / Whitespace  the HF presets, as character/regex splits.
 * A regex only ever sees one piece: anchors and lookaheads stop at its ends. */
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer_internal.h"

/* ---- regexes ---- */

static pthread_once_t onig_once = PTHREAD_ONCE_INIT;
static void onig_init_once(void) {
    /* Oniguruma's one process-wide initialisation (its encoding tables). */
    OnigEncoding enc[1] = {ONIG_ENCODING_UTF8};
    onig_initialize(enc, 1);
}

int tok_compile_regex(const char *pat, size_t len, OnigRegex *out, tide_status *st) {
    pthread_once(&onig_once, onig_init_once);
    OnigErrorInfo einfo;
    int r = onig_new(out, (const UChar *)pat, (const UChar *)pat + len, ONIG_OPTION_NONE,
                     ONIG_ENCODING_UTF8, ONIG_SYNTAX_ONIGURUMA, &einfo);
    if (r != ONIG_NORMAL) {
        UChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
        onig_error_code_to_str(msg, r, &einfo);
        *out = NULL;
        return tide_fail(st, TIDE_ERR_FORMAT, "bad regex /%.*s/: %s", (int)(len > 200 ? 200 : len), pat,
                         (const char *)msg);
    }
    return 0;
}

/* Backtracking steps allowed per searched byte, plus a floor: ordinary
 * patterns need a handful per byte, a catastrophic one grows without bound. */
#define TOK_RE_RETRIES_PER_BYTE 1000ul
#define TOK_RE_RETRIES_MIN 10000000ul

int tok_regex_search(OnigRegex re, const char *s, size_t n, size_t from, OnigRegion *region, OnigMatchParam *mp) {
    const UChar *b = (const UChar *)s, *e = b + n;
    size_t left = n - from;
    unsigned long limit = left > (ULONG_MAX - TOK_RE_RETRIES_MIN) / TOK_RE_RETRIES_PER_BYTE
                              ? ULONG_MAX
                              : TOK_RE_RETRIES_MIN + TOK_RE_RETRIES_PER_BYTE * left;
    onig_initialize_match_param(mp);
    onig_set_retry_limit_in_search_of_match_param(mp, limit);
    return onig_search_with_param(re, b, e, b + from, e, region, ONIG_OPTION_NONE, mp);
}

int tok_regex_fail(tide_status *st, int r, const char *where, size_t at) {
    UChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
    onig_error_code_to_str(msg, r);
    return tide_fail(st, TIDE_ERR_INVALID, "regex search from %s byte %zu failed: %s (Oniguruma error %d)", where, at,
                     (const char *)msg, r);
}

/* Compiles a step's regex and keeps its text for messages. */
static int compile_step_regex(tok_pre *s, const char *pat, size_t len, tide_status *st) {
    if (tok_compile_regex(pat, len, &s->re, st) != 0) return -1;
    s->re_src = malloc(len + 1);
    if (!s->re_src) {
        onig_free(s->re);
        s->re = NULL;
        return tide_fail(st, TIDE_ERR_NOMEM, "pre_tokenizer: out of memory");
    }
    memcpy(s->re_src, pat, len);
    s->re_src[len] = 0;
    return 0;
}

/* GPT-2's pre-tokenizer regex, used by ByteLevel when use_regex is true. */
static const char gpt2_regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
/* HF's Whitespace pre-tokenizer keeps the matches of this and drops the rest. */
static const char whitespace_regex[] = "\\w+|[^\\w\\s]+";

/* ---- parsing ---- */

static int add_step(tide_tokenizer *tok, tok_pre step, tide_status *st) {
    tok_pre *v = realloc(tok->pre, (tok->n_pre + 1) * sizeof *v);
    if (!v) {
        if (step.re) onig_free(step.re);
        free(step.re_src);
        free(step.lit);
        return tide_fail(st, TIDE_ERR_NOMEM, "pre_tokenizer: out of memory");
    }
    tok->pre = v;
    tok->pre[tok->n_pre++] = step;
    return 0;
}

static int parse_behavior(json_t *j, tok_split_behavior *b, tide_status *st) {
    const char *s = json_string_value(j);
    static const struct { const char *name; tok_split_behavior b; } names[] = {
        {"Removed", TOK_SPLIT_REMOVED}, {"Isolated", TOK_SPLIT_ISOLATED},
        {"MergedWithPrevious", TOK_SPLIT_MERGED_PREV}, {"MergedWithNext", TOK_SPLIT_MERGED_NEXT},
        {"Contiguous", TOK_SPLIT_CONTIGUOUS},
    };
    if (!s) return tide_fail(st, TIDE_ERR_FORMAT, "Split needs a \"behavior\" string");
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(s, names[i].name)) { *b = names[i].b; return 0; }
    return tide_fail(st, TIDE_ERR_UNSUPPORTED, "Split behavior \"%s\" is unknown", s);
}

static bool flag(json_t *obj, const char *key, bool dflt) {
    json_t *v = json_object_get(obj, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

static int parse_split(tide_tokenizer *tok, json_t *j, tide_status *st) {
    tok_pre s = {.type = TOK_PRE_SPLIT, .invert = flag(j, "invert", false)};
    if (parse_behavior(json_object_get(j, "behavior"), &s.behavior, st) != 0) return -1;
    json_t *pat = json_object_get(j, "pattern");
    json_t *re = pat ? json_object_get(pat, "Regex") : NULL;
    json_t *lit = pat ? json_object_get(pat, "String") : NULL;
    if (json_is_string(re)) {
        if (compile_step_regex(&s, json_string_value(re), json_string_length(re), st) != 0) return -1;
        s.fast = tok_fast_lookup(json_string_value(re), json_string_length(re));
        if (s.fast != TOK_FAST_NONE && tok_fast_init(tok, st) != 0) {
            onig_free(s.re);
            free(s.re_src);
            return -1;
        }
    } else if (json_is_string(lit)) {
        s.lit_len = json_string_length(lit);
        if (s.lit_len == 0) return tide_fail(st, TIDE_ERR_FORMAT, "Split pattern String is empty");
        s.lit = malloc(s.lit_len);
        if (!s.lit) return tide_fail(st, TIDE_ERR_NOMEM, "pre_tokenizer: out of memory");
        memcpy(s.lit, json_string_value(lit), s.lit_len);
    } else {
        return tide_fail(st, TIDE_ERR_FORMAT, "Split needs pattern {\"Regex\"|\"String\": ...}");
    }
    return add_step(tok, s, st);
}

static int parse_one(tide_tokenizer *tok, json_t *j, int depth, tide_status *st) {
    if (depth > 16) return tide_fail(st, TIDE_ERR_FORMAT, "pre_tokenizer nesting deeper than 16");
    if (!json_is_object(j)) return tide_fail(st, TIDE_ERR_FORMAT, "pre_tokenizer must be an object");
    const char *type = json_string_value(json_object_get(j, "type"));
    if (!type) return tide_fail(st, TIDE_ERR_FORMAT, "pre_tokenizer has no \"type\"");
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(j, "pretokenizers");
        if (!json_is_array(list)) return tide_fail(st, TIDE_ERR_FORMAT, "Sequence needs a \"pretokenizers\" array");
        size_t i;
        json_t *v;
        json_array_foreach(list, i, v) {
            if (parse_one(tok, v, depth + 1, st) != 0) return tide_fail_ctx(st, "pretokenizers[%zu]", i);
        }
        return 0;
    }
    if (!strcmp(type, "Split")) return parse_split(tok, j, st);
    if (!strcmp(type, "ByteLevel")) {
        tok_pre s = {.type = TOK_PRE_BYTELEVEL, .add_prefix_space = flag(j, "add_prefix_space", true),
                     .use_regex = flag(j, "use_regex", true), .behavior = TOK_SPLIT_ISOLATED};
        if (s.use_regex && compile_step_regex(&s, gpt2_regex, strlen(gpt2_regex), st) != 0) return -1;
        return add_step(tok, s, st);
    }
    if (!strcmp(type, "Digits"))
        return add_step(tok, (tok_pre){.type = TOK_PRE_DIGITS, .individual_digits = flag(j, "individual_digits", false)}, st);
    if (!strcmp(type, "WhitespaceSplit")) return add_step(tok, (tok_pre){.type = TOK_PRE_WSPLIT}, st);
    if (!strcmp(type, "Whitespace")) {
        tok_pre s = {.type = TOK_PRE_SPLIT, .behavior = TOK_SPLIT_REMOVED, .invert = true};
        if (compile_step_regex(&s, whitespace_regex, strlen(whitespace_regex), st) != 0) return -1;
        return add_step(tok, s, st);
    }
    return tide_fail(st, TIDE_ERR_UNSUPPORTED,
                     "pre_tokenizer type \"%s\" is not supported (tide handles Sequence, Split, "
                     "ByteLevel, Digits, Whitespace, WhitespaceSplit)", type);
}

int tok_parse_pretokenizer(tide_tokenizer *tok, json_t *j, tide_status *st) {
    if (!j || json_is_null(j)) return 0;
    if (parse_one(tok, j, 0, st) != 0) return tide_fail_ctx(st, "pre_tokenizer");
    return 0;
}

void tok_free_pretokenizer(tide_tokenizer *tok) {
    for (size_t i = 0; i < tok->n_pre; i++) {
        if (tok->pre[i].re) onig_free(tok->pre[i].re);
        free(tok->pre[i].re_src);
        free(tok->pre[i].lit);
    }
    free(tok->pre);
    tok->pre = NULL;
    tok->n_pre = 0;
}

/* ---- matching: fill sc->work / sc->is_match with the piece's (range, match) list ---- */

static int push_cand(tok_pretok_scratch *sc, size_t off, size_t len, bool m, tide_status *st) {
    if (sc->work.n == sc->is_match_cap) {
        size_t cap = sc->is_match_cap ? sc->is_match_cap * 2 : 64;
        uint8_t *p = realloc(sc->is_match, cap);
        if (!p) return tide_fail(st, TIDE_ERR_NOMEM, "pre_tokenizer: out of memory");
        sc->is_match = p;
        sc->is_match_cap = cap;
    }
    sc->is_match[sc->work.n] = m;
    return tok_spans_push(&sc->work, (uint32_t)off, (uint32_t)len, st);
}

static size_t char_len_at(const char *s, size_t n, size_t i) {
    uint32_t cp;
    int l = tok_utf8_decode((const uint8_t *)s + i, n - i, &cp);
    return l ? (size_t)l : 1;
}

/* Names the failing step and where its search started in the caller's text. */
static int regex_step_fail(const tide_tokenizer *tok, const tok_pre *p, const tok_pretok_scratch *sc, size_t at,
                           int r, tide_status *st) {
    at += sc->err_piece;
    if (sc->err_normalized)
        tok_regex_fail(st, r, "normalized", at);
    else
        tok_regex_fail(st, r, "input", sc->err_off + at);
    tide_fail_ctx(st, "pre_tokenizer step %zu (%s /%.80s/)", (size_t)(p - tok->pre),
                  p->type == TOK_PRE_SPLIT ? "Split" : "ByteLevel", p->re_src);
    if (sc->err_normalized) tide_fail_ctx(st, "segment at input byte %zu", sc->err_off);
    return -1;
}

/* Regex matches as the onig crate's find_iter yields them (an empty match
 * right after the previous match is skipped by one character), turned into
 * the alternating list of HF's Pattern::find_matches. s starts at byte
 * `base` of the step's text (for messages). */
static int regex_matches(const tide_tokenizer *tok, const tok_pre *p, tok_pretok_scratch *sc, const char *s, size_t n,
                         size_t base, tide_status *st) {
    if (p->fast != TOK_FAST_NONE && !sc->no_fast) {
        /* These patterns never match empty, so no empty-match stepping. */
        size_t prev = 0, ms, me;
        while (tok_fast_search(tok, p->fast, s, n, prev, &ms, &me)) {
            if (prev != ms && push_cand(sc, prev, ms - prev, false, st) != 0) return -1;
            if (push_cand(sc, ms, me - ms, true, st) != 0) return -1;
            prev = me;
        }
        if (prev != n) return push_cand(sc, prev, n - prev, false, st);
        return 0;
    }
    if (!sc->region && !(sc->region = onig_region_new()))
        return tide_fail(st, TIDE_ERR_NOMEM, "pre_tokenizer: out of memory");
    if (!sc->match_param && !(sc->match_param = onig_new_match_param()))
        return tide_fail(st, TIDE_ERR_NOMEM, "pre_tokenizer: out of memory");
    size_t from = 0, prev = 0;
    bool have_last = false;
    size_t last_end = 0;
    while (from <= n) {
        int r = tok_regex_search(p->re, s, n, from, sc->region, sc->match_param);
        if (r == ONIG_MISMATCH) break;
        if (r < 0) return regex_step_fail(tok, p, sc, base + from, r, st);
        size_t ms = (size_t)sc->region->beg[0], me = (size_t)sc->region->end[0];
        if (ms == me && have_last && last_end == me) {
            from += from < n ? char_len_at(s, n, from) : 1;
            continue;
        }
        from = me;
        have_last = true;
        last_end = me;
        if (prev != ms && push_cand(sc, prev, ms - prev, false, st) != 0) return -1;
        if (push_cand(sc, ms, me - ms, true, st) != 0) return -1;
        prev = me;
    }
    if (prev != n) return push_cand(sc, prev, n - prev, false, st);
    return 0;
}

static int literal_matches(const tok_pre *p, tok_pretok_scratch *sc, const char *s, size_t n, tide_status *st) {
    size_t prev = 0, pos = 0;
    while (pos < n) {
        const char *hit = memmem(s + pos, n - pos, p->lit, p->lit_len);
        if (!hit) break;
        size_t at = (size_t)(hit - s);
        if (prev != at && push_cand(sc, prev, at - prev, false, st) != 0) return -1;
        if (push_cand(sc, at, p->lit_len, true, st) != 0) return -1;
        prev = pos = at + p->lit_len;
    }
    if (prev != n) return push_cand(sc, prev, n - prev, false, st);
    return 0;
}

/* Each character satisfying the predicate is one match; runs of others are
 * one non-match (HF's Pattern impl for Fn(char) -> bool). */
static int char_matches(bool (*pred)(uint32_t), tok_pretok_scratch *sc, const char *s, size_t n, tide_status *st) {
    size_t last = 0, i = 0;
    while (i < n) {
        uint32_t cp = 0;
        int l = tok_utf8_decode((const uint8_t *)s + i, n - i, &cp);
        size_t step = l ? (size_t)l : 1;
        if (pred(cp)) {
            if (last < i && push_cand(sc, last, i - last, false, st) != 0) return -1;
            if (push_cand(sc, i, step, true, st) != 0) return -1;
            last = i + step;
        }
        i += step;
    }
    if (last < n) return push_cand(sc, last, n - last, false, st);
    return 0;
}

/* Shapes the candidate list by behaviour (HF's NormalizedString::split) and
 * appends the surviving non-empty ranges, offset by base, to out. */
static int emit_behavior(tok_pretok_scratch *sc, tok_split_behavior beh, bool invert, uint32_t base,
                         tok_spans *out, tide_status *st) {
    size_t n = sc->work.n;
    if (n == 0) return 0;
    tok_span *w = sc->work.v;
    uint8_t *m = sc->is_match;
    if (invert)
        for (size_t i = 0; i < n; i++) m[i] = !m[i];
    /* Merge in place into w[0..k), with keep flags in m. */
    size_t k = 0;
    bool prev_match = false;
    switch (beh) {
    case TOK_SPLIT_ISOLATED:
        for (size_t i = 0; i < n; i++) m[i] = 0;
        k = n;
        break;
    case TOK_SPLIT_REMOVED:
        k = n; /* m[i] = 1 means removed */
        break;
    case TOK_SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < n; i++) {
            bool im = m[i];
            if (im == prev_match && k > 0) w[k - 1].len = w[i].off + w[i].len - w[k - 1].off;
            else w[k++] = w[i];
            prev_match = im;
        }
        memset(m, 0, k);
        break;
    case TOK_SPLIT_MERGED_PREV:
        for (size_t i = 0; i < n; i++) {
            bool im = m[i];
            if (im && !prev_match && k > 0) w[k - 1].len = w[i].off + w[i].len - w[k - 1].off;
            else w[k++] = w[i];
            prev_match = im;
        }
        memset(m, 0, k);
        break;
    case TOK_SPLIT_MERGED_NEXT: {
        /* Right to left, then the kept ranges are in reverse order at the top. */
        size_t top = n;
        for (size_t i = n; i-- > 0;) {
            bool im = m[i];
            if (im && !prev_match && top < n) {
                w[top].len = w[top].off + w[top].len - w[i].off;
                w[top].off = w[i].off;
            } else {
                w[--top] = w[i];
            }
            prev_match = im;
        }
        memmove(w, w + top, (n - top) * sizeof *w);
        k = n - top;
        memset(m, 0, k);
        break;
    }
    }
    for (size_t i = 0; i < k; i++)
        if (!m[i] && w[i].len && tok_spans_push(out, base + w[i].off, w[i].len, st) != 0) return -1;
    return 0;
}

static int split_piece(const tide_tokenizer *tok, const tok_pre *p, tok_pretok_scratch *sc, const char *s, size_t n,
                       uint32_t base, tok_spans *out, tide_status *st) {
    sc->work.n = 0;
    int rc;
    switch (p->type) {
    case TOK_PRE_SPLIT: rc = p->re ? regex_matches(tok, p, sc, s, n, base, st) : literal_matches(p, sc, s, n, st); break;
    case TOK_PRE_DIGITS: rc = char_matches(tok_is_numeric, sc, s, n, st); break;
    case TOK_PRE_WSPLIT: rc = char_matches(tok_is_whitespace, sc, s, n, st); break;
    default: rc = regex_matches(tok, p, sc, s, n, base, st); break; /* ByteLevel's GPT-2 split */
    }
    if (rc != 0) return -1;
    tok_split_behavior beh = p->behavior;
    if (p->type == TOK_PRE_DIGITS) beh = p->individual_digits ? TOK_SPLIT_ISOLATED : TOK_SPLIT_CONTIGUOUS;
    if (p->type == TOK_PRE_WSPLIT) beh = TOK_SPLIT_REMOVED;
    if (p->type == TOK_PRE_BYTELEVEL) beh = TOK_SPLIT_ISOLATED;
    return emit_behavior(sc, beh, p->type == TOK_PRE_SPLIT && p->invert, base, out, st);
}

/* ByteLevel: prefix space, optional regex split, byte mapping into a new buffer. */
static int bytelevel_step(const tide_tokenizer *tok, const tok_pre *p, tok_pretok_scratch *sc, const tok_buf *in, const tok_spans *pin,
                          tok_buf *out, tok_spans *pout, tide_status *st) {
    tok_buf *tmp = &sc->prefixed;
    tok_spans *sub = &sc->sub;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < pin->n; i++) {
        const char *s = in->p + pin->v[i].off;
        size_t n = pin->v[i].len;
        if (p->add_prefix_space && (n == 0 || s[0] != ' ')) {
            tmp->n = 0;
            if ((rc = tok_buf_append(tmp, " ", 1, st)) || (rc = tok_buf_append(tmp, s, n, st))) break;
            s = tmp->p;
            n = tmp->n;
        }
        sub->n = 0;
        if (p->use_regex) {
            /* For messages: where s is in the step's text (a prefix space
             * that is not there is counted back out). */
            sc->err_piece = pin->v[i].off - (s == tmp->p && pin->v[i].off ? 1u : 0u);
            rc = split_piece(tok, p, sc, s, n, 0, sub, st);
            sc->err_piece = 0;
        }
        else if (n) rc = tok_spans_push(sub, 0, (uint32_t)n, st);
        for (size_t j = 0; rc == 0 && j < sub->n; j++) {
            size_t start = out->n;
            rc = tok_bytelevel_map(s + sub->v[j].off, sub->v[j].len, out, st);
            if (rc == 0) rc = tok_spans_push(pout, (uint32_t)start, (uint32_t)(out->n - start), st);
        }
    }
    return rc;
}

int tok_pretokenize(const tide_tokenizer *tok, tok_pretok_scratch *sc, const char *s, size_t n,
                    const tok_buf **buf, const tok_spans **spans, tide_status *st) {
    if (n > UINT32_MAX / 2) return tide_fail(st, TIDE_ERR_INVALID, "pre_tokenizer: text piece of %zu bytes is too long", n);
    int cur = 0;
    sc->text[0].n = 0;
    sc->spans[0].n = 0;
    if (tok_buf_append(&sc->text[0], s, n, st) != 0) return -1;
    if (n && tok_spans_push(&sc->spans[0], 0, (uint32_t)n, st) != 0) return -1;
    for (size_t k = 0; k < tok->n_pre; k++) {
        const tok_pre *p = &tok->pre[k];
        tok_buf *tin = &sc->text[cur];
        tok_spans *in = &sc->spans[cur], *out = &sc->spans[1 - cur];
        out->n = 0;
        if (p->type == TOK_PRE_BYTELEVEL) {
            tok_buf *tout = &sc->text[1 - cur];
            tout->n = 0;
            if (bytelevel_step(tok, p, sc, tin, in, tout, out, st) != 0) return -1;
        } else {
            for (size_t i = 0; i < in->n; i++) {
                if (split_piece(tok, p, sc, tin->p + in->v[i].off, in->v[i].len, in->v[i].off, out, st) != 0) return -1;
            }
            /* The text did not change: the next step reads it from the other slot. */
            tok_buf t = sc->text[cur];
            sc->text[cur] = sc->text[1 - cur];
            sc->text[1 - cur] = t;
        }
        cur = 1 - cur;
    }
    *buf = &sc->text[cur];
    *spans = &sc->spans[cur];
    return 0;
}

void tok_pretok_scratch_free(tok_pretok_scratch *sc) {
    for (int i = 0; i < 2; i++) {
        tok_buf_free(&sc->text[i]);
        tok_spans_free(&sc->spans[i]);
    }
    tok_spans_free(&sc->work);
    tok_buf_free(&sc->prefixed);
    tok_spans_free(&sc->sub);
    free(sc->is_match);
    if (sc->region) onig_region_free(sc->region, 1);
    if (sc->match_param) onig_free_match_param(sc->match_param);
    memset(sc, 0, sizeof *sc);
}
