/* libmicrohttpd glue shared by tide serve and tide route (http_glue.h). */
#include "serve/http_glue.h"

#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"

void tide_http_body_begin(struct MHD_Connection *c, tide_sb *body, int *too_big, size_t max) {
    tide_sb_init(body);
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    *too_big = cl && strtoull(cl, NULL, 10) > max;
}

void tide_http_log(void *cls, const char *fmt, va_list ap) {
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    tide_log(TIDE_LOG_DEBUG, "%s: http: %s", (const char *)cls, msg);
}

void tide_http_body_add(tide_sb *body, int *too_big, size_t max, const char *data, size_t n) {
    if (!*too_big && body->len + n > max) *too_big = 1, tide_sb_free(body);
    if (!*too_big) tide_sb_addn(body, data, n);
    if (body->oom) *too_big = 1, tide_sb_free(body);
}

enum MHD_Result tide_http_queue_buffer(struct MHD_Connection *c, int status, const char *ctype, char *body,
                                       size_t len) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body ? body : (char *)"", body ? MHD_RESPMEM_MUST_FREE
                                                                                             : MHD_RESPMEM_PERSISTENT);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype ? ctype : "application/json");
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

ssize_t tide_http_pipe_read(const tide_http_pipe *p, char *out, size_t max) {
    tide_sb *b = p->buf;
    if (*p->off < b->len) {
        size_t k = b->len - *p->off < max ? b->len - *p->off : max;
        memcpy(out, b->s + *p->off, k);
        *p->off += k;
        if (*p->off == b->len) tide_sb_reset(b), *p->off = 0;
        return (ssize_t)k;
    }
    if (*p->finished) return MHD_CONTENT_READER_END_OF_STREAM;
    *p->suspended = 1;
    MHD_suspend_connection(p->conn);
    return 0;
}
