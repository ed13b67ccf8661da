/* `tide run --ep N`: the launcher and the rank driver of expert parallelism
 * (docs/ep.md).
 *
 * The launcher (this process) reads and checks every request line, loads
 * the checkpoint (mmap, shared by the ranks), makes the socket mesh of the
 * CPU communicator and forks N rank processes. Rank r runs its own engine
 * over its own requests (line i belongs to rank i % N: attention is data
 * parallel) with the model's routed experts spread over the ranks
 * (dist/ep.h). Each finished request goes to the launcher through a pipe
 * ("index<TAB>json line"), which writes the results in input order.
 *
 * Between engine steps the ranks meet in tide_ep_sync and exchange a
 * control block: whether they still have work, and the lines they finished
 * since (a line is announced only after its result reached the pipe).
 *
 * A rank that dies (its sockets close) or hangs (its heartbeat stops for
 * --ep-timeout) fails the exchange on every survivor. The survivors shrink the communicator, re-place the experts over
 * themselves, OR together what each knows to be finished, and resubmit
 * every unfinished line that is theirs under the new numbering (a dead
 * rank's line i goes to survivor i % survivors), recomputing from the
 * prompt. The launcher keeps the first result of each line: a line the dead
 * rank wrote but did not announce may be finished twice, with the same
 * tokens (seeded sampling), and is written once. Every line ends once. */
#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cmd_ep.h"
#include "cli/out_file.h"
#include "dist/ep.h"
#include "engine/engine.h"
#include "engine/request_jsonl.h"
#include "base/log.h"
#include "engine/rng.h"

#define ANN_CAP 200 /* lines announced per sync */

static void usage(FILE *f) {
    fprintf(f, "usage: tide run --ep N --model DIR (--input IN.jsonl [--output OUT.jsonl] | --prompt-ids 1,2,3)\n"
               "  --ep N               ranks (processes) the experts are spread over (1..%d)\n"
               "  --max-tokens N       default max_tokens of a line (default 16)\n"
               "  --ignore-eos         keep going after the model's end-of-sequence ids\n"
               "  --threads N          threads per rank (default 1)\n"
               "  --max-seqs N / --step-tokens N   each rank's engine batch limits\n"
               "  --ep-redundant R     extra expert slots per layer (EPLB copies of hot experts)\n"
               "  --eplb-window S      rebalance the placement every S steps (0 = never, default)\n"
               "  --ep-timeout MS      a rank whose heartbeat stops this long is lost (default 10000)\n"
               "  --ep-kill R:K[:stop] tests: rank R kills itself (SIGKILL) at its K-th exchange\n"
               "                       (:stop: stops itself, SIGSTOP: a hung rank)\n"
               "Output lines: {\"id\", \"output_ids\", \"finish_reason\", \"prompt_tokens\", \"completion_tokens\"}.\n"
               "Design, limits and what runs where: docs/ep.md.\n",
            TIDE_COMM_MAX);
}

static int parse(int argc, char **argv, tide_ep_run_opts *o) {
    memset(o, 0, sizeof *o);
    o->max_tokens = 16;
    o->threads = 1;
    o->timeout_ms = 10000;
    o->max_seqs = 64;
    o->step_tokens = 512;
    o->kill_rank = -1;
    static const struct {
        const char *flag;
        size_t off;
        int64_t lo, hi;
    } nums[] = {
        {"--ep", offsetof(tide_ep_run_opts, ranks), 1, TIDE_COMM_MAX},
        {"--max-tokens", offsetof(tide_ep_run_opts, max_tokens), 1, 1000000},
        {"--threads", offsetof(tide_ep_run_opts, threads), 1, 256},
        {"--ep-redundant", offsetof(tide_ep_run_opts, redundant), 0, 4096},
        {"--eplb-window", offsetof(tide_ep_run_opts, window), 0, 1 << 30},
        {"--ep-timeout", offsetof(tide_ep_run_opts, timeout_ms), 10, 3600000},
        {"--max-seqs", offsetof(tide_ep_run_opts, max_seqs), 1, 4096},
        {"--step-tokens", offsetof(tide_ep_run_opts, step_tokens), 1, 1 << 24},
    };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int done = 0;
        for (size_t k = 0; k < sizeof nums / sizeof nums[0] && !done; k++) {
            if (strcmp(a, nums[k].flag) != 0) continue;
            if (!v || tide_cli_parse_i64(v, nums[k].lo, nums[k].hi, (int64_t *)((char *)o + nums[k].off)) != 0) {
                fprintf(stderr, "tide run: %s: '%s' is not a valid count (%lld..%lld)\n", a, v ? v : "",
                        (long long)nums[k].lo, (long long)nums[k].hi);
                return TIDE_EXIT_USAGE;
            }
            i++;
            done = 1;
        }
        if (done) continue;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return TIDE_EXIT_OK;
        } else if (!strcmp(a, "--model") && v) {
            o->model = argv[++i];
        } else if (!strcmp(a, "--input") && v) {
            o->input = argv[++i];
        } else if (!strcmp(a, "--output") && v) {
            o->output = argv[++i];
        } else if (!strcmp(a, "--prompt-ids") && v) {
            o->ids_s = argv[++i];
        } else if (!strcmp(a, "--ignore-eos")) {
            o->ignore_eos = 1;
        } else if (!strcmp(a, "--ep-kill") && v) {
            long long r, k;
            char tail[8] = "";
            int got = sscanf(v, "%lld:%lld:%7s", &r, &k, tail);
            if (got < 2 || r < 0 || k < 1 || (got == 3 && strcmp(tail, "stop") != 0) ||
                (got == 2 && strchr(strchr(v, ':') + 1, ':'))) {
                fprintf(stderr, "tide run: --ep-kill: '%s' is not RANK:ROUND[:stop]\n", v);
                return TIDE_EXIT_USAGE;
            }
            o->kill_stop = got == 3;
            o->kill_rank = r;
            o->kill_round = k;
            i++;
        } else {
            fprintf(stderr, "tide run --ep: unknown or incomplete option '%s' (tide run --ep 1 --help)\n", a);
            return TIDE_EXIT_USAGE;
        }
    }
    if (!o->model || (!o->input == !o->ids_s)) {
        fprintf(stderr, "tide run --ep: needs --model and one of --input / --prompt-ids\n");
        return TIDE_EXIT_USAGE;
    }
    if (o->kill_rank >= o->ranks) {
        fprintf(stderr, "tide run: --ep-kill: rank %lld of %lld\n", (long long)o->kill_rank, (long long)o->ranks);
        return TIDE_EXIT_USAGE;
    }
    return -1;
}

/* Every request line, checked before any rank starts (--prompt-ids: one). */
void tide_ep_lines_free(tide_ep_lines *L) {
    for (int64_t i = 0; i < L->n; i++) tide_jsonl_request_free(&L->lines[i]);
    free(L->lines);
    memset(L, 0, sizeof *L);
}

static int read_requests(const tide_ep_run_opts *o, tide_ep_lines *L, tide_status *st) {
    const tide_jsonl_defaults d = {.max_tokens = o->max_tokens, .ignore_eos = o->ignore_eos};
    char *line = NULL;
    size_t cap = 0, len;
    int64_t lineno = 0, cap_l = 0;
    int rc = 0;
    if (o->ids_s) {
        size_t n = strlen(o->ids_s) + 64;
        line = malloc(n);
        if (!line) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
        snprintf(line, n, "{\"prompt_ids\": [%s], \"temperature\": 0}", o->ids_s); /* greedy, as tide run's */
        L->lines = calloc(1, sizeof *L->lines);
        if (!L->lines) abort();
        L->n = 1;
        rc = tide_jsonl_request_parse(line, strlen(line), 1, &d, &L->lines[0], st);
        if (rc != 0) tide_fail(st, TIDE_ERR_INVALID, "--prompt-ids: '%s' is not a list of token ids", o->ids_s);
        free(line);
        return rc;
    }
    FILE *in = strcmp(o->input, "-") ? fopen(o->input, "r") : stdin;
    if (!in) return tide_fail(st, TIDE_ERR_IO, "%s: %s", o->input, strerror(errno));
    int g;
    while ((g = tide_jsonl_next_line(in, &line, &cap, &len, &lineno)) > 0) {
        if (L->n == cap_l) {
            cap_l = cap_l ? 2 * cap_l : 64;
            L->lines = realloc(L->lines, (size_t)cap_l * sizeof *L->lines);
            if (!L->lines) abort();
        }
        rc = tide_jsonl_request_parse(line, len, lineno, &d, &L->lines[L->n], st);
        L->n++;
        if (rc != 0) break;
    }
    if (g < 0 && rc == 0) rc = tide_fail(st, TIDE_ERR_IO, "%s: read error", o->input);
    if (in != stdin) fclose(in);
    free(line);
    return rc;
}

/* ---- one rank -------------------------------------------------------------- */

typedef struct {
    int64_t idx;
    char *json;
} result;

typedef struct {
    const tide_ep_lines *L;
    result *res; /* finished in the current step */
    int64_t n_res, cap_res;
} rank_events;

static void on_event(void *ctx, const tide_event *ev) {
    rank_events *r = ctx;
    if (ev->kind != TIDE_EVENT_FINISHED) return;
    int64_t i = (int64_t)(intptr_t)ev->user;
    json_t *o = json_object(), *ids = json_array();
    json_object_set(o, "id", r->L->lines[i].id ? r->L->lines[i].id : json_null());
    for (int64_t t = 0; t < ev->n_output; t++) json_array_append_new(ids, json_integer(ev->output[t]));
    json_object_set_new(o, "output_ids", ids);
    json_object_set_new(o, "finish_reason", json_string(tide_finish_reason_name(ev->reason)));
    json_object_set_new(o, "prompt_tokens", json_integer(ev->n_prompt));
    json_object_set_new(o, "completion_tokens", json_integer(ev->n_output));
    if (ev->error) json_object_set_new(o, "error", json_string(ev->error));
    if (r->n_res == r->cap_res) {
        r->cap_res = r->cap_res ? 2 * r->cap_res : 64;
        r->res = realloc(r->res, (size_t)r->cap_res * sizeof *r->res);
        if (!r->res) abort();
    }
    r->res[r->n_res++] = (result){i, json_dumps(o, JSON_COMPACT)};
    json_decref(o);
}

static int write_all(int fd, const char *s, size_t n) {
    while (n) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

/* The survivor (current rank) that runs line i: its first rank if alive,
 * else the survivors in turn. */
static int line_rank(const tide_comm *c, int64_t i, int n0) {
    int first = (int)(i % n0);
    for (int q = 0; q < c->world; q++)
        if (c->orig[q] == first) return q;
    return (int)(i % c->world);
}

typedef struct {
    int64_t busy, n;
    int64_t idx[ANN_CAP];
} ctl_block;

static int rank_main(const tide_ep_run_opts *o, const tide_ep_lines *L, tide_model *m, tide_comm *c, int out_fd) {
    tide_status st = {0};
    int n0 = c->world;
    tide_ep_opts eo = {.redundant = (int)o->redundant, .window = o->window, .n_threads = (int)o->threads,
                       .ctl_bytes = sizeof(ctl_block),
                       .kill_round = o->kill_rank == c->rank ? o->kill_round : 0, .kill_stop = o->kill_stop};
    tide_ep *ep;
    if (tide_ep_create(c, m, &eo, &ep, &st) != 0) {
        fprintf(stderr, "tide run: rank %d: %s\n", c->rank, st.msg);
        return 1;
    }
    m->ep = ep;
    uint8_t *done = calloc((size_t)L->n + 1, 1), *mine_done = calloc((size_t)L->n + 1, 1);
    int64_t *ann = malloc(((size_t)L->n + 1) * sizeof(int64_t)), n_ann = 0;
    ctl_block *all = malloc((size_t)TIDE_COMM_MAX * sizeof(ctl_block));
    if (!done || !mine_done || !ann || !all) abort();
    rank_events rev = {.L = L};
    tide_engine_config cfg = tide_engine_config_default();
    cfg.model_dir = o->no_model_dir ? NULL : o->model;
    cfg.n_threads = (int)o->threads;
    cfg.max_seqs = (int)o->max_seqs;
    cfg.max_step_tokens = o->step_tokens;
    cfg.on_event = on_event;
    cfg.event_ctx = &rev;
    tide_engine *e = NULL;
    int rc = 0, restart = 1;
    double t_lost = 0, recovery_s = 0; /* from a failure seen to the engine restarted */
    for (;;) {
        if (restart) { /* (re)start: this rank's unfinished lines, from their prompts */
            tide_engine_destroy(e);
            e = NULL;
            if (tide_engine_create_with_model(&cfg, m, &e, &st) != 0) {
                rc = 1;
                break;
            }
            for (int64_t i = 0; i < L->n; i++) {
                if (done[i] || mine_done[i] || line_rank(c, i, n0) != c->rank) continue;
                tide_request r = L->lines[i].req;
                r.user = (void *)(intptr_t)i;
                if (!r.has_seed) { /* the same seed wherever the line runs */
                    r.has_seed = 1;
                    r.sampling.seed = tide_rng_derive_seed(cfg.seed, (uint64_t)i);
                }
                if (tide_engine_submit(e, &r, NULL, &st) != 0) {
                    /* refused (checked against the model here): an error result */
                    char *js = NULL;
                    json_t *jo = json_pack("{s:O?,s:[],s:s,s:s}", "id", L->lines[i].id, "output_ids",
                                           "finish_reason", "error", "error", st.msg);
                    if (jo) js = json_dumps(jo, JSON_COMPACT);
                    json_decref(jo);
                    if (rev.n_res == rev.cap_res) {
                        rev.cap_res = rev.cap_res ? 2 * rev.cap_res : 64;
                        rev.res = realloc(rev.res, (size_t)rev.cap_res * sizeof *rev.res);
                        if (!rev.res) abort();
                    }
                    rev.res[rev.n_res++] = (result){i, js};
                }
            }
            restart = 0;
            if (t_lost > 0) recovery_s += tide_now_seconds() - t_lost;
            t_lost = 0;
        }
        if (tide_engine_busy(e) && tide_engine_step(e, &st) != 0) {
            rc = 1;
            break;
        }
        if (!tide_ep_failed(ep)) { /* results of a step that failed are garbage: dropped */
            for (int64_t j = 0; j < rev.n_res && rc == 0; j++) {
                result *r = &rev.res[j];
                char head[32];
                int hn = snprintf(head, sizeof head, "%lld\t", (long long)r->idx);
                if (!r->json || write_all(out_fd, head, (size_t)hn) != 0 ||
                    write_all(out_fd, r->json, strlen(r->json)) != 0 || write_all(out_fd, "\n", 1) != 0)
                    rc = 1;
                mine_done[r->idx] = 1;
                ann[n_ann++] = r->idx;
            }
            if (rc) break;
        }
        for (int64_t j = 0; j < rev.n_res; j++) free(rev.res[j].json);
        rev.n_res = 0;
        ctl_block cb = {.busy = tide_engine_busy(e) || n_ann > 0, .n = n_ann < ANN_CAP ? n_ann : ANN_CAP};
        memcpy(cb.idx, ann, (size_t)cb.n * sizeof(int64_t));
        if (!tide_ep_failed(ep) && tide_ep_sync(ep, &cb, all, &st) == 0) {
            memmove(ann, ann + cb.n, (size_t)(n_ann - cb.n) * sizeof(int64_t));
            n_ann -= cb.n;
            int any = 0;
            for (int q = 0; q < c->world; q++) {
                any |= all[q].busy != 0;
                for (int64_t j = 0; j < all[q].n; j++)
                    if (all[q].idx[j] >= 0 && all[q].idx[j] < L->n) done[all[q].idx[j]] = 1;
            }
            if (!any) break;
            continue;
        }
        /* a rank was lost: agree on the survivors, re-place, requeue */
        t_lost = tide_now_seconds();
        fprintf(stderr, "tide run: rank %d: %s; recovering\n", c->orig[c->rank], c->why);
        if (tide_ep_recover(ep, &st) != 0) {
            rc = c->excluded ? 4 : 1; /* 4: left out by the survivors, who requeue its lines */
            break;
        }
        for (int64_t i = 0; i < L->n; i++) done[i] |= mine_done[i];
        /* every survivor: the union of what each knows finished */
        uint8_t *alld = malloc((size_t)(L->n + 1) * (size_t)c->world);
        if (!alld) abort();
        if (tide_comm_allgather(c, done, L->n + 1, alld, &st) != 0) {
            free(alld);
            rc = 1;
            break;
        }
        for (int q = 0; q < c->world; q++)
            for (int64_t i = 0; i < L->n; i++) done[i] |= alld[q * (L->n + 1) + i];
        free(alld);
        restart = 1;
    }
    if (rc == 0 && tide_ep_measure(ep, &st) == 0) { /* the launcher sums these */
        tide_ep_stats s;
        tide_ep_get_stats(ep, &s);
        char line[256];
        int n = snprintf(line, sizeof line, "S\t%lld %lld %lld %lld %lld %lld %d %.9f %.6f\n", (long long)s.rounds,
                         (long long)s.rows_sent, (long long)s.rows_served, (long long)s.rebalances,
                         (long long)s.recoveries, (long long)s.bytes_reloaded, c->world, s.balancedness,
                         recovery_s);
        if (write_all(out_fd, line, (size_t)n) != 0) rc = 1;
    }
    if (rc) fprintf(stderr, "tide run: rank %d: %s\n", c->orig[c->rank], st.msg);
    tide_engine_destroy(e);
    m->ep = NULL;
    tide_ep_free(ep);
    free(done);
    free(mine_done);
    free(ann);
    free(all);
    free(rev.res);
    return rc;
}

/* ---- the launcher ---------------------------------------------------------- */

void tide_ep_result_free(tide_ep_result *r, int64_t n_lines) {
    if (r->got)
        for (int64_t i = 0; i < n_lines; i++) free(r->got[i]);
    free(r->got);
    memset(r, 0, sizeof *r);
}

/* One line from a rank: "index<TAB>json" (a result) or "S<TAB>..." (its
 * statistics at the end). */
static void take_line(char *s, const tide_ep_lines *L, tide_ep_result *res, int *stats_seen) {
    char *tab = strchr(s, '\t');
    if (!tab) return;
    if (s[0] == 'S') {
        long long v[6];
        int world;
        double bal, rec;
        if (sscanf(tab + 1, "%lld %lld %lld %lld %lld %lld %d %lf %lf", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                   &world, &bal, &rec) != 9)
            return;
        if (rec > res->recovery_s) res->recovery_s = rec;
        res->stats.rounds += v[0];
        res->stats.rows_sent += v[1];
        res->stats.rows_served += v[2];
        res->stats.rebalances = v[3];
        res->stats.recoveries = v[4];
        res->stats.bytes_reloaded += v[5];
        res->stats.balancedness = bal;
        res->world_end = world;
        *stats_seen = 1;
        res->n_stats++;
        return;
    }
    long long idx = strtoll(s, NULL, 10);
    if (idx < 0 || idx >= L->n) return;
    if (res->got[idx]) res->dup++;
    else {
        res->got[idx] = strdup(tab + 1);
        if (!res->got[idx]) abort();
        res->n_got++;
    }
}

int tide_ep_launch(const tide_ep_run_opts *o, const tide_ep_lines *L, tide_model *m, tide_ep_result *res,
                   tide_status *st) {
    memset(res, 0, sizeof *res);
    int N = (int)o->ranks, fds[2 * TIDE_COMM_MAX * TIDE_COMM_MAX], pipes[TIDE_COMM_MAX][2];
    pid_t pids[TIDE_COMM_MAX];
    res->got = calloc((size_t)L->n + 1, sizeof *res->got);
    if (!res->got) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    if (tide_comm_sock_mesh(N, fds, st) != 0) return -1;
    setenv("NCCL_NVLS_ENABLE", "0", 1); /* NVLink multicast stays off (docs/ep.md) */
    double t0 = tide_now_seconds();
    fflush(NULL);
    for (int r = 0; r < N; r++) {
        if (pipe(pipes[r]) != 0) abort();
        pids[r] = fork();
        if (pids[r] < 0) {
            fprintf(stderr, "tide run: fork: %s\n", strerror(errno));
            abort();
        }
        if (pids[r] == 0) {
            for (int q = 0; q <= r; q++) close(pipes[q][0]);
            tide_comm *c;
            /* a hung rank is found by the heartbeat; the collective's own
             * no-progress limit is only the backstop */
            if (tide_comm_sock_create(r, N, fds, 600000, (int)o->timeout_ms, &c, st) != 0) _exit(3);
            int x = rank_main(o, L, m, c, pipes[r][1]);
            tide_comm_free(c);
            _exit(x);
        }
        close(pipes[r][1]);
    }
    for (int i = 0; i < 2 * N * N; i++)
        if (fds[i] >= 0) close(fds[i]);
    /* collect lines; a line cut by a death is dropped */
    char *buf[TIDE_COMM_MAX] = {0};
    size_t blen[TIDE_COMM_MAX] = {0}, bcap[TIDE_COMM_MAX] = {0};
    int open_n = N;
    struct pollfd pf[TIDE_COMM_MAX];
    for (int r = 0; r < N; r++) pf[r] = (struct pollfd){pipes[r][0], POLLIN, 0};
    int stats_seen[TIDE_COMM_MAX] = {0}, left[TIDE_COMM_MAX] = {0};
    while (open_n > 0) {
        if (poll(pf, (nfds_t)N, 200) < 0 && errno != EINTR) break;
        /* every survivor has reported and every line has its result: a rank
         * still there was left behind hung (the others found it silent) */
        if (res->n_stats > 0 && res->n_stats == res->world_end && res->n_got == L->n)
            for (int r = 0; r < N; r++)
                if (pf[r].fd >= 0 && !stats_seen[r] && !left[r]) {
                    left[r] = 1;
                    kill(pids[r], SIGKILL);
                }
        for (int r = 0; r < N; r++) {
            if (pf[r].fd < 0 || !(pf[r].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            if (bcap[r] - blen[r] < 65536) {
                bcap[r] = bcap[r] * 2 + 65536;
                buf[r] = realloc(buf[r], bcap[r]);
                if (!buf[r]) abort();
            }
            ssize_t n = read(pf[r].fd, buf[r] + blen[r], bcap[r] - blen[r]);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                close(pf[r].fd);
                pf[r].fd = -1;
                open_n--;
                continue;
            }
            blen[r] += (size_t)n;
            char *s = buf[r], *nl;
            while ((nl = memchr(s, '\n', blen[r] - (size_t)(s - buf[r])))) {
                *nl = 0;
                take_line(s, L, res, &stats_seen[r]);
                s = nl + 1;
            }
            blen[r] -= (size_t)(s - buf[r]);
            memmove(buf[r], s, blen[r]);
        }
    }
    int failed = 0;
    for (int r = 0; r < N; r++) {
        int ws;
        waitpid(pids[r], &ws, 0);
        free(buf[r]);
        if (left[r]) {
            fprintf(stderr, "tide run --ep: rank %d was left behind by the others (hung) and killed\n", r);
            res->lost++;
        } else if (WIFSIGNALED(ws)) {
            fprintf(stderr, "tide run --ep: rank %d was killed (signal %d)\n", r, WTERMSIG(ws));
            res->lost++;
        } else if (WIFEXITED(ws) && WEXITSTATUS(ws) == 4) {
            fprintf(stderr, "tide run --ep: rank %d was left out of the group by the others\n", r);
            res->lost++;
        } else if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
            fprintf(stderr, "tide run --ep: rank %d failed\n", r);
            failed++;
        }
    }
    res->seconds = tide_now_seconds() - t0;
    if (res->n_got != L->n || failed)
        return tide_fail(st, TIDE_ERR_IO, "%lld of %lld requests finished (%d ranks failed, %d lost)",
                         (long long)res->n_got, (long long)L->n, failed, res->lost);
    return 0;
}

int tide_cmd_ep_run(int argc, char **argv) {
    tide_ep_run_opts o;
    int rc = parse(argc, argv, &o);
    if (rc >= 0) return rc;
    tide_status st = {0};
    tide_ep_lines L = {0};
    tide_model *m = NULL;
    tide_ep_result res = {0};
    tide_out_file out = {.fd = -1};
    rc = TIDE_EXIT_FAIL;
    if (read_requests(&o, &L, &st) != 0 || tide_model_load(o.model, &m, &st) != 0 ||
        tide_out_open(&out, o.output, o.input, &st) != 0) {
        fprintf(stderr, "tide run: %s\n", st.msg);
        goto done;
    }
    if (tide_ep_launch(&o, &L, m, &res, &st) != 0) {
        fprintf(stderr, "tide run --ep: %s\n", st.msg);
        goto done;
    }
    if (o.ids_s) { /* the generated ids, comma-separated, as tide run --prompt-ids prints them */
        json_t *j = json_loads(res.got[0], 0, NULL), *ids = json_object_get(j, "output_ids");
        size_t n = json_array_size(ids), len = 0;
        char *txt = malloc(n * 24 + 1);
        if (!txt) abort();
        for (size_t t = 0; t < n; t++)
            len += (size_t)sprintf(txt + len, "%s%lld", t ? "," : "", (long long)json_integer_value(json_array_get(ids, t)));
        tide_out_line(&out, txt, len, &st);
        free(txt);
        json_decref(j);
    }
    for (int64_t i = 0; i < L.n && !o.ids_s && !st.msg[0]; i++) tide_out_line(&out, res.got[i], strlen(res.got[i]), &st);
    if (st.msg[0] || tide_out_commit(&out, &st) != 0) {
        fprintf(stderr, "tide run: %s\n", st.msg);
        goto done;
    }
    const tide_ep_stats *s = &res.stats;
    fprintf(stderr,
            "tide run --ep: %d ranks at the end (%lld at the start), experts balancedness %.3f (mean/max routed "
            "rows per rank, last window), %lld rebalances, %lld recoveries; all ranks: %lld rows sent, %lld "
            "served, %lld bytes of experts reloaded; recovery %.0f ms (a failure seen to the engines restarted, the "
            "slowest survivor)\n",
            res.world_end, (long long)o.ranks, s->balancedness, (long long)s->rebalances, (long long)s->recoveries,
            (long long)s->rows_sent, (long long)s->rows_served, (long long)s->bytes_reloaded, 1000.0 * res.recovery_s);
    fprintf(stderr, "tide run --ep: %lld requests finished once each (%d ranks lost, %lld repeated results dropped)\n",
            (long long)L.n, res.lost, (long long)res.dup);
    rc = TIDE_EXIT_OK;
done:
    tide_out_abort(&out); /* nothing when committed */
    tide_ep_result_free(&res, L.n);
    tide_ep_lines_free(&L);
    tide_model_free(m);
    return rc;
}
