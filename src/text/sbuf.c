/* Growable byte string; see sbuf.h. */
#include "text/sbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tide_sb_init(tide_sb *b) { memset(b, 0, sizeof *b); }

void tide_sb_free(tide_sb *b) {
    free(b->s);
    memset(b, 0, sizeof *b);
}

void tide_sb_reset(tide_sb *b) {
    b->len = 0;
    if (b->s) b->s[0] = 0;
}

static int grow(tide_sb *b, size_t extra) {
    if (b->oom) return -1;
    if (extra > ((size_t)-1) / 4 - b->len) { b->oom = 1; return -1; }
    size_t need = b->len + extra + 1;
    if (need <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) cap *= 2;
    char *s = realloc(b->s, cap);
    if (!s) { b->oom = 1; return -1; }
    b->s = s;
    b->cap = cap;
    return 0;
}

void tide_sb_addn(tide_sb *b, const char *s, size_t n) {
    if (grow(b, n) != 0) return;
    if (n) memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

void tide_sb_add(tide_sb *b, const char *s) { tide_sb_addn(b, s, strlen(s)); }

void tide_sb_addc(tide_sb *b, char c) { tide_sb_addn(b, &c, 1); }

void tide_sb_addf(tide_sb *b, const char *fmt, ...) {
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) { b->oom = 1; return; }
    if ((size_t)n < sizeof small) { tide_sb_addn(b, small, (size_t)n); return; }
    if (grow(b, (size_t)n) != 0) return;
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void tide_sb_consume(tide_sb *b, size_t n) {
    if (n >= b->len) { tide_sb_reset(b); return; }
    memmove(b->s, b->s + n, b->len - n);
    b->len -= n;
    b->s[b->len] = 0;
}

int tide_sb_check(const tide_sb *b, const char *what, tide_status *st) {
    if (!b->oom) return 0;
    return tide_fail(st, TIDE_ERR_NOMEM, "%s: out of memory", what);
}

char *tide_sb_take(tide_sb *b) {
    if (b->oom) return NULL;
    char *s = b->s;
    if (!s) s = calloc(1, 1);
    memset(b, 0, sizeof *b);
    return s;
}
