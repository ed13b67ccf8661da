/* The scheduler: see sched.h for the policy. */
#include "engine/sched.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tide_sched_init(tide_sched *s, const tide_sched_cfg *cfg, tide_fwd_ctx *fx, tide_status *st) {
    memset(s, 0, sizeof *s);
    s->cfg = *cfg;
    s->fx = fx;
    const tide_model *m = tide_fwd_model(fx);
    s->n_src = m->n_kv_src;
    for (int k = 0; k < m->n_kv_src; k++) s->ratio[k] = m->cfg.roles[m->kv_src_layer[k]].compress_ratio;
    s->wq_cap = 64;
    s->wq = malloc((size_t)s->wq_cap * sizeof *s->wq);
    s->running = malloc((size_t)cfg->max_seqs * sizeof *s->running);
    s->plan.items = malloc((size_t)cfg->max_seqs * sizeof *s->plan.items);
    s->plan.failed = malloc((size_t)cfg->max_seqs * sizeof *s->plan.failed);
    if (!s->wq || !s->running || !s->plan.items || !s->plan.failed) {
        tide_sched_free(s);
        return tide_fail(st, TIDE_ERR_NOMEM, "scheduler: out of memory");
    }
    return 0;
}

void tide_sched_free(tide_sched *s) {
    free(s->wq);
    free(s->running);
    free(s->plan.items);
    free(s->plan.failed);
    memset(s, 0, sizeof *s);
}

int64_t tide_sched_blocks_for(const tide_sched *s, int64_t n_pos) {
    int64_t bl = tide_fwd_kv(s->fx)->block_len, n = 0;
    for (int k = 0; k < s->n_src; k++) n += (n_pos / s->ratio[k] + bl - 1) / bl;
    return n;
}

int64_t tide_sched_blocks_free(const tide_sched *s) {
    const tide_kv_pool *p = tide_fwd_kv(s->fx);
    return p->max_blocks - p->n_blocks + p->n_free;
}

static int64_t held(const tide_sched *s, const tide_req *q) {
    int64_t n = 0;
    if (q->has_cache)
        for (int k = 0; k < s->n_src; k++) n += q->cache.tables[k].n;
    return n;
}

/* New blocks q needs to feed n more tokens (what tide_forward will reserve). */
static int64_t need(const tide_sched *s, const tide_req *q, int64_t n) {
    int64_t bl = tide_fwd_kv(s->fx)->block_len, pos = q->has_cache ? q->cache.pos : 0, total = 0;
    for (int k = 0; k < s->n_src; k++) {
        int64_t want = ((pos + n) / s->ratio[k] + bl - 1) / bl;
        int64_t have = q->has_cache ? q->cache.tables[k].n : 0;
        if (want > have) total += want - have;
    }
    return total;
}

/* Tokens q feeds next given `budget` tokens left in the step (0 = not now). */
static int64_t chunk(const tide_sched *s, const tide_req *q, int64_t budget) {
    int64_t pos = q->has_cache ? q->cache.pos : 0, left = q->n_tokens - pos, n;
    if (s->cfg.flexible) {
        n = left < s->cfg.prefill_chunk ? left : s->cfg.prefill_chunk;
        return n < budget ? n : budget;
    }
    n = pos < q->n_prompt ? q->n_prompt - pos : 1;
    if (n > s->cfg.prefill_chunk) n = s->cfg.prefill_chunk;
    return n <= budget ? n : 0;
}

/* Keeps room for every live request (waiting + running), so that a
 * preempted one can always go back to the queue. */
static int wq_grow(tide_sched *s) {
    if (s->wq_n + s->n_running < s->wq_cap) return 0;
    int64_t cap = 2 * s->wq_cap;
    tide_req **w = malloc((size_t)cap * sizeof *w);
    if (!w) return -1;
    for (int64_t i = 0; i < s->wq_n; i++) w[i] = s->wq[(s->wq_head + i) % s->wq_cap];
    free(s->wq);
    s->wq = w;
    s->wq_cap = cap;
    s->wq_head = 0;
    return 0;
}

static tide_req *wq_at(const tide_sched *s, int64_t i) { return s->wq[(s->wq_head + i) % s->wq_cap]; }

int tide_sched_enqueue(tide_sched *s, tide_req *q, tide_status *st) {
    if (wq_grow(s) != 0) return tide_fail(st, TIDE_ERR_NOMEM, "scheduler: out of memory");
    s->wq[(s->wq_head + s->wq_n++) % s->wq_cap] = q;
    q->state = TIDE_REQ_WAITING;
    return 0;
}

/* The queue's front: where preempted requests go. Cannot fail: wq_grow
 * keeps room for every waiting and running request. */
static void wq_push_front(tide_sched *s, tide_req *q) {
    s->wq_head = (s->wq_head + s->wq_cap - 1) % s->wq_cap;
    s->wq[s->wq_head] = q;
    s->wq_n++;
    q->state = TIDE_REQ_WAITING;
}

static void wq_pop_front(tide_sched *s) {
    s->wq_head = (s->wq_head + 1) % s->wq_cap;
    s->wq_n--;
}

static void drop_cache(tide_sched *s, tide_req *q) {
    if (!q->has_cache) return;
    tide_fwd_seq_free(s->fx, &q->cache);
    q->has_cache = 0;
}

void tide_sched_remove(tide_sched *s, tide_req *q) {
    for (int i = 0; i < s->n_running; i++)
        if (s->running[i] == q) {
            memmove(s->running + i, s->running + i + 1, (size_t)(s->n_running - i - 1) * sizeof *s->running);
            s->n_running--;
            break;
        }
    for (int64_t i = 0; i < s->wq_n; i++)
        if (wq_at(s, i) == q) {
            for (int64_t j = i; j + 1 < s->wq_n; j++)
                s->wq[(s->wq_head + j) % s->wq_cap] = wq_at(s, j + 1);
            s->wq_n--;
            break;
        }
    drop_cache(s, q);
}

/* Preempts the newest running request: recompute from scratch later. */
static void preempt_last(tide_sched *s) {
    tide_req *v = s->running[--s->n_running];
    drop_cache(s, v);
    v->n_preempted++;
    s->preemptions++;
    wq_push_front(s, v);
}

static void add(tide_sched *s, tide_req *q, int64_t n) {
    tide_sched_item *it = &s->plan.items[s->plan.n_items++];
    it->req = q;
    it->n_tokens = n;
    it->logits = q->cache.pos + n == q->n_tokens ? TIDE_LOGITS_LAST : TIDE_LOGITS_NONE;
    s->plan.n_tokens += n;
}

static void fail(tide_sched *s, tide_req *q, const char *msg) {
    tide_req_set_error(q, msg);
    s->plan.failed[s->plan.n_failed++] = q;
}

void tide_sched_make_plan(tide_sched *s) {
    tide_sched_plan *p = &s->plan;
    p->n_items = p->n_failed = 0;
    p->n_tokens = 0;
    int64_t budget = s->cfg.max_step_tokens, avail = tide_sched_blocks_free(s);
    for (int i = 0; i < s->n_running;) {
        tide_req *q = s->running[i];
        int64_t n = chunk(s, q, budget);
        if (n == 0) {
            i++;
            continue;
        }
        int64_t nb = need(s, q, n);
        while (nb > avail && s->running[s->n_running - 1] != q) {
            avail += held(s, s->running[s->n_running - 1]);
            preempt_last(s);
        }
        if (nb > avail) {
            if (p->n_items == 0) {
                /* alone and still too big: admission checks make this
                 * impossible; never loop on it */
                tide_sched_remove(s, q);
                fail(s, q, "the KV pool cannot hold this request");
                continue;
            }
            avail += held(s, q);
            preempt_last(s); /* q is the newest: it waits for the others */
            continue;
        }
        add(s, q, n);
        avail -= nb;
        budget -= n;
        i++;
    }
    while (s->wq_n > 0 && s->n_running < s->cfg.max_seqs && budget > 0) {
        tide_req *q = wq_at(s, 0);
        int64_t n = chunk(s, q, budget);
        if (n == 0) break;
        int64_t nb = need(s, q, n);
        if (nb > avail) break;
        wq_pop_front(s);
        tide_status st = {0};
        if (tide_fwd_seq_init(s->fx, &q->cache, &st) != 0) {
            fail(s, q, st.msg);
            if (p->n_failed == s->cfg.max_seqs) break;
            continue;
        }
        q->has_cache = 1;
        q->state = TIDE_REQ_RUNNING;
        s->running[s->n_running++] = q;
        add(s, q, n);
        avail -= nb;
        budget -= n;
    }
}
