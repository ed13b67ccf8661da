/* libmicrohttpd glue: the daemon (epoll, internal thread pool, suspend and
 * resume), body accumulation under the size limit, the hand-over to
 * serve_route, and the two ways a job's answer goes out: a streaming
 * response whose reader suspends the connection until the engine thread has
 * more SSE bytes, or (non-streaming) a connection suspended in the access
 * handler until the whole body is ready. A request whose connection closes
 * before its job finished cancels its session (which frees its KV pages).
 *
 * libmicrohttpd does not poll a suspended connection, and a job's
 * connection is suspended while it waits in the queue (and between
 * tokens), so a client that left would only be noticed when its first
 * bytes are written. The disconnect watcher closes that gap: every job's
 * socket is in an epoll set of its own (EPOLLRDHUP, one shot), and a thread
 * cancels the job the moment its peer hangs up. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

#include "base/log.h"
#include "cache/kv_tier.h"
#include "serve/http_glue.h"
#include "serve/serve_internal.h"

typedef struct conn_ctx {
    tide_sb body;
    int too_big;
    int answered; /* a response was queued */
    serve_job *job;
    int watched_fd; /* in the watcher's epoll set, or -1 */
} conn_ctx;

static const char *get_header(void *ud, const char *name) {
    return MHD_lookup_connection_value((struct MHD_Connection *)ud, MHD_HEADER_KIND, name);
}

static void count_status(tide_server *srv, int status) {
    pthread_mutex_lock(&srv->mu);
    serve_metrics_count_status(&srv->metrics, status);
    pthread_mutex_unlock(&srv->mu);
}

static enum MHD_Result queue_buffer(tide_server *srv, struct MHD_Connection *c, int status, const char *ctype,
                                    char *body, size_t len) {
    count_status(srv, status);
    return tide_http_queue_buffer(c, status, ctype, body, len);
}

/* Streaming: hands out what the engine thread wrote; suspends when there
 * is nothing yet (the engine thread resumes it). */
static ssize_t sse_read(void *cls, uint64_t pos, char *out, size_t max) {
    (void)pos;
    serve_job *j = cls;
    pthread_mutex_lock(&j->srv->mu);
    tide_http_pipe p = {&j->buf, &j->off, &j->finished, &j->suspended, j->conn};
    ssize_t n = tide_http_pipe_read(&p, out, max);
    if (n > 0 && j->t_out == 0) j->t_out = serve_now();
    pthread_mutex_unlock(&j->srv->mu);
    return n;
}

/* ---- the disconnect watcher ---- */

/* The client of job j hung up (watcher thread): cancel the job now. */
static void client_left(tide_server *srv, int64_t seq) {
    pthread_mutex_lock(&srv->mu);
    for (serve_job *j = srv->active; j; j = j->next) {
        if (j->seq != seq) continue;
        if (j->conn && !j->finished && !j->cancel) {
            j->cancel = 1;
            srv->metrics.disconnects++;
            if (j->gid && srv->gen) tide_gen_cancel(srv->gen, j->gid); /* frees its KV pages */
        }
        break;
    }
    pthread_mutex_unlock(&srv->mu);
}

static void *watcher_main(void *arg) {
    tide_server *srv = arg;
    struct epoll_event ev[32];
    for (;;) {
        int n = epoll_wait(srv->watch_ep, ev, 32, -1);
        for (int i = 0; i < n; i++) {
            if (ev[i].data.u64 == 0) return NULL; /* the stop eventfd */
            client_left(srv, (int64_t)ev[i].data.u64);
        }
    }
}

/* Puts a job's socket in the watch set (HTTP thread, after submit). */
static void watch(tide_server *srv, struct MHD_Connection *c, conn_ctx *cx, const serve_job *j) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!srv->watcher_on || !ci) return;
    struct epoll_event ev = {.events = EPOLLRDHUP | EPOLLONESHOT, .data.u64 = (uint64_t)j->seq};
    if (epoll_ctl(srv->watch_ep, EPOLL_CTL_ADD, ci->connect_fd, &ev) == 0) cx->watched_fd = ci->connect_fd;
}

static int watcher_start(tide_server *srv, tide_status *st) {
    srv->watch_ep = epoll_create1(EPOLL_CLOEXEC);
    srv->watch_stop = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 0};
    if (srv->watch_ep < 0 || srv->watch_stop < 0 || epoll_ctl(srv->watch_ep, EPOLL_CTL_ADD, srv->watch_stop, &ev) != 0 ||
        pthread_create(&srv->watcher, NULL, watcher_main, srv) != 0) {
        if (srv->watch_ep >= 0) close(srv->watch_ep);
        if (srv->watch_stop >= 0) close(srv->watch_stop);
        return tide_fail(st, TIDE_ERR_INTERNAL, "serve: cannot start the disconnect watcher");
    }
    srv->watcher_on = 1;
    return 0;
}

static void watcher_stop(tide_server *srv) {
    if (!srv->watcher_on) return;
    uint64_t one = 1;
    if (write(srv->watch_stop, &one, sizeof one) != (ssize_t)sizeof one) tide_log(TIDE_LOG_ERROR, "serve: cannot stop the watcher");
    pthread_join(srv->watcher, NULL);
    close(srv->watch_ep);
    close(srv->watch_stop);
    srv->watcher_on = 0;
}

static enum MHD_Result start_stream(tide_server *srv, struct MHD_Connection *c, serve_job *j) {
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, sse_read, j, NULL);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    count_status(srv, 200);
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

/* Non-streaming: queues the body once it is complete, else waits. */
static enum MHD_Result answer_job(tide_server *srv, struct MHD_Connection *c, conn_ctx *cx) {
    serve_job *j = cx->job;
    pthread_mutex_lock(&srv->mu);
    if (!j->finished) {
        j->suspended = 1;
        MHD_suspend_connection(c);
        pthread_mutex_unlock(&srv->mu);
        return MHD_YES;
    }
    int status = j->status;
    size_t len = j->buf.len;
    char *body = tide_sb_take(&j->buf);
    pthread_mutex_unlock(&srv->mu);
    /* tide route's prefill leg: the decode replica reads these pages next */
    const tide_kv_tier *kt = srv->cfg.engine.kv_tier;
    if (j->kv_flush && kt && kt->flush) kt->flush(kt->ctx);
    cx->answered = 1;
    return queue_buffer(srv, c, status, "application/json", body, body ? len : 0);
}

static enum MHD_Result dispatch(tide_server *srv, struct MHD_Connection *c, const char *url, const char *method,
                                conn_ctx *cx) {
    serve_reply rp = {0};
    if (cx->too_big) {
        serve_error(&rp, serve_api_of_path(url), 413, "invalid_request_error", NULL,
                    "the body is larger than this server's limit of %zu bytes", srv->cfg.max_body);
    } else {
        serve_http_req rq = {.method = method, .path = url, .body = cx->body.s ? cx->body.s : "",
                             .len = cx->body.len, .header = get_header, .ud = c};
        serve_route(srv, &rq, &rp);
    }
    if (!rp.job) {
        cx->answered = 1;
        return queue_buffer(srv, c, rp.status, rp.ctype, rp.body, rp.len);
    }
    serve_job *j = rp.job;
    j->conn = c;
    if (serve_job_submit(j, &rp) != 0) {
        pthread_mutex_lock(&srv->mu);
        serve_job_unref(j);
        pthread_mutex_unlock(&srv->mu);
        cx->answered = 1;
        return queue_buffer(srv, c, rp.status, rp.ctype, rp.body, rp.len);
    }
    cx->job = j;
    watch(srv, c, cx, j);
    if (j->stream) {
        cx->answered = 1;
        return start_stream(srv, c, j);
    }
    return answer_job(srv, c, cx);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *data, size_t *data_size, void **con_cls) {
    (void)version;
    tide_server *srv = cls;
    conn_ctx *cx = *con_cls;
    if (!cx) {
        cx = calloc(1, sizeof *cx);
        if (!cx) return MHD_NO;
        tide_http_body_begin(c, &cx->body, &cx->too_big, srv->cfg.max_body);
        cx->watched_fd = -1;
        *con_cls = cx;
        return MHD_YES;
    }
    if (*data_size) {
        tide_http_body_add(&cx->body, &cx->too_big, srv->cfg.max_body, data, *data_size);
        *data_size = 0;
        return MHD_YES;
    }
    if (cx->answered) return MHD_YES;
    if (cx->job) return answer_job(srv, c, cx); /* resumed: the body is ready */
    return dispatch(srv, c, url, method, cx);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)c, (void)toe;
    tide_server *srv = cls;
    conn_ctx *cx = *con_cls;
    if (!cx) return;
    /* out of the watch set before libmicrohttpd closes the socket */
    if (cx->watched_fd >= 0) epoll_ctl(srv->watch_ep, EPOLL_CTL_DEL, cx->watched_fd, NULL);
    if (cx->job) {
        pthread_mutex_lock(&srv->mu);
        serve_job *j = cx->job;
        /* Where a request's time to first token went (monotonic seconds, to
         * set against the client's: tools/bench/serve_overhead.py). */
        if (j->t_first > 0)
            tide_log(TIDE_LOG_DEBUG, "serve: timing %s arrive %.6f engine %.6f first %.6f sse %.6f out %.6f", j->id,
                     j->t_arrive, j->t_engine, j->t_first, j->t_sse, j->t_out);
        j->conn = NULL;
        j->suspended = 0;
        if (!j->finished && !j->cancel) {
            j->cancel = 1;
            srv->metrics.disconnects++;
            if (j->gid && srv->gen) tide_gen_cancel(srv->gen, j->gid); /* frees its KV pages */
        }
        serve_job_unref(j);
        pthread_mutex_unlock(&srv->mu);
    }
    tide_sb_free(&cx->body);
    free(cx);
    *con_cls = NULL;
}


int serve_http_start(tide_server *srv, tide_status *st) {
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, srv->host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)srv->cfg.port);
    } else if (inet_pton(AF_INET6, srv->host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)srv->cfg.port);
        flags |= MHD_USE_IPv6;
    } else {
        return tide_fail(st, TIDE_ERR_INVALID, "--host '%s': not an IPv4 or IPv6 address", srv->host);
    }
    /* One polling thread, or a pool of them (libmicrohttpd warns about a
     * pool of one). Idle keep-alive connections close after 120 s. */
    struct MHD_OptionItem opts[] = {
        {MHD_OPTION_EXTERNAL_LOGGER, (intptr_t)tide_http_log, (void *)"serve"},
        {MHD_OPTION_SOCK_ADDR, 0, &ss},
        {MHD_OPTION_CONNECTION_LIMIT, srv->cfg.max_connections, NULL},
        {MHD_OPTION_CONNECTION_TIMEOUT, 120, NULL},
        {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)on_completed, srv},
        {srv->cfg.http_threads > 1 ? MHD_OPTION_THREAD_POOL_SIZE : MHD_OPTION_END, srv->cfg.http_threads, NULL},
        {MHD_OPTION_END, 0, NULL},
    };
    if (watcher_start(srv, st) != 0) return -1;
    srv->mhd = MHD_start_daemon(flags, (uint16_t)srv->cfg.port, NULL, NULL, on_request, srv, MHD_OPTION_ARRAY, opts,
                                MHD_OPTION_END);
    if (!srv->mhd) {
        watcher_stop(srv);
        return tide_fail(st, TIDE_ERR_IO, "cannot listen on %s port %d (in use, or not an address of this machine)",
                         srv->host, srv->cfg.port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(srv->mhd, MHD_DAEMON_INFO_BIND_PORT);
    srv->port = di ? di->port : srv->cfg.port;
    return 0;
}

void serve_http_stop(tide_server *srv) {
    if (srv->mhd) MHD_stop_daemon(srv->mhd);
    srv->mhd = NULL;
    watcher_stop(srv);
}
