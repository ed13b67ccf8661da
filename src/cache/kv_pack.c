/* Packed KV entries: see kv_pack.h. The quantisers and decoders are
 * src/num's; this file only fixes where codes and scales sit. */
#include "cache/kv_pack.h"

#include "num/num.h"

int tide_kv_fmt_block(tide_kv_fmt f) { return f == TIDE_KV_LATENT ? 16 : 32; }

size_t tide_kv_code_bytes(tide_kv_fmt f, int64_t dim) {
    if (dim <= 0) return 0;
    return f == TIDE_KV_WINDOW ? (size_t)dim : ((size_t)dim + 1) / 2;
}

size_t tide_kv_entry_bytes(tide_kv_fmt f, int64_t dim) {
    if (dim <= 0) return 0;
    size_t b = (size_t)tide_kv_fmt_block(f);
    return tide_kv_code_bytes(f, dim) + ((size_t)dim + b - 1) / b;
}

void tide_kv_pack(tide_kv_fmt f, const float *x, int64_t dim, uint8_t *e) {
    if (dim <= 0) return;
    size_t n = (size_t)dim, b = (size_t)tide_kv_fmt_block(f);
    uint8_t *scale = e + tide_kv_code_bytes(f, dim);
    switch (f) {
    case TIDE_KV_WINDOW: tide_quant_fp8_act(x, n, b, e, scale); break;
    case TIDE_KV_LATENT: tide_quant_fp4_e4m3(x, n, b, e, scale); break;
    case TIDE_KV_KEY: tide_quant_fp4_e8m0(x, n, b, e, scale); break;
    }
}

void tide_kv_unpack(tide_kv_fmt f, const uint8_t *e, int64_t dim, float *y) {
    if (dim <= 0) return;
    size_t n = (size_t)dim, b = (size_t)tide_kv_fmt_block(f);
    const uint8_t *scale = e + tide_kv_code_bytes(f, dim);
    switch (f) {
    case TIDE_KV_WINDOW: tide_dequant_fp8_act(e, scale, n, b, y); break;
    case TIDE_KV_LATENT: tide_dequant_fp4_e4m3(e, scale, n, b, y); break;
    case TIDE_KV_KEY: tide_dequant_fp4_e8m0(e, scale, n, b, y); break;
    }
}
