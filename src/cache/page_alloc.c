/* Reference-counted pages and the free queue in eviction order (see
 * page_alloc.h). The queue is an intrusive doubly linked list over page ids. */
#include "cache/page_alloc.h"

#include <stdlib.h>
#include <string.h>

static void unlink_page(tide_page_alloc *pa, int32_t p) {
    int32_t a = pa->prev[p], b = pa->next[p];
    if (a >= 0) pa->next[a] = b; else pa->head = b;
    if (b >= 0) pa->prev[b] = a; else pa->tail = a;
    pa->prev[p] = pa->next[p] = -1;
    pa->n_free--;
}

static void push_head(tide_page_alloc *pa, int32_t p) {
    pa->prev[p] = -1;
    pa->next[p] = pa->head;
    if (pa->head >= 0) pa->prev[pa->head] = p; else pa->tail = p;
    pa->head = p;
    pa->n_free++;
}

static void push_tail(tide_page_alloc *pa, int32_t p) {
    pa->next[p] = -1;
    pa->prev[p] = pa->tail;
    if (pa->tail >= 0) pa->next[pa->tail] = p; else pa->head = p;
    pa->tail = p;
    pa->n_free++;
}

int tide_page_alloc_init(tide_page_alloc *pa, int32_t n_pages, tide_status *st) {
    memset(pa, 0, sizeof *pa);
    pa->head = pa->tail = -1;
    if (n_pages <= 0) return tide_fail(st, TIDE_ERR_INVALID, "page allocator: %d pages", (int)n_pages);
    pa->n_pages = n_pages;
    pa->ref = calloc((size_t)n_pages, sizeof *pa->ref);
    pa->prev = malloc((size_t)n_pages * sizeof *pa->prev);
    pa->next = malloc((size_t)n_pages * sizeof *pa->next);
    if (!pa->ref || !pa->prev || !pa->next) {
        tide_page_alloc_free(pa);
        return tide_fail(st, TIDE_ERR_NOMEM, "page allocator: out of memory for %d pages", (int)n_pages);
    }
    for (int32_t p = 0; p < n_pages; p++) push_tail(pa, p);
    return 0;
}

void tide_page_alloc_free(tide_page_alloc *pa) {
    free(pa->ref);
    free(pa->prev);
    free(pa->next);
    memset(pa, 0, sizeof *pa);
    pa->head = pa->tail = -1;
}

int tide_page_alloc_get(tide_page_alloc *pa, int32_t *page, tide_status *st) {
    if (pa->head < 0)
        return tide_fail(st, TIDE_ERR_NOMEM, "page allocator: all %d pages are in use", (int)pa->n_pages);
    int32_t p = pa->head;
    unlink_page(pa, p);
    pa->ref[p] = 1;
    *page = p;
    return 0;
}

void tide_page_ref(tide_page_alloc *pa, int32_t page) {
    if (pa->ref[page]++ == 0) unlink_page(pa, page);
}

int32_t tide_page_unref(tide_page_alloc *pa, int32_t page, int keep) {
    if (pa->ref[page] <= 0) return -1;
    if (--pa->ref[page] == 0) {
        if (keep) push_tail(pa, page);
        else push_head(pa, page);
    }
    return pa->ref[page];
}

void tide_page_to_head(tide_page_alloc *pa, int32_t page) {
    if (pa->ref[page] != 0) return;
    unlink_page(pa, page);
    push_head(pa, page);
}
