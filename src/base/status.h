/* Status reporting: every fallible function in tide returns an int (0 on
 * success, -1 on failure) and fills a caller-owned tide_status with a code and
 * a human-readable message that says what was wrong and where.
 *
 *     tide_status st = {0};
 *     if (tide_st_open(path, &file, &st) != 0) { fprintf(stderr, "%s\n", st.msg); ... }
 *
 * No global errno-style state: the status travels with the call. */
#ifndef TIDE_BASE_STATUS_H
#define TIDE_BASE_STATUS_H

#include <stdarg.h>
#include <stddef.h>

typedef enum tide_code {
    TIDE_OK = 0,
    TIDE_ERR_INVALID,     /* bad argument or malformed input */
    TIDE_ERR_IO,          /* file system or OS failure */
    TIDE_ERR_FORMAT,      /* a file exists but its content is wrong (corrupt, truncated) */
    TIDE_ERR_MISSING,     /* a required field, tensor or file is absent */
    TIDE_ERR_UNSUPPORTED, /* valid input that tide does not handle (yet) */
    TIDE_ERR_NOMEM,       /* allocation failed or a limit was exceeded */
    TIDE_ERR_INTERNAL,    /* a bug in tide */
} tide_code;

#define TIDE_STATUS_MSG 1024

typedef struct tide_status {
    tide_code code;
    char msg[TIDE_STATUS_MSG];
} tide_status;

/* Sets st (if non-NULL) and returns -1, so callers can `return tide_fail(...)`. */
int tide_fail(tide_status *st, tide_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int tide_vfail(tide_status *st, tide_code code, const char *fmt, va_list ap);

/* Prepends context to an existing message: "loading x: <old message>". */
int tide_fail_ctx(tide_status *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

const char *tide_code_name(tide_code code);

#endif
