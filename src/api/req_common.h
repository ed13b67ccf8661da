/* Pieces the three request converters (req_chat.c, req_responses.c,
 * req_messages.c) share where their APIs agree: text given as a string or
 * an array of parts, adding a turn, the seed, the tool choice and the
 * messages array. Internal to src/api/; messages keep each API's field
 * paths, since every error names the path it is about. */
#ifndef TIDE_API_REQ_COMMON_H
#define TIDE_API_REQ_COMMON_H

#include <jansson.h>

#include "api/api.h"
#include "text/sbuf.h"

/* Checks one content part (an object, at `path`) and gives its text. Each
 * API has its own part types and order of checks. req: where image parts
 * go (their text is then the image placeholder); NULL where the field
 * takes no images. */
typedef int (*tide_text_part_fn)(tide_api_req *req, json_t *part, const char *path, const char **text,
                                 tide_api_err *err);

/* The OpenAI APIs' part check: "type" required, an image type read as an
 * image (req non-NULL: its "image_url", a string or an object with "url",
 * must be a data: URL) or refused, any other type not in text_types refused
 * as not supported, then "text" required. Both lists end with NULL. */
int tide_openai_text_part(tide_api_req *req, json_t *part, const char *path, const char *const *text_types,
                          const char *const *image_types, const char **text, tide_api_err *err);

/* Text of a content field: a string as is, or an array of parts (each
 * checked by `part`) joined with blank lines, the reference encoder's rule
 * for content blocks. Appends to out. */
int tide_read_text_parts(tide_api_req *req, json_t *v, const char *path, tide_text_part_fn part, tide_sb *out,
                         tide_api_err *err);

/* Image parts (req_image.c): an image's bytes from a data: URL or from
 * base64 into req's conversation (tide_conv_add_image), for the next
 * message; remote URLs and bad base64 refused. */
int tide_api_image_url(tide_api_req *req, const char *url, const char *path, tide_api_err *err);
int tide_api_image_b64(tide_api_req *req, const char *b64, size_t n, const char *path, tide_api_err *err);

/* Adds a turn to the conversation; a refusal names `path`. */
int tide_api_conv_add(tide_api_req *req, tide_role r, const char *s, size_t n, const char *path, tide_api_err *err);

/* "seed": any int64 or null/absent (no seed). */
int tide_get_seed(json_t *root, tide_gen *g, tide_api_err *err);

/* Forces the tool named `name`. */
int tide_set_named_tool(tide_api_req *req, const char *name, tide_api_err *err);

/* OpenAI's "tool_choice": absent/null, "none", "auto", "required", or an
 * object naming a function, whose shape differs between the OpenAI APIs and
 * is read by `named`. Then applies the choice to the tools. */
typedef int (*tide_named_choice_fn)(tide_api_req *req, json_t *choice, tide_api_err *err);
int tide_read_tool_choice(tide_api_req *req, json_t *root, tide_named_choice_fn named, tide_api_err *err);

/* Reads each tools[i] (absent: no tools) with `one`, given the element,
 * known to be an object, and its path "tools[i]". */
typedef int (*tide_tool_fn)(tide_api_req *req, json_t *tool, const char *path, tide_api_err *err);
int tide_read_tool_list(tide_api_req *req, json_t *root, tide_tool_fn one, tide_api_err *err);

/* The required "messages" array, at most TIDE_CONV_MAX_MESSAGES long. */
int tide_get_messages(json_t *root, json_t **msgs, tide_api_err *err);

#endif
