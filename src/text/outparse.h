/* The streaming output parser: generated text -> reasoning, content and
 * tool calls, for one assistant turn.
 *
 * Text arrives in chunks of any size (a chunk may even end inside a UTF-8
 * character or inside a marker). The parser is a state machine over
 *
 *   REASONING --</think>--> CONTENT --[\n\n]<｜DSML｜ calls>--> CALLS
 *   CALLS --<｜DSML｜ invoke name="--> NAME --">--> INVOKE
 *   INVOKE --<｜DSML｜ parameter name="--> PARAM_HEAD --">--> VALUE
 *   VALUE --</｜DSML｜ parameter>--> INVOKE --</｜DSML｜ invoke>--> CALLS
 *   CALLS --</｜DSML｜ calls>--> CONTENT
 *
 * and <｜end▁of▁sentence｜> or a stop sequence (matched in content only)
 * ends the turn. Any suffix of the unprocessed text that could still grow
 * into a marker is held back, and the earliest (then longest) marker wins,
 * so the result is the same for every way of splitting the text into
 * chunks. Tool-call arguments are produced as JSON text ({"k": "v", ...}):
 * string="true" parameter values are taken raw and JSON-escaped as they
 * stream, string="false" values are parsed as JSON (and kept as a string
 * when they do not parse). docs/text.md has the full description. */
#ifndef TIDE_TEXT_OUTPARSE_H
#define TIDE_TEXT_OUTPARSE_H

#include <stddef.h>

#include "base/status.h"
#include "text/sbuf.h"

typedef enum tide_pev_kind {
    TIDE_PEV_REASONING,  /* text: reasoning delta */
    TIDE_PEV_CONTENT,    /* text: content delta */
    TIDE_PEV_CALL_BEGIN, /* call, name: a tool call starts */
    TIDE_PEV_CALL_ARGS,  /* call, text: a piece of its JSON arguments */
    TIDE_PEV_CALL_END,   /* call: its arguments are complete */
} tide_pev_kind;

typedef struct tide_pev {
    tide_pev_kind kind;
    const char *text;
    size_t len;
    size_t call;      /* index of the tool call in this turn */
    const char *name; /* CALL_BEGIN */
} tide_pev;

typedef int (*tide_pev_fn)(void *ud, const tide_pev *ev, tide_status *st);

typedef enum tide_parse_end {
    TIDE_PEND_NONE = 0, /* not ended by the text (length limit, or still running) */
    TIDE_PEND_EOS,      /* <｜end▁of▁sentence｜> */
    TIDE_PEND_STOP,     /* a stop sequence */
    TIDE_PEND_JSON,     /* JSON mode: the top-level value closed */
} tide_parse_end;

#define TIDE_OUTPARSE_MAX_STOPS 16
#define TIDE_OUTPARSE_MAX_STOP_LEN 256
#define TIDE_OUTPARSE_MAX_CALLS 128

typedef struct tide_outparse_cfg {
    int in_reasoning;          /* the prompt ended in <think> */
    int json_mode;             /* content is expected to be one JSON value */
    int raw;                   /* raw text (completions): all content, only stop
                                * sequences and <｜end▁of▁sentence｜> are markers */
    const char *const *stops;  /* copied */
    size_t n_stops;
    tide_pev_fn fn;            /* may be NULL: only accumulate */
    void *ud;
} tide_outparse_cfg;

typedef struct tide_parsed_call {
    char *name;
    tide_sb args; /* JSON object text */
    int complete; /* the invoke was closed (not cut off) */
} tide_parsed_call;

typedef struct tide_outparse tide_outparse;

int tide_outparse_new(const tide_outparse_cfg *cfg, tide_outparse **out, tide_status *st);
void tide_outparse_free(tide_outparse *p);
/* Feeds generated text. Text after the end of the turn is ignored. */
int tide_outparse_feed(tide_outparse *p, const char *text, size_t len, tide_status *st);
/* No more text: flushes what was held back and closes open tool calls. */
int tide_outparse_finish(tide_outparse *p, tide_status *st);

tide_parse_end tide_outparse_end(const tide_outparse *p); /* != NONE: stop generating */
const char *tide_outparse_reasoning(const tide_outparse *p, size_t *len);
const char *tide_outparse_content(const tide_outparse *p, size_t *len);
size_t tide_outparse_ncalls(const tide_outparse *p);
const tide_parsed_call *tide_outparse_call(const tide_outparse *p, size_t i);
/* The stop sequence that ended the turn (TIDE_PEND_STOP), else NULL. */
const char *tide_outparse_stop_seq(const tide_outparse *p);
/* JSON mode: 1 when the content was one complete JSON value. */
int tide_outparse_json_ok(const tide_outparse *p);

#endif
