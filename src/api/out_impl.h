/* Internals shared by out.c and the three event writers (out_chat.c,
 * out_responses.c, out_messages.c). The parser's events are grouped into
 * output ITEMS (a reasoning run, a text run, one tool call) in the order
 * they appear; every API's events and responses are written from items. */
#ifndef TIDE_API_OUT_IMPL_H
#define TIDE_API_OUT_IMPL_H

#include "api/out.h"
#include "text/outparse.h"
#include "text/sbuf.h"

typedef enum { IT_REASONING, IT_TEXT, IT_CALL } item_kind;

typedef struct out_item {
    item_kind kind;
    size_t call;   /* IT_CALL: index among the turn's calls */
    tide_sb text;  /* reasoning or text (calls keep theirs in the parser) */
    char id[96];   /* Responses item id / tool call id */
    size_t lp_lo, lp_hi; /* its logprob entries: lp_all[lp_lo, lp_hi) (out.c lp_attribute) */
    int lp_set;
} out_item;

typedef enum { FIN_STOP, FIN_STOP_SEQ, FIN_LENGTH, FIN_TOOLS } fin_kind;

typedef struct out_api {
    int (*begin)(tide_api_out *o, tide_status *st);
    int (*open)(tide_api_out *o, size_t item, tide_status *st);
    int (*delta)(tide_api_out *o, size_t item, const char *text, size_t len, tide_status *st);
    int (*close)(tide_api_out *o, size_t item, tide_status *st);
    int (*finish)(tide_api_out *o, tide_status *st);
    json_t *(*response)(tide_api_out *o);
    int (*fail)(tide_api_out *o, const char *message, tide_status *st);
} out_api;

struct tide_api_out {
    tide_api_kind kind;
    const out_api *api;
    char *id, *model;
    int64_t created;
    int stream, include_usage, max_tokens, parallel_tool_calls;
    double temperature, top_p;
    tide_outparse *parser;
    tide_sse_fn fn;
    void *ud;
    out_item *items;
    size_t n_items, cap_items;
    long open;  /* index of the open item, -1 none */
    int begun, finished, failed;
    int64_t seq; /* Responses sequence_number */
    fin_kind fin;
    tide_usage usage;
    tide_pev_fn tap; /* tide_api_out_set_tap */
    void *tap_ud;
    int choice, last_choice; /* n > 1: this choice's index; whether it closes the stream */
    int logprobs;           /* the request asked for them */
    json_t *lp_all, *lp_pending; /* logprob entries: all of them, not yet streamed (Chat) */
    size_t lp_mark;         /* lp_all[0, lp_mark) belong to items (the token before its text) */
    size_t lp_sent;         /* Completions / Responses: entries already streamed */
    int64_t lp_off;         /* Completions: text_offset of the next streamed entry */
};

/* Logprob entry i ({token, logprob, bytes, top_logprobs}; NULL beyond). */
static inline json_t *tide_out_lp(const tide_api_out *o, size_t i) { return o->lp_all ? json_array_get(o->lp_all, i) : NULL; }

/* Sends one event: `obj` is consumed. Responses events get their
 * sequence_number here. */
int tide_out_emit(tide_api_out *o, const char *event, json_t *obj, tide_status *st);
/* As tide_out_emit, for the APIs whose events carry their own name as a
 * leading "type" member (Responses, Messages). */
int tide_out_event(tide_api_out *o, const char *type, json_t *obj, tide_status *st);
/* The arguments of tool call `call` as parsed (JSON object text). */
const char *tide_out_call_args(const tide_api_out *o, size_t call, size_t *len);
const char *tide_out_call_name(const tide_api_out *o, size_t call);
/* The parser's matched stop sequence, or NULL. */
const char *tide_out_stop_seq(const tide_api_out *o);

/* The OpenAI APIs' streamed failure: an error object, then [DONE]. */
int tide_out_openai_fail(tide_api_out *o, const char *message, tide_status *st);

extern const out_api tide_out_chat, tide_out_responses, tide_out_messages, tide_out_completions;

#endif
