/* The scheduler: see sched.h for the policy. The file reads in three parts:
 * the queues, the prefix cache's page <-> block bookkeeping, and planning. */
#include "engine/sched.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "cache/kv_tier.h"

/* ---- setup ---------------------------------------------------------------- */

static int64_t gcd64(int64_t a, int64_t b) {
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

int64_t tide_sched_page_unit(tide_fwd_ctx *fx) {
    const tide_model *m = tide_fwd_model(fx);
    int64_t l = 1;
    for (int k = 0; k < m->n_kv_src; k++) {
        int64_t r = m->cfg.roles[m->kv_src_layer[k]].compress_ratio;
        if (r > 0) l = l / gcd64(l, r) * r;
    }
    return l * tide_fwd_kv(fx)->block_len;
}

/* The cache evicted a page: drop its reference on the page's blocks. */
static void on_evict(void *ctx, int32_t page) {
    tide_sched *s = ctx;
    tide_sched_prefix *x = &s->px;
    if (!x->held[page]) return;
    tide_status st = {0};
    if (tide_kv_unref(tide_fwd_kv(s->fx), x->blocks + (int64_t)page * x->bpp, x->bpp, &st) != 0)
        tide_log(TIDE_LOG_ERROR, "prefix cache: page %d: %s", (int)page, st.msg);
    x->held[page] = 0;
}

static int prefix_init(tide_sched *s, tide_status *st) {
    tide_sched_prefix *x = &s->px;
    const tide_kv_pool *kv = tide_fwd_kv(s->fx);
    int64_t unit = tide_sched_page_unit(s->fx), P = s->cfg.page_tokens;
    if (P < 0) return tide_fail(st, TIDE_ERR_INVALID, "page_tokens %lld is negative", (long long)P);
    if (s->cfg.prefix_replay < -1)
        return tide_fail(st, TIDE_ERR_INVALID, "prefix_replay %lld: use >= 0 tokens, or -1 for the whole prefix",
                         (long long)s->cfg.prefix_replay);
    if (P == 0) P = (128 + unit - 1) / unit * unit;
    if (P % unit != 0 || P > (1 << 24))
        return tide_fail(st, TIDE_ERR_INVALID,
                         "page_tokens %lld must be a multiple of %lld (the compress ratios' least common multiple "
                         "times kv_block %d), at most 2^24",
                         (long long)P, (long long)unit, kv->block_len);
    x->page_tokens = P;
    x->replay = s->cfg.prefix_replay;
    x->src_off[0] = 0;
    for (int k = 0; k < s->n_src; k++) x->src_off[k + 1] = x->src_off[k] + (int)(P / s->ratio[k] / kv->block_len);
    x->bpp = x->src_off[s->n_src];
    if (x->bpp == 0) return 0; /* no global KV at all: nothing to share */
    int64_t n = kv->max_blocks / x->bpp;
    if (n > 65536) n = 65536;
    n += s->cfg.max_seqs; /* room for pages that duplicate a concurrent request's */
    if (tide_prefix_init(&x->pc, (int32_t)P, (int32_t)n, 64, st) != 0) return -1;
    x->blocks = malloc((size_t)n * (size_t)x->bpp * sizeof *x->blocks);
    x->held = calloc((size_t)n, 1);
    x->inexact = calloc((size_t)n, 1);
    if (!x->blocks || !x->held || !x->inexact) return tide_fail(st, TIDE_ERR_NOMEM, "prefix cache: out of memory");
    x->pc.on_evict = on_evict;
    x->pc.evict_ctx = s;
    s->prefix_on = 1;
    if (s->cfg.tier) {
        x->tier_bytes = (int64_t)x->bpp * (int64_t)tide_kv_block_bytes(kv);
        if (!(x->tier_buf = malloc((size_t)x->tier_bytes)))
            return tide_fail(st, TIDE_ERR_NOMEM, "prefix cache: out of memory");
    }
    return 0;
}

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
    s->flight.items = malloc((size_t)cfg->max_seqs * sizeof *s->flight.items);
    if (!s->wq || !s->running || !s->plan.items || !s->plan.failed || !s->flight.items) {
        tide_sched_free(s);
        return tide_fail(st, TIDE_ERR_NOMEM, "scheduler: out of memory");
    }
    if (cfg->prefix_cache && prefix_init(s, st) != 0) {
        tide_sched_free(s);
        return tide_fail_ctx(st, "prefix cache");
    }
    return 0;
}

void tide_sched_free(tide_sched *s) {
    free(s->wq);
    free(s->running);
    free(s->plan.items);
    free(s->plan.failed);
    free(s->flight.items);
    tide_prefix_free(&s->px.pc);
    free(s->px.blocks);
    free(s->px.held);
    free(s->px.inexact);
    free(s->px.tier_buf);
    memset(s, 0, sizeof *s);
}

/* ---- the queues ----------------------------------------------------------- */

int64_t tide_sched_blocks_for(const tide_sched *s, int64_t n_pos) {
    int64_t bl = tide_fwd_kv(s->fx)->block_len, n = 0;
    for (int k = 0; k < s->n_src; k++) n += (n_pos / s->ratio[k] + bl - 1) / bl;
    return n;
}

int64_t tide_sched_blocks_free(const tide_sched *s) { return tide_kv_available(tide_fwd_kv(s->fx)); }

/* Blocks a plan may still count on: free ones plus those of cached pages
 * nobody references (only the cache holds those, so evicting frees them). */
static int64_t room(const tide_sched *s) {
    int64_t n = tide_sched_blocks_free(s);
    if (s->prefix_on) n += (int64_t)s->px.pc.n_idle * s->px.bpp;
    return n;
}

/* New blocks a sequence needs to hold positions [0, end): per source, what it
 * wants less what its tables have (c), or, for a sequence not created yet,
 * the blocks of its first `shared` positions that a hit will share. */
static int64_t need_blocks(const tide_sched *s, int64_t end, const tide_seq_cache *c, int64_t shared) {
    int64_t bl = tide_fwd_kv(s->fx)->block_len, total = 0;
    for (int k = 0; k < s->n_src; k++) {
        int64_t want = (end / s->ratio[k] + bl - 1) / bl;
        int64_t have = c ? c->tables[k].n : shared / s->ratio[k] / bl;
        if (want > have) total += want - have;
    }
    return total;
}

/* Tokens q feeds next from position pos of its len tokens given `budget`
 * tokens left in the step (0 = not now). */
static int64_t chunk_at(const tide_sched *s, const tide_req *q, int64_t pos, int64_t len, int64_t budget) {
    int64_t left = len - pos, n;
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

static void tier_fetch(tide_sched *s, tide_req *q);
static void tier_prefetch(tide_sched *s, tide_req *q);

int tide_sched_enqueue(tide_sched *s, tide_req *q, tide_status *st) {
    if (wq_grow(s) != 0) return tide_fail(st, TIDE_ERR_NOMEM, "scheduler: out of memory");
    if (s->prefix_on && s->cfg.tier) {
        if (s->cfg.tier->prefetch) tier_prefetch(s, q); /* read ahead; taken at admission */
        else tier_fetch(s, q);
    }
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

/* ---- prefix cache: pages and their blocks --------------------------------- */

static int pages_room(tide_req *q, int64_t n) {
    if (n <= q->cap_pages) return 0;
    int64_t cap = q->cap_pages ? 2 * q->cap_pages : 8;
    while (cap < n) cap *= 2;
    int32_t *p = realloc(q->pages, (size_t)cap * sizeof *p);
    if (!p) return -1;
    q->pages = p;
    q->cap_pages = cap;
    return 0;
}

/* Drops q's page references (its cached pages become evictable, most
 * recently used; deeper pages are evicted first). */
static void prefix_drop(tide_sched *s, tide_req *q) {
    if (q->n_pages == 0) return;
    tide_status st = {0};
    if (tide_prefix_release(&s->px.pc, q->pages, q->n_pages, &st) != 0)
        tide_log(TIDE_LOG_ERROR, "prefix cache: request %lld: %s", (long long)q->id, st.msg);
    q->n_pages = 0;
}

/* Looks q's tokens (less the last, which must be fed to get logits) up:
 * takes a reference on each hit page (listed in q->pages) and returns the
 * hit length in tokens. A failure here only means no hit. */
static int64_t prefix_lookup(tide_sched *s, tide_req *q) {
    if (!s->prefix_on) return 0;
    int64_t P = s->px.page_tokens, maxp = (q->n_tokens - 1) / P;
    if (maxp == 0 || maxp > INT32_MAX || pages_room(q, maxp) != 0) return 0;
    int32_t h = 0;
    tide_status st = {0};
    if (tide_prefix_lookup(&s->px.pc, tide_req_keys(q), q->n_tokens - 1, q->salt, q->pages, (int32_t)maxp, &h, &st) != 0)
        return 0;
    q->n_pages = h;
    return h * P;
}

/* Shares the hit pages' blocks into q's fresh tables, in page order, and
 * restores the sequence at `start`. */
static int prefix_attach(tide_sched *s, tide_req *q, int64_t frozen, int64_t start, tide_status *st) {
    tide_sched_prefix *x = &s->px;
    for (int64_t i = 0; i < q->n_pages; i++) {
        const int32_t *b = x->blocks + (int64_t)q->pages[i] * x->bpp;
        for (int k = 0; k < s->n_src; k++)
            if (tide_kv_share(tide_fwd_kv(s->fx), &q->cache.tables[k], b + x->src_off[k],
                              x->src_off[k + 1] - x->src_off[k], st) != 0)
                return -1;
    }
    return tide_fwd_seq_restore(s->fx, &q->cache, q->tokens, frozen, start, st);
}

/* ---- the tiers behind the cache (cfg.tier, cache/kv_tier.h) --------------- */

/* Page i of q (page id pg) just got an entry: hand its KV to the tiers
 * (which copy it and write behind). */
static void tier_put(tide_sched *s, const tide_req *q, int64_t i, int32_t pg) {
    tide_sched_prefix *x = &s->px;
    if (!s->cfg.tier) return;
    const tide_kv_pool *kv = tide_fwd_kv(s->fx);
    size_t per = tide_kv_block_bytes(kv);
    for (int j = 0; j < x->bpp; j++)
        memcpy(x->tier_buf + j * per, kv->blocks[x->blocks[(int64_t)pg * x->bpp + j]], per);
    tide_kv_page p = {q->salt, tide_req_keys(q), (i + 1) * x->page_tokens, x->page_tokens, x->pc.hash[pg], x->tier_buf,
                      x->tier_bytes, q->kv_class - 1 /* TIDE_KV_CLASS_X - 1 = TIDE_KV_X (request.c) */};
    s->cfg.tier->put(s->cfg.tier->ctx, &p);
    x->tier_stored++;
}

/* A page id and fresh blocks for a page fetched into x->tier_buf, its KV
 * copied in; the page holds one reference (the caller's), the blocks one
 * (to be the cache's). */
static int tier_promote(tide_sched *s, int32_t *page) {
    tide_sched_prefix *x = &s->px;
    tide_kv_pool *kv = tide_fwd_kv(s->fx);
    tide_status st = {0};
    int32_t pg;
    if (tide_prefix_alloc(&x->pc, &pg, &st) != 0) return -1;
    /* the blocks the pending plan will reserve at its launch are not ours */
    int64_t need = x->bpp + x->planned_blocks;
    while (tide_kv_available(kv) < need && tide_prefix_evict(&x->pc, 1) == 1) {
    }
    tide_block_table t = {0};
    if (tide_kv_available(kv) < need || tide_kv_reserve(kv, &t, (int64_t)x->bpp * kv->block_len, &st) != 0) {
        tide_kv_release(kv, &t);
        tide_prefix_release(&x->pc, &pg, 1, &st);
        return -1;
    }
    size_t per = tide_kv_block_bytes(kv);
    for (int j = 0; j < x->bpp; j++) {
        x->blocks[(int64_t)pg * x->bpp + j] = t.blocks[j];
        memcpy(kv->blocks[t.blocks[j]], x->tier_buf + j * per, per);
    }
    free(t.blocks); /* the blocks' references pass to the cache */
    *page = pg;
    return 0;
}

/* Brings the pages of q's prefix (less its last token) that follow the
 * cache's hit and that a tier holds into the cache, in order, as cached
 * pages nobody references: q's admission then hits them as usual. */
static void tier_fetch(tide_sched *s, tide_req *q) {
    tide_sched_prefix *x = &s->px;
    int64_t P = x->page_tokens, maxp = (q->n_tokens - 1) / P;
    if (maxp == 0 || maxp > INT32_MAX || pages_room(q, maxp) != 0) return;
    int32_t h = 0, got;
    tide_status st = {0};
    if (tide_prefix_lookup(&x->pc, tide_req_keys(q), q->n_tokens - 1, q->salt, q->pages, (int32_t)maxp, &h, &st) != 0) return;
    uint64_t chain = tide_prefix_root(q->salt);
    for (int64_t i = 0; i < h; i++) chain = tide_prefix_page_hash(chain, tide_req_keys(q) + i * P, (int32_t)P);
    for (got = h; got < maxp; got++) {
        uint64_t next = tide_prefix_page_hash(chain, tide_req_keys(q) + (int64_t)got * P, (int32_t)P);
        tide_kv_page p = {q->salt, tide_req_keys(q), (int64_t)(got + 1) * P, P, next, x->tier_buf, x->tier_bytes, -1};
        if (!s->cfg.tier->get(s->cfg.tier->ctx, &p) || tier_promote(s, &q->pages[got]) != 0) break;
        chain = next;
    }
    if (got > h && tide_prefix_insert(&x->pc, tide_req_keys(q), (int64_t)got * P, q->salt, q->pages, got, &st) != 0)
        tide_log(TIDE_LOG_WARN, "kv tiers: request %lld: %s", (long long)q->id, st.msg);
    for (int32_t i = h; i < got; i++) {
        int32_t pg = q->pages[i];
        if (x->pc.cached[pg]) {
            x->held[pg] = 1;
            x->tier_fetched++;
        } else if (tide_kv_unref(tide_fwd_kv(s->fx), x->blocks + (int64_t)pg * x->bpp, x->bpp, &st) != 0)
            tide_log(TIDE_LOG_ERROR, "kv tiers: page %d: %s", (int)pg, st.msg);
    }
    if (got > 0 && tide_prefix_release(&x->pc, q->pages, got, &st) != 0)
        tide_log(TIDE_LOG_ERROR, "kv tiers: request %lld: %s", (long long)q->id, st.msg);
}

/* The pages of q's prefix after the cache's hit, handed to the tiers to
 * read ahead (q->tier_ticket); admission takes them (tier_admit). */
static void tier_prefetch(tide_sched *s, tide_req *q) {
    tide_sched_prefix *x = &s->px;
    int64_t P = x->page_tokens, maxp = (q->n_tokens - 1) / P;
    if (maxp == 0 || maxp > INT32_MAX) return;
    int32_t h = 0;
    tide_status st = {0};
    if (pages_room(q, maxp) != 0 ||
        tide_prefix_lookup(&x->pc, tide_req_keys(q), q->n_tokens - 1, q->salt, q->pages, (int32_t)maxp, &h, &st) != 0)
        return;
    if (h > 0 && tide_prefix_release(&x->pc, q->pages, h, &st) != 0)
        tide_log(TIDE_LOG_ERROR, "kv tiers: request %lld: %s", (long long)q->id, st.msg);
    if (h >= maxp) return;
    tide_kv_page p = {q->salt, tide_req_keys(q), (int64_t)(h + 1) * P, P, 0, x->tier_buf, x->tier_bytes, -1};
    q->tier_ticket = s->cfg.tier->prefetch(s->cfg.tier->ctx, &p, maxp - h);
}

/* At admission: 0 when q may go on (its read-ahead is done and its pages
 * are in the cache now), -1 while the tiers are still reading (it waits;
 * when the engine has nothing else to do, a little while here). */
static int tier_admit(tide_sched *s, tide_req *q, int idle) {
    const tide_kv_tier *t = s->cfg.tier;
    if (!q->tier_ticket) return 0;
    if (!t->ready(t->ctx, q->tier_ticket, idle ? 0.002 : 0)) return -1;
    tier_fetch(s, q); /* every hit is read already: no I/O */
    t->forget(t->ctx, q->tier_ticket);
    q->tier_ticket = 0;
    return 0;
}

/* Registers the pages q completed since the last call: a page id per page
 * (possibly evicting the least recently used cached page), the page's blocks
 * copied from q's tables, then the index entries; the cache takes a
 * reference on the blocks of each page that got an entry. A page that cannot
 * get an id or duplicates another request's entry stays private to q. */
static void register_pages(tide_sched *s, tide_req *q) {
    tide_sched_prefix *x = &s->px;
    int64_t P = x->page_tokens, full = q->cache.pos / P, first = q->n_pages;
    if (!s->cfg.cache_inexact && full > q->exact_pages) { /* the inexact ones stay private */
        if (full - q->exact_pages > q->n_withheld) {
            x->withheld_pages += full - q->exact_pages - q->n_withheld;
            q->n_withheld = full - q->exact_pages;
        }
        full = q->exact_pages;
    }
    if (full <= first || pages_room(q, full) != 0) return;
    tide_status st = {0};
    while (q->n_pages < full) {
        int32_t pg;
        if (tide_prefix_alloc(&x->pc, &pg, &st) != 0) break; /* every page referenced */
        int32_t *b = x->blocks + (int64_t)pg * x->bpp;
        for (int k = 0; k < s->n_src; k++) {
            int64_t per = x->src_off[k + 1] - x->src_off[k];
            memcpy(b + x->src_off[k], q->cache.tables[k].blocks + q->n_pages * per, (size_t)per * sizeof *b);
        }
        x->inexact[pg] = q->n_pages >= q->exact_pages;
        x->inexact_cached += x->inexact[pg];
        q->pages[q->n_pages++] = pg;
    }
    if (q->n_pages == first) return;
    if (tide_prefix_insert(&x->pc, tide_req_keys(q), q->n_pages * P, q->salt, q->pages, q->n_pages, &st) != 0)
        tide_log(TIDE_LOG_WARN, "prefix cache: request %lld: %s", (long long)q->id, st.msg);
    /* The insert walks all of q's pages, not just the new ones: an older
     * page that stayed private (it duplicated another request's entry)
     * gets an entry once that entry was evicted, and a cached page hanging
     * off an evicted ancestor may be re-linked or dropped. So the cache's
     * block references follow the entries over every page of q. */
    for (int64_t i = 0; i < q->n_pages; i++) {
        int32_t pg = q->pages[i];
        if (x->pc.cached[pg] == x->held[pg]) continue;
        if (x->held[pg]) on_evict(s, pg); /* lost its entry: the cache's references go */
        else if (tide_kv_ref(tide_fwd_kv(s->fx), x->blocks + (int64_t)pg * x->bpp, x->bpp, &st) == 0) {
            x->held[pg] = 1;
            tier_put(s, q, i, pg);
        } else tide_log(TIDE_LOG_ERROR, "prefix cache: page %d: %s", (int)pg, st.msg);
    }
}

void tide_sched_after_step(tide_sched *s) {
    if (!s->prefix_on) return;
    for (int i = 0; i < s->flight.n_items; i++) {
        tide_req *q = s->flight.items[i].req;
        if (q->has_cache) register_pages(s, q);
    }
}

int64_t tide_sched_clear_prefix(tide_sched *s) {
    return s->prefix_on ? tide_prefix_evict(&s->px.pc, INT32_MAX) : 0;
}

/* Evicts least recently used cached pages until the pool's free blocks
 * cover what the plan will reserve. */
static void reclaim(tide_sched *s, int64_t planned) {
    if (!s->prefix_on) return;
    while (tide_sched_blocks_free(s) < planned && tide_prefix_evict(&s->px.pc, 1) == 1) {
    }
}

/* ---- planning ------------------------------------------------------------- */

static void drop_cache(tide_sched *s, tide_req *q) {
    if (q->has_cache) {
        tide_fwd_seq_free(s->fx, &q->cache);
        q->has_cache = 0;
    }
    prefix_drop(s, q);
}

static void unplan(tide_sched *s, tide_req *q) {
    tide_sched_plan *p = &s->plan;
    for (int i = 0; i < p->n_items; i++)
        if (p->items[i].req == q) {
            p->n_tokens -= p->items[i].n_tokens;
            memmove(p->items + i, p->items + i + 1, (size_t)(p->n_items - i - 1) * sizeof *p->items);
            p->n_items--;
            return;
        }
}

void tide_sched_remove(tide_sched *s, tide_req *q) {
    unplan(s, q);
    if (q->tier_ticket) s->cfg.tier->forget(s->cfg.tier->ctx, q->tier_ticket), q->tier_ticket = 0;
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

/* Preempts the newest running request: recompute later (from whatever of
 * its prefix is still cached then). */
static void preempt_last(tide_sched *s) {
    tide_req *v = s->running[--s->n_running];
    drop_cache(s, v);
    v->n_preempted++;
    s->preemptions++;
    wq_push_front(s, v);
}

void tide_sched_retry_alone(tide_sched *s, tide_req *q) {
    tide_sched_remove(s, q);
    q->solo = 1;
    q->n_preempted++;
    s->preemptions++;
    wq_push_front(s, q);
}

static void add(tide_sched *s, tide_req *q, int64_t pos, int64_t n, int64_t len) {
    tide_sched_item *it = &s->plan.items[s->plan.n_items++];
    it->req = q;
    it->pos = pos;
    it->n_tokens = n;
    it->logits = pos + n == len ? TIDE_LOGITS_LAST : TIDE_LOGITS_NONE;
    s->plan.n_tokens += n;
}

static const tide_sched_item *in_flight(const tide_sched *s, const tide_req *q) {
    for (int i = 0; i < s->flight.n_items; i++)
        if (s->flight.items[i].req == q) return &s->flight.items[i];
    return NULL;
}

/* Where running request q will stand when the step in flight is done: its
 * position and sequence length (a sampled row adds a token), and whether
 * that step ends it for sure (its last token by max_tokens). */
static int ahead(const tide_sched *s, const tide_req *q, int64_t *pos, int64_t *len) {
    const tide_sched_item *f = in_flight(s, q);
    *len = q->n_tokens;
    if (!f) {
        *pos = q->cache.pos;
        return 0;
    }
    *pos = f->pos + f->n_tokens;
    if (f->logits != TIDE_LOGITS_LAST) return 0;
    (*len)++;
    return q->sp.max_tokens > 0 && tide_req_n_output(q) + 1 >= q->sp.max_tokens;
}

/* The newest running request can be preempted unless it is q or in flight
 * (its cache is in use). */
static int can_preempt_last(const tide_sched *s, const tide_req *q) {
    tide_req *v = s->running[s->n_running - 1];
    return v != q && !in_flight(s, v);
}

void tide_sched_launch(tide_sched *s) {
    tide_sched_plan *f = &s->flight, *p = &s->plan;
    memcpy(f->items, p->items, (size_t)p->n_items * sizeof *f->items);
    f->n_items = p->n_items;
    f->n_tokens = p->n_tokens;
    p->n_items = p->n_failed = 0;
    p->n_tokens = 0;
    s->px.planned_blocks = 0;
}

void tide_sched_land(tide_sched *s) {
    s->flight.n_items = 0;
    s->flight.n_tokens = 0;
}

static void fail(tide_sched *s, tide_req *q, const char *msg) {
    tide_req_set_error(q, msg);
    s->plan.failed[s->plan.n_failed++] = q;
}

/* Creates the sequence of an admitted request: fresh, or restored from its
 * cache hit. */
static int start_seq(tide_sched *s, tide_req *q, int64_t frozen, int64_t start, tide_status *st) {
    if (tide_fwd_seq_init(s->fx, &q->cache, st) != 0) return -1;
    q->has_cache = 1;
    if (frozen > 0 && prefix_attach(s, q, frozen, start, st) != 0) return -1;
    q->n_cached = frozen;
    /* a bounded replay, or a hit on inexact pages: what it computes next is inexact */
    int inexact = frozen > 0 && start > 0;
    for (int64_t i = 0; i < q->n_pages && !inexact; i++) inexact = s->px.inexact[q->pages[i]];
    q->exact_pages = inexact ? frozen / s->px.page_tokens : INT64_MAX;
    q->n_withheld = 0;
    if (s->cfg.decoder_tail > 0 && q->n_tokens > s->cfg.decoder_tail) {
        q->cache.tail_lo = q->n_tokens - s->cfg.decoder_tail; /* the last row always runs them */
        if (q->cache.tail_lo > start) s->decoder_rows_skipped += q->cache.tail_lo - start;
    }
    if (s->prefix_on) {
        s->px.lookup_tokens += q->n_tokens - 1;
        s->px.hit_tokens += frozen;
        s->px.replay_tokens += frozen - start;
        s->px.hits += frozen > 0;
        s->px.inexact_admissions += inexact;
    }
    return 0;
}

void tide_sched_make_plan(tide_sched *s) {
    tide_sched_plan *p = &s->plan;
    p->n_items = p->n_failed = 0;
    p->n_tokens = 0;
    int64_t budget = s->cfg.max_step_tokens, planned = 0;
    for (int i = 0; i < s->n_running;) {
        tide_req *q = s->running[i];
        int64_t pos, len;
        int64_t n = ahead(s, q, &pos, &len) ? 0 : chunk_at(s, q, pos, len, budget);
        if (n == 0) {
            i++;
            continue;
        }
        int64_t nb = need_blocks(s, pos + n, &q->cache, 0);
        while (nb > room(s) - planned && can_preempt_last(s, q)) preempt_last(s);
        if (nb > room(s) - planned) {
            if (in_flight(s, q) || s->running[s->n_running - 1] != q) {
                i++; /* the newer ones are in flight: q waits for a step */
                continue;
            }
            if (p->n_items == 0 && s->flight.n_items == 0) {
                /* alone and still too big: admission checks make this
                 * impossible; never loop on it */
                tide_sched_remove(s, q);
                fail(s, q, "the KV pool cannot hold this request");
                continue;
            }
            preempt_last(s); /* q is the newest: it waits for the others */
            continue;
        }
        add(s, q, pos, n, len);
        planned += nb;
        budget -= n;
        i++;
    }
    while (s->wq_n > 0 && s->n_running < s->cfg.max_seqs && budget > 0 && p->n_failed < s->cfg.max_seqs) {
        tide_req *q = wq_at(s, 0);
        if (q->solo && p->n_items > 0) break; /* it waits for a pass of its own */
        s->px.planned_blocks = planned; /* what the tiers must leave in the pool */
        if (tier_admit(s, q, p->n_items == 0 && s->flight.n_items == 0) != 0) break; /* FIFO: the rest wait too */
        int64_t frozen = prefix_lookup(s, q), start = 0;
        if (frozen > 0 && s->px.replay >= 0 && frozen > s->px.replay) start = frozen - s->px.replay;
        int64_t n = chunk_at(s, q, start, q->n_tokens, budget);
        /* room() is taken after the lookup: hit pages are no longer evictable */
        if (n == 0 || need_blocks(s, start + n, NULL, frozen) > room(s) - planned) {
            prefix_drop(s, q);
            break;
        }
        int64_t nb = need_blocks(s, start + n, NULL, frozen);
        wq_pop_front(s);
        tide_status st = {0};
        if (start_seq(s, q, frozen, start, &st) != 0) {
            drop_cache(s, q);
            fail(s, q, st.msg);
            continue;
        }
        q->state = TIDE_REQ_RUNNING;
        s->running[s->n_running++] = q;
        add(s, q, start, n, q->n_tokens);
        planned += nb;
        budget -= n;
        if (q->solo) break; /* nothing else in its pass */
    }
    reclaim(s, planned);
    s->px.planned_blocks = planned;
}

int64_t tide_sched_extend(tide_sched *s, int i, int64_t extra) {
    tide_sched_plan *p = &s->plan;
    tide_sched_item *it = &p->items[i];
    int64_t left = s->cfg.max_step_tokens - p->n_tokens;
    if (extra > left) extra = left;
    int64_t end = it->pos + it->n_tokens, planned = s->px.planned_blocks, nb = 0;
    for (; extra > 0; extra--) {
        nb = need_blocks(s, end + extra, &it->req->cache, 0) - need_blocks(s, end, &it->req->cache, 0);
        if (nb <= room(s) - planned) break;
    }
    if (extra <= 0) return 0;
    reclaim(s, planned + nb);
    s->px.planned_blocks = planned + nb;
    it->n_tokens += extra;
    p->n_tokens += extra;
    return extra;
}

int tide_sched_reserve(tide_sched *s, tide_status *st) {
    tide_kv_pool *kv = tide_fwd_kv(s->fx);
    for (int i = 0; i < s->plan.n_items; i++) {
        tide_req *q = s->plan.items[i].req;
        int64_t end = s->plan.items[i].pos + s->plan.items[i].n_tokens;
        if (q->cache.pos != s->plan.items[i].pos) /* a prediction went wrong: never feed a wrong position */
            return tide_fail(st, TIDE_ERR_INTERNAL, "scheduler: request %lld is at %lld, planned at %lld",
                             (long long)q->id, (long long)q->cache.pos, (long long)s->plan.items[i].pos);
        for (int k = 0; k < s->n_src; k++)
            if (tide_kv_reserve(kv, &q->cache.tables[k], end / s->ratio[k], st) != 0)
                return tide_fail_ctx(st, "scheduler: request %lld", (long long)q->id);
    }
    return 0;
}

/* ---- consistency (tests) -------------------------------------------------- */

int tide_sched_check(const tide_sched *s, tide_status *st) {
    const tide_kv_pool *kv = tide_fwd_kv(s->fx);
    int32_t n_pages = s->prefix_on ? s->px.pc.pages.n_pages : 0;
    int32_t *cnt = calloc((size_t)(kv->n_blocks + 1), sizeof *cnt);
    int32_t *pref = calloc((size_t)n_pages + 1, sizeof *pref);
    int rc = 0;
    if (!cnt || !pref) {
        rc = tide_fail(st, TIDE_ERR_NOMEM, "check: out of memory");
        goto out;
    }
    for (int i = 0; i < s->n_running; i++) {
        const tide_req *q = s->running[i];
        for (int k = 0; k < s->n_src && q->has_cache; k++)
            for (int64_t j = 0; j < q->cache.tables[k].n; j++) cnt[q->cache.tables[k].blocks[j]]++;
        for (int64_t j = 0; j < q->n_pages; j++) pref[q->pages[j]]++;
    }
    for (int64_t i = 0; i < s->wq_n; i++)
        if (wq_at(s, i)->has_cache || wq_at(s, i)->n_pages) {
            rc = tide_fail(st, TIDE_ERR_INTERNAL, "check: waiting request %lld holds a cache",
                           (long long)wq_at(s, i)->id);
            goto out;
        }
    for (int32_t pg = 0; pg < n_pages; pg++) {
        if (s->px.held[pg] != s->px.pc.cached[pg]) {
            rc = tide_fail(st, TIDE_ERR_INTERNAL, "check: page %d cached %d but holds blocks %d", (int)pg,
                           s->px.pc.cached[pg], s->px.held[pg]);
            goto out;
        }
        if (s->px.held[pg])
            for (int j = 0; j < s->px.bpp; j++) cnt[s->px.blocks[(int64_t)pg * s->px.bpp + j]]++;
        if (pref[pg] != s->px.pc.pages.ref[pg]) {
            rc = tide_fail(st, TIDE_ERR_INTERNAL, "check: page %d has %d references, %d requests list it", (int)pg,
                           (int)s->px.pc.pages.ref[pg], (int)pref[pg]);
            goto out;
        }
    }
    for (int64_t b = 0; b < kv->n_blocks; b++)
        if (cnt[b] != kv->ref[b]) {
            rc = tide_fail(st, TIDE_ERR_INTERNAL, "check: block %lld has %d references, %d holders", (long long)b,
                           (int)kv->ref[b], (int)cnt[b]);
            goto out;
        }
out:
    free(cnt);
    free(pref);
    return rc;
}
