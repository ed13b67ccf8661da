/* Reed-Solomon by ISA-L: see kvstore_ec.h. Decoding inverts the k x k
 * matrix of the rows that survived; the rows of that inverse for the lost
 * data shards rebuild them, and parity is then encoded again. */
#include "cache/kvstore_ec.h"

#include <isa-l/erasure_code.h>
#include <stdlib.h>
#include <string.h>

#include "cache/kvstore_fmt.h"

int tide_kvs_ec_init(tide_kvs_ec *ec, int k, int m, tide_status *st) {
    memset(ec, 0, sizeof *ec);
    if (k < 1 || m < 0 || k + m > 32)
        return tide_fail(st, TIDE_ERR_INVALID, "erasure code %d+%d: use k >= 1, m >= 0, k + m <= 32", k, m);
    ec->k = k;
    ec->m = m;
    ec->matrix = malloc((size_t)(k + m) * (size_t)k);
    ec->tables = malloc(32 * (size_t)k * (size_t)(m > 0 ? m : 1));
    if (!ec->matrix || !ec->tables) {
        tide_kvs_ec_free(ec);
        return tide_fail(st, TIDE_ERR_NOMEM, "erasure code: out of memory");
    }
    gf_gen_cauchy1_matrix(ec->matrix, k + m, k);
    if (m > 0) ec_init_tables(k, m, ec->matrix + (size_t)k * (size_t)k, ec->tables);
    return 0;
}

void tide_kvs_ec_free(tide_kvs_ec *ec) {
    free(ec->matrix);
    free(ec->tables);
    memset(ec, 0, sizeof *ec);
}

void tide_kvs_ec_encode(const tide_kvs_ec *ec, uint64_t len, uint8_t **shards) {
    if (ec->m > 0) ec_encode_data((int)len, ec->k, ec->m, ec->tables, shards, shards + ec->k);
}

int tide_kvs_ec_decode(const tide_kvs_ec *ec, uint64_t len, uint8_t **shards, const uint8_t *have, tide_status *st) {
    int k = ec->k, n = ec->k + ec->m, rows[32], lost[32], n_lost = 0, n_rows = 0;
    for (int i = 0; i < n; i++) {
        if (have[i] && n_rows < k) rows[n_rows++] = i;
        if (!have[i] && i < k) lost[n_lost++] = i;
    }
    if (n_rows < k)
        return tide_fail(st, TIDE_ERR_FORMAT, "erasure code %d+%d: only %d shards left, %d needed", k, ec->m, n_rows, k);
    if (n_lost > 0) {
        unsigned char b[32 * 32], inv[32 * 32], rec[32 * 32], tbl[32 * 32 * 32];
        uint8_t *src[32], *dst[32];
        for (int r = 0; r < k; r++) {
            memcpy(b + r * k, ec->matrix + rows[r] * k, (size_t)k);
            src[r] = shards[rows[r]];
        }
        if (gf_invert_matrix(b, inv, k) != 0) /* impossible for a Cauchy matrix */
            return tide_fail(st, TIDE_ERR_INTERNAL, "erasure code: singular decode matrix");
        for (int j = 0; j < n_lost; j++) {
            memcpy(rec + j * k, inv + lost[j] * k, (size_t)k);
            dst[j] = shards[lost[j]];
        }
        ec_init_tables(k, n_lost, rec, tbl);
        ec_encode_data((int)len, k, n_lost, tbl, src, dst);
    }
    for (int i = k; i < n; i++)
        if (!have[i]) { /* parity: encode again from the (now complete) data */
            tide_kvs_ec_encode(ec, len, shards);
            break;
        }
    return 0;
}
