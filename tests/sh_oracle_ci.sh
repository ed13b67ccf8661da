#!/bin/bash
# The oracle tests skip when their dependency is missing, except under CI,
# where they fail (tests/testutil.h TU_NEED_DEP, tn_model_setup, and
# sh_tokenizer_oracle.sh): each is run with its dependency root
# (TIDE_TEST_DEPS_ROOT) pointed at an empty directory, without CI (must pass,
# saying it skips) and with CI=true (must fail, saying it is required).
# Usage: sh_oracle_ci.sh TIDE_EXE SRC_DIR BIN_DIR
set -u
SRC=$2
BIN=$3
EMPTY=$(mktemp -d "${TMPDIR:-/tmp}/tide-nodeps-XXXXXX")
trap 'rm -rf "$EMPTY"' EXIT
fails=0
check() { # name command...
    local name=$1
    shift
    out=$(env -u CI -u TIDE_TOKENIZER TIDE_TEST_DEPS_ROOT="$EMPTY" "$@" 2>&1)
    rc=$?
    if [ $rc -ne 0 ] || ! grep -qiE "skip" <<<"$out"; then
        echo "FAIL $name without CI: exit $rc, or no word of skipping"; echo "$out" | tail -5 | sed 's/^/  /'
        fails=$((fails + 1))
    else echo "ok   $name skips without CI"; fi
    out=$(env -u TIDE_TOKENIZER CI=true TIDE_TEST_DEPS_ROOT="$EMPTY" "$@" 2>&1)
    rc=$?
    if [ $rc -eq 0 ] || ! grep -q "required under CI" <<<"$out"; then
        echo "FAIL $name under CI: exit $rc, or no word of it being required"; echo "$out" | tail -5 | sed 's/^/  /'
        fails=$((fails + 1))
    else echo "ok   $name fails under CI"; fi
}
for t in test_engram_norm test_tokenizer_real test_forward_ref test_forward_dspark; do
    check "$t" "$BIN/$t"
done
check sh_tokenizer_oracle bash "$SRC/tests/sh_tokenizer_oracle.sh" "$1" "$SRC" "$BIN"
[ $fails -eq 0 ] && echo "all ok" || echo "$fails failed"
[ $fails -eq 0 ]
