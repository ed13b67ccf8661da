/* The packed formats of the KV caches (the release's: the reference's
 * kv_cache / kv_compressed / index-key tensors), one entry at a time. An entry
 * is one vector of `dim` values; its bytes are the codes, then the scales:
 *
 *   TIDE_KV_WINDOW  window ring entry: FP8 e4m3 codes [dim], then one UE8M0
 *                   scale per 32 values [ceil(dim/32)]    (512 -> 528 bytes)
 *   TIDE_KV_LATENT  compressed latent: FP4 e2m1 codes, two per byte (even
 *                   element in the low nibble) [ceil(dim/2)], then one E4M3
 *                   scale per 16 values [ceil(dim/16)]    (512 -> 288 bytes)
 *   TIDE_KV_KEY     index key: FP4 e2m1 codes [ceil(dim/2)], then one UE8M0
 *                   scale per 32 values [ceil(dim/32)]    (128 -> 68 bytes)
 *
 * The codes and scales are exactly src/num's block quantisers' (tide_quant_*),
 * so unpacking gives, bit for bit, what the simulation (tide_sim_fp8_act /
 * tide_sim_fp4_e4m3 / tide_sim_fp4_e8m0) gives for the same input: storing a
 * cache packed changes no value the forward pass reads (a NaN block stays
 * NaN; its payload is the decoder's). Pack from the UNsimulated values: the
 * quantisers are not idempotent on every simulated block (a scale computed
 * from already rounded values can differ), so packing sim(x) is not
 * guaranteed lossless.
 *
 * Entries are byte strings with no alignment requirement; a pool block is a
 * run of them (kv_pool.h) and the GPU kernels will read the same layout
 * (docs/gpu.md). */
#ifndef TIDE_CACHE_KV_PACK_H
#define TIDE_CACHE_KV_PACK_H

#include <stddef.h>
#include <stdint.h>

typedef enum tide_kv_fmt {
    TIDE_KV_WINDOW = 0, /* FP8 e4m3, UE8M0 per 32 */
    TIDE_KV_LATENT,     /* FP4 e2m1, E4M3 per 16 */
    TIDE_KV_KEY,        /* FP4 e2m1, UE8M0 per 32 */
} tide_kv_fmt;

/* Values per scale of format f (32 or 16). */
int tide_kv_fmt_block(tide_kv_fmt f);
/* Bytes of the codes part of an entry of dim values (the scales follow). */
size_t tide_kv_code_bytes(tide_kv_fmt f, int64_t dim);
/* Bytes of one entry of dim values (0 for dim <= 0). */
size_t tide_kv_entry_bytes(tide_kv_fmt f, int64_t dim);
/* Quantises x[0, dim) into the entry at e (tide_kv_entry_bytes(f, dim)). */
void tide_kv_pack(tide_kv_fmt f, const float *x, int64_t dim, uint8_t *e);
/* The values of entry e into y[0, dim): sim(x) for the x it was packed from. */
void tide_kv_unpack(tide_kv_fmt f, const uint8_t *e, int64_t dim, float *y);

#endif
