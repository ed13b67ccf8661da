/* Image decoding for the vision path (image.h): the format is told by the
 * content's magic bytes; each decoder checks the declared size against the
 * limits BEFORE allocating pixels, and turns every library error into a
 * status. The output is what PIL's Image.open(...).convert("RGB") gives the
 * reference: 8-bit RGB, alpha dropped (not composited), palettes and grey
 * expanded; GIF's first frame. Differences from PIL are listed in
 * docs/vision.md. A decoder whose library was not found at build time says so. */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vision/image.h"

#ifdef TIDE_HAVE_PNG
#include <png.h>
#endif
#ifdef TIDE_HAVE_JPEG
#include <jpeglib.h>
#endif
#ifdef TIDE_HAVE_WEBP
#include <webp/decode.h>
#endif
#ifdef TIDE_HAVE_GIF
#include <gif_lib.h>
#endif

void tide_image_free(tide_image *im) {
    if (!im) return;
    free(im->rgb);
    memset(im, 0, sizeof *im);
}

#if defined(TIDE_HAVE_PNG) || defined(TIDE_HAVE_JPEG) || defined(TIDE_HAVE_WEBP) || defined(TIDE_HAVE_GIF)
/* The declared size against the limits; allocates the pixels. */
static int alloc_pixels(const char *fmt, int64_t w, int64_t h, int64_t max_pixels, tide_image *out, tide_status *st) {
    if (w < 1 || h < 1)
        return tide_fail(st, TIDE_ERR_INVALID, "image: the %s declares %lld x %lld pixels", fmt, (long long)w,
                         (long long)h);
    if (w > TIDE_IMAGE_MAX_SIDE || h > TIDE_IMAGE_MAX_SIDE || w * h > max_pixels)
        return tide_fail(st, TIDE_ERR_NOMEM, "image: the %s is %lld x %lld pixels, over the limit (%lld pixels, %d per side)",
                         fmt, (long long)w, (long long)h, (long long)max_pixels, TIDE_IMAGE_MAX_SIDE);
    if (!(out->rgb = malloc((size_t)w * (size_t)h * 3)))
        return tide_fail(st, TIDE_ERR_NOMEM, "image: out of memory for %lld x %lld pixels", (long long)w, (long long)h);
    out->w = (int)w, out->h = (int)h;
    return 0;
}
#endif

/* ---- PNG (libpng) ---- */

#ifdef TIDE_HAVE_PNG
typedef struct png_src {
    const uint8_t *p;
    size_t n, at;
    char err[160];
} png_src;

static void png_read_mem(png_structp png, png_bytep dst, size_t len) {
    png_src *s = png_get_io_ptr(png);
    if (len > s->n - s->at) png_error(png, "the data ends early (truncated)");
    memcpy(dst, s->p + s->at, len);
    s->at += len;
}
static void png_on_error(png_structp png, png_const_charp msg) {
    png_src *s = png_get_error_ptr(png);
    snprintf(s->err, sizeof s->err, "%s", msg);
    png_longjmp(png, 1);
}
static void png_on_warning(png_structp png, png_const_charp msg) { (void)png, (void)msg; }

typedef struct png_job { /* on the heap: it outlives a longjmp */
    png_structp png;
    png_infop info;
    png_bytep *rows;
    png_src src;
} png_job;

static int decode_png(const uint8_t *d, size_t n, int64_t max_px, tide_image *out, tide_status *st) {
    png_job *j = calloc(1, sizeof *j);
    if (!j) return tide_fail(st, TIDE_ERR_NOMEM, "image: out of memory");
    j->src = (png_src){.p = d, .n = n};
    int rc = -1;
    j->png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &j->src, png_on_error, png_on_warning);
    if (!j->png || !(j->info = png_create_info_struct(j->png))) {
        tide_fail(st, TIDE_ERR_NOMEM, "image: out of memory");
        goto done;
    }
    if (setjmp(png_jmpbuf(j->png))) {
        tide_image_free(out);
        tide_fail(st, TIDE_ERR_INVALID, "image: bad PNG: %s", j->src.err[0] ? j->src.err : "decoding failed");
        goto done;
    }
    png_set_read_fn(j->png, &j->src, png_read_mem);
    png_set_user_limits(j->png, TIDE_IMAGE_MAX_SIDE, TIDE_IMAGE_MAX_SIDE);
    png_set_chunk_malloc_max(j->png, (png_alloc_size_t)8 << 20);
    png_read_info(j->png, j->info);
    png_uint_32 w = png_get_image_width(j->png, j->info), h = png_get_image_height(j->png, j->info);
    int ct = png_get_color_type(j->png, j->info), bd = png_get_bit_depth(j->png, j->info);
    if (alloc_pixels("PNG", w, h, max_px, out, st)) goto done;
    if (ct == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(j->png);
    if (ct == PNG_COLOR_TYPE_GRAY && bd < 8) png_set_expand_gray_1_2_4_to_8(j->png);
    if (ct == PNG_COLOR_TYPE_GRAY || ct == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(j->png);
    if (bd == 16) png_set_strip_16(j->png); /* the high byte, as PIL's RGB;16B unpacker */
    png_set_strip_alpha(j->png);
    png_set_interlace_handling(j->png);
    png_read_update_info(j->png, j->info);
    if (png_get_rowbytes(j->png, j->info) != (size_t)w * 3) {
        tide_image_free(out);
        tide_fail(st, TIDE_ERR_UNSUPPORTED, "image: PNG colour type %d depth %d does not reduce to RGB", ct, bd);
        goto done;
    }
    if (!(j->rows = malloc(sizeof *j->rows * h))) {
        tide_image_free(out);
        tide_fail(st, TIDE_ERR_NOMEM, "image: out of memory");
        goto done;
    }
    for (png_uint_32 y = 0; y < h; y++) j->rows[y] = out->rgb + (size_t)y * w * 3;
    png_read_image(j->png, j->rows);
    rc = 0;
done:
    if (j->png) png_destroy_read_struct(&j->png, j->info ? &j->info : NULL, NULL);
    free(j->rows);
    free(j);
    return rc;
}
#endif

/* ---- JPEG (libjpeg-turbo) ---- */
#ifdef TIDE_HAVE_JPEG
typedef struct jpeg_job {
    struct jpeg_decompress_struct cinfo;
    struct jpeg_error_mgr jerr;
    jmp_buf jmp;
    char err[JMSG_LENGTH_MAX];
    int started;
} jpeg_job;

static void jpeg_on_error(j_common_ptr c) {
    jpeg_job *j = (jpeg_job *)c; /* cinfo is the first member */
    c->err->format_message(c, j->err);
    longjmp(j->jmp, 1);
}
static void jpeg_on_message(j_common_ptr c, int level) { (void)c, (void)level; }

static int decode_jpeg(const uint8_t *d, size_t n, int64_t max_px, tide_image *out, tide_status *st) {
    jpeg_job *j = calloc(1, sizeof *j);
    if (!j) return tide_fail(st, TIDE_ERR_NOMEM, "image: out of memory");
    int rc = -1;
    j->cinfo.err = jpeg_std_error(&j->jerr);
    j->jerr.error_exit = jpeg_on_error;
    j->jerr.emit_message = jpeg_on_message;
    if (setjmp(j->jmp)) {
        tide_image_free(out);
        tide_fail(st, TIDE_ERR_INVALID, "image: bad JPEG: %s", j->err);
        goto done;
    }
    jpeg_create_decompress(&j->cinfo);
    j->started = 1;
    jpeg_mem_src(&j->cinfo, d, (unsigned long)n);
    jpeg_read_header(&j->cinfo, TRUE);
    if (j->cinfo.jpeg_color_space == JCS_CMYK || j->cinfo.jpeg_color_space == JCS_YCCK) {
        tide_fail(st, TIDE_ERR_UNSUPPORTED, "image: CMYK JPEG images are not supported; send RGB");
        goto done;
    }
    j->cinfo.out_color_space = JCS_RGB;
    if (alloc_pixels("JPEG", j->cinfo.image_width, j->cinfo.image_height, max_px, out, st)) goto done;
    jpeg_start_decompress(&j->cinfo);
    if (j->cinfo.output_components != 3 || (int)j->cinfo.output_width != out->w ||
        (int)j->cinfo.output_height != out->h) {
        tide_image_free(out);
        tide_fail(st, TIDE_ERR_UNSUPPORTED, "image: this JPEG does not decode to %d x %d RGB", out->w, out->h);
        goto done;
    }
    while (j->cinfo.output_scanline < j->cinfo.output_height) {
        JSAMPROW row = out->rgb + (size_t)j->cinfo.output_scanline * (size_t)out->w * 3;
        jpeg_read_scanlines(&j->cinfo, &row, 1);
    }
    jpeg_finish_decompress(&j->cinfo);
    rc = 0;
done:
    if (j->started) jpeg_destroy_decompress(&j->cinfo);
    free(j);
    return rc;
}
#endif

/* ---- WebP (libwebp) ---- */
#ifdef TIDE_HAVE_WEBP
static int decode_webp(const uint8_t *d, size_t n, int64_t max_px, tide_image *out, tide_status *st) {
    WebPBitstreamFeatures f;
    if (WebPGetFeatures(d, n, &f) != VP8_STATUS_OK)
        return tide_fail(st, TIDE_ERR_INVALID, "image: bad WebP (its header does not parse)");
    if (f.has_animation)
        return tide_fail(st, TIDE_ERR_UNSUPPORTED, "image: animated WebP images are not supported");
    if (alloc_pixels("WebP", f.width, f.height, max_px, out, st)) return -1;
    if (!WebPDecodeRGBInto(d, n, out->rgb, (size_t)out->w * (size_t)out->h * 3, out->w * 3)) {
        tide_image_free(out);
        return tide_fail(st, TIDE_ERR_INVALID, "image: bad WebP (decoding failed)");
    }
    return 0;
}
#endif

/* ---- GIF (giflib): the first frame on the logical screen ---- */
#ifdef TIDE_HAVE_GIF
typedef struct gif_src {
    const uint8_t *p;
    size_t n, at;
} gif_src;

static int gif_read_mem(GifFileType *g, GifByteType *dst, int len) {
    gif_src *s = g->UserData;
    size_t k = (size_t)len < s->n - s->at ? (size_t)len : s->n - s->at;
    memcpy(dst, s->p + s->at, k);
    s->at += k;
    return (int)k;
}

static int decode_gif(const uint8_t *d, size_t n, int64_t max_px, tide_image *out, tide_status *st) {
    gif_src src = {.p = d, .n = n};
    int err = 0, rc = -1;
    GifFileType *g = DGifOpen(&src, gif_read_mem, &err);
    GifPixelType *line = NULL;
    if (!g) return tide_fail(st, TIDE_ERR_INVALID, "image: bad GIF: %s", GifErrorString(err));
    if (alloc_pixels("GIF", g->SWidth, g->SHeight, max_px, out, st)) goto done;
    /* the canvas starts as the background colour, as PIL's first frame does */
    const ColorMapObject *gcm = g->SColorMap;
    GifColorType bg = {0, 0, 0};
    if (gcm && g->SBackGroundColor < gcm->ColorCount) bg = gcm->Colors[g->SBackGroundColor];
    for (size_t i = 0; i < (size_t)out->w * (size_t)out->h; i++)
        out->rgb[3 * i] = bg.Red, out->rgb[3 * i + 1] = bg.Green, out->rgb[3 * i + 2] = bg.Blue;
    for (;;) {
        GifRecordType t;
        if (DGifGetRecordType(g, &t) == GIF_ERROR) break;
        if (t == TERMINATE_RECORD_TYPE) {
            tide_fail(st, TIDE_ERR_INVALID, "image: bad GIF: no image in it");
            goto done;
        }
        if (t == EXTENSION_RECORD_TYPE) {
            int code;
            GifByteType *ext;
            if (DGifGetExtension(g, &code, &ext) == GIF_ERROR) break;
            while (ext)
                if (DGifGetExtensionNext(g, &ext) == GIF_ERROR) goto fail;
            continue;
        }
        if (t != IMAGE_DESC_RECORD_TYPE) continue;
        if (DGifGetImageDesc(g) == GIF_ERROR) break;
        const GifImageDesc *id = &g->Image;
        const ColorMapObject *cm = id->ColorMap ? id->ColorMap : gcm;
        if (!cm) {
            tide_fail(st, TIDE_ERR_INVALID, "image: bad GIF: the first frame has no colour map");
            goto done;
        }
        /* the frame's own size bounds the decoding work, whatever the screen's */
        if (id->Width < 1 || id->Height < 1 || id->Width > TIDE_IMAGE_MAX_SIDE || id->Height > TIDE_IMAGE_MAX_SIDE ||
            (int64_t)id->Width * id->Height > max_px) {
            tide_fail(st, TIDE_ERR_INVALID, "image: bad GIF: a %d x %d frame", id->Width, id->Height);
            goto done;
        }
        if (!(line = malloc((size_t)id->Width))) {
            tide_fail(st, TIDE_ERR_NOMEM, "image: out of memory");
            goto done;
        }
        /* interlaced frames come in four passes */
        static const int start[4] = {0, 4, 2, 1}, step[4] = {8, 8, 4, 2};
        int passes = id->Interlace ? 4 : 1;
        for (int pass = 0; pass < passes; pass++)
            for (int y = id->Interlace ? start[pass] : 0; y < id->Height; y += id->Interlace ? step[pass] : 1) {
                if (DGifGetLine(g, line, id->Width) == GIF_ERROR) goto fail;
                int64_t yy = (int64_t)id->Top + y;
                if (yy < 0 || yy >= out->h) continue;
                for (int x = 0; x < id->Width; x++) {
                    int64_t xx = (int64_t)id->Left + x;
                    if (xx < 0 || xx >= out->w || line[x] >= cm->ColorCount) continue;
                    uint8_t *o = out->rgb + ((size_t)yy * (size_t)out->w + (size_t)xx) * 3;
                    o[0] = cm->Colors[line[x]].Red, o[1] = cm->Colors[line[x]].Green, o[2] = cm->Colors[line[x]].Blue;
                }
            }
        rc = 0;
        goto done;
    }
fail:
    tide_fail(st, TIDE_ERR_INVALID, "image: bad GIF: %s", GifErrorString(g->Error));
done:
    if (rc) tide_image_free(out);
    free(line);
    DGifCloseFile(g, &err);
    return rc;
}
#endif

/* Each format's decoder, NULL when its library was not found at build time. */
typedef int (*decode_fn)(const uint8_t *d, size_t n, int64_t max_px, tide_image *out, tide_status *st);
#ifdef TIDE_HAVE_PNG
#define PNG_DECODER decode_png
#else
#define PNG_DECODER NULL
#endif
#ifdef TIDE_HAVE_JPEG
#define JPEG_DECODER decode_jpeg
#else
#define JPEG_DECODER NULL
#endif
#ifdef TIDE_HAVE_WEBP
#define WEBP_DECODER decode_webp
#else
#define WEBP_DECODER NULL
#endif
#ifdef TIDE_HAVE_GIF
#define GIF_DECODER decode_gif
#else
#define GIF_DECODER NULL
#endif

int tide_image_decode(const uint8_t *d, size_t n, const tide_image_limits *lim, tide_image *out, tide_status *st) {
    memset(out, 0, sizeof *out);
    size_t max_bytes = lim && lim->max_bytes ? lim->max_bytes : TIDE_IMAGE_MAX_BYTES;
    int64_t max_px = lim && lim->max_pixels ? lim->max_pixels : TIDE_IMAGE_MAX_PIXELS;
    if (!d || n == 0) return tide_fail(st, TIDE_ERR_INVALID, "image: empty");
    if (n > max_bytes)
        return tide_fail(st, TIDE_ERR_NOMEM, "image: %zu bytes, over the limit of %zu", n, max_bytes);
    const char *fmt;
    decode_fn fn;
    if (n >= 8 && !memcmp(d, "\x89PNG\r\n\x1a\n", 8)) fmt = "PNG", fn = PNG_DECODER;
    else if (n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF) fmt = "JPEG", fn = JPEG_DECODER;
    else if (n >= 12 && !memcmp(d, "RIFF", 4) && !memcmp(d + 8, "WEBP", 4)) fmt = "WebP", fn = WEBP_DECODER;
    else if (n >= 6 && (!memcmp(d, "GIF87a", 6) || !memcmp(d, "GIF89a", 6))) fmt = "GIF", fn = GIF_DECODER;
    else return tide_fail(st, TIDE_ERR_UNSUPPORTED, "image: not a PNG, JPEG, WebP or GIF file");
    if (fn) return fn(d, n, max_px, out, st);
    return tide_fail(st, TIDE_ERR_UNSUPPORTED, "image: this tide was built without %s support (scripts/deps.sh)", fmt);
}
