/* tide run with text: the generation layer (api/gen.h) from the command line.
 *
 *   --prompt TEXT   one user turn through the V4.1 template (--raw: the text
 *                   as a raw completion prompt); the content streams to
 *                   stdout, the reasoning (--thinking) to stderr.
 *   --chat          interactive: each stdin line is a user turn, the reply
 *                   streams to stdout, the conversation is kept; EOF or
 *                   "/exit" ends it. Works with a pipe.
 *   --input FILE    a JSONL batch of text requests: a line with "messages"
 *                   is a Chat Completions body, one with "prompt" (text or
 *                   ids) or "prompt_ids" a Completions body, plus an "id";
 *                   one result line each, in completion order:
 *                   {"id", "text", "reasoning", "tool_calls", "output_ids",
 *                    "finish_reason", "prompt_tokens", "completion_tokens",
 *                    "cached_tokens"} (+ "error"). */
#include "cli/run_text.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "api/gen.h"
#include "base/log.h"
#include "cli/batch_end.h"
#include "cli/cli.h"
#include "cli/out_file.h"
#include "cli/stop_signal.h"
#include "engine/request_jsonl.h"
#include "text/conv.h"
#include "text/sbuf.h"

/* ---- --prompt and --chat: streamed to the terminal ---- */

typedef struct printer {
    const tide_run_text_opts *o;
    tide_sb reply;       /* the content of the current turn (the chat history) */
    char *error;
    const char *finish;  /* static string from the result */
    int64_t n_prompt, n_output;
    int done, at_line_start;
} printer;

static int print_parsed(void *ud, const tide_pev *ev, tide_status *st) {
    printer *p = ud;
    (void)st;
    switch (ev->kind) {
    case TIDE_PEV_REASONING:
        fwrite(ev->text, 1, ev->len, stderr);
        if (p->o->show_reasoning) fwrite(ev->text, 1, ev->len, stdout);
        break;
    case TIDE_PEV_CONTENT:
        fwrite(ev->text, 1, ev->len, stdout);
        tide_sb_addn(&p->reply, ev->text, ev->len);
        break;
    case TIDE_PEV_CALL_BEGIN: printf("\n[tool call %s ", ev->name); break;
    case TIDE_PEV_CALL_ARGS: fwrite(ev->text, 1, ev->len, stdout); break;
    case TIDE_PEV_CALL_END: printf("]\n"); break;
    }
    fflush(stdout);
    return 0;
}

static const char *static_reason(const char *r) {
    static const char *const KNOWN[] = {"stop", "length", "tool_calls", "cancelled", "error"};
    for (size_t i = 0; i < sizeof KNOWN / sizeof KNOWN[0]; i++)
        if (r && !strcmp(r, KNOWN[i])) return KNOWN[i];
    return "stop";
}

static void print_done(void *ud, const tide_gen_result *r) {
    printer *p = ud;
    p->done = 1;
    p->finish = static_reason(r->finish_reason);
    p->n_prompt = r->usage.prompt_tokens;
    p->n_output = r->n_output;
    if (r->error) p->error = strdup(r->error);
}

static void fill_settings(const tide_run_text_opts *o, tide_gen *g) {
    g->temperature = o->temperature;
    g->max_tokens = (int)o->max_tokens;
    g->ignore_eos = o->ignore_eos;
}

/* Generates one turn for req, streaming it; 0 or an exit code. */
static int one_turn(tide_gen_engine *g, const tide_api_req *req, printer *p) {
    tide_status st = {0};
    tide_sb_free(&p->reply);
    tide_sb_init(&p->reply);
    p->done = 0;
    tide_gen_input in = {.req = req, .response_id = "run", .sink = {.text = print_parsed, .done = print_done, .ud = p}};
    if (tide_gen_submit(g, &in, NULL, &st) != 0 || tide_gen_run(g, &st) != 0) {
        fprintf(stderr, "\ntide run: %s\n", st.msg);
        return TIDE_EXIT_FAIL;
    }
    printf("\n");
    fflush(stdout);
    if (p->error) {
        fprintf(stderr, "tide run: %s\n", p->error);
        return TIDE_EXIT_FAIL;
    }
    return 0;
}

static int build_prompt_req(const tide_run_text_opts *o, tide_api_req *req, tide_status *st) {
    tide_api_req_init(req, o->raw ? TIDE_API_COMPLETIONS : TIDE_API_CHAT);
    fill_settings(o, &req->gen);
    if (o->raw) {
        req->prompt_len = strlen(o->prompt);
        if (!(req->prompt = strdup(o->prompt))) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
        return 0;
    }
    req->conv.thinking = o->thinking;
    if (o->effort) req->conv.effort = o->effort;
    if (o->system && tide_conv_add(&req->conv, TIDE_ROLE_SYSTEM, o->system, strlen(o->system), st) != 0) return -1;
    if (o->prompt && tide_conv_add(&req->conv, TIDE_ROLE_USER, o->prompt, strlen(o->prompt), st) != 0) return -1;
    return 0;
}

static int run_prompt(tide_gen_engine *g, const tide_run_text_opts *o) {
    printer p = {.o = o};
    tide_api_req req;
    tide_status st = {0};
    int rc = TIDE_EXIT_FAIL;
    double t0 = tide_now_seconds();
    if (build_prompt_req(o, &req, &st) != 0) {
        fprintf(stderr, "tide run: %s\n", st.msg);
    } else if ((rc = one_turn(g, &req, &p)) == 0) {
        fprintf(stderr, "tide run: %lld prompt + %lld generated tokens in %.3f s, finish %s\n", (long long)p.n_prompt,
                (long long)p.n_output, tide_now_seconds() - t0, p.finish);
    }
    tide_api_req_free(&req);
    tide_sb_free(&p.reply);
    free(p.error);
    return rc;
}

static void chomp(char *s, size_t *n) {
    while (*n && (s[*n - 1] == '\n' || s[*n - 1] == '\r')) s[--*n] = 0;
}

static int run_chat(tide_gen_engine *g, const tide_run_text_opts *o) {
    printer p = {.o = o};
    tide_api_req req;
    tide_status st = {0};
    int rc = TIDE_EXIT_OK;
    char *line = NULL;
    size_t cap = 0;
    if (build_prompt_req(o, &req, &st) != 0) {
        fprintf(stderr, "tide run: %s\n", st.msg);
        tide_api_req_free(&req);
        return TIDE_EXIT_FAIL;
    }
    for (;;) {
        if (isatty(fileno(stdin))) fprintf(stderr, "> ");
        ssize_t got = getline(&line, &cap, stdin);
        if (got < 0) break;
        size_t n = (size_t)got;
        chomp(line, &n);
        if (!strcmp(line, "/exit")) break;
        if (n == 0) continue;
        if (tide_conv_add(&req.conv, TIDE_ROLE_USER, line, n, &st) != 0) {
            fprintf(stderr, "tide run: %s\n", st.msg);
            rc = TIDE_EXIT_FAIL;
            break;
        }
        if ((rc = one_turn(g, &req, &p)) != 0) break;
        /* the reply joins the conversation */
        if (tide_sb_check(&p.reply, "the reply", &st) != 0 ||
            tide_conv_add(&req.conv, TIDE_ROLE_ASSISTANT, p.reply.s ? p.reply.s : "", p.reply.len, &st) != 0) {
            fprintf(stderr, "tide run: %s\n", st.msg);
            rc = TIDE_EXIT_FAIL;
            break;
        }
    }
    free(line);
    tide_api_req_free(&req);
    tide_sb_free(&p.reply);
    free(p.error);
    return rc;
}

/* ---- --input: a text JSONL batch ---- */

typedef struct line_ctx line_ctx;

typedef struct batch {
    tide_batch b;        /* cli/batch_end.h */
    tide_gen_engine *g;
    const tide_run_text_opts *o;
    int stopping;        /* what a stop or a failure left unfinished writes no line */
} batch;

/* One line in flight: its id and the tool calls as they stream. */
struct line_ctx {
    batch *b;
    json_t *id;
    json_t *calls;   /* [{"name", "arguments"}] */
    tide_sb args;    /* the open call's arguments */
};

static void write_error(batch *b, json_t *id, const char *msg) {
    json_t *o = json_pack("{s:O, s:s, s:[], s:s, s:i, s:i, s:i, s:s}", "id", id ? id : json_null(), "text", "",
                          "output_ids", "finish_reason", "error", "prompt_tokens", 0, "completion_tokens", 0,
                          "cached_tokens", 0, "error", msg);
    tide_batch_write(&b->b, o, 1);
}

static int line_parsed(void *ud, const tide_pev *ev, tide_status *st) {
    line_ctx *l = ud;
    if (ev->kind == TIDE_PEV_CALL_BEGIN) {
        tide_sb_free(&l->args);
        tide_sb_init(&l->args);
        json_array_append_new(l->calls, json_pack("{s:s}", "name", ev->name ? ev->name : ""));
    } else if (ev->kind == TIDE_PEV_CALL_ARGS) {
        tide_sb_addn(&l->args, ev->text, ev->len);
    } else if (ev->kind == TIDE_PEV_CALL_END) {
        json_t *c = json_array_get(l->calls, json_array_size(l->calls) - 1);
        if (tide_sb_check(&l->args, "tool call arguments", st) != 0) return -1;
        if (c) json_object_set_new(c, "arguments", json_stringn(l->args.s ? l->args.s : "", l->args.len));
    }
    return 0;
}

static void line_done(void *ud, const tide_gen_result *r) {
    line_ctx *l = ud;
    batch *b = l->b;
    json_t *ids = json_array();
    for (int64_t i = 0; i < r->n_output; i++) json_array_append_new(ids, json_integer(r->output[i]));
    json_t *o = json_pack("{s:O, s:s%, s:s%, s:O, s:o, s:s, s:I, s:I, s:I}", "id", l->id ? l->id : json_null(), "text",
                          r->content, r->content_len, "reasoning", r->reasoning, r->reasoning_len, "tool_calls",
                          l->calls, "output_ids", ids, "finish_reason", r->finish_reason, "prompt_tokens",
                          (json_int_t)r->usage.prompt_tokens, "completion_tokens",
                          (json_int_t)r->usage.completion_tokens, "cached_tokens", (json_int_t)r->usage.cached_tokens);
    if (o && r->error) json_object_set_new(o, "error", json_string(r->error));
    if (b->stopping) json_decref(o); /* stopped (a signal, a failure): not run, no line */
    else tide_batch_write(&b->b, o, r->error != NULL);
    json_decref(l->id);
    json_decref(l->calls);
    tide_sb_free(&l->args);
    free(l);
}

/* A line -> an API request: "messages" -> Chat Completions, else
 * Completions ("prompt_ids" read as "prompt"); without max_tokens, the
 * command's --max-tokens. */
static int line_request(json_t *root, const tide_run_text_opts *o, tide_api_req *req, tide_api_err *err) {
    tide_api_kind kind = json_object_get(root, "messages") ? TIDE_API_CHAT : TIDE_API_COMPLETIONS;
    if (kind == TIDE_API_COMPLETIONS && !json_object_get(root, "prompt") && json_object_get(root, "prompt_ids"))
        json_object_set(root, "prompt", json_object_get(root, "prompt_ids"));
    json_object_del(root, "prompt_ids");
    if (!json_object_get(root, "max_tokens") && !json_object_get(root, "max_completion_tokens"))
        json_object_set_new(root, "max_tokens", json_integer(o->max_tokens));
    if (o->ignore_eos && !json_object_get(root, "ignore_eos")) json_object_set_new(root, "ignore_eos", json_true());
    if (!json_object_get(root, "temperature")) json_object_set_new(root, "temperature", json_real(o->temperature));
    json_t *id = json_object_get(root, "id");
    json_incref(id);
    json_object_del(root, "id");
    char *body = json_dumps(root, JSON_COMPACT);
    json_object_set_new(root, "id", id ? id : json_null());
    if (!body) return tide_fail(&err->st, TIDE_ERR_NOMEM, "out of memory");
    int rc = tide_api_parse(kind, body, strlen(body), req, err);
    free(body);
    return rc;
}

static void submit_line(void *ctx, const char *text, size_t len, int64_t lineno) {
    batch *b = ctx;
    json_error_t jerr;
    json_t *root = json_loadb(text, len, 0, &jerr);
    char msg[TIDE_STATUS_MSG + 64];
    if (!root || !json_is_object(root)) {
        snprintf(msg, sizeof msg, "line %lld: %s", (long long)lineno, root ? "expected a JSON object" : jerr.text);
        write_error(b, NULL, msg);
        json_decref(root);
        return;
    }
    json_t *id = json_object_get(root, "id");
    id = id ? json_incref(id) : json_integer(lineno);
    tide_api_req req;
    tide_api_err err;
    line_ctx *l = calloc(1, sizeof *l);
    tide_status st = {0};
    if (!l) {
        write_error(b, id, "out of memory");
    } else if (line_request(root, b->o, &req, &err) != 0) {
        snprintf(msg, sizeof msg, "line %lld: %s", (long long)lineno, err.st.msg);
        write_error(b, id, msg);
        free(l);
        l = NULL;
    } else {
        l->b = b;
        l->id = json_incref(id);
        l->calls = json_array();
        tide_gen_input in = {.req = &req, .response_id = "run", .sink = {.text = line_parsed, .done = line_done, .ud = l}};
        if (tide_gen_submit(b->g, &in, NULL, &st) != 0) {
            snprintf(msg, sizeof msg, "line %lld: %s", (long long)lineno, st.msg);
            write_error(b, id, msg);
            json_decref(l->id);
            json_decref(l->calls);
            free(l);
        }
        tide_api_req_free(&req);
    }
    json_decref(id);
    json_decref(root);
}

static int busy(void *ctx) { return tide_gen_busy(((batch *)ctx)->g); }
static int step(void *ctx, tide_status *st) { return tide_gen_step(((batch *)ctx)->g, st); }

static int run_batch(const tide_run_text_opts *o, const tide_engine_config *cfg) {
    batch b;
    memset(&b, 0, sizeof b);
    b.o = o;
    if (tide_batch_open(&b.b, o->output, o->input) != 0) return TIDE_EXIT_FAIL;
    tide_status st = {0};
    int sig = -1;
    if (tide_gen_create(cfg, NULL, &b.g, &st) != 0) {
        fprintf(stderr, "tide run: %s\n", st.msg);
    } else {
        const tide_batch_ops ops = {.submit = submit_line, .busy = busy, .step = step};
        sig = tide_batch_drive(&b.b, &ops, &b);
    }
    b.stopping = 1; /* what a stop or a failure left unfinished writes no line */
    if (sig == 0 && !b.b.write_failed) {
        tide_gen_stats s;
        tide_gen_get_stats(b.g, &s);
        fprintf(stderr, "tide run: %lld/%lld done, %lld errors, %lld steps, %.1f tok/s (%.2f generated/s)\n",
                b.b.n_finished, b.b.n_lines, b.b.n_errors, (long long)s.engine.steps, s.engine.tokens_per_s,
                s.engine.generated_per_s);
    }
    int rc = tide_batch_finish(&b.b, sig >= 0, sig > 0 ? sig : 0);
    tide_gen_destroy(b.g);
    tide_batch_close(&b.b);
    return rc;
}

/* ---- entry ---- */

int tide_run_text_arg(int argc, char **argv, int *i, tide_run_text_opts *t) {
    const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (!strcmp(a, "--prompt") && v) t->prompt = argv[++*i];
    else if (!strcmp(a, "--system") && v) t->system = argv[++*i];
    else if (!strcmp(a, "--chat")) t->chat = 1;
    else if (!strcmp(a, "--raw")) t->raw = 1;
    else if (!strcmp(a, "--thinking")) t->thinking = 1;
    else if (!strcmp(a, "--show-reasoning")) t->show_reasoning = 1;
    else if (!strcmp(a, "--text")) t->text_input = 1;
    else if (!strcmp(a, "--effort") && v) {
        tide_status st = {0};
        ++*i;
        if (tide_cli_parse_effort(v, &t->effort, &st) != 0) {
            fprintf(stderr, "tide run: --effort: %s\n", st.msg);
            return -1;
        }
    } else if (!strcmp(a, "--temperature") && v) {
        char *end;
        errno = 0;
        t->temperature = strtod(v, &end);
        ++*i;
        if (*end || end == v || errno || !(t->temperature >= 0 && t->temperature <= 2)) {
            fprintf(stderr, "tide run: --temperature: '%s' is not a number in [0, 2]\n", v);
            return -1;
        }
    } else {
        return 0;
    }
    return 1;
}


int tide_run_text_is_text_input(const char *path) {
    struct stat sb;
    if (!path || !strcmp(path, "-") || stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) return 0;
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char *line = NULL;
    size_t cap = 0, len;
    int64_t lineno = 0;
    int text = 0;
    if (tide_jsonl_next_line(f, &line, &cap, &len, &lineno) > 0) {
        json_t *root = json_loadb(line, len, 0, NULL);
        text = json_is_object(root) && (json_object_get(root, "messages") || json_object_get(root, "prompt"));
        json_decref(root);
    }
    free(line);
    fclose(f);
    return text;
}

int tide_run_text(const tide_run_text_opts *o, const tide_engine_config *cfg) {
    if (o->input) return run_batch(o, cfg);
    tide_status st = {0};
    tide_gen_engine *g;
    if (tide_gen_create(cfg, NULL, &g, &st) != 0) {
        fprintf(stderr, "tide run: %s\n", st.msg);
        return TIDE_EXIT_FAIL;
    }
    int rc = o->chat ? run_chat(g, o) : run_prompt(g, o);
    tide_gen_destroy(g);
    return rc;
}
