/* The three HTTP APIs on the way out: generated text -> parsed output
 * (text/outparse.h) -> the API's streaming events and complete response.
 *
 *   tide_api_out_new      one per request, after the prompt is rendered
 *   tide_api_out_begin    streaming: the opening events
 *   tide_api_out_text     generated text as it is detokenized; streaming
 *                         requests get delta events through the sink
 *   tide_api_out_finish   the engine stopped (or the parser said so);
 *                         streaming requests get the closing events
 *   tide_api_out_response the complete JSON response (non-streaming)
 *   tide_api_out_fail     an error after the stream began
 *
 * Event shapes per API (and their order) are in docs/text.md. The sink gets
 * SSE-ready pieces: an event name (NULL for Chat Completions, which has
 * none) and one JSON data line; Chat Completions ends with data "[DONE]". */
#ifndef TIDE_API_OUT_H
#define TIDE_API_OUT_H

#include <stdint.h>

#include "api/api.h"
#include "base/status.h"

typedef int (*tide_sse_fn)(void *ud, const char *event, const char *data, size_t len, tide_status *st);

typedef struct tide_usage {
    int64_t prompt_tokens;
    int64_t completion_tokens;
    int64_t reasoning_tokens; /* part of completion_tokens; 0 if unknown */
    int64_t cached_tokens;    /* part of prompt_tokens served from the prefix cache */
    int64_t spec_verified;    /* speculative decoding: drafts verified (all choices) */
    int64_t spec_accepted;    /* ... and accepted */
} tide_usage;

typedef enum tide_gen_end {
    TIDE_GEN_STOP,   /* end of sequence, a stop token, or the parser's end */
    TIDE_GEN_LENGTH, /* max_tokens (or the context) ran out */
} tide_gen_end;

typedef struct tide_api_out tide_api_out;

/* `id` names the response ("chatcmpl-...", "resp_...", "msg_..." as the
 * caller likes); `created` is a Unix time. `in_reasoning` comes from the
 * rendered prompt (tide_prompt.in_reasoning). */
int tide_api_out_new(const tide_api_req *req, int in_reasoning, const char *id, int64_t created, tide_sse_fn fn,
                     void *ud, tide_api_out **out, tide_status *st);
void tide_api_out_free(tide_api_out *o);

int tide_api_out_begin(tide_api_out *o, const tide_usage *usage, tide_status *st);
int tide_api_out_text(tide_api_out *o, const char *text, size_t len, tide_status *st);
/* 1 when the output itself has ended (end-of-sentence text, a stop
 * sequence, JSON mode's closed value): the engine should stop. */
int tide_api_out_ended(const tide_api_out *o);
int tide_api_out_finish(tide_api_out *o, tide_gen_end end, const tide_usage *usage, tide_status *st);
/* The complete response (after finish); malloc'd JSON. */
char *tide_api_out_response(tide_api_out *o, tide_status *st);
/* Streams an error in the API's way and ends the stream. */
int tide_api_out_fail(tide_api_out *o, const char *message, tide_status *st);

/* Also hands every parser event (reasoning and content deltas, tool
 * calls) to fn, before the API's own events: the generation layer's plain
 * text sink (api/gen.h). fn NULL: none. */
void tide_api_out_set_tap(tide_api_out *o, tide_pev_fn fn, void *ud);
/* n > 1 (Chat Completions): this output is choice `index`; only the last
 * choice (`last`) writes the closing usage chunk and [DONE]. */
void tide_api_out_set_choice(tide_api_out *o, int index, int last);

/* A generated token's log probability (Chat Completions' logprobs;
 * Completions' legacy logprobs object and Responses' output_text logprobs
 * are written from the same entries): its raw
 * bytes, and the best alternatives' (alt_bytes[i] / alt_len[i] /
 * alt_logprob[i]). Recorded in order; streaming chunks carry the entries
 * recorded since the last chunk, the response all of them. Requests that
 * did not ask for logprobs ignore it. */
int tide_api_out_logprob(tide_api_out *o, const uint8_t *bytes, size_t len, float logprob,
                         const uint8_t *const *alt_bytes, const size_t *alt_len, const float *alt_logprob, int n_alt,
                         tide_status *st);
/* Takes the entries recorded since the last call (a JSON array, owned by
 * the caller; NULL when none): for the event writers. */
json_t *tide_api_out_take_logprobs(tide_api_out *o);

/* The parsed output so far: content (stop sequence and what follows
 * trimmed), reasoning, and the number of tool calls. */
const char *tide_api_out_content(const tide_api_out *o, size_t *len);
const char *tide_api_out_reasoning(const tide_api_out *o, size_t *len);
size_t tide_api_out_ncalls(const tide_api_out *o);

/* The finish reason as the API names it (after finish). */
const char *tide_api_out_finish_reason(const tide_api_out *o);

#endif
