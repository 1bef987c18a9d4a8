#!/usr/bin/env bash
# Instructions redis-server spends per EVALSHA (callgrind, inclusive cost of evalShaCommand) for
# the decision scripts of one-rule limits, as the library sends them (the assembled files in
# ratelimit-runtime/src/store/redis/lua/): for the sliding window, the seed script (the
# harness's reference), the lean script (decide_sw_batch.lua, a batch of one call, as a lone call
# sends it) and the general one (decide.lua, as a call with a block or a shadow limit sends it);
# for the O(1) algorithms the general script, the lean one (decide_o1_batch.lua, a batch of one),
# and the reference GCRA script (benches/src/gcra_reference.lua). Unlike the harness's µs from
# INFO commandstats, these counts do not move with the machine's load.
#
#     benches/lua_instructions.sh [calls per figure, default 2000]
#
# Needs redis-server, redis-cli, python3 and valgrind. Ten keys are used in turn (a busy
# subject), one rule of 60 s and 10^9 (every call admitted).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-2000}
# A redis-server under callgrind: $dir, $port, $vg.
source benches/redis_under_callgrind.sh

# The scripts as the library sends them: checked in assembled from their parts.
lua=ratelimit-runtime/src/store/redis/lua
# The seed script, as benches/src/redis_load.rs holds it.
sed -n '/^\(pub(crate) \)\?const SEED_SCRIPT: &str = r"$/,/^";$/p' benches/src/redis_load.rs | sed '1d;$d' >"$dir/seed.lua"
# An empty extract would measure an empty script (about 10 000 instructions) without a word.
[ -s "$dir/seed.lua" ] || { echo "SEED_SCRIPT not found in benches/src/redis_load.rs" >&2; exit 1; }

# Sends `n` EVALSHA of `sha` with `args`, one at a time as redis-benchmark -c 1 -r 10 would:
# `__rand_int__` becomes one of ten 12-digit numbers; an argument `pack:FMT:V1,V2,...` becomes
# the bytes of struct.pack(FMT, V1, V2, ...) (decide_sw_batch.lua's packed numbers).
cat >"$dir/send.py" <<'PY'
import random, socket, struct, sys
port, sha, n, args = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4:]
def arg(a, rnd):
    if a.startswith("pack:"):
        _, fmt, values = a.split(":", 2)
        return struct.pack(fmt, *(float(v) for v in values.split(",")))
    return a.replace("__rand_int__", "%012d" % rnd.randrange(10)).encode()
sock = socket.create_connection(("127.0.0.1", port))
replies = sock.makefile("rb")
rnd = random.Random(1)
for _ in range(n):
    parts = [b"EVALSHA", sha.encode()] + [arg(a, rnd) for a in args]
    sock.sendall(b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts))
    line = replies.readline()
    if line.startswith(b"-"):
        sys.exit("error: " + line.decode().strip())
    if line.startswith(b"$") and int(line[1:]) >= 0:
        replies.read(int(line[1:]) + 2)
    elif line.startswith(b"*"):
        for _ in range(int(line[1:])):
            sub = replies.readline()
            if sub.startswith(b"$") and int(sub[1:]) >= 0:
                replies.read(int(sub[1:]) + 2)
PY

measure() { # label script args...
  local label=$1 file=$2; shift 2
  local sha; sha=$(redis-cli -p "$port" script load "$(cat "$file")")
  python3 "$dir/send.py" "$port" "$sha" 200 "$@"
  callgrind_control -z "$vg" >/dev/null 2>&1
  python3 "$dir/send.py" "$port" "$sha" "$N" "$@"
  rm -f "$dir"/cg."$vg".*
  callgrind_control -d "$vg" >/dev/null 2>&1
  sleep 0.5
  local out; out=$(ls -t "$dir"/cg."$vg".* | head -1)
  local ir; ir=$(callgrind_annotate --inclusive=yes "$out" 2>/dev/null | awk '/evalShaCommand/ && !done { gsub(",", "", $1); print $1; done = 1 }')
  printf '%-34s %8d instructions per EVALSHA\n' "$label" $((ir / N))
}

measure "seed script (reference), 1 rule" "$dir/seed.lua" 1 'seed:{__rand_int__}' 1700000000000 member 60000 1000000000
# decide_sw_batch.lua, one call: the call count, the member (16 bytes: here two doubles), now
# (0: TIME), cost, the key count, the rule count, window and count, packed as doubles.
measure "sw: sliding script (decide_sw_batch.lua)" "$lua/decide_sw_batch.lua" 1 'k:{__rand_int__}:sw' 'pack:<ddddddddd:1,1.5,2.5,0,1,1,1,60000000,1000000000'
measure "sw: general script (decide.lua)" "$lua/decide.lua" 1 'k:{__rand_int__}:sw' 0 1 0123456789abcdef d 0 0 0 0 sw 1 0 60000000 1000000000
measure "reference GCRA script" benches/src/gcra_reference.lua 1 'ref:{__rand_int__}' 1000000000 1000000000 60 1
# decide_o1_batch.lua's algorithm numbers: 1 fw, 2 swc, 3 the buckets (they decide alike).
code() { case $1 in fw) echo 1 ;; swc) echo 2 ;; *) echo 3 ;; esac; }
for alg in fw swc tb lb gcra; do
  measure "$alg: general script (decide.lua)" "$lua/decide.lua" 1 "k:{__rand_int__}:$alg" 0 1 0123456789abcdef d 0 0 0 0 "$alg" 1 0 60000000 1000000000
  # decide_o1_batch.lua, one call, packed: the call count, now (0: TIME), cost, the key count,
  # then the limit's algorithm, rule count, burst (0), window and count.
  measure "$alg: lean script (decide_o1_batch.lua)" "$lua/decide_o1_batch.lua" 1 "k:{__rand_int__}:$alg" "pack:<ddddddddd:1,0,1,1,$(code "$alg"),1,0,60000000,1000000000"
done
