/* What `tide kv` and `tide bench kvstore` share: a store named on the
 * command line. `--store ROOT` is n node directories ROOT/node00 ..
 * (--nodes, default 12) under erasure code K+M (--ec, default 10+2 for 12
 * nodes, N+0 otherwise). */
#ifndef TIDE_CLI_KV_CLI_H
#define TIDE_CLI_KV_CLI_H

#include <stdint.h>

#include "cache/kvstore.h"

typedef struct kv_cli_store {
    const char *root;
    int64_t nodes;
    const char *ec;       /* "K+M" or NULL */
    char dirs[TIDE_KVS_MAX_SHARDS][4096];
    const char *dir_ptrs[TIDE_KVS_MAX_SHARDS];
} kv_cli_store;

/* Fills cfg's nodes, k and m from o (o must outlive the store). */
int kv_cli_store_cfg(kv_cli_store *o, tide_kvstore_cfg *cfg, tide_status *st);

#endif

/* ---- tide run's tiers (kv_run.c) ---- */

#include <stdio.h>

#include "tide.h"

typedef struct kv_run_opts {
    const char *root;     /* --kv-store ROOT: the shared store */
    const char *ec;       /* --kv-ec K+M */
    const char *ssd;      /* --kv-ssd DIR: the local SSD tier (one node) */
    const char *klass;    /* --kv-class chat|agent */
    int64_t nodes;        /* --kv-nodes N (0 = 12) */
    int64_t host_mib;     /* --kv-host-mib N (0 = 1024) */
} kv_run_opts;

/* One command-line flag: 0 = not a tiers flag, 2 = flag and value taken,
 * -1 = a bad value (the message printed). */
int kv_run_flag(kv_run_opts *o, const char *flag, const char *value);
void kv_run_help(FILE *f);

typedef struct kv_run kv_run;
/* With --kv-store or --kv-ssd: opens the stores (keyed by the model in
 * c->model_dir and c's layout) and the tiers and sets c->kv_tier; else
 * *out = NULL. */
int kv_run_open(const kv_run_opts *o, tide_engine_config *c, kv_run **out, tide_status *st);
/* The tiers (for their statistics), NULL for NULL. */
struct tide_kvtiers *kv_run_tiers(const kv_run *r);
/* Writes what is queued, prints the tiers' figures on stderr, closes. */
void kv_run_close(kv_run *r);
