/* Reference-counted pages with one free queue in eviction order.
 *
 * A page is the unit the prefix cache shares: `page_tokens` consecutive token
 * positions of one sequence's global KV (all KV sources; the scheduler maps a
 * page id to its blocks in the KV pool). Each sequence using a page holds one
 * reference. A page whose count drops to 0 goes back to the free queue, but
 * keeps its contents: if the prefix cache indexes it, a later lookup can take
 * it out of the queue again (a cache hit), until an allocation reuses it.
 *
 * The queue is ordered for eviction (the idea of vLLM's free block queue):
 * allocation pops the head. Pages released with nothing worth keeping go to
 * the head (reused first); pages released with cached contents go to the tail
 * (reused last, least recently used first). So free-and-empty pages are always
 * used before any cached page is evicted, and cached pages leave in LRU order.
 *
 * All operations are O(1). No allocation after init. */
#ifndef TIDE_CACHE_PAGE_ALLOC_H
#define TIDE_CACHE_PAGE_ALLOC_H

#include <stdint.h>

#include "base/status.h"

typedef struct tide_page_alloc {
    int32_t n_pages;
    int32_t *ref;   /* [n_pages] references held by sequences */
    int32_t *prev;  /* [n_pages] free-queue links, -1 at the ends */
    int32_t *next;
    int32_t head, tail; /* -1 when the queue is empty */
    int32_t n_free;     /* pages in the queue (ref == 0) */
} tide_page_alloc;

/* All pages start free (in the queue, ids ascending from the head). */
int tide_page_alloc_init(tide_page_alloc *pa, int32_t n_pages, tide_status *st);
void tide_page_alloc_free(tide_page_alloc *pa);

/* Pops the head of the queue and gives it one reference. Fails with
 * TIDE_ERR_NOMEM when every page is referenced. The caller (the prefix cache)
 * must drop any index entry that still points at the page. */
int tide_page_alloc_get(tide_page_alloc *pa, int32_t *page, tide_status *st);

/* One more reference; a free page leaves the queue (reuse of cached contents). */
void tide_page_ref(tide_page_alloc *pa, int32_t page);

/* One reference less. At zero the page joins the queue: at the tail when
 * `keep` (its contents are cached), else at the head. Returns the new count.
 * Fails (-1, nothing changed) on a page that has no reference. */
int32_t tide_page_unref(tide_page_alloc *pa, int32_t page, int keep);

/* Takes a free page out of the queue and puts it back at the head (its
 * contents were dropped: it should be reused first). */
void tide_page_to_head(tide_page_alloc *pa, int32_t page);

static inline int tide_page_valid(const tide_page_alloc *pa, int32_t page) {
    return page >= 0 && page < pa->n_pages;
}

#endif
