/* Fuzz target for config.json parsing and checking: arbitrary bytes must
 * never crash the loader; an accepted config must have a self-consistent
 * role table, survive a JSON round trip unchanged, and (when small enough to
 * list) give a manifest whose sizes add up. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/config.h"
#include "model/manifest.h"

static void check_roles(const tide_config *c) {
    for (int i = 0; i < c->n_layers; i++) {
        const tide_layer_role *r = &c->roles[i];
        if (r->compress_ratio == 0) {
            if (r->kv_source != -1 || r->index_source != -1 || r->is_kv_source || r->is_index_source) abort();
            continue;
        }
        if (r->kv_source < 0 || r->kv_source > i || !c->roles[r->kv_source].is_kv_source) abort();
        if (c->roles[r->kv_source].compress_ratio != r->compress_ratio) abort();
        if (r->index_source < 0 || r->index_source > i || !c->roles[r->index_source].is_index_source) abort();
        if (c->roles[r->index_source].kv_source != r->kv_source) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    tide_config *c = malloc(sizeof *c), *d = malloc(sizeof *d);
    tide_status st = {0};
    if (c && d && tide_config_from_json_text(text, "fuzz", c, &st) == 0) {
        check_roles(c);
        char *json = NULL;
        if (tide_config_to_json_text(c, &json, &st) != 0) abort();
        if (tide_config_from_json_text(json, "fuzz-roundtrip", d, &st) != 0) abort();
        if (memcmp(c->roles, d->roles, sizeof(tide_layer_role) * (size_t)c->n_layers) != 0) abort();
        /* every field, the optional ones included: what was absent stays absent */
        if (memcmp(&c->text, &d->text, sizeof c->text) || memcmp(&c->vision, &d->vision, sizeof c->vision) ||
            memcmp(&c->synth, &d->synth, sizeof c->synth) || c->image_token_id != d->image_token_id ||
            strcmp(c->model_type, d->model_type))
            abort();
        free(json);
        /* listing is linear in layers x experts: keep it cheap */
        if ((int64_t)c->n_layers * (c->text.n_routed_experts + c->text.dspark_n_routed_experts) < 20000) {
            tide_manifest m;
            if (tide_manifest_build(c, &m, &st) == 0) {
                uint64_t sum = 0;
                for (size_t i = 0; i < m.n; i++) sum += m.e[i].nbytes;
                if (sum != m.total_bytes) abort();
                tide_manifest_free(&m);
            }
        }
    } else if (!st.msg[0]) {
        abort(); /* a failure always says why */
    }
    free(c);
    free(d);
    free(text);
    return 0;
}
