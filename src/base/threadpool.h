/* A fixed pool of worker threads running one parallel-for at a time.
 *
 *     tide_pool *p;
 *     tide_pool_create(4, &p, &st);
 *     tide_pool_for(p, n_tasks, fn, arg);   // fn(arg, task, thread) for task in [0, n_tasks)
 *     tide_pool_destroy(p);
 *
 * Tasks are handed out dynamically (an atomic counter), so uneven tasks
 * balance themselves. The calling thread works too (it is thread 0), so a pool
 * of 1 thread spawns nothing and runs everything inline. A NULL pool is
 * accepted everywhere and means "run inline". Not reentrant: a task must not
 * call tide_pool_for on the same pool. */
#ifndef TIDE_BASE_THREADPOOL_H
#define TIDE_BASE_THREADPOOL_H

#include <stdint.h>

#include "base/status.h"

typedef struct tide_pool tide_pool;
typedef void (*tide_task_fn)(void *arg, int64_t task, int thread);

int tide_pool_create(int n_threads, tide_pool **out, tide_status *st);
void tide_pool_destroy(tide_pool *p);
/* Number of threads including the caller (>= 1); 1 for a NULL pool. */
int tide_pool_size(const tide_pool *p);
void tide_pool_for(tide_pool *p, int64_t n_tasks, tide_task_fn fn, void *arg);

#endif
