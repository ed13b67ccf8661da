#include <string.h>

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "base/fs.h"
#include "base/status.h"
#include "testutil.h"

static int inner(tide_status *st) { return tide_fail(st, TIDE_ERR_FORMAT, "bad byte at %d", 7); }

static void test_fail_and_context(void **state) {
    (void)state;
    tide_status st = {0};
    assert_int_equal(inner(&st), -1);
    assert_int_equal(st.code, TIDE_ERR_FORMAT);
    assert_string_equal(st.msg, "bad byte at 7");
    tide_fail_ctx(&st, "reading %s", "x.safetensors");
    assert_string_equal(st.msg, "reading x.safetensors: bad byte at 7");
    assert_int_equal(st.code, TIDE_ERR_FORMAT);
    assert_int_equal(tide_fail(NULL, TIDE_ERR_IO, "ignored"), -1);
    /* a context the message already starts with is not added twice */
    tide_fail(&st, TIDE_ERR_NOMEM, "engine: out of memory");
    tide_fail_ctx(&st, "engine");
    assert_string_equal(st.msg, "engine: out of memory");
    assert_int_equal(st.code, TIDE_ERR_NOMEM);
    tide_fail_ctx(&st, "loading %s", "m");
    tide_fail_ctx(&st, "loading m");
    assert_string_equal(st.msg, "loading m: engine: out of memory");
    /* only a whole leading context counts */
    tide_fail(&st, TIDE_ERR_IO, "engines: x");
    tide_fail_ctx(&st, "engine");
    assert_string_equal(st.msg, "engine: engines: x");
    tide_fail(&st, TIDE_ERR_IO, "engine");
    tide_fail_ctx(&st, "engine");
    assert_string_equal(st.msg, "engine: engine");
}

static void test_mkdir_p(void **state) {
    (void)state;
    char *root = tu_mkdtemp("fs");
    assert_non_null(root);
    char path[4096], file[4096];
    struct stat sb;
    tide_status st = {0};
    snprintf(path, sizeof path, "%s/a/b/c", root);
    assert_int_equal(tide_mkdir_p(path, &st), 0);
    assert_int_equal(stat(path, &sb), 0);
    assert_true(S_ISDIR(sb.st_mode));
    assert_int_equal(tide_mkdir_p(path, &st), 0); /* existing is fine */
    snprintf(file, sizeof file, "%s/a/f", root);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(path, sizeof path, "%s/a/f/x", root);
    assert_int_equal(tide_mkdir_p(path, &st), -1);
    assert_non_null(strstr(st.msg, "a/f"));
    assert_int_equal(tide_mkdir_p("", &st), -1);
    tu_rmtree(root);
    free(root);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_fail_and_context), cmocka_unit_test(test_mkdir_p)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
