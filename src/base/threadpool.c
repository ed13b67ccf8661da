/* Worker pool for data-parallel loops: see threadpool.h.
 *
 * One job at a time: the caller publishes (fn, arg, n_tasks), bumps a
 * generation counter and wakes the workers; everyone (caller included) pulls
 * task indices from an atomic counter until exhausted; the caller waits until
 * every worker has checked out of the generation. */
#include "base/threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

struct tide_pool {
    int n;                 /* threads including the caller */
    pthread_t *threads;    /* n - 1 workers */
    pthread_mutex_t mu;
    pthread_cond_t wake;   /* workers wait here for a new generation */
    pthread_cond_t done;   /* the caller waits here for workers to finish */
    uint64_t generation;
    int busy;              /* workers still inside the current generation */
    int quit;
    tide_task_fn fn;
    void *arg;
    int64_t n_tasks;
    atomic_llong next;
};

typedef struct {
    tide_pool *p;
    int id;
} worker_arg;

static void drain(tide_pool *p, int thread) {
    for (;;) {
        int64_t t = atomic_fetch_add(&p->next, 1);
        if (t >= p->n_tasks) break;
        p->fn(p->arg, t, thread);
    }
}

static void *worker_main(void *vp) {
    worker_arg *wa = vp;
    tide_pool *p = wa->p;
    int id = wa->id;
    free(wa);
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->quit && p->generation == seen) pthread_cond_wait(&p->wake, &p->mu);
        if (p->quit) break;
        seen = p->generation;
        pthread_mutex_unlock(&p->mu);
        drain(p, id);
        pthread_mutex_lock(&p->mu);
        if (--p->busy == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int tide_pool_create(int n_threads, tide_pool **out, tide_status *st) {
    *out = NULL;
    if (n_threads < 1 || n_threads > 1024)
        return tide_fail(st, TIDE_ERR_INVALID, "thread pool: %d threads is out of range 1..1024", n_threads);
    tide_pool *p = calloc(1, sizeof *p);
    if (!p) return tide_fail(st, TIDE_ERR_NOMEM, "thread pool: out of memory");
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    atomic_init(&p->next, 0);
    if (n_threads > 1) {
        p->threads = calloc((size_t)n_threads - 1, sizeof *p->threads);
        if (!p->threads) {
            tide_pool_destroy(p);
            return tide_fail(st, TIDE_ERR_NOMEM, "thread pool: out of memory");
        }
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (wa) {
            wa->p = p;
            wa->id = i;
        }
        if (!wa || pthread_create(&p->threads[i - 1], NULL, worker_main, wa) != 0) {
            free(wa);
            p->n = i; /* only i-1 workers exist: destroy joins exactly those */
            tide_pool_destroy(p);
            return tide_fail(st, TIDE_ERR_IO, "thread pool: cannot start thread %d", i);
        }
    }
    *out = p;
    return 0;
}

void tide_pool_destroy(tide_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i + 1 < p->n; i++) pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p);
}

int tide_pool_size(const tide_pool *p) { return p ? p->n : 1; }

void tide_pool_for(tide_pool *p, int64_t n_tasks, tide_task_fn fn, void *arg) {
    if (n_tasks <= 0) return;
    if (!p || p->n == 1 || n_tasks == 1) {
        for (int64_t t = 0; t < n_tasks; t++) fn(arg, t, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->arg = arg;
    p->n_tasks = n_tasks;
    atomic_store(&p->next, 0);
    p->busy = p->n - 1;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    drain(p, 0);
    pthread_mutex_lock(&p->mu);
    while (p->busy > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
