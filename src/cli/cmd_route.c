/* tide route: the load balancer in front of `tide serve` replicas
 * (src/cluster/router.c, docs/route.md). Prints one line
 * "tide route: listening on http://HOST:PORT" on stdout when listening;
 * SIGTERM or SIGINT ends the requests still open (503, or an error event
 * for a stream) and exits 0. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/stop_signal.h"
#include "cluster/router.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tide route --config FILE [--host ADDR] [--port N] [--mode aware|round-robin]\n"
            "\n"
            "One HTTP front door over a pool of 'tide serve' replicas (docs/route.md): the\n"
            "same routes as tide serve, forwarded (bodies and SSE streams as they are) to\n"
            "replicas tagged prefill, decode or mixed, placed by prompt-length bucket,\n"
            "prefix affinity and load. With prefill and decode replicas up, a request is\n"
            "prefilled on a prefill replica (one output token, its pages published to the\n"
            "KV store the replicas share) and answered by a decode replica.\n"
            "Health checks (/health) and load (/metrics) every interval; a replica that\n"
            "fails them or drops a connection is taken out; a request whose answer has not\n"
            "started is retried on another replica.\n"
            "\n"
            "The router's own routes:\n"
            "  GET /health  GET /metrics (Prometheus text)  GET /router/replicas\n"
            "  POST /router/replicas {\"url\": \"http://HOST:PORT\", \"role\": \"decode\"}  (join)\n"
            "  DELETE /router/replicas {\"url\": \"http://HOST:PORT\"}                 (leave)\n"
            "\n"
            "options:\n"
            "  --config FILE        the JSON configuration (replicas, buckets, weights, health)\n"
            "  --host ADDR          IPv4 address to listen on (overrides the file; default 127.0.0.1)\n"
            "  --port N             TCP port (overrides the file; default 8080; 0 = any free port)\n"
            "  --mode M             placement: aware (default) or round-robin\n");
}

int tide_cmd_route(int argc, char **argv) {
    const char *config = NULL, *host = NULL, *mode = NULL;
    long port = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return TIDE_EXIT_OK;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "tide route: %s: unknown option or missing value\n", a);
            return TIDE_EXIT_USAGE;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--config")) config = v;
        else if (!strcmp(a, "--host")) host = v;
        else if (!strcmp(a, "--mode")) mode = v;
        else if (!strcmp(a, "--port")) {
            char *end;
            port = strtol(v, &end, 10);
            if (*end || end == v || port < 0 || port > 65535) {
                fprintf(stderr, "tide route: --port '%s': expected 0..65535\n", v);
                return TIDE_EXIT_USAGE;
            }
        } else {
            fprintf(stderr, "tide route: unknown option %s (tide route --help lists them)\n", a);
            return TIDE_EXIT_USAGE;
        }
    }
    if (!config) {
        fprintf(stderr, "tide route: --config FILE is required (tide route --help)\n");
        return TIDE_EXIT_USAGE;
    }
    tide_route_config cfg;
    tide_route_config_default(&cfg);
    tide_status st = {0};
    if (tide_route_config_load(&cfg, config, &st) != 0) {
        fprintf(stderr, "tide route: %s\n", st.msg);
        return TIDE_EXIT_FAIL;
    }
    if (host) {
        if (strlen(host) >= sizeof cfg.host) {
            fprintf(stderr, "tide route: --host: too long\n");
            return TIDE_EXIT_USAGE;
        }
        snprintf(cfg.host, sizeof cfg.host, "%s", host);
    }
    if (port >= 0) cfg.port = (int)port;
    if (mode) {
        if (!strcmp(mode, "aware")) cfg.policy.mode = TIDE_PLACE_AWARE;
        else if (!strcmp(mode, "round-robin")) cfg.policy.mode = TIDE_PLACE_ROUND_ROBIN;
        else {
            fprintf(stderr, "tide route: --mode '%s': expected aware or round-robin\n", mode);
            return TIDE_EXIT_USAGE;
        }
    }
    /* the router's threads inherit the mask: the signals reach only the wait below */
    sigset_t old;
    tide_stop_signals_block(&old);
    signal(SIGPIPE, SIG_IGN);
    tide_router *r;
    if (tide_router_start(&cfg, &r, &st) != 0) {
        fprintf(stderr, "tide route: %s\n", st.msg);
        return TIDE_EXIT_FAIL;
    }
    fprintf(stderr, "tide route: %d replicas, placement %s, disaggregation %s\n", cfg.n_replicas,
            cfg.policy.mode == TIDE_PLACE_AWARE ? "aware" : "round-robin", cfg.disaggregate ? "on" : "off");
    printf("tide route: listening on http://%s:%d\n", cfg.host, tide_router_port(r));
    fflush(stdout);
    int sig = tide_stop_signal_wait();
    fprintf(stderr, "tide route: %s: stopping\n", tide_stop_signal_name(sig));
    tide_router_stop(r);
    fprintf(stderr, "tide route: stopped\n");
    return TIDE_EXIT_OK;
}
