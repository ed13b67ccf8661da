/* Images into the vision tower's input, as the release's image_processor.py
 * does it (docs/vision.md):
 *
 *   bytes -> decode (PNG, JPEG, WebP, GIF first frame; libpng, libjpeg-turbo,
 *            libwebp, giflib) -> 8-bit RGB (alpha dropped, as PIL's
 *            convert("RGB") does)
 *         -> plan: aspect limit (max_wh_ratio), up-scale to min_pixels,
 *            round up to whole patches, shrink until the span fits
 *            max_image_tokens
 *         -> resize (PIL's bicubic, bit for bit: fixed-point, 8-bit between
 *            the two passes) then centre on a grey (127) canvas, or a plain
 *            stretch for images beyond the aspect limit
 *         -> (v/255 - 0.5) / 0.5, BF16, cut into p x p patches [N][3][p][p]
 *
 * and the prompt span: [IMAGE_START] ([IMAGE] * n_llm_w + [IMAGE_NEW_LINE]) * n_llm_h
 * [IMAGE_END], every position carrying image_token_id. */
#ifndef TIDE_VISION_IMAGE_H
#define TIDE_VISION_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "model/config.h"

/* Span token types (the reference's IMAGE_START, IMAGE, IMAGE_NEW_LINE,
 * IMAGE_END = range(4); TEXT = -1 outside spans). */
enum { TIDE_IMG_TEXT = -1, TIDE_IMG_START = 0, TIDE_IMG_IMAGE = 1, TIDE_IMG_NEWLINE = 2, TIDE_IMG_END = 3 };

typedef struct tide_image_limits {
    size_t max_bytes;      /* encoded size; 0 = TIDE_IMAGE_MAX_BYTES */
    int64_t max_pixels;    /* decoded width * height; 0 = TIDE_IMAGE_MAX_PIXELS */
} tide_image_limits;
#define TIDE_IMAGE_MAX_BYTES ((size_t)20 << 20)
#define TIDE_IMAGE_MAX_PIXELS ((int64_t)50000000)
#define TIDE_IMAGE_MAX_SIDE 65535

typedef struct tide_image {
    int w, h;
    uint8_t *rgb; /* [h][w][3] */
} tide_image;

/* Decodes PNG / JPEG / WebP / GIF (by content, not by name). Every failure is
 * a clear TIDE_ERR_INVALID (malformed), TIDE_ERR_UNSUPPORTED (a format or
 * variant tide does not read: animated WebP, CMYK JPEG, ...) or
 * TIDE_ERR_NOMEM (over the limits), never a crash. lim may be NULL. */
int tide_image_decode(const uint8_t *data, size_t n, const tide_image_limits *lim, tide_image *out,
                      tide_status *st);
void tide_image_free(tide_image *im);

/* The reference's plan_image_grid for an image of w x h pixels. */
typedef struct tide_image_plan {
    int64_t best_w, best_h;   /* pixel size after resizing (multiples of the patch) */
    int64_t n_vit_h, n_vit_w; /* patch grid */
    int64_t n_llm_h, n_llm_w; /* token grid after the aligner */
    int stretch;              /* 1: beyond the aspect limit, resized without keeping the aspect */
} tide_image_plan;
int tide_image_plan_grid(int64_t w, int64_t h, const tide_vision_config *v, tide_image_plan *p, tide_status *st);

/* Positions of the image's prompt span: n_llm_h * (n_llm_w + 1) + 2. */
int64_t tide_image_span_len(const tide_image_plan *p);
/* Its token types, in order (span_len entries). */
void tide_image_span_types(const tide_image_plan *p, int8_t *types);

/* The resized, padded, normalised image cut into patches:
 * out [n_vit_h * n_vit_w][3][p][p] (BF16-exact floats). */
int tide_image_patches(const tide_image *im, const tide_image_plan *p, int64_t patch, float *out, tide_status *st);

/* PIL's Image.resize(size, BICUBIC) on 8-bit RGB, bit for bit. */
int tide_image_resize(const tide_image *src, int w, int h, tide_image *dst, tide_status *st);

#endif
