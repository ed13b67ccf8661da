/* Fuzz target for the vision path's image entry point (src/vision/image.h):
 * bytes -> tide_image_decode (PNG / JPEG / WebP / GIF by content) -> the
 * grid plan -> patches, with the tiny vision config and small limits. Every
 * input either decodes to an image within the limits whose patches are all
 * in [-1, 1], or fails with a message starting "image:"; nothing may crash,
 * hang or leak. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vision/image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tide_image_limits lim = {.max_bytes = 1 << 20, .max_pixels = 1 << 20};
    tide_image im;
    tide_status st = {0};
    if (tide_image_decode(data, size, &lim, &im, &st)) {
        if (strncmp(st.msg, "image:", 6)) abort();
        return 0;
    }
    if (im.w < 1 || im.h < 1 || (int64_t)im.w * im.h > lim.max_pixels) abort();
    tide_vision_config v = {.num_hidden_layers = 1, .hidden_size = 64, .num_attention_heads = 4,
                            .intermediate_size = 96, .patch_size = 14, .rope_theta = 1000.0,
                            .downsample_ratio = 3, .max_image_tokens = 64, .min_pixels = 112 * 112,
                            .max_wh_ratio = (int64_t)(size % 3) * 2}; /* 0 (none), 2 or 4 */
    tide_image_plan p;
    if (tide_image_plan_grid(im.w, im.h, &v, &p, &st) == 0) {
        if (tide_image_span_len(&p) > v.max_image_tokens) abort();
        float *x = malloc(sizeof(float) * (size_t)(p.n_vit_h * p.n_vit_w * 3 * 14 * 14));
        if (x && tide_image_patches(&im, &p, 14, x, &st) == 0)
            for (int64_t i = 0; i < p.n_vit_h * p.n_vit_w * 3 * 14 * 14; i++)
                if (!(x[i] >= -1.0f && x[i] <= 1.0f)) abort();
        free(x);
    }
    tide_image_free(&im);
    return 0;
}
