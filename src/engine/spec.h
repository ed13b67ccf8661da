/* Speculative decoding with the DSpark draft head: the mode, the cost model
 * and the verification budget (docs/spec.md).
 *
 * Every decoding sequence carries the draft block the DSpark head made after
 * its last step (dspark_block_size tokens, each with a confidence). A step
 * verifies a prefix of each sequence's draft in the one ragged target pass
 * (the sequence feeds [its last token, d0 .. d(k-1)] and asks for every
 * row's logits); how long a prefix is the budget's business:
 *   - fixed:K   every sequence verifies min(K, block) drafts;
 *   - dspark    the confidence-scheduled budget: survival(i, j) = product of
 *               sigmoid(confidence) over draft positions 0..j of sequence i
 *               (the estimated probability that d0..dj are all accepted);
 *               B, the number of drafts verified in the step, maximises
 *                 (n + sum of the B best survivals) / (draft + verify cost)
 *               with n the sequences sampled and the costs from the profile
 *               of the running backend; the B slots go to the best survivals
 *               across the batch, which (survival falling along a draft)
 *               gives each sequence a contiguous prefix.
 * The cost model: verify(T) = fixed + per_token x T for a pass of T rows,
 * draft(n) = per_seq x n. */
#ifndef TIDE_ENGINE_SPEC_H
#define TIDE_ENGINE_SPEC_H

#include <stdint.h>

#include "base/status.h"
#include "tide.h"

#define TIDE_SPEC_MAX_BLOCK 16 /* the longest draft block the engine handles */

/* "off", "dspark" or "fixed:K" (K >= 1) into mode / k (k 0 unless fixed). */
int tide_spec_parse(const char *s, int *mode, int *k, tide_status *st);
/* The mode as --spec spells it, into buf (>= 24 bytes). */
const char *tide_spec_name(int mode, int k, char *buf, size_t n);

typedef struct tide_spec_costs {
    double verify_fixed;     /* seconds per target pass */
    double verify_per_token; /* seconds per row of a target pass */
    double draft_per_seq;    /* seconds per sequence drafted */
} tide_spec_costs;

/* Survivals of one draft block from its confidence logits: surv[j] =
 * prod_{i <= j} sigmoid(conf[i]). */
void tide_spec_survival(const float *conf, int n, float *surv);

/* The budget: n sequences, sequence i has avail[i] drafts whose survivals
 * are surv[i * stride ..]; base_tokens rows are in the pass anyway (the
 * sampled rows and every prefill chunk). Chooses B <= max_b and writes
 * take[i] (sum = B, a contiguous prefix of each draft). With mode FIXED
 * take[i] = min(k, avail[i]) trimmed to max_b from the lowest survival.
 * Returns B. */
int64_t tide_spec_budget(const tide_spec_costs *c, int mode, int k, int n, const float *surv, int stride,
                         const int *avail, int64_t base_tokens, int64_t max_b, int *take);

/* Whether drafting paid in a step where the budget verified B drafts
 * whose survivals sum to surv_b (n sequences sampled, base rows in the
 * pass anyway): the budget's objective with the drafts,
 * (n + surv_b) / (draft(n) + verify(base + B)), against a step that drafts
 * nothing, n / verify(base). 1 when it did. The dspark mode stops drafting
 * while it does not (a probe step drafts now and then: docs/spec.md). */
int tide_spec_draft_pays(const tide_spec_costs *c, int n, double surv_b, int64_t base, int64_t B);

/* Expected value of one step under the budget when the true per-position
 * acceptance of sequence i's draft position j is acc[j] (the same for every
 * sequence; the drafts' survivals are taken equal to the true ones): for n
 * sequences and block drafts each, the expected tokens per sequence, the
 * verified drafts per sequence and the modelled step time. For tide bench
 * spec's simulation with measured acceptance rates. */
void tide_spec_simulate(const tide_spec_costs *c, int mode, int k, int n, int block, const float *acc,
                        double *tokens_per_seq, double *verified_per_seq, double *step_seconds);

#endif
