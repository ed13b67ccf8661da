/* The three request converters behind tide_api_parse (internal to src/api/).
 * Each reads a parsed JSON object into an initialised request. */
#ifndef TIDE_API_CONVERT_H
#define TIDE_API_CONVERT_H

#include "api/api.h"

int tide_convert_chat(json_t *root, tide_api_req *req, tide_api_err *err);
int tide_convert_responses(json_t *root, tide_api_req *req, tide_api_err *err);
int tide_convert_messages(json_t *root, tide_api_req *req, tide_api_err *err);
int tide_convert_completions(json_t *root, tide_api_req *req, tide_api_err *err);
/* The sampling fields the OpenAI APIs share beyond temperature / top_p /
 * top_k / stop (req_sampling.c): min_p, the three penalties, logit_bias,
 * ignore_eos, stop_token_ids, and (when `with_n`) n. */
int tide_read_sampling_extras(json_t *root, tide_gen *g, int with_n, tide_api_err *err);
/* The constraint extensions (req_guided.c): guided_regex, guided_json,
 * guided_grammar, guided_choice, and structured_outputs {json, regex,
 * grammar, choice}; at most one. */
int tide_read_guided(json_t *root, tide_gen *g, tide_api_err *err);
/* Chat Completions: "logprobs" (already read: `logprobs`) and
 * "top_logprobs" 0..20, which needs logprobs. */
int tide_read_chat_logprobs(json_t *root, tide_gen *g, int logprobs, tide_api_err *err);
/* Completions: the legacy "logprobs" N 0..20 (the chosen tokens and the N
 * best at each position; null or absent: none). */
int tide_read_completions_logprobs(json_t *root, tide_gen *g, tide_api_err *err);
/* Responses: "top_logprobs" 0..20, and "include" (strings): logprobs when it
 * has "message.output_text.logprobs" or top_logprobs > 0; other include
 * values are accepted and ignored. */
int tide_read_responses_logprobs(json_t *root, tide_gen *g, tide_api_err *err);

#endif
