/* Fuzz target for the streaming output parser, checking its central
 * property: the result does not depend on how the text is split. Input:
 * byte 0 = flags (bit 0 starts in reasoning, bit 1 JSON mode), byte 1 =
 * chunk-size seed, then up to two stop sequences separated by 0x00 bytes
 * before a 0x01 byte, then the generated text. The text is parsed whole
 * and in pseudo-random chunks; any difference aborts. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/outparse.h"

static char *run(const tide_outparse_cfg *cfg, const char *text, size_t n, unsigned seed, size_t *out_len) {
    tide_outparse *p;
    tide_status st = {0};
    if (tide_outparse_new(cfg, &p, &st) != 0) return NULL;
    size_t at = 0;
    while (at < n) {
        size_t step = seed ? 1 + (seed = seed * 1103515245u + 12345u) % 7 : n;
        if (step > n - at) step = n - at;
        if (tide_outparse_feed(p, text + at, step, &st) != 0) abort();
        at += step;
    }
    if (tide_outparse_finish(p, &st) != 0) abort();
    tide_sb d;
    tide_sb_init(&d);
    size_t len;
    const char *s = tide_outparse_reasoning(p, &len);
    tide_sb_addn(&d, s, len);
    tide_sb_addc(&d, 0);
    s = tide_outparse_content(p, &len);
    tide_sb_addn(&d, s, len);
    tide_sb_addf(&d, "|%d|%d|", (int)tide_outparse_end(p), tide_outparse_json_ok(p));
    for (size_t i = 0; i < tide_outparse_ncalls(p); i++) {
        const tide_parsed_call *c = tide_outparse_call(p, i);
        tide_sb_add(&d, c->name);
        tide_sb_addn(&d, c->args.s, c->args.len);
        tide_sb_addc(&d, c->complete ? '+' : '-');
    }
    tide_outparse_free(p);
    *out_len = d.len;
    return tide_sb_take(&d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    tide_outparse_cfg cfg = {.in_reasoning = data[0] & 1, .json_mode = (data[0] >> 1) & 1};
    unsigned seed = data[1] | 1u;
    const char *rest = (const char *)data + 2;
    size_t n = size - 2;
    char stopbuf[2][64];
    const char *stops[2];
    const char *end = memchr(rest, 1, n);
    if (end) { /* stop sequences before the 0x01 */
        const char *s = rest;
        while (s < end && cfg.n_stops < 2) {
            const char *z = memchr(s, 0, (size_t)(end - s));
            size_t len = (size_t)((z ? z : end) - s);
            if (len > 0 && len < sizeof stopbuf[0]) {
                memcpy(stopbuf[cfg.n_stops], s, len);
                stopbuf[cfg.n_stops][len] = 0;
                stops[cfg.n_stops] = stopbuf[cfg.n_stops];
                cfg.n_stops++;
            }
            if (!z) break;
            s = z + 1;
        }
        n -= (size_t)(end + 1 - rest);
        rest = end + 1;
    }
    cfg.stops = stops;
    size_t lw = 0, ls = 0;
    char *whole = run(&cfg, rest, n, 0, &lw);
    char *split = run(&cfg, rest, n, seed, &ls);
    if (!whole || !split) abort();
    if (lw != ls || memcmp(whole, split, lw) != 0) abort();
    free(whole);
    free(split);
    return 0;
}
