/* Fuzzes tide serve's request path. One server runs for the whole session
 * (on the tiny checkpoint with a vision tower written to a temporary directory at the
 * first input, removed at exit), listening on a free loopback port; the
 * first byte of an input picks what the rest is:
 *
 *   even: raw bytes sent over a TCP connection to it (request lines,
 *         headers, Content-Length and chunked bodies are libmicrohttpd's to
 *         parse, then the routes'), the write side shut, the answer read
 *         while it comes (then the connection is closed);
 *   odd:  byte 1 picks a route, the rest is its JSON body, handed to
 *         serve_route below the HTTP library (a job it makes is dropped
 *         without generating).
 *
 * Requests that generate are cut by a 0.2 s request timeout. Every input
 * must leave the server answering; ASan/UBSan and leak checks do the rest. */
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "model/config.h"
#include "model/synth.h"
#include "serve/serve_internal.h"

/* The fuzzing session's one server (a harness may keep state; the library
 * does not). */
static tide_server *g_srv;
static char g_dir[256];

static void rm_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[512];
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
    closedir(d);
    rmdir(dir);
}

static void teardown(void) {
    tide_server_stop(g_srv);
    g_srv = NULL;
    if (g_dir[0]) rm_dir(g_dir);
}

static int setup(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/fuzz_serve.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_dir)) return -1;
    atexit(teardown);
    tide_status st = {0};
    tide_config cfg;
    tide_synth_opts so = {.out_dir = g_dir, .shape = "tiny", .seed = 1, .tokenizer = TIDE_DEFAULT_TOKENIZER};
    /* with the tiny vision tower, so that image parts are decoded, planned
     * and encoded as in production */
    if (tide_config_preset("tiny", &cfg, &st) != 0 || tide_config_preset_vision("tiny", &cfg, &st) != 0 ||
        tide_synth_write(&cfg, &so, NULL, &st) != 0) {
        fprintf(stderr, "fuzz_serve_http: %s\n", st.msg);
        return -1;
    }
    tide_serve_config sc = tide_serve_config_default();
    sc.engine.model_dir = g_dir;
    sc.engine.n_threads = 1;
    sc.port = 0;
    sc.timeout_s = 0.2;
    sc.max_body = 1 << 16;
    sc.http_threads = 1;
    if (tide_server_start(&sc, &g_srv, &st) != 0 || tide_server_wait_ready(g_srv, &st) != 0) {
        fprintf(stderr, "fuzz_serve_http: %s\n", st.msg);
        return -1;
    }
    return 0;
}

static void over_tcp(const uint8_t *data, size_t size) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)tide_server_port(g_srv))};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
        for (size_t off = 0; off < size;) {
            ssize_t n = send(fd, data + off, size - off, MSG_NOSIGNAL);
            if (n <= 0) break;
            off += (size_t)n;
        }
        shutdown(fd, SHUT_WR);
        /* Reads what comes: up to 300 ms for the first bytes, then while
         * more follows within 30 ms. libmicrohttpd keeps a half-closed
         * keep-alive connection until its idle timeout, so waiting for the
         * close would cost that timeout per input; closing early instead
         * also exercises the disconnect path. */
        char buf[4096];
        struct pollfd p = {.fd = fd, .events = POLLIN};
        for (int wait = 300; poll(&p, 1, wait) > 0 && recv(fd, buf, sizeof buf, 0) > 0; wait = 30) {
        }
    }
    close(fd);
}

static const char *header_none(void *ud, const char *name) {
    (void)ud, (void)name;
    return NULL;
}

static void below_http(const uint8_t *data, size_t size) {
    static const char *const paths[] = {"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages",
                                        "/v1/messages/count_tokens", "/tokenize", "/detokenize", "/v1/models"};
    const char *path = size ? paths[data[0] % (sizeof paths / sizeof paths[0])] : paths[0];
    serve_http_req rq = {.method = strcmp(path, "/v1/models") ? "POST" : "GET", .path = path,
                         .body = size > 1 ? (const char *)data + 1 : "", .len = size > 1 ? size - 1 : 0,
                         .header = header_none};
    serve_reply rp;
    serve_route(g_srv, &rq, &rp);
    if (rp.job) { /* a valid generation request: not run here */
        pthread_mutex_lock(&g_srv->mu);
        serve_job_unref(rp.job);
        pthread_mutex_unlock(&g_srv->mu);
    }
    free(rp.body);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_srv && !g_dir[0] && setup() != 0) abort();
    if (!g_srv || size < 1) return 0;
    if (data[0] & 1) below_http(data + 1, size - 1);
    else over_tcp(data + 1, size - 1);
    return 0;
}
