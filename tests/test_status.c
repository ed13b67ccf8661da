#include <string.h>

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
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_fail_and_context)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
