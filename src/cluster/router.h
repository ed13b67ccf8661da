/* tide route: the HTTP front door over a pool of `tide serve` replicas
 * (docs/route.md). libmicrohttpd takes the clients' requests; one thread
 * runs libcurl's multi interface for every upstream transfer (forwarded
 * requests, health checks, metrics scrapes). Bodies and SSE streams are
 * forwarded as they are: the router never parses an API beyond what
 * placement needs (router_req.c).
 *
 *     tide_router *r;
 *     if (tide_router_start(&cfg, &r, &st) != 0) ...
 *     ... SIGTERM ...
 *     tide_router_stop(r);
 */
#ifndef TIDE_CLUSTER_ROUTER_H
#define TIDE_CLUSTER_ROUTER_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "cluster/route.h"

typedef enum tide_route_api {
    TIDE_ROUTE_API_NONE = 0, /* not a generation route: forwarded to any replica */
    TIDE_ROUTE_API_CHAT,
    TIDE_ROUTE_API_COMPLETIONS,
    TIDE_ROUTE_API_RESPONSES,
    TIDE_ROUTE_API_MESSAGES,
} tide_route_api;

tide_route_api tide_route_api_of_path(const char *path);

#define TIDE_ROUTE_MAX_CHAIN 256

/* What placement reads of a generation request (router_req.c). */
typedef struct tide_route_req {
    int stream;
    int resumable; /* a stream whose output is reproducible (temperature 0 or a seed, one choice;
                    * Chat, Completions, Messages): a broken one can be resumed elsewhere */
    int64_t prompt_tokens; /* estimate */
    uint64_t chain[TIDE_ROUTE_MAX_CHAIN];
    int64_t upto[TIDE_ROUTE_MAX_CHAIN]; /* prompt tokens (estimated) covered by units 0..i */
    int n_chain;
} tide_route_req;

/* -1 when the body is not a JSON object (placement then uses the
 * estimate alone; the replica answers the 400). */
int tide_route_req_read(tide_route_api api, const char *body, size_t len, tide_route_req *out);
/* The disaggregated path's first leg: the same request, one output token,
 * not streamed (malloc'd; NULL when the body is not a JSON object). */
char *tide_route_prefill_body(tide_route_api api, const char *body, size_t len, size_t *out_len);

/* One SSE event of a stream (its "data: " payload, [DONE] included) as
 * resumption reads it: *text (malloc'd, may be empty) the output text it
 * carries; returns 1 for an event that only opens the stream or carries
 * text, 0 for anything else (a finish, usage, a tool call: a stream past
 * it is not resumed), -1 for a payload that is not JSON. */
int tide_route_event_text(tide_route_api api, const char *data, size_t len, char **text);

typedef struct tide_router tide_router;

int tide_router_start(const tide_route_config *cfg, tide_router **out, tide_status *st);
int tide_router_port(const tide_router *r);
void tide_router_stop(tide_router *r);

#endif
