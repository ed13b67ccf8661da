/* Request traces for `tide bench route` (docs/route.md): the two public
 * formats, told apart by their first byte.
 *
 *   Mooncake (JSONL, one request a line):
 *     {"timestamp": MS, "input_length": N, "output_length": M, "hash_ids": [ids]}
 *     timestamp in milliseconds since the first request; hash_ids one id per
 *     block of 512 prompt tokens, equal ids = equal prefixes up to that block.
 *   Azure LLM inference (CSV with a header line):
 *     TIMESTAMP,ContextTokens,GeneratedTokens
 *     2023-11-16 18:15:46.6805900,4808,10
 *     absolute UTC times; no prefix information.
 *
 * A request's prefix units are kept as chain hashes (route.h), unit i
 * covering blocks 0..i, which is what the placer's prefix table takes. */
#ifndef TIDE_CLUSTER_ROUTE_TRACE_H
#define TIDE_CLUSTER_ROUTE_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

typedef struct tide_trace_req {
    double t;            /* seconds after the first request */
    int64_t in_len, out_len;
    int64_t hash_off;    /* its chain hashes: trace.hashes[hash_off .. hash_off + n_hash) */
    int n_hash;
} tide_trace_req;

typedef struct tide_trace {
    tide_trace_req *reqs;
    int64_t n;
    uint64_t *hashes;
    int64_t n_hashes;
    int block_tokens;    /* tokens per hash unit (512 for Mooncake) */
    const char *format;  /* "mooncake" | "azure" */
} tide_trace;

/* Limits a trace must keep (a request over them is refused with its line). */
#define TIDE_TRACE_MAX_REQS 10000000
#define TIDE_TRACE_MAX_LEN 100000000
#define TIDE_TRACE_MAX_HASHES 100000

/* Parses a whole trace (requests sorted by time, stably). */
int tide_trace_parse(const char *text, size_t len, const char *where, tide_trace *t, tide_status *st);
int tide_trace_load(const char *path, tide_trace *t, tide_status *st);
void tide_trace_free(tide_trace *t);

#endif
