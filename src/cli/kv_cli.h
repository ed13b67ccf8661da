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
