/* The three HTTP APIs tide speaks, on the way in: an OpenAI Chat
 * Completions, OpenAI Responses or Anthropic Messages request body becomes
 * a conversation (text/conv.h) plus generation settings. An invalid request
 * gets an error in that API's own error shape, naming the field
 * ("messages[2].content: expected string or array"). The way out (events
 * and responses) is api/out.h. Conversion tables: docs/text.md. */
#ifndef TIDE_API_API_H
#define TIDE_API_API_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/status.h"
#include "engine/sampling_params.h"
#include "text/conv.h"
#include "text/outparse.h"

typedef enum tide_api_kind {
    TIDE_API_CHAT,      /* POST /v1/chat/completions */
    TIDE_API_RESPONSES, /* POST /v1/responses */
    TIDE_API_MESSAGES,  /* POST /v1/messages */
    TIDE_API_COMPLETIONS, /* POST /v1/completions: a raw prompt (tide_api_req.prompt), raw text out */
} tide_api_kind;

/* Hostile-input limits for request bodies. */
#define TIDE_API_MAX_BODY (32u << 20)
#define TIDE_API_MAX_DEPTH 64 /* JSON nesting anywhere in the body */

typedef enum tide_tool_choice {
    TIDE_TOOLS_AUTO,
    TIDE_TOOLS_NONE,     /* tools are left out of the prompt */
    TIDE_TOOLS_REQUIRED, /* the model must call some tool */
    TIDE_TOOLS_NAMED,    /* the model must call `tool_name` (the only tool left in the prompt) */
} tide_tool_choice;

typedef enum tide_out_format {
    TIDE_FMT_TEXT,
    TIDE_FMT_JSON_OBJECT,
    TIDE_FMT_JSON_SCHEMA, /* json_schema holds the schema */
} tide_out_format;

typedef struct tide_gen {
    char *model;         /* as the client named it ("" when absent) */
    double temperature;  /* default 1.0 */
    double top_p;        /* default 1.0 */
    int top_k;           /* 0 = off */
    int max_tokens;      /* the request's, or the mode's default */
    char *stop[TIDE_OUTPARSE_MAX_STOPS];
    size_t n_stop;
    int has_seed;
    uint64_t seed;
    int stream;
    int include_usage;   /* Chat Completions stream_options.include_usage */
    tide_tool_choice tool_choice;
    char *tool_name;     /* TIDE_TOOLS_NAMED */
    int parallel_tool_calls; /* default 1 */
    tide_out_format format;
    json_t *json_schema; /* TIDE_FMT_JSON_SCHEMA: the schema itself (owned) */
    /* Sampling beyond temperature / top_p / top_k (the generation layer,
     * api/gen.h, hands them to the engine's sampler). */
    int n;                     /* choices; default 1 (Chat Completions "n") */
    double min_p;              /* [0, 1]; 0 = off */
    double frequency_penalty;  /* [-2, 2]; 0 = off */
    double presence_penalty;   /* [-2, 2]; 0 = off */
    double repetition_penalty; /* > 0; 1 = off (vLLM's extension) */
    tide_logit_bias *logit_bias; /* owned; n_logit_bias entries */
    size_t n_logit_bias;
    int logprobs;              /* return the chosen tokens' log probabilities */
    int top_logprobs;          /* 0..TIDE_GEN_MAX_TOP_LOGPROBS alternatives per token */
    int ignore_eos;            /* do not stop at the model's end ids (extension) */
    int32_t *stop_token_ids;   /* owned; extra ids that end generation (extension) */
    size_t n_stop_token_ids;
    /* An output constraint from the extensions (guided_regex, guided_json,
     * guided_grammar, guided_choice, structured_outputs: api/req_guided.c):
     * guided = 1 + a tide_cons_kind (0: none; response_format then decides),
     * guided_text its text (owned), guided_param the field it came from. */
    int guided;
    char *guided_text;
    const char *guided_param;
    int kv_class;              /* "kv_class": "chat" | "agent" (extension, every API): how long the
                                * persistent KV store keeps the pages (TIDE_KV_CLASS_*; 0 unset) */
} tide_gen;

#define TIDE_GEN_MAX_N 16
#define TIDE_GEN_MAX_TOP_LOGPROBS 20
#define TIDE_GEN_MAX_LOGIT_BIAS 1024
#define TIDE_GEN_MAX_STOP_IDS 64

typedef struct tide_api_req {
    tide_api_kind kind;
    tide_conv conv;
    tide_gen gen;
    /* TIDE_API_COMPLETIONS: the prompt, text (owned) or token ids (owned) */
    char *prompt;
    size_t prompt_len;
    int32_t *prompt_ids;
    size_t n_prompt_ids;
} tide_api_req;

typedef struct tide_api_err {
    int http_status;   /* 400, or 413 for a body over the size limit */
    char param[160];   /* the offending field ("messages[2].content"), "" if none */
    const char *type;  /* "invalid_request_error", ... (static string) */
    tide_status st;    /* message: "<param>: what was wrong" */
} tide_api_err;

/* Parses a request body. On failure *req is left empty and err says why. */
int tide_api_parse(tide_api_kind kind, const char *body, size_t len, tide_api_req *req, tide_api_err *err);
void tide_api_req_free(tide_api_req *req);
/* An empty request with the defaults tide_api_parse starts from (for
 * callers that build one: the CLI, tests). */
void tide_api_req_init(tide_api_req *req, tide_api_kind kind);

/* The error body in the API's own shape (malloc'd JSON text):
 *   OpenAI:    {"error": {"message", "type", "param", "code"}}
 *   Anthropic: {"type": "error", "error": {"type", "message"}} */
char *tide_api_error_json(tide_api_kind kind, const tide_api_err *err);

const char *tide_api_kind_name(tide_api_kind kind);

#endif
