/* tide route: placement of requests on a pool of `tide serve` replicas
 * (docs/route.md). This header is the part shared by the live router
 * (router.c) and the trace simulation (route_sim.c), so that both run the
 * same placement code:
 *
 *   - the configuration (route_config.c): replicas, prompt-length buckets
 *     and their shares of the prefill replicas, load weights, prefix
 *     affinity, health checks;
 *   - the placer (route_place.c): prefill placement by length bucket and
 *     expected prefix hit, decode placement by least weighted load, a
 *     round-robin mode to compare against;
 *   - the prefix keys: a chain of 64-bit hashes, one per prefix unit (a
 *     message of a conversation in the live router, a block of a trace),
 *     each covering everything before it. */
#ifndef TIDE_CLUSTER_ROUTE_H
#define TIDE_CLUSTER_ROUTE_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

typedef enum tide_route_role {
    TIDE_ROLE_MIXED = 0, /* prefill and decode of whole requests */
    TIDE_ROLE_PREFILL,
    TIDE_ROLE_DECODE,
} tide_route_role;

const char *tide_route_role_name(tide_route_role r);
/* "prefill" | "decode" | "mixed" -> role; -1 for anything else. */
int tide_route_role_parse(const char *s, tide_route_role *out);

typedef enum tide_route_mode {
    TIDE_PLACE_AWARE = 0, /* buckets + prefix affinity + least load */
    TIDE_PLACE_ROUND_ROBIN,
} tide_route_mode;

#define TIDE_ROUTE_MAX_BUCKETS 8
#define TIDE_ROUTE_MAX_REPLICAS 64
#define TIDE_ROUTE_URL_MAX 200

typedef struct tide_route_policy {
    tide_route_mode mode;
    int n_buckets;                              /* edges = n_buckets - 1 */
    int64_t edges[TIDE_ROUTE_MAX_BUCKETS - 1];  /* prompt tokens; bucket b holds [edges[b-1], edges[b]) */
    double shares[TIDE_ROUTE_MAX_BUCKETS];      /* of the prefill replicas; normalised */
    /* load = w_prompt * pending prompt tokens + w_running * running requests
     *      + w_context * cached context tokens */
    double w_prompt, w_running, w_context;
    /* A bucket's replicas whose least load is over overload_factor x the
     * role's least load + overload_slack: the whole role takes the request. */
    double overload_factor, overload_slack;
    /* Prefill load remembers the prompt tokens sent to a replica, halved
     * every prefill_memory_s seconds (0 = only what is pending). */
    double prefill_memory_s;
    int prefix_slots;                           /* the prefix table's entries (power of two) */
} tide_route_policy;

tide_route_policy tide_route_policy_default(void);

typedef struct tide_route_replica_cfg {
    char url[TIDE_ROUTE_URL_MAX]; /* http://HOST:PORT */
    tide_route_role role;
} tide_route_replica_cfg;

typedef struct tide_route_config {
    char host[64];
    int port;
    int n_replicas;
    tide_route_replica_cfg replicas[TIDE_ROUTE_MAX_REPLICAS];
    tide_route_policy policy;
    int disaggregate;       /* prefill on a prefill replica, then decode on a decode replica */
    int health_interval_ms; /* /health and /metrics of every replica */
    int health_timeout_ms;
    int fail_threshold;     /* failed checks in a row that take a replica out */
    int retries;            /* other replicas tried for a request not yet streaming */
    int request_timeout_s;
    int64_t max_body;
} tide_route_config;

void tide_route_config_default(tide_route_config *c);
/* Parses a JSON configuration (docs/route.md) over the defaults in c;
 * `where` names the source in messages. */
int tide_route_config_parse(tide_route_config *c, const char *json, size_t len, const char *where, tide_status *st);
int tide_route_config_load(tide_route_config *c, const char *path, tide_status *st);
/* Checks a replica URL: http://HOST:PORT with nothing after (a trailing / is cut). */
int tide_route_url_check(char *url, tide_status *st);

/* ---- placement (route_place.c) ---- */

/* What the placer sees of a replica. */
typedef struct tide_route_view {
    tide_route_role role;
    int up;
    double prompt_tokens;  /* prompt tokens sent and not yet prefilled */
    double running;        /* requests running or queued */
    double context_tokens; /* cached context of its running requests */
} tide_route_view;

typedef struct tide_route_placer {
    tide_route_policy pol;
    uint64_t *keys;        /* prefix table: chain hash -> replica + 1 (0 = empty) */
    int *owner;
    uint64_t rr[TIDE_ROUTE_MAX_BUCKETS + 1]; /* round-robin cursors: buckets, then decode */
    double recent[TIDE_ROUTE_MAX_REPLICAS];   /* prompt tokens sent, decayed (prefill_memory_s) */
    double recent_t[TIDE_ROUTE_MAX_REPLICAS]; /* when recent[] was last decayed */
    int64_t hits, lookups;
} tide_route_placer;

int tide_route_placer_init(tide_route_placer *p, const tide_route_policy *pol, tide_status *st);
void tide_route_placer_free(tide_route_placer *p);

/* The bucket of a prompt length. */
int tide_route_bucket(const tide_route_policy *pol, int64_t prompt_tokens);
/* The weighted load of a replica. */
double tide_route_load(const tide_route_policy *pol, const tide_route_view *v);

/* Where to prefill a prompt at time `now` (seconds, any origin): among the
 * replicas of `want` role (prefill, or mixed for a pool without
 * disaggregation) that are up, those of the prompt's bucket (all of them
 * when none of its share is up or it is overloaded), then the one of least
 * load + cost of the prompt's tokens it does not hold (route_place.c).
 * upto[i] (NULL: proportional to i) = the prompt tokens units 0..i cover.
 * *hit_units (may be NULL) = the prefix units the chosen replica is
 * expected to hold. -1 when no replica of that role is up. */
int tide_route_place_prefill(tide_route_placer *p, const tide_route_view *v, int n, tide_route_role want, double now,
                             int64_t prompt_tokens, const uint64_t *chain, const int64_t *upto, int n_chain,
                             int *hit_units);
/* Where to decode: the decode (or, with want = mixed, mixed) replica of least load. */
int tide_route_place_decode(tide_route_placer *p, const tide_route_view *v, int n, tide_route_role want);
/* Records that `replica` now holds the prefix units of `chain`. */
void tide_route_note(tide_route_placer *p, int replica, const uint64_t *chain, int n_chain);
/* Forgets every prefix of a replica, and what was sent to it (it left or restarted). */
void tide_route_forget(tide_route_placer *p, int replica);

/* Chains a unit's bytes onto the previous hash (0 for the first unit). */
uint64_t tide_route_chain(uint64_t prev, const void *bytes, size_t len);

#endif
