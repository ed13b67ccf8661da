/* A growable byte string for building prompts, JSON and SSE events.
 *
 * Appends never fail loudly: an allocation failure sets `oom` and later
 * appends become no-ops, so a builder can run to the end and check once
 * (tide_sb_check). The buffer is always NUL-terminated when non-empty. */
#ifndef TIDE_TEXT_SBUF_H
#define TIDE_TEXT_SBUF_H

#include <stddef.h>

#include "base/status.h"

typedef struct tide_sb {
    char *s;
    size_t len, cap;
    int oom;
} tide_sb;

void tide_sb_init(tide_sb *b);
void tide_sb_free(tide_sb *b);
void tide_sb_reset(tide_sb *b); /* len = 0, keeps the memory */
void tide_sb_addn(tide_sb *b, const char *s, size_t n);
void tide_sb_add(tide_sb *b, const char *s);
void tide_sb_addc(tide_sb *b, char c);
void tide_sb_addf(tide_sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Removes the first n bytes. */
void tide_sb_consume(tide_sb *b, size_t n);
/* 0 when no allocation failed, else -1 with a status naming `what`. */
int tide_sb_check(const tide_sb *b, const char *what, tide_status *st);
/* Hands the string to the caller (never NULL on success: "" for empty). */
char *tide_sb_take(tide_sb *b);

#endif
