#include "base/status.h"

#include <stdio.h>
#include <string.h>

int tide_vfail(tide_status *st, tide_code code, const char *fmt, va_list ap) {
    if (st) {
        st->code = code;
        vsnprintf(st->msg, sizeof st->msg, fmt, ap);
    }
    return -1;
}

int tide_fail(tide_status *st, tide_code code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    tide_vfail(st, code, fmt, ap);
    va_end(ap);
    return -1;
}

int tide_fail_ctx(tide_status *st, const char *fmt, ...) {
    if (!st) return -1;
    char old[TIDE_STATUS_MSG];
    memcpy(old, st->msg, sizeof old);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(st->msg, sizeof st->msg, fmt, ap);
    va_end(ap);
    size_t used = n < 0 ? 0 : (size_t)n;
    /* A layer that names itself in its own messages and again when it
     * passes a failure up ("engine: engine: out of memory") says it once. */
    if (used > 0 && used + 1 < sizeof old && !strncmp(old, st->msg, used) && old[used] == ':' &&
        old[used + 1] == ' ') {
        memcpy(st->msg, old, sizeof old);
        if (st->code == TIDE_OK) st->code = TIDE_ERR_INTERNAL;
        return -1;
    }
    if (used < sizeof st->msg - 1) {
        st->msg[used] = ':';
        size_t room = sizeof st->msg - used - 1;
        size_t len = strnlen(old, sizeof old - 1);
        if (room > 1) {
            st->msg[used + 1] = ' ';
            size_t copy = len < room - 2 ? len : room - 2;
            memcpy(st->msg + used + 2, old, copy);
            st->msg[used + 2 + copy] = 0;
        } else {
            st->msg[used + 1] = 0;
        }
    }
    if (st->code == TIDE_OK) st->code = TIDE_ERR_INTERNAL;
    return -1;
}

const char *tide_code_name(tide_code code) {
    switch (code) {
    case TIDE_OK: return "ok";
    case TIDE_ERR_INVALID: return "invalid";
    case TIDE_ERR_IO: return "io";
    case TIDE_ERR_FORMAT: return "format";
    case TIDE_ERR_MISSING: return "missing";
    case TIDE_ERR_UNSUPPORTED: return "unsupported";
    case TIDE_ERR_NOMEM: return "nomem";
    case TIDE_ERR_INTERNAL: return "internal";
    }
    return "unknown";
}
