# tide kv stat|ls|verify|gc over a store that tide bench kvstore wrote: the
# counts, two lost or corrupt shards of a page repaired by verify, three lost
# making it a lost page (verify exits 1) that gc then deletes, expiry judged
# at a later time (--at), bad usage exits 2 with a message.
# Usage: bash sh_kv.sh TIDE_EXE SRC_DIR BIN_DIR
set -u
TIDE=$1
W=$(mktemp -d "${TMPDIR:-/tmp}/sh_kv.XXXXXX")
trap 'rm -rf "$W"' EXIT
FAIL=0
fail() {
    echo "FAIL: $*"
    FAIL=1
}
# expect RC NAME ARGS...: runs tide ARGS, wants exit RC; output in $W/NAME.out
expect() {
    local want=$1 name=$2
    shift 2
    "$TIDE" "$@" >"$W/$name.out" 2>&1
    local rc=$?
    [ $rc -eq "$want" ] || { fail "$name: exit $rc, wanted $want"; cat "$W/$name.out"; }
}
has() {
    grep -qE "$2" "$W/$1.out" || { fail "$1: no line matches '$2'"; cat "$W/$1.out"; }
}

expect 0 bench bench kvstore --dir "$W/s" --pages 6 --page-kib 8
has bench '^erasure code 10\+2, pages of 8192 bytes: encode [0-9.]+ GB/s, decode \(2 data shards lost\) [0-9.]+ GB/s'
has bench '^SSD tier \(1 node, 1\+0\): write [0-9.]+ GB/s .*read [0-9.]+ GB/s'
has bench '^shared store \(12 nodes, 10\+2\): write'
S="$W/s/shared"
expect 0 stat kv stat --store "$S"
has stat '^pages 6 \(chat 6, agent 0\), .* 0 degraded'
# the counters the bench's process persisted: 6 puts and 6 hits per store
has stat '^counters of 1 processes: hits 6, misses 0 \(0 expired, 0 lost\), host-tier hits 0$'
has stat '^puts 6 \(0 failed\), [0-9.]+ kB written, [0-9.]+ kB read, encode [0-9.]+ [kMG]?B/s, decode \(rebuilding shards\) [0-9.]+ [kMG]?B/s$'
expect 0 stat1 kv stat --store "$W/s/ssd" --nodes 1
has stat1 'erasure code 1\+0'
has stat1 '^pages 6 '
has stat1 '^counters of 1 processes: hits 6, '
expect 0 ls kv ls --store "$S"
[ "$(grep -c 'shards=12' "$W/ls.out")" = 6 ] || fail "ls: not 6 pages of 12 shards"
expect 0 ls2 kv ls --store "$S" --limit 2
[ "$(wc -l <"$W/ls2.out")" = 2 ] || fail "ls --limit 2"

# page 1: two shards gone; page 2: one shard gone, one corrupt; page 3: three gone
K1=$(sed -n 1p "$W/ls.out" | cut -c1-32)
K2=$(sed -n 2p "$W/ls.out" | cut -c1-32)
K3=$(sed -n 3p "$W/ls.out" | cut -c1-32)
rm "$S/node00/$K1.0" "$S/node11/$K1.11"
rm "$S/node05/$K2.5"
printf '\x55' | dd of="$S/node07/$K2.7" bs=1 seek=200 conv=notrunc status=none
expect 0 verify kv verify --store "$S"
has verify '^pages 6 ok 4 repaired 2 lost 0$'
expect 0 verify2 kv verify --store "$S"
has verify2 '^pages 6 ok 6 repaired 0 lost 0$'
rm "$S/node01/$K3.1" "$S/node02/$K3.2" "$S/node03/$K3.3"
expect 1 verify3 kv verify --store "$S"
has verify3 'lost 1$'
expect 0 gc kv gc --store "$S"
has gc '^pages 6 deleted 1 '
has gc '^pages 5 '
# chat pages live 7 days: gone when judged 8 days later
expect 0 gc2 kv gc --store "$S" --at $(($(date +%s) + 8 * 86400))
has gc2 'deleted 5'
has gc2 '^pages 0 '
[ -z "$(ls "$S/node04")" ] || fail "gc left files in node04"
# the counters of every process so far (bench, 3 verify, gc, gc2): verify
# rebuilt 4 shards (one of them corrupt), the gcs deleted 5 expired pages;
# 8 days on, the records older than a day were folded into record 0
has gc2 '^counters of [0-9]+ processes: hits 6, '
has gc2 '^puts 6 \(0 failed\)'
has gc2 '^corrupt shards 1, shards repaired 4, evictions 0, expired pages deleted 5$'
[ "$(ls -A "$S/node00" | grep -c '^\.stats\.')" = 2 ] || fail "gc2: not record 0 and gc2's own: $(ls -A "$S/node00")"
[ -e "$S/node00/.stats.0000000000000000" ] || fail "gc2: no folded record"
expect 0 stat3 kv stat --store "$S"
has stat3 '^corrupt shards 1, shards repaired 4, evictions 0, expired pages deleted 5$'

expect 2 bad1 kv frob --store "$S"
has bad1 "unknown action 'frob'"
expect 2 bad2 kv stat
has bad2 'store ROOT is required'
expect 1 bad3 kv stat --store "$S" --ec 10+3
has bad3 'needs 13 node directories, got 12'
expect 2 bad4 kv stat --store "$S" --ec ten
has bad4 "is not K\+M"
expect 1 cuda bench kvstore --backend cuda
has cuda 'CUDA engine path'
[ $FAIL = 0 ] && echo "sh_kv: all passed"
exit $FAIL
