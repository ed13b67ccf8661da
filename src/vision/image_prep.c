/* From decoded RGB to the tower's patches, as the release's
 * image_processor.py does it (image.h; docs/vision.md): the grid plan, PIL's
 * bicubic resize, ImageOps.pad's centring, the normalisation and the patch
 * cut, and the prompt span layout. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "num/num.h"
#include "vision/image.h"

/* ---- the plan (plan_image_grid, safe_resize, solve_resize_ratio, llm_grid) ---- */

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

static void llm_grid(int64_t bh, int64_t bw, int64_t p, int64_t r, int64_t *gh, int64_t *gw) {
    *gh = ceil_div(bh / p, r);
    *gw = ceil_div(bw / p, r);
}

static int64_t span_tokens(int64_t gh, int64_t gw) { return gh * (gw + 1) + 2; }

int tide_image_plan_grid(int64_t width, int64_t height, const tide_vision_config *v, tide_image_plan *pl,
                         tide_status *st) {
    memset(pl, 0, sizeof *pl);
    int64_t p = v->patch_size, r = v->downsample_ratio, max_tok = v->max_image_tokens;
    if (width < 1 || height < 1 || width > TIDE_IMAGE_MAX_SIDE || height > TIDE_IMAGE_MAX_SIDE)
        return tide_fail(st, TIDE_ERR_INVALID, "image: %lld x %lld pixels is outside 1..%d per side",
                         (long long)width, (long long)height, TIDE_IMAGE_MAX_SIDE);
    if (p < 1 || r < 1 || max_tok < 3) return tide_fail(st, TIDE_ERR_INVALID, "image: no vision config");
    int64_t w = width, h = height;
    if (v->max_wh_ratio > 0 && w > h * v->max_wh_ratio) w = h * v->max_wh_ratio;
    if (w * h < v->min_pixels) {
        double ratio = pow((double)v->min_pixels / (double)(w * h), 0.5);
        w = (int64_t)((double)w * ratio);
        h = (int64_t)((double)h * ratio);
    }
    int64_t bw = ceil_div(w, p) * p, bh = ceil_div(h, p) * p, gh, gw;
    llm_grid(bh, bw, p, r, &gh, &gw);
    if (span_tokens(gh, gw) > max_tok) {
        /* the largest aspect-preserving size whose span fits */
        double ar = (double)h / (double)w;
        double max_w = sqrt((double)(max_tok - 2) / ar + 0.25) - 0.5, max_h = max_w * ar;
        int64_t cell = p * r;
        if (max_w < 1.0) { /* very tall: one column */
            bh = (max_tok - 2) / 2 * cell;
            bw = cell;
        } else if (max_h < 1.0) { /* very wide: one row */
            bh = cell;
            bw = (max_tok - 3) * cell;
        } else {
            double bw_ = floor(max_w) * (double)cell / (double)w, bh_ = floor(max_h) * (double)cell / (double)h;
            double beta = bw_ < bh_ ? bw_ : bh_;
            bh = (int64_t)floor((double)h * beta / (double)p) * p;
            bw = (int64_t)floor((double)w * beta / (double)p) * p;
        }
        llm_grid(bh, bw, p, r, &gh, &gw);
        if (span_tokens(gh, gw) > max_tok || bh < p || bw < p)
            return tide_fail(st, TIDE_ERR_INVALID, "image: %lld x %lld pixels has no grid within %lld tokens",
                             (long long)width, (long long)height, (long long)max_tok);
    }
    if (bw > TIDE_IMAGE_MAX_SIDE || bh > TIDE_IMAGE_MAX_SIDE)
        return tide_fail(st, TIDE_ERR_INVALID, "image: resized to %lld x %lld, beyond %d per side", (long long)bw,
                         (long long)bh, TIDE_IMAGE_MAX_SIDE);
    pl->best_w = bw, pl->best_h = bh;
    pl->n_vit_w = bw / p, pl->n_vit_h = bh / p;
    pl->n_llm_w = gw, pl->n_llm_h = gh;
    /* the ORIGINAL size decides the stretch (load_image), not the clamped one */
    pl->stretch = v->max_wh_ratio > 0 && width >= v->max_wh_ratio * height;
    return 0;
}

int64_t tide_image_span_len(const tide_image_plan *p) { return span_tokens(p->n_llm_h, p->n_llm_w); }

void tide_image_span_types(const tide_image_plan *p, int8_t *t) {
    int64_t k = 0;
    t[k++] = TIDE_IMG_START;
    for (int64_t y = 0; y < p->n_llm_h; y++) {
        for (int64_t x = 0; x < p->n_llm_w; x++) t[k++] = TIDE_IMG_IMAGE;
        t[k++] = TIDE_IMG_NEWLINE;
    }
    t[k] = TIDE_IMG_END;
}

/* ---- PIL's bicubic resample (libImaging/Resample.c), 8 bits per channel ---- */

#define PRECISION_BITS (32 - 8 - 2)

static double bicubic(double x) {
    const double a = -0.5;
    if (x < 0.0) x = -x;
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
}

/* Per output index: the first input index, the tap count and ksize fixed-point
 * weights (the antialiasing support widens with the down-scale factor). */
typedef struct coeffs {
    int ksize;
    int *bounds; /* [out][2]: xmin, count */
    int *k;      /* [out][ksize] */
} coeffs;

static int precompute(int in_size, int out_size, coeffs *c) {
    double scale = (double)in_size / out_size, filterscale = scale < 1.0 ? 1.0 : scale;
    double support = 2.0 * filterscale;
    c->ksize = (int)ceil(support) * 2 + 1;
    c->bounds = malloc(sizeof(int) * 2 * (size_t)out_size);
    c->k = malloc(sizeof(int) * (size_t)c->ksize * (size_t)out_size);
    double *pre = malloc(sizeof(double) * (size_t)c->ksize);
    if (!c->bounds || !c->k || !pre) {
        free(pre);
        return -1;
    }
    for (int xx = 0; xx < out_size; xx++) {
        double center = (xx + 0.5) * scale, ww = 0.0, ss = 1.0 / filterscale;
        int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5);
        if (xmin < 0) xmin = 0;
        if (xmax > in_size) xmax = in_size;
        xmax -= xmin;
        int x = 0;
        for (; x < xmax; x++) {
            double w = bicubic((x + xmin - center + 0.5) * ss);
            pre[x] = w;
            ww += w;
        }
        for (x = 0; x < xmax; x++)
            if (ww != 0.0) pre[x] /= ww;
        for (; x < c->ksize; x++) pre[x] = 0;
        for (x = 0; x < c->ksize; x++)
            c->k[xx * c->ksize + x] = pre[x] < 0 ? (int)(-0.5 + pre[x] * (1 << PRECISION_BITS))
                                                 : (int)(0.5 + pre[x] * (1 << PRECISION_BITS));
        c->bounds[2 * xx] = xmin;
        c->bounds[2 * xx + 1] = xmax;
    }
    free(pre);
    return 0;
}

static uint8_t clip8(int v) {
    v >>= PRECISION_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

int tide_image_resize(const tide_image *src, int w, int h, tide_image *dst, tide_status *st) {
    memset(dst, 0, sizeof *dst);
    if (w < 1 || h < 1 || w > TIDE_IMAGE_MAX_SIDE || h > TIDE_IMAGE_MAX_SIDE)
        return tide_fail(st, TIDE_ERR_INVALID, "image: cannot resize to %d x %d", w, h);
    coeffs ch = {0}, cv = {0};
    uint8_t *tmp = NULL, *out = malloc((size_t)w * (size_t)h * 3);
    int rc = -1;
    if (!out) goto done;
    if (src->w == w && src->h == h) { /* PIL returns a copy */
        memcpy(out, src->rgb, (size_t)w * (size_t)h * 3);
        rc = 0;
        goto done;
    }
    if (precompute(src->w, w, &ch) || precompute(src->h, h, &cv)) goto done;
    /* horizontal pass over only the rows the vertical pass reads */
    int y0 = cv.bounds[0], y1 = cv.bounds[2 * h - 2] + cv.bounds[2 * h - 1];
    int need_h = w != src->w, need_v = h != src->h;
    const uint8_t *in = src->rgb;
    int in_w = src->w;
    if (need_h) {
        if (!(tmp = malloc((size_t)w * (size_t)(y1 - y0) * 3))) goto done;
        for (int y = y0; y < y1; y++)
            for (int xx = 0; xx < w; xx++) {
                int xmin = ch.bounds[2 * xx], n = ch.bounds[2 * xx + 1];
                const int *k = ch.k + xx * ch.ksize;
                for (int c = 0; c < 3; c++) {
                    int ss = 1 << (PRECISION_BITS - 1);
                    for (int x = 0; x < n; x++) ss += src->rgb[((size_t)y * src->w + xmin + x) * 3 + c] * k[x];
                    tmp[((size_t)(y - y0) * w + xx) * 3 + c] = clip8(ss);
                }
            }
        in = tmp, in_w = w;
    } else {
        y0 = 0;
    }
    if (need_v) {
        for (int yy = 0; yy < h; yy++) {
            int ymin = cv.bounds[2 * yy] - y0, n = cv.bounds[2 * yy + 1];
            const int *k = cv.k + yy * cv.ksize;
            for (int xx = 0; xx < w; xx++)
                for (int c = 0; c < 3; c++) {
                    int ss = 1 << (PRECISION_BITS - 1);
                    for (int y = 0; y < n; y++) ss += in[((size_t)(ymin + y) * in_w + xx) * 3 + c] * k[y];
                    out[((size_t)yy * w + xx) * 3 + c] = clip8(ss);
                }
        }
    } else {
        memcpy(out, in, (size_t)w * (size_t)h * 3);
    }
    rc = 0;
done:
    free(ch.bounds), free(ch.k), free(cv.bounds), free(cv.k), free(tmp);
    if (rc) {
        free(out);
        return tide_fail(st, TIDE_ERR_NOMEM, "image: out of memory resizing %d x %d to %d x %d", src->w, src->h, w, h);
    }
    dst->w = w, dst->h = h, dst->rgb = out;
    return 0;
}

/* Python's round() of a non-negative half-integer multiple: ties to even. */
static int64_t round_half_even(int64_t twice) {
    int64_t q = twice / 2;
    return (twice % 2 && q % 2) ? q + 1 : q;
}

int tide_image_patches(const tide_image *im, const tide_image_plan *pl, int64_t p, float *out, tide_status *st) {
    int W = (int)pl->best_w, H = (int)pl->best_h;
    tide_image sized = {0};
    uint8_t *canvas = NULL;
    const uint8_t *px;
    if (pl->stretch) {
        if (tide_image_resize(im, W, H, &sized, st)) return -1;
        px = sized.rgb;
    } else {
        /* ImageOps.pad: contain (fit inside, aspect kept, Python rounding),
         * then centre on grey 127 */
        int cw = W, chh = H;
        double ir = (double)im->w / im->h, dr = (double)W / H;
        if (ir != dr) {
            if (ir > dr) {
                int nh = (int)nearbyint((double)im->h / im->w * W);
                if (nh != H) chh = nh;
            } else {
                int nw = (int)nearbyint((double)im->w / im->h * H);
                if (nw != W) cw = nw;
            }
        }
        if (cw < 1) cw = 1;
        if (chh < 1) chh = 1;
        if (tide_image_resize(im, cw, chh, &sized, st)) return -1;
        if (cw == W && chh == H) {
            px = sized.rgb;
        } else {
            if (!(canvas = malloc((size_t)W * (size_t)H * 3))) {
                tide_image_free(&sized);
                return tide_fail(st, TIDE_ERR_NOMEM, "image: out of memory for a %d x %d canvas", W, H);
            }
            memset(canvas, 127, (size_t)W * (size_t)H * 3);
            int ox = cw != W ? (int)round_half_even(W - cw) : 0, oy = cw != W ? 0 : (int)round_half_even(H - chh);
            for (int y = 0; y < chh && oy + y < H; y++)
                for (int x = 0; x < cw && ox + x < W; x++)
                    if (oy + y >= 0 && ox + x >= 0)
                        memcpy(canvas + ((size_t)(oy + y) * W + ox + x) * 3, sized.rgb + ((size_t)y * cw + x) * 3, 3);
            px = canvas;
        }
    }
    float lut[256];
    for (int i = 0; i < 256; i++) lut[i] = tide_round_bf16(((float)i / 255.0f - 0.5f) / 0.5f);
    int64_t vw = pl->n_vit_w, vh = pl->n_vit_h;
    for (int64_t by = 0; by < vh; by++)
        for (int64_t bx = 0; bx < vw; bx++) {
            float *o = out + (by * vw + bx) * 3 * p * p;
            for (int c = 0; c < 3; c++)
                for (int64_t y = 0; y < p; y++)
                    for (int64_t x = 0; x < p; x++)
                        o[(c * p + y) * p + x] = lut[px[((size_t)(by * p + y) * W + (size_t)(bx * p + x)) * 3 + c]];
        }
    free(canvas);
    tide_image_free(&sized);
    return 0;
}
