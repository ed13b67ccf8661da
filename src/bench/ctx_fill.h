/* Synthetic decode context: makes a fresh sequence cache look as if C tokens
 * had been prefilled, without running C tokens through the model, so that a
 * decode step at context 128K can be timed in seconds.
 *
 * Everything a decode step reads is filled with random values drawn from the
 * value sets real ones come from: a random token history (ids in the
 * vocabulary, never the image token), the window rings of every layer (the
 * last min(C, window) positions; normal values rounded to BF16, then the
 * FP8 simulation the forward pass applies), the compressors' partial groups
 * (f32), and for every KV source the C / ratio compressed latents (FP4 with
 * E4M3 scales per 16) and index keys (FP4 with E8M0 scales per 32) in pool
 * blocks reserved through the public kv_pool calls. The published index
 * keys are those of the last KV source whose indexer owns keys, as after a
 * real prefill. The step's cost depends on the shapes, not on the values,
 * so the timing is that of a real context of that length. */
#ifndef TIDE_BENCH_CTX_FILL_H
#define TIDE_BENCH_CTX_FILL_H

#include <stdint.h>

#include "base/status.h"
#include "cache/seq_cache.h"
#include "model/forward.h"

/* c: fresh from tide_fwd_seq_init (pos 0). n >= 0 tokens; the same seed
 * gives the same contents. Fails (KV pool exhausted, out of memory, c not
 * fresh) with c partly filled: free it with tide_fwd_seq_free. */
int tide_bench_fill_context(tide_fwd_ctx *fx, tide_seq_cache *c, int64_t n, uint64_t seed, tide_status *st);

#endif
