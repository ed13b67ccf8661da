/* Type names and nesting depth of jansson values (see base/json.h). One
 * table holds both spellings of each type name so they cannot drift. */
#include "base/json.h"

static const struct {
    const char *kind, *word;
} NAMES[] = {
    [JSON_OBJECT] = {"an object", "object"},  [JSON_ARRAY] = {"an array", "array"},
    [JSON_STRING] = {"a string", "string"},   [JSON_INTEGER] = {"an integer", "integer"},
    [JSON_REAL] = {"a real number", "number"}, [JSON_TRUE] = {"a boolean", "boolean"},
    [JSON_FALSE] = {"a boolean", "boolean"},  [JSON_NULL] = {"null", "null"},
};

static int type_index(const json_t *v) {
    int t = (int)json_typeof(v);
    return t >= 0 && t < (int)(sizeof NAMES / sizeof NAMES[0]) && NAMES[t].kind ? t : -1;
}

const char *tide_json_kind(const json_t *v) {
    int t = type_index(v);
    return t < 0 ? "?" : NAMES[t].kind;
}

const char *tide_json_type_name(const json_t *v) {
    int t = type_index(v);
    return t < 0 ? "?" : NAMES[t].word;
}

int tide_json_depth(const json_t *v, int limit) {
    if (limit <= 0) return 1;
    int best = 0;
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)v, k, x) {
            int d = tide_json_depth(x, limit - 1);
            if (d > best) best = d;
            if (best >= limit) break;
        }
    } else if (json_is_array(v)) {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) {
            int d = tide_json_depth(x, limit - 1);
            if (d > best) best = d;
            if (best >= limit) break;
        }
    }
    return best + 1;
}
