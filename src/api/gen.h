/* The generation layer: text through the engine.
 *
 * One request travels in the order DESIGN.md gives:
 *
 *   tide_api_req (api.h) or a raw prompt text
 *     -> render (text/render.h: V4.1 template, thinking on/off, effort, tools)
 *     -> tokenize (text/tokenizer.h, the renderer's client spans as plain text)
 *     -> engine (include/tide.h: submit, step, cancel, events)
 *     -> detokenize as a stream (partial UTF-8 and partial added tokens held back)
 *     -> output parser (text/outparse.h: reasoning, DSML tool calls, stop strings)
 *     -> API events and the complete response (api/out.h)
 *
 * A tide_gen_engine wraps one tide_engine and the model's tokenizer. It is
 * driven in one of two ways:
 *
 *   - synchronously (the CLI, tests): the caller's thread calls
 *     tide_gen_submit, then tide_gen_step / tide_gen_run; every callback
 *     runs inside those calls, on that thread.
 *   - by its own engine thread (tide serve): tide_gen_start starts one
 *     thread that owns the engine; from then on tide_gen_submit and
 *     tide_gen_cancel may be called from any thread (they queue under a
 *     mutex and wake the engine thread), tide_gen_step / _run must not be
 *     called, and every callback (sse, text, done) runs on the engine
 *     thread. A callback must not block for long (it stalls every
 *     request in the batch): copy the data into the connection's own
 *     queue and return. tide_gen_destroy stops the thread.
 *
 * Thread safety at a glance:
 *   tide_gen_create / _destroy / _start    one thread (the owner)
 *   tide_gen_submit, tide_gen_cancel       any thread once started; else the driving thread
 *   tide_gen_stats, tide_gen_tokenizer,
 *   tide_gen_stop_ids, tide_gen_count_tokens  any thread, any time
 *   tide_gen_step / _run / _busy           the driving thread, only when not started
 *
 * A session (one submitted request, its n choices) is owned by the
 * tide_gen_engine from submit to its `done` callback, which is its last
 * callback; the engine frees it after `done` returns. Callers keep only
 * its id (for tide_gen_cancel, which is a no-op for an id that is done).
 *
 * Errors found at submission (a bad conversation, a prompt that does not
 * render or tokenize, a prompt longer than the context, bad sampling
 * settings) fail tide_gen_submit itself with a message, nothing queued (the
 * server answers 400). Errors after that (the engine failed the request)
 * end the session with done(result.error != NULL). docs/text.md,
 * "The generation layer", has the whole description. */
#ifndef TIDE_API_GEN_H
#define TIDE_API_GEN_H

#include <stddef.h>
#include <stdint.h>

#include "api/api.h"
#include "api/out.h"
#include "base/status.h"
#include "text/outparse.h"
#include "text/tokenizer.h"
#include "tide.h"

typedef struct tide_gen_engine tide_gen_engine;
typedef int64_t tide_gen_id; /* > 0, unique within a tide_gen_engine */

/* Limits on a request's images (docs/vision.md; tide serve --max-images,
 * --max-image-bytes, --max-image-pixels); 0 = the default. */
typedef struct tide_gen_image_limits {
    int max_images;        /* per request; default TIDE_GEN_MAX_IMAGES */
    size_t max_bytes;      /* one image, encoded; default TIDE_IMAGE_MAX_BYTES */
    int64_t max_pixels;    /* one image, decoded; default TIDE_IMAGE_MAX_PIXELS */
} tide_gen_image_limits;
#define TIDE_GEN_MAX_IMAGES 16
void tide_gen_set_image_limits(tide_gen_engine *g, const tide_gen_image_limits *lim);

/* The engine config's on_event / event_ctx are the generation layer's own
 * (a caller's are ignored). tokenizer: a tokenizer.json path, or NULL for
 * MODEL_DIR/tokenizer.json. */
int tide_gen_create(const tide_engine_config *cfg, const char *tokenizer, tide_gen_engine **out, tide_status *st);
/* Stops the engine thread (if started); sessions still running end with
 * done(finish "cancelled") first. NULL is fine. */
void tide_gen_destroy(tide_gen_engine *g);

/* Starts the engine thread (see above). */
int tide_gen_start(tide_gen_engine *g, tide_status *st);

/* Synchronous driving (not started): one engine step with its callbacks;
 * steps until idle; whether anything is queued or running. */
int tide_gen_step(tide_gen_engine *g, tide_status *st);
int tide_gen_run(tide_gen_engine *g, tide_status *st);
int tide_gen_busy(tide_gen_engine *g);

/* The model's tokenizer (read-only, shared by all threads). */
const tide_tokenizer *tide_gen_tokenizer(const tide_gen_engine *g);

/* The token ids that end generation unless ignore_eos: the model's end
 * ids (the one place that decides them: the checkpoint's eos_token_id as
 * tide_engine_eos_tokens reads it, else the tokenizer's
 * <｜end▁of▁sentence｜>). They are never output as text. Borrowed, valid
 * for g's lifetime. */
const int32_t *tide_gen_stop_ids(const tide_gen_engine *g, size_t *n);

/* Renders and tokenizes req's conversation without generating (for
 * /v1/messages/count_tokens and /tokenize): *n_tokens prompt tokens. */
int tide_gen_count_tokens(const tide_gen_engine *g, const tide_api_req *req, int64_t *n_tokens, tide_status *st);

/* Engine statistics (a snapshot taken after the last step; KV pool,
 * prefix cache, queue and running counts) plus the layer's own. */
typedef struct tide_gen_stats {
    tide_engine_stats engine;
    int64_t sessions_active;  /* submitted, not yet done */
    int64_t sessions_done;
} tide_gen_stats;
void tide_gen_get_stats(tide_gen_engine *g, tide_gen_stats *s);

/* ---- a session ---- */

/* One generated token, for logprobs and for callers that want ids. */
typedef struct tide_gen_token {
    int32_t id;
    float logprob;            /* log softmax of the raw logits at this token (when logprobs asked) */
    int32_t n_top;            /* top_logprobs entries filled */
    const int32_t *top_ids;   /* [n_top], best first */
    const float *top_logprobs;
    double t_engine;          /* when its session was handed to the engine (tide_now_seconds, monotonic) */
} tide_gen_token;

/* What a session ended with (handed to `done`; pointers valid during it). */
typedef struct tide_gen_result {
    tide_gen_id id;
    const char *error;        /* NULL, or why the engine failed the request (or the output failed) */
    const char *response;     /* non-streaming API requests: the complete JSON response body; else NULL */
    size_t response_len;
    const char *finish_reason; /* the API's name ("stop", "length", "tool_calls", "end_turn", ...);
                                * choice 0 when n > 1 */
    tide_usage usage;         /* summed over the choices */
    /* Choice 0, for the CLI and tests: the generated ids (stop token
     * included when one ended it), and the text as parsed. */
    const int32_t *output;
    int64_t n_output;
    const char *content;      /* the parsed content (stop string and what follows trimmed) */
    size_t content_len;
    const char *reasoning;    /* the parsed reasoning ("" when none) */
    size_t reasoning_len;
    size_t n_calls;           /* tool calls parsed (their names and arguments went out as events) */
    int cancelled;            /* ended by tide_gen_cancel (or destroy) */
} tide_gen_result;

typedef struct tide_gen_sink {
    /* Streaming API requests (req->gen.stream): SSE-ready events as
     * api/out.h defines them, in order, choices interleaved with their
     * own index for n > 1. A nonzero return cancels the session (a
     * client that went away). May be NULL. */
    tide_sse_fn sse;
    /* Every request: the parsed output as it streams (reasoning and
     * content deltas, tool calls), choice 0 only. May be NULL. */
    tide_pev_fn text;
    /* Every generated token of choice `choice`. May be NULL. */
    void (*token)(void *ud, int choice, const tide_gen_token *t);
    /* Exactly once, last. Required. */
    void (*done)(void *ud, const tide_gen_result *r);
    void *ud;
} tide_gen_sink;

typedef struct tide_gen_input {
    /* The request: a parsed API request (tide_api_parse or built by the
     * caller). Chat Completions, Responses and Messages carry a
     * conversation, rendered with the V4.1 template; Completions
     * (TIDE_API_COMPLETIONS) a raw prompt: text tokenized as is (special
     * tokens in it are matched; <｜begin▁of▁sentence｜> is put in front
     * unless it starts with it) or token ids taken as they are, and raw
     * text out (stop strings and EOS only, no reasoning or tool markup).
     * Only read during tide_gen_submit. */
    const tide_api_req *req;
    /* Names the response ("chatcmpl-...", "resp_...", "msg_...", "cmpl-...");
     * created: Unix time. */
    const char *response_id;
    int64_t created;
    uint64_t cache_salt;      /* prefix-cache isolation (tide_request.cache_salt) */
    int kv_class;             /* persistent KV store class (tide_request.kv_class); 0: req->gen.kv_class */
    tide_gen_sink sink;
} tide_gen_input;

/* Renders, tokenizes and queues a request; *id may be NULL. */
int tide_gen_submit(tide_gen_engine *g, const tide_gen_input *in, tide_gen_id *id, tide_status *st);
/* Ends a session with finish "cancelled": its engine requests are
 * cancelled (their KV pages freed), streaming requests get no more
 * events, and done follows. Unknown or done ids: nothing happens. */
void tide_gen_cancel(tide_gen_engine *g, tide_gen_id id);

#endif
