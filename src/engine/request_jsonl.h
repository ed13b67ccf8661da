/* JSONL request files: the workload format of `tide run --input` and
 * `tide bench offline --input`, one request per line:
 *
 *   {"id": any, "prompt_ids": [..], "max_tokens": N, "temperature", "top_p",
 *    "top_k", "min_p", "repetition_penalty", "presence_penalty",
 *    "frequency_penalty", "seed", "stop_token_ids": [..], "ignore_eos": bool,
 *    "cache_salt": N}
 *
 * Only "prompt_ids" is required; any other field is an error. The line is
 * untrusted input: this checks the JSON, the field types and the ranges that
 * do not depend on the model; tide_engine_submit checks the rest (token ids
 * against the vocabulary, max_tokens >= 1, a non-empty prompt). Errors name
 * the line and the field: `line 4: "top_k": -2 is outside [-1, 2147483647]`.
 *
 *     char *line = NULL; size_t cap = 0, len; int64_t lineno = 0;
 *     while ((rc = tide_jsonl_next_line(in, &line, &cap, &len, &lineno)) > 0) {
 *         tide_jsonl_request r;
 *         if (tide_jsonl_request_parse(line, len, lineno, &defaults, &r, &st) == 0) ... submit r.req ...
 *         tide_jsonl_request_free(&r);
 *     }
 *     free(line); */
#ifndef TIDE_ENGINE_REQUEST_JSONL_H
#define TIDE_ENGINE_REQUEST_JSONL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "base/status.h"
#include "tide.h"

/* What a line gets for the fields it leaves out. */
typedef struct tide_jsonl_defaults {
    int64_t max_tokens; /* "max_tokens" */
    int ignore_eos;     /* "ignore_eos": when 0, the model's EOS ids stop the request too
                         * (req.stop_at_eos; the engine knows them) */
} tide_jsonl_defaults;

/* One parsed line. */
typedef struct tide_jsonl_request {
    tide_request req; /* ready to submit (but for req.user); points into prompt and stop */
    int32_t *prompt;  /* owned, NULL when "prompt_ids" is empty */
    int32_t *stop;    /* owned: "stop_token_ids" */
    json_t *id;       /* owned reference: the line's "id" when it is an object with one, else
                       * the line number (an integer); set for rejected lines too (NULL only
                       * when out of memory) */
} tide_jsonl_request;

/* Parses line[0..len) (no terminator needed), line number lineno (1-based,
 * for ids and messages). Fills *out in every case (free it with
 * tide_jsonl_request_free); returns 0, or -1 with st->msg = "line N: what
 * was wrong". */
int tide_jsonl_request_parse(const char *line, size_t len, int64_t lineno, const tide_jsonl_defaults *d,
                             tide_jsonl_request *out, tide_status *st);
void tide_jsonl_request_free(tide_jsonl_request *r);

/* Reads the next request line of in into *line (getline's buffer, *cap),
 * without trailing newline, CR and spaces; blank lines are skipped but
 * counted in *lineno. Returns 1 with a line of *len > 0 bytes, 0 at the end,
 * -1 on a read error. */
int tide_jsonl_next_line(FILE *in, char **line, size_t *cap, size_t *len, int64_t *lineno);

#endif
