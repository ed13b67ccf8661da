/* tide render: request bodies -> the V4.1 text the model sees.
 *
 *   tide render [--api chat|responses|messages] [--with-answer]
 *               [--thinking on|off] [--effort E] [--format jsonl|raw]
 *               [-o FILE] [INPUT.jsonl]
 *
 * Each input line is one request body, parsed by the API layer (api/api.h)
 * and rendered by text/render.c: the same path as tide run and tide serve,
 * so the text is exactly what a request's prompt would be. Without
 * --with-answer a final assistant message is left out (the prompt, ending
 * in the assistant's header); with it the final assistant message is
 * rendered closed (reasoning, DSML tool calls and the end-of-sentence token
 * included): training text. Nothing here parses input of its own: the
 * request JSON goes through tide_api_parse, which fuzz/fuzz_api_request.c
 * covers. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "cli/cli.h"
#include "cli/out_file.h"
#include "text/render.h"

/* What --format raw writes after each text: a line holding only the ASCII
 * record separator (tools/train/data/README.md). */
static const char RAW_SEP[] = "\n\x1e\n";

typedef struct {
    tide_api_kind api;
    int with_answer;
    int thinking; /* -1: as the request says */
    int effort;   /* 0: as the request says */
    int raw;
    const char *input, *output;
} render_opts;

static void usage(FILE *f) {
    fprintf(f,
            "usage: tide render [options] [INPUT.jsonl]\n\n"
            "Renders request bodies, one JSON object a line (INPUT or stdin), into the DeepSeek-V4.1\n"
            "prompt text, through the same request parser and renderer as tide run and tide serve.\n\n"
            "  --api chat|responses|messages\n"
            "                     the request shape (default chat: OpenAI Chat Completions)\n"
            "  --with-answer      the last message must be the assistant's: render it closed\n"
            "                     (reasoning, tool calls, end-of-sentence token) as training text;\n"
            "                     without it a final assistant message is left out and the text\n"
            "                     ends with the assistant's header (the prompt)\n"
            "  --thinking on|off  force thinking mode on or off (default: as each request says)\n"
            "  --effort E         force the reasoning effort: low, high, max or 1..100\n"
            "  --format jsonl|raw jsonl (default): one {\"text\", \"prompt_bytes\"} object a line,\n"
            "                     prompt_bytes = UTF-8 bytes of text before the answer (with\n"
            "                     --with-answer; else the whole text);\n"
            "                     raw: each text followed by a line holding only the ASCII record\n"
            "                     separator (\"\\n\\x1e\\n\"); a text holding U+001E is an error\n"
            "  -o FILE            write to FILE (replaced only when every line rendered)\n\n"
            "The first bad line stops the run with its line number and the field at fault.\n");
}

int tide_cli_parse_effort(const char *v, int *effort, tide_status *st) {
    int64_t n;
    if (*v >= '0' && *v <= '9') {
        if (tide_cli_parse_i64(v, 1, 100, &n) != 0) return tide_fail(st, TIDE_ERR_INVALID, "'%s' is not in 1..100", v);
        *effort = (int)n;
        return 0;
    }
    return tide_effort_from_name(v, effort, st);
}

static int parse_args(int argc, char **argv, render_opts *o) {
    memset(o, 0, sizeof *o);
    o->api = TIDE_API_CHAT;
    o->thinking = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(a, "--with-answer")) {
            o->with_answer = 1;
        } else if (!strcmp(a, "--api") && v) {
            i++;
            if (!strcmp(v, "chat")) o->api = TIDE_API_CHAT;
            else if (!strcmp(v, "responses")) o->api = TIDE_API_RESPONSES;
            else if (!strcmp(v, "messages")) o->api = TIDE_API_MESSAGES;
            else {
                fprintf(stderr, "tide render: --api expects chat, responses or messages, got '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--thinking") && v) {
            i++;
            if (!strcmp(v, "on")) o->thinking = 1;
            else if (!strcmp(v, "off")) o->thinking = 0;
            else {
                fprintf(stderr, "tide render: --thinking expects on or off, got '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--effort") && v) {
            i++;
            tide_status st = {0};
            if (tide_cli_parse_effort(v, &o->effort, &st) != 0) {
                fprintf(stderr, "tide render: --effort: %s\n", st.msg);
                return 2;
            }
        } else if (!strcmp(a, "--format") && v) {
            i++;
            if (!strcmp(v, "raw")) o->raw = 1;
            else if (strcmp(v, "jsonl") != 0) {
                fprintf(stderr, "tide render: --format expects jsonl or raw, got '%s'\n", v);
                return 2;
            }
        } else if ((!strcmp(a, "-o") || !strcmp(a, "--output")) && v) {
            o->output = argv[++i];
        } else if (a[0] != '-' && !o->input) {
            o->input = a;
        } else {
            fprintf(stderr, "tide render: unknown or incomplete option '%s'\n\n", a);
            usage(stderr);
            return 2;
        }
    }
    return 0;
}

/* Renders one request. *prompt_bytes: where the answer starts (with
 * --with-answer), else the text's length. */
static int render_req(tide_api_req *req, const render_opts *o, tide_prompt *out, size_t *prompt_bytes,
                      tide_status *st) {
    tide_conv *c = &req->conv;
    if (o->thinking >= 0) c->thinking = o->thinking;
    if (o->effort) c->effort = o->effort;
    int ends_in_answer = c->n_msgs > 0 && c->msgs[c->n_msgs - 1].role == TIDE_ROLE_ASSISTANT;
    if (o->with_answer && !ends_in_answer)
        return tide_fail(st, TIDE_ERR_INVALID, "--with-answer: the last message is not the assistant's");
    if (o->with_answer && c->continue_final)
        return tide_fail(st, TIDE_ERR_INVALID, "--with-answer: continue_final_message leaves the answer open");
    if (o->with_answer && tide_render(c, out, st) != 0) return -1;
    if (ends_in_answer) tide_conv_pop(c);
    if (c->n_msgs == 0) {
        tide_prompt_free(out);
        return tide_fail(st, TIDE_ERR_INVALID, "no messages before the assistant's answer");
    }
    tide_prompt p;
    if (tide_render(c, &p, st) != 0) {
        tide_prompt_free(out);
        return -1;
    }
    if (!o->with_answer) {
        *out = p;
        *prompt_bytes = p.len;
        return 0;
    }
    /* The prompt is a prefix of the full text (render.c keeps every earlier
     * unit as is); say so loudly if that ever stops being true. */
    int prefix = p.len <= out->len && memcmp(p.text, out->text, p.len) == 0;
    *prompt_bytes = p.len;
    tide_prompt_free(&p);
    if (!prefix) {
        tide_prompt_free(out);
        return tide_fail(st, TIDE_ERR_INTERNAL, "the rendered prompt is not a prefix of the rendered answer");
    }
    return 0;
}

static int emit(tide_out_file *out, const render_opts *o, const tide_prompt *p, size_t prompt_bytes,
                tide_status *st) {
    if (o->raw) {
        if (memchr(p->text, RAW_SEP[1], p->len))
            return tide_fail(st, TIDE_ERR_INVALID,
                             "the text holds the record separator U+001E, which --format raw uses between texts");
        if (tide_out_write(out, p->text, p->len, st) != 0) return -1;
        return tide_out_write(out, RAW_SEP, sizeof RAW_SEP - 1, st);
    }
    json_t *j = json_pack("{s:s%, s:I}", "text", p->text, p->len, "prompt_bytes", (json_int_t)prompt_bytes);
    char *s = j ? json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_PRESERVE_ORDER) : NULL;
    json_decref(j);
    if (!s) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory writing a line");
    int rc = tide_out_line(out, s, strlen(s), st);
    free(s);
    return rc;
}

int tide_cmd_render(int argc, char **argv) {
    render_opts o;
    int pr = parse_args(argc, argv, &o);
    if (pr) return pr == 1 ? TIDE_EXIT_OK : TIDE_EXIT_USAGE;
    FILE *in = stdin;
    if (o.input && strcmp(o.input, "-") != 0 && !(in = fopen(o.input, "rb"))) {
        perror(o.input);
        return TIDE_EXIT_FAIL;
    }
    tide_status st = {0};
    tide_out_file out;
    if (tide_out_open(&out, o.output, o.input, &st) != 0) {
        fprintf(stderr, "tide render: %s\n", st.msg);
        if (in != stdin) fclose(in);
        return TIDE_EXIT_FAIL;
    }
    char *line = NULL;
    size_t cap = 0, lineno = 0, done = 0;
    ssize_t n;
    int rc = TIDE_EXIT_OK;
    while ((n = getline(&line, &cap, in)) >= 0) {
        lineno++;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
        if (n == 0) continue;
        tide_api_req req;
        tide_api_err err;
        if (tide_api_parse(o.api, line, (size_t)n, &req, &err) != 0) {
            fprintf(stderr, "tide render: line %zu: %s\n", lineno, err.st.msg);
            rc = TIDE_EXIT_FAIL;
            break;
        }
        tide_prompt p;
        size_t prompt_bytes = 0;
        int r = render_req(&req, &o, &p, &prompt_bytes, &st);
        tide_api_req_free(&req);
        if (r != 0) {
            fprintf(stderr, "tide render: line %zu: %s\n", lineno, st.msg);
            rc = TIDE_EXIT_FAIL;
            break;
        }
        r = emit(&out, &o, &p, prompt_bytes, &st);
        tide_prompt_free(&p);
        if (r != 0) {
            fprintf(stderr, "tide render: line %zu: %s\n", lineno, st.msg);
            rc = TIDE_EXIT_FAIL;
            break;
        }
        done++;
    }
    if (rc == TIDE_EXIT_OK && ferror(in)) {
        fprintf(stderr, "tide render: reading %s failed\n", o.input ? o.input : "stdin");
        rc = TIDE_EXIT_FAIL;
    }
    free(line);
    if (in != stdin) fclose(in);
    if (rc != TIDE_EXIT_OK) {
        tide_out_abort(&out);
        return rc;
    }
    if (tide_out_commit(&out, &st) != 0) {
        fprintf(stderr, "tide render: %s\n", st.msg);
        return TIDE_EXIT_FAIL;
    }
    fprintf(stderr, "tide render: %zu conversations rendered\n", done);
    return TIDE_EXIT_OK;
}
