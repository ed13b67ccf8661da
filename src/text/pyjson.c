/* Python-compatible JSON writer; see pyjson.h for why the exact form matters. */
#include "text/pyjson.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tide_pyjson_escape(tide_sb *out, const char *s, size_t n) {
    size_t run = 0; /* bytes copied verbatim are appended in runs */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char hex[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) {
                snprintf(hex, sizeof hex, "\\u%04x", c);
                esc = hex;
            }
        }
        if (!esc) continue;
        tide_sb_addn(out, s + run, i - run);
        tide_sb_add(out, esc);
        run = i + 1;
    }
    tide_sb_addn(out, s + run, n - run);
}

void tide_pyjson_string(tide_sb *out, const char *s, size_t n) {
    tide_sb_addc(out, '"');
    tide_pyjson_escape(out, s, n);
    tide_sb_addc(out, '"');
}

/* Python's float repr: the shortest digit string that reads back to the same
 * double, shown in positional form when the decimal exponent is in
 * [-4, 16), else as d.ddde+XX. */
void tide_pyjson_float(tide_sb *out, double d) {
    if (d == 0) { tide_sb_add(out, signbit(d) ? "-0.0" : "0.0"); return; }
    char buf[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, d);
        if (strtod(buf, NULL) == d) break;
    }
    /* buf = [-]D[.DDD]e[+-]XX: collect the digits and the exponent. */
    char digits[24];
    int nd = 0, neg = buf[0] == '-';
    const char *p = buf + neg;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') digits[nd++] = *p;
    int exp10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    int decpt = exp10 + 1; /* value = 0.DIGITS * 10^decpt */
    if (neg) tide_sb_addc(out, '-');
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            tide_sb_add(out, "0.");
            for (int i = 0; i < -decpt; i++) tide_sb_addc(out, '0');
            tide_sb_addn(out, digits, (size_t)nd);
        } else if (decpt >= nd) {
            tide_sb_addn(out, digits, (size_t)nd);
            for (int i = nd; i < decpt; i++) tide_sb_addc(out, '0');
            tide_sb_add(out, ".0");
        } else {
            tide_sb_addn(out, digits, (size_t)decpt);
            tide_sb_addc(out, '.');
            tide_sb_addn(out, digits + decpt, (size_t)(nd - decpt));
        }
        return;
    }
    tide_sb_addc(out, digits[0]);
    if (nd > 1) {
        tide_sb_addc(out, '.');
        tide_sb_addn(out, digits + 1, (size_t)(nd - 1));
    }
    tide_sb_addf(out, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
}

static void dump(tide_sb *out, const json_t *v, const tide_pyjson_doc *doc) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *k;
        json_t *x;
        int first = 1;
        tide_sb_addc(out, '{');
        json_object_foreach((json_t *)v, k, x) {
            if (!first) tide_sb_add(out, ", ");
            first = 0;
            tide_pyjson_string(out, k, strlen(k));
            tide_sb_add(out, ": ");
            dump(out, x, doc);
        }
        tide_sb_addc(out, '}');
        break;
    }
    case JSON_ARRAY: {
        size_t i;
        json_t *x;
        tide_sb_addc(out, '[');
        json_array_foreach(v, i, x) {
            if (i) tide_sb_add(out, ", ");
            dump(out, x, doc);
        }
        tide_sb_addc(out, ']');
        break;
    }
    case JSON_STRING:
        if (tide_pyjson_doc_is_raw(doc, v)) tide_sb_addn(out, json_string_value(v), json_string_length(v));
        else tide_pyjson_string(out, json_string_value(v), json_string_length(v));
        break;
    case JSON_INTEGER: tide_sb_addf(out, "%" JSON_INTEGER_FORMAT, json_integer_value(v)); break;
    case JSON_REAL: tide_pyjson_float(out, json_real_value(v)); break;
    case JSON_TRUE: tide_sb_add(out, "true"); break;
    case JSON_FALSE: tide_sb_add(out, "false"); break;
    case JSON_NULL: tide_sb_add(out, "null"); break;
    }
}

int tide_pyjson_doc_dump(tide_sb *out, const tide_pyjson_doc *doc, const json_t *v, tide_status *st) {
    if (!v) return tide_fail(st, TIDE_ERR_INVALID, "no JSON value");
    if (tide_json_depth(v, TIDE_PYJSON_MAX_DEPTH + 1) > TIDE_PYJSON_MAX_DEPTH)
        return tide_fail(st, TIDE_ERR_INVALID, "JSON nested deeper than %d levels", TIDE_PYJSON_MAX_DEPTH);
    dump(out, v, doc);
    return tide_sb_check(out, "writing JSON", st);
}

int tide_pyjson_dump(tide_sb *out, const json_t *v, tide_status *st) { return tide_pyjson_doc_dump(out, NULL, v, st); }
