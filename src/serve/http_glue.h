/* libmicrohttpd glue shared by the server (serve_http.c) and the router
 * (cluster/router.c): a request body accumulated under a size limit, a
 * complete answer queued from a buffer, and a streamed answer handed out
 * from a buffer that another thread fills (the connection is suspended
 * while the buffer is empty and resumed by the filler). */
#ifndef TIDE_SERVE_HTTP_GLUE_H
#define TIDE_SERVE_HTTP_GLUE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <microhttpd.h>

#include "text/sbuf.h"

/* A new request's body: empty, and *too_big when its Content-Length is
 * over max already. */
void tide_http_body_begin(struct MHD_Connection *c, tide_sb *body, int *too_big, size_t max);
/* Appends a chunk of a request body; past `max` bytes (or on an allocation
 * failure) the body is dropped and *too_big set. */
void tide_http_body_add(tide_sb *body, int *too_big, size_t max, const char *data, size_t n);

/* libmicrohttpd's error log, at debug level; cls is the name prefixed
 * ("serve", "route"). */
void tide_http_log(void *cls, const char *fmt, va_list ap);

/* Queues a complete answer; body is malloc'd and taken (NULL: empty). */
enum MHD_Result tide_http_queue_buffer(struct MHD_Connection *c, int status, const char *ctype, char *body,
                                       size_t len);

/* A streamed answer's state, guarded by its owner's mutex. */
typedef struct tide_http_pipe {
    tide_sb *buf;                 /* bytes waiting for the connection */
    size_t *off;                  /* of them, already handed out */
    const int *finished;          /* nothing more will come */
    int *suspended;               /* the connection waits for the filler's resume */
    struct MHD_Connection *conn;
} tide_http_pipe;

/* The body of a libmicrohttpd content reader (call it under the owner's
 * mutex): up to max bytes of the buffer, the end of the stream, or 0 after
 * suspending the connection. */
ssize_t tide_http_pipe_read(const tide_http_pipe *p, char *out, size_t max);

#endif
