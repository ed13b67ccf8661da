/* Fuzz target for the request converters (image parts included: their
 * bytes go through the image decoder). The first byte selects the API
 * (Chat Completions, Responses, Messages, Completions); the rest is the request
 * body. A request that parses is rendered and run through the output side
 * with a fixed sample output; one that does not must produce an error body
 * that is valid JSON. Nothing may crash or leak. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/out.h"
#include "text/render.h"
#include "vision/image.h"

static int sink(void *ud, const char *event, const char *data, size_t len, tide_status *st) {
    (void)ud, (void)event, (void)data, (void)len, (void)st;
    return 0;
}

static const char OUTPUT[] = "r</think>text\n\n<\xef\xbd\x9c" "DSML\xef\xbd\x9c calls>\n<\xef\xbd\x9c" "DSML\xef\xbd\x9c "
                             "invoke name=\"f\">\n<\xef\xbd\x9c" "DSML\xef\xbd\x9c parameter name=\"a\" string=\"false\">1"
                             "</\xef\xbd\x9c" "DSML\xef\xbd\x9c parameter>\n</\xef\xbd\x9c" "DSML\xef\xbd\x9c invoke>";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    tide_api_kind kind = (tide_api_kind)(data[0] % 4);
    tide_api_req req;
    tide_api_err err;
    if (tide_api_parse(kind, (const char *)data + 1, size - 1, &req, &err) != 0) {
        char *js = tide_api_error_json(kind, &err);
        json_t *v = js ? json_loads(js, 0, NULL) : NULL;
        if (!v) abort(); /* the error body must always be JSON */
        json_decref(v);
        free(js);
        tide_api_req_free(&req);
        return 0;
    }
    tide_prompt p;
    tide_status st = {0};
    /* image parts: their bytes through the decoder, as the generation
     * layer does (small limits: fuzzing is about the parsing) */
    tide_image_limits lim = {1u << 20, 1 << 20};
    for (size_t i = 0; i < req.conv.n_images; i++) {
        tide_image im;
        tide_status ist = {0};
        if (tide_image_decode(req.conv.images[i].data, req.conv.images[i].n, &lim, &im, &ist) == 0) tide_image_free(&im);
    }
    if (tide_render(&req.conv, &p, &st) == 0) {
        tide_api_out *o;
        if (tide_api_out_new(&req, p.in_reasoning, "fz", 0, sink, NULL, &o, &st) == 0) {
            tide_api_out_begin(o, NULL, &st);
            tide_api_out_text(o, OUTPUT, sizeof OUTPUT - 1, &st);
            tide_api_out_finish(o, TIDE_GEN_LENGTH, NULL, &st);
            free(tide_api_out_response(o, &st));
            tide_api_out_free(o);
        }
        tide_prompt_free(&p);
    }
    tide_api_req_free(&req);
    return 0;
}
