/* Fuzz target for the JSONL request reader (src/engine/request_jsonl.h), the
 * input of `tide run --input` and `tide bench offline --input`. The first
 * byte picks the defaults (bit 0: ignore_eos; bits 1-2: max_tokens); the rest
 * is a request file, read line by line as the commands read it. Every line
 * either parses into a request whose arrays agree with its counts, or fails
 * with a message that names its line; nothing may crash or leak. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/request_jsonl.h"

static void check_ok(const tide_jsonl_request *r) {
    const tide_request *q = &r->req;
    const tide_sampling_params *p = &q->sampling;
    if (q->prompt != r->prompt || (q->n_prompt == 0) != (r->prompt == NULL) || q->n_prompt < 0) abort();
    if (p->stop_tokens != r->stop || (p->n_stop_tokens == 0) != (r->stop == NULL) || p->n_stop_tokens < 0) abort();
    for (int64_t i = 0; i < q->n_prompt; i++) (void)(volatile int32_t)q->prompt[i]; /* in bounds under ASan */
    if (p->top_k < -1 || !(p->temperature >= 0)) abort();
    if (q->stop_at_eos != 0 && q->stop_at_eos != 1) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    static const int64_t max_tokens[4] = {16, 1, 0, INT64_MAX};
    const tide_jsonl_defaults d = {.max_tokens = max_tokens[(data[0] >> 1) & 3], .ignore_eos = data[0] & 1};
    FILE *in = fmemopen((void *)(data + 1), size - 1, "r");
    if (!in) return 0;
    char *line = NULL;
    size_t cap = 0, len;
    int64_t lineno = 0, prev = 0;
    while (tide_jsonl_next_line(in, &line, &cap, &len, &lineno) > 0) {
        if (lineno <= prev || len == 0) abort();
        prev = lineno;
        tide_jsonl_request r;
        tide_status st = {0};
        if (tide_jsonl_request_parse(line, len, lineno, &d, &r, &st) == 0) {
            check_ok(&r);
        } else {
            char want[48];
            snprintf(want, sizeof want, "line %lld: ", (long long)lineno);
            if (strncmp(st.msg, want, strlen(want)) != 0 || strlen(st.msg) == strlen(want)) abort();
            if (r.prompt || r.stop) abort();
        }
        if (!r.id) abort();
        char *js = json_dumps(r.id, JSON_ENCODE_ANY | JSON_COMPACT); /* as written into results */
        if (!js) abort();
        free(js);
        tide_jsonl_request_free(&r);
    }
    free(line);
    fclose(in);
    return 0;
}
