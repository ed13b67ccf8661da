/* Internal engine entry points beyond the public API (include/tide.h). */
#ifndef TIDE_ENGINE_ENGINE_H
#define TIDE_ENGINE_ENGINE_H

#include "model/model.h"
#include "tide.h"

/* Like tide_engine_create, but over a model the caller loaded and keeps
 * (m must outlive the engine; cfg->model_dir, when set, is read only for
 * the EOS ids: model/gen_config.h). Lets tests and
 * embedders run several engines on one loaded checkpoint. */
int tide_engine_create_with_model(const tide_engine_config *cfg, const tide_model *m, tide_engine **out,
                                  tide_status *st);

/* A fault injected for tests: called before every forward pass with the
 * user pointers of the batch's requests (n of them); returning -1 (with st
 * set) makes the pass fail as if the forward pass had. NULL removes it. */
typedef int (*tide_engine_fault_fn)(void *ctx, void *const *users, int n, tide_status *st);
void tide_engine_set_fault(tide_engine *e, tide_engine_fault_fn fn, void *ctx);

/* Speculative decoding, for tests: a draft source used instead of the
 * DSpark head (whose stage rings are still seeded): called for every new
 * draft block with the request's tokens (the draft continues
 * tokens[n_tokens - 1]); it writes draft[0..n) and may set the confidence
 * logits conf[0..n) (0 when left). Outputs never depend on the drafts, only
 * speed does: tests use it to force accepted and rejected drafts. NULL
 * removes it. */
typedef void (*tide_engine_draft_fn)(void *ctx, void *user, const int32_t *tokens, int64_t n_tokens, int32_t *draft,
                                     float *conf, int n);
void tide_engine_set_draft_hook(tide_engine *e, tide_engine_draft_fn fn, void *ctx);

/* The vision tower's configuration, NULL when the model has none (images
 * are then refused). */
const tide_vision_config *tide_engine_vision(const tide_engine *e);

/* Checks the KV pool's and the prefix cache's reference counts against
 * their holders (tide_sched_check). For tests. */
int tide_engine_check(const tide_engine *e, tide_status *st);

#endif
