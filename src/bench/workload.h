/* Generated benchmark workloads: lists of prompts (token ids) with a number
 * of tokens to generate each, reproducible from a seed.
 *
 *   random          n prompts of lengths uniform in [len_lo, len_hi];
 *   shared prefix   n prompts = one common prefix of `shared` tokens + a
 *                   suffix of `suffix` tokens of their own (a system prompt
 *                   shared by every request: what a prefix cache serves).
 *
 * Token ids are uniform over the vocabulary less BOS/EOS/PAD (0..2) and the
 * image token, which a text request may not carry. */
#ifndef TIDE_BENCH_WORKLOAD_H
#define TIDE_BENCH_WORKLOAD_H

#include <stdint.h>

#include "base/status.h"

typedef struct tide_workload {
    int64_t n;
    int32_t **prompt;   /* [n] views into one block */
    int64_t *n_prompt;  /* [n] */
    int64_t max_tokens; /* the same for every request */
    int64_t total_prompt;
} tide_workload;

int tide_workload_random(tide_workload *w, int64_t n, int64_t len_lo, int64_t len_hi, int64_t gen, int64_t vocab,
                         int64_t image_token, uint64_t seed, tide_status *st);
int tide_workload_shared_prefix(tide_workload *w, int64_t n, int64_t shared, int64_t suffix, int64_t gen,
                                int64_t vocab, int64_t image_token, uint64_t seed, tide_status *st);
/* n requests over the given prompts (prompt i = prompts[i % count]). */
int tide_workload_cycle(tide_workload *w, const int32_t *const *prompts, const int64_t *n_prompts, int64_t count,
                        int64_t n, int64_t gen, tide_status *st);
void tide_workload_free(tide_workload *w);

/* Token `index` of the stream `seed`: uniform in [3, vocab), never the image
 * token (which is replaced by its predecessor). vocab must be > 4. */
int32_t tide_bench_token(uint64_t seed, uint64_t index, int64_t vocab, int64_t image_token);

#endif
