/* Internals of the generation layer (api/gen.h), shared by gen.c (the
 * engine wrapper, its queues and its thread) and gen_session.c (one
 * session: its prompt, its choices, their streams). Internal to src/api/. */
#ifndef TIDE_API_GEN_SESSION_H
#define TIDE_API_GEN_SESSION_H

#include <pthread.h>

#include "api/gen.h"
#include "model/config.h"

typedef struct gen_session gen_session;

/* One choice: one engine request and its output stream. */
typedef struct gen_choice {
    gen_session *s;
    int index;
    tide_request_id rid;    /* 0 until the engine has it */
    tide_api_out *out;
    tide_detok *detok;
    int finished;           /* the engine's FINISHED came */
    int ended;              /* the output itself ended (stop string, EOS text, JSON closed): cancel it */
    int saw_reasoning;      /* the current token's text went to the reasoning */
    int64_t reasoning_tokens;
    int64_t n_output, n_cached;
    int64_t n_spec_verified, n_spec_accepted;
    int32_t *ids;           /* the output, copied when it finished */
    tide_finish_reason reason;
} gen_choice;

struct gen_session {
    tide_gen_id id;
    tide_gen_engine *g;
    gen_session *next;      /* pending or active list */
    tide_gen_sink sink;
    int kind_stream;        /* streaming API request */
    int n;                  /* choices */
    gen_choice *ch;
    int n_finished;
    int cancelled;          /* tide_gen_cancel, destroy, or the sink gave up */
    int cancel_pending;     /* to cancel after the step (called from inside a callback) */
    char *error;            /* the first failure */
    int32_t *prompt;
    int64_t n_prompt;
    tide_sampling_params sp;
    tide_logit_bias *bias;  /* owned copies the engine borrows */
    int32_t *stop_ids;
    int has_seed;
    uint64_t cache_salt;
    int kv_class;
    int last_finished;      /* index of the choice that finished last */
    struct tide_cons_grammar *cgram; /* the output constraint (NULL none) */
    int32_t cgate;          /* it applies after this token (</think>), -1 from the start */
    double t_engine;        /* tide_now_seconds() when given to the engine */
    struct tide_image *imgs; /* the prompt's images, decoded (the engine encodes them at submit) */
    tide_request_image *rimgs;
    int n_imgs;
};

struct tide_gen_engine {
    tide_engine *e;
    tide_tokenizer *tok;
    int32_t vocab;
    int64_t context;        /* prompt + generated tokens at most (<= 0: no limit known) */
    int32_t stop_ids[8];    /* the model's end ids (tide_gen_stop_ids) */
    size_t n_stop_ids;
    /* Under mu: ids, the queues from other threads, the stats snapshot. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    int started, stopping;
    tide_gen_id next_id;
    gen_session *pending;   /* submitted, not yet given to the engine (FIFO: tail appended) */
    gen_session **pending_tail;
    tide_gen_id *cancels;   /* ids to cancel */
    size_t n_cancels, cap_cancels;
    tide_gen_stats stats;
    /* The driving thread's own (no lock): sessions the engine has. */
    gen_session *active;
    tide_request_id *release; /* finished engine requests to release after the step */
    size_t n_release, cap_release;
    /* Output constraints (constrain/constrain.h): the vocabulary trie, built
     * at the first constrained request, and the compile cache; under cmu. */
    pthread_mutex_t cmu;
    struct tide_cons_vocab *cvocab;
    struct tide_cons_cache *ccache;
    /* images (docs/vision.md): the tower's config (NULL: none), the image
     * token, the server's limits (tide_gen_set_image_limits) */
    const tide_vision_config *vision;
    int32_t image_token;
    tide_gen_image_limits img_lim;
};

/* Builds a session from the input: renders, tokenizes, checks, creates the
 * choices' outputs (any thread). */
int tide_gen_session_new(tide_gen_engine *g, const tide_gen_input *in, gen_session **out, tide_status *st);
/* The prompt's ids for req (rendered or raw), and whether generation
 * starts in the reasoning (any thread). */
int tide_gen_prompt_ids(const tide_gen_engine *g, const tide_api_req *req, tide_tok_ids *ids, int *in_reasoning,
                        tide_status *st);
/* Frees a session that is not (any more) in the engine. */
void tide_gen_session_free(gen_session *s);
/* Gives its choices to the engine (driving thread); fails with nothing
 * queued. */
int tide_gen_session_submit(gen_session *s, tide_status *st);
/* The engine's event callback (ev->user is the gen_choice). */
void tide_gen_on_event(void *ctx, const tide_event *ev);
/* Cancels what is left of a session in the engine (driving thread, outside
 * callbacks); its done comes from the FINISHED events, or right here when
 * the engine has none of its requests. */
void tide_gen_session_cancel(gen_session *s);
/* Ends a session that never reached the engine, with done. */
void tide_gen_session_abort(gen_session *s, const char *error);
/* Unlinks s from g->active (driving thread). */
void tide_gen_unlink_active(tide_gen_engine *g, gen_session *s);
/* Queues a finished engine request for release after the step. */
void tide_gen_defer_release(tide_gen_engine *g, tide_request_id rid);

#endif
