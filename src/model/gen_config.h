/* The generation defaults a checkpoint ships beside its config: the
 * end-of-sequence ids that stop a request (HF's generation_config.json,
 * else config.json). eos_token_id may be one integer or a list:
 *
 *   generation_config.json  {"bos_token_id": 0, "eos_token_id": 1}
 *   or                      {"eos_token_id": [1, 128803]}
 *
 * Read in that order: generation_config.json's eos_token_id, config.json's
 * top-level one, then its text_config's. A checkpoint with none has no EOS
 * (requests end at max_tokens or their own stop tokens); tide_engine_create
 * logs a warning then. Synthetic checkpoints (`tide synth`) write
 * generation_config.json with the release's ids (BOS 0, EOS 1). */
#ifndef TIDE_MODEL_GEN_CONFIG_H
#define TIDE_MODEL_GEN_CONFIG_H

#include <stdint.h>

#include "base/status.h"

#define TIDE_GEN_MAX_EOS 16 /* HF checkpoints list at most a handful */

typedef struct tide_gen_config {
    int32_t eos[TIDE_GEN_MAX_EOS];
    int n_eos;           /* 0: the checkpoint names no EOS */
    const char *source;  /* the file and key the ids came from (static text), NULL when none */
} tide_gen_config;

/* Reads dir's generation defaults; every id must be in [0, vocab). A file
 * that exists but is not JSON, or an eos_token_id of the wrong type or
 * range, fails naming the file and the key. */
int tide_gen_config_read(const char *dir, int64_t vocab, tide_gen_config *g, tide_status *st);

/* Writes dir/generation_config.json {"bos_token_id": bos, "eos_token_id":
 * eos[0] (an integer when there is one, else the list)}. */
int tide_gen_config_write(const char *dir, int64_t bos, const int32_t *eos, int n_eos, tide_status *st);

#endif
