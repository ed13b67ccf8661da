/* Image parts of the three APIs (docs/vision.md, "The APIs"): the bytes of
 * a data: URL (OpenAI image_url / input_image) or of a base64 source
 * (Anthropic image blocks) go into the conversation as they are
 * (tide_conv_add_image); they are decoded, limited and planned when the
 * prompt is built (api/gen_session.c). Remote URLs are refused: the
 * server has no network. */
#include <stdlib.h>
#include <string.h>

#include "api/jfield.h"
#include "api/req_common.h"
#include "vision/image.h"

/* The base64 alphabet's value of c, -1 outside it. */
static int b64_value(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Standard base64 (RFC 4648 section 4, padding optional) into out (at least
 * n / 4 * 3 + 2 bytes); -1 and *bad at the first byte that is not. */
static long b64_decode(const char *s, size_t n, unsigned char *out, size_t *bad) {
    size_t len = 0, pad = 0;
    unsigned acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '=') {
            pad++;
            continue;
        }
        int v = b64_value((unsigned char)s[i]);
        if (v < 0 || pad) {
            *bad = i;
            return -1;
        }
        acc = (acc << 6) | (unsigned)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[len++] = (unsigned char)(acc >> bits);
        }
    }
    if (pad > 2 || bits >= 6) {
        *bad = n;
        return -1;
    }
    return (long)len;
}

int tide_api_image_b64(tide_api_req *req, const char *b64, size_t n, const char *path, tide_api_err *err) {
    if (n == 0) return tide_api_bad(err, path, "the image's base64 data is empty");
    if (n / 4 * 3 > TIDE_IMAGE_MAX_BYTES)
        return tide_api_bad(err, path, "the image is over %zu bytes encoded", TIDE_IMAGE_MAX_BYTES);
    unsigned char *buf = malloc(n / 4 * 3 + 3);
    if (!buf) return tide_fail(&err->st, TIDE_ERR_NOMEM, "out of memory decoding an image");
    size_t bad = 0;
    long len = b64_decode(b64, n, buf, &bad);
    int rc = 0;
    if (len < 0) rc = tide_api_bad(err, path, "the image's data is not valid base64 (at byte %zu)", bad);
    else if (len == 0) rc = tide_api_bad(err, path, "the image's data is empty");
    else if (tide_conv_add_image(&req->conv, buf, (size_t)len, &err->st) != 0)
        rc = tide_api_bad(err, path, "%s", err->st.msg);
    free(buf);
    return rc;
}

int tide_api_image_url(tide_api_req *req, const char *url, const char *path, tide_api_err *err) {
    if (strncmp(url, "data:", 5) != 0) {
        if (!strncmp(url, "http://", 7) || !strncmp(url, "https://", 8))
            return tide_api_bad(err, path,
                                "remote image URLs are not fetched: this server has no network access; send the "
                                "image inline as a data: URL (data:image/png;base64,...)");
        return tide_api_bad(err, path, "expected a data: URL (data:image/png;base64,...)");
    }
    const char *comma = strchr(url, ',');
    if (!comma) return tide_api_bad(err, path, "the data: URL has no ',' before its data");
    size_t head = (size_t)(comma - url);
    if (head < 12 || memcmp(comma - 7, ";base64", 7) != 0)
        return tide_api_bad(err, path, "the data: URL is not base64 (data:image/...;base64,...)");
    if (strncmp(url + 5, "image/", 6) != 0)
        return tide_api_bad(err, path, "the data: URL's media type is not an image (%.*s)",
                            (int)(head - 12 < 40 ? head - 12 : 40), url + 5);
    return tide_api_image_b64(req, comma + 1, strlen(comma + 1), path, err);
}
