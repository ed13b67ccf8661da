/* The conversation model: what a request asks the model to continue, before
 * it is rendered into the V4.1 prompt text (render.h).
 *
 * A conversation is an ordered list of messages (system, user, assistant,
 * tool result), the tools the model may call, an optional response format,
 * and the generation mode: chat (the assistant header ends in </think>) or
 * thinking (it ends in <think>, and the prompt opens with a reasoning-effort
 * line). All strings are owned, NUL-terminated UTF-8. The API layer fills it
 * (src/api/), the renderer reads it. */
#ifndef TIDE_TEXT_CONV_H
#define TIDE_TEXT_CONV_H

#include <stddef.h>

#include <jansson.h>

#include "base/status.h"

/* Hostile-input limits, checked when a conversation is built. */
#define TIDE_CONV_MAX_MESSAGES 4096
#define TIDE_CONV_MAX_TOOLS 256
#define TIDE_CONV_MAX_CALLS 128        /* tool calls in one assistant message */
#define TIDE_CONV_MAX_NAME 128         /* tool names and parameter names, bytes */
#define TIDE_CONV_MAX_TEXT (16u << 20) /* one message, bytes */

/* The release's image placeholder: the renderer emits it as the image
 * token where an image part was (tide_conv_add_image); refused in client
 * text (conv.c). */
#define TIDE_CONV_IMAGE_PLACEHOLDER "<\xef\xbd\x9c" "deepseek_image\xef\xbd\x9c>"

/* Default completion budgets when a request names none. */
#define TIDE_MAX_TOKENS_CHAT 8192
#define TIDE_MAX_TOKENS_THINKING 65536

typedef enum tide_role {
    TIDE_ROLE_SYSTEM,    /* the first message, or a mid-conversation instruction */
    TIDE_ROLE_USER,
    TIDE_ROLE_ASSISTANT,
    TIDE_ROLE_TOOL,      /* a tool result; rendered inside the next user turn */
} tide_role;

typedef struct tide_tool_call {
    char *id;        /* may be NULL; used to order the results */
    char *name;
    char *arguments; /* JSON text of an object, as the client sent it */
} tide_tool_call;

typedef struct tide_msg {
    tide_role role;
    char *content;      /* never NULL */
    char *reasoning;    /* assistant only; NULL when absent */
    tide_tool_call *calls;
    size_t n_calls;
    char *tool_call_id; /* tool only; may be NULL */
} tide_msg;

typedef struct tide_tool {
    char *name;
    char *description; /* may be NULL */
    json_t *parameters; /* JSON schema (owned reference); may be NULL */
    json_t *shown;      /* the definition as the client sent it, rendered as is
                         * (owned reference); NULL: {name, description, parameters} */
    int strict;         /* "strict": true (arguments constrained to the schema, docs/structured.md) */
} tide_tool;

/* An image part, as the client sent it (encoded bytes, owned); decoded and
 * planned when the prompt is built (api/gen_session.c). */
typedef struct tide_conv_image {
    unsigned char *data;
    size_t n;
} tide_conv_image;
#define TIDE_CONV_MAX_IMAGES 256 /* a hard cap; the server's own limit is lower */

typedef struct tide_conv {
    tide_msg *msgs;
    size_t n_msgs, cap_msgs;
    tide_tool *tools;
    size_t n_tools, cap_tools;
    json_t *response_format; /* rendered as the response-format block; NULL = none */
    int thinking;            /* 0 chat mode, 1 thinking mode */
    int continue_final;      /* 1: a final assistant message is continued (no EOS) */
    int effort;              /* 1..100, used in thinking mode */
    tide_conv_image *images; /* in prompt order */
    size_t n_images, cap_images;
    size_t n_placed;         /* images whose placeholder a message already holds */
} tide_conv;

void tide_conv_init(tide_conv *c); /* chat mode, default effort */
void tide_conv_free(tide_conv *c);

/* Appends a message with a copy of `content` (n bytes). */
int tide_conv_add(tide_conv *c, tide_role role, const char *content, size_t n, tide_status *st);
/* Adds an image part to the next message added: the caller puts
 * TIDE_CONV_IMAGE_PLACEHOLDER where it goes in that message's content, which
 * must then hold exactly one placeholder per image added since the last
 * message (a client's own placeholder text is refused). Copies data. */
int tide_conv_add_image(tide_conv *c, const void *data, size_t n, tide_status *st);
/* Removes the last message (no-op when there is none). */
void tide_conv_pop(tide_conv *c);
/* Sets the reasoning of the last message, which must be an assistant's. */
int tide_conv_set_reasoning(tide_conv *c, const char *text, size_t n, tide_status *st);
/* Appends a tool call to the last message, which must be an assistant's. */
int tide_conv_add_call(tide_conv *c, const char *id, const char *name, const char *arguments,
                       tide_status *st);
/* Sets the call id of the last message, which must be a tool result. */
int tide_conv_set_call_id(tide_conv *c, const char *id, tide_status *st);
/* Adds a tool; `parameters` is borrowed (a reference is taken). */
int tide_conv_add_tool(tide_conv *c, const char *name, const char *description,
                       json_t *parameters, tide_status *st);
/* Sets what the last tool renders as (the client's own definition object,
 * key order and extra keys kept); `shown` is borrowed. */
void tide_conv_set_tool_shown(tide_conv *c, json_t *shown);
/* Keeps only the tool named `name` (tool_choice naming one function). */
int tide_conv_keep_tool(tide_conv *c, const char *name, tide_status *st);
void tide_conv_clear_tools(tide_conv *c);

/* Tool and parameter names: 1..TIDE_CONV_MAX_NAME bytes of [A-Za-z0-9_.:-]. */
int tide_conv_check_name(const char *name, tide_status *st);

/* Reasoning effort: the one table mapping names to the 1..100 scale, the
 * release encoder's (low 50, high 75, max 100) plus aliases (docs/text.md). */
#define TIDE_EFFORT_DEFAULT 75 /* "high", the release's default */
/* 0 and *effort set for a known name; -1 (status names the choices) if not.
 * "none" is not an effort: callers turn thinking off for it. */
int tide_effort_from_name(const char *name, int *effort, tide_status *st);
/* The name a number reads back as (for echoing in responses). */
const char *tide_effort_name(int effort);

int tide_conv_default_max_tokens(const tide_conv *c);

#endif
