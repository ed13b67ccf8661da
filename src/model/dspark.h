/* The DSpark draft head (the reference's forward_spec over the mtp.* stages).
 *
 * After every main-model step the engine hands the step's recorded block
 * inputs (tide_step_out.dspark_in: the mean over hyper-connection copies of
 * the inputs of the dspark target layers) to the draft head:
 *   - tide_dspark_seed: for a prefill chunk, every stage's window ring takes
 *     the KV of main_x = main_norm(main_proj(inputs)) at those positions;
 *   - tide_dspark_draft: for the token at position sp (>= 0; the reference
 *     drafts at decode positions > 0, the engine from the prompt's last
 *     token on, a one-token prompt's included), the ring
 *     takes position sp, then the block of dspark_block_size draft tokens
 *     [token, noise, ...] at positions sp+1.. runs through the stages
 *     (window-only attention over the ring plus all draft positions,
 *     bidirectionally; each stage's own MoE), the shared head gives the
 *     draft logits, a rank-r Markov head adds a bias from the previous draft
 *     token (applied as drafts are chosen), and the confidence head gives one
 *     logit per position from [hidden ; markov embedding].
 * Drafts are chosen greedily (argmax, ties toward the lower id) unless the
 * caller forces them. */
#ifndef TIDE_MODEL_DSPARK_H
#define TIDE_MODEL_DSPARK_H

#include "model/forward.h"

typedef struct tide_dspark_out {
    int32_t *draft_ids;  /* [block + 1]: the input token, then the drafts */
    float *logits;       /* [block][vocab], Markov bias included (NULL: not wanted) */
    float *confidence;   /* [block] confidence logits */
} tide_dspark_out;

/* Ring seeding for n committed positions start.. (main_hidden [n][targets*dim]). */
int tide_dspark_seed(tide_fwd_ctx *fx, tide_seq_cache *c, const float *main_hidden, int64_t n,
                     int64_t start, tide_status *st);

/* One draft block at sp >= 0; main_hidden_row [targets*dim] is the decode
 * row of position sp, token the one sampled from it. forced: NULL, or
 * block draft ids to use instead of the argmax (for verification replays). */
int tide_dspark_draft(tide_fwd_ctx *fx, tide_seq_cache *c, const float *main_hidden_row, int64_t sp,
                      int32_t token, const int32_t *forced, tide_dspark_out *out, tide_status *st);

/* The draft blocks of several sequences in one pass (rows are independent:
 * each sequence's results equal tide_dspark_draft's bit for bit), so the
 * stages, the head and the Markov head run as GEMMs over every sequence's
 * rows. Fails, changing nothing, on a bad job or a sequence listed twice. */
typedef struct tide_dspark_job {
    tide_seq_cache *cache;
    const float *main_hidden_row; /* [targets*dim], the row of position sp */
    int64_t sp;
    int32_t token;
    const int32_t *forced;        /* NULL or [block] */
    tide_dspark_out out;
} tide_dspark_job;
int tide_dspark_draft_many(tide_fwd_ctx *fx, const tide_dspark_job *jobs, int n, tide_status *st);

#endif
