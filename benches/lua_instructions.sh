#!/usr/bin/env bash
# Instructions redis-server spends per EVALSHA (callgrind, inclusive cost of evalShaCommand) for
# the decision scripts of one-rule limits: the seed script (the harness's reference for the
# sliding window) and ours for the sliding window (decide_sw.lua); for the O(1) algorithms the
# general script (decide.lua), the lean one (decide_o1.lua), and the reference GCRA script
# (benches/src/gcra_reference.lua). Unlike the
# harness's µs from INFO commandstats, these counts do not move with the machine's load.
#
#     benches/lua_instructions.sh [calls per figure, default 2000]
#
# Needs redis-server, redis-cli, redis-benchmark and valgrind. Ten keys are used in turn (a busy
# subject), one rule of 60 s and 10^9 (every call admitted).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-2000}
for bin in redis-server redis-cli redis-benchmark valgrind callgrind_control callgrind_annotate; do
  command -v "$bin" >/dev/null || { echo "missing: $bin" >&2; exit 1; }
done
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
valgrind --tool=callgrind --callgrind-out-file="$dir/cg.%p" \
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" >"$dir/log" 2>&1 &
vg=$!
trap 'kill $vg 2>/dev/null; wait $vg 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.2; done

# The scripts with their `--@name` lines replaced by lua/name.lua (fragments may hold markers of
# their own), as store/redis.rs assembles them.
store=ratelimit-runtime/src/store
assemble() { # template output
  python3 - "$store" "$1" "$2" <<'PY'
import re, sys
store, template, output = sys.argv[1:]
def splice(path, out):
    for line in open(path):
        marker = re.fullmatch(r"--@([a-z_0-9]+)", line.strip())
        if marker:
            splice(f"{store}/lua/{marker.group(1)}.lua", out)
        else:
            out.append(line.rstrip("\n") + "\n")
out = []
splice(f"{store}/{template}", out)
open(output, "w").write("".join(out))
PY
}
assemble decide.lua "$dir/general.lua"
assemble decide_sw.lua "$dir/sliding.lua"
assemble decide_o1.lua "$dir/o1.lua"
# The seed script, as benches/src/redis_load.rs holds it.
sed -n '/^const SEED_SCRIPT: &str = r"$/,/^";$/p' benches/src/redis_load.rs | sed '1d;$d' >"$dir/seed.lua"

measure() { # label script args...
  local label=$1 file=$2; shift 2
  local sha; sha=$(redis-cli -p "$port" script load "$(cat "$file")")
  redis-benchmark -p "$port" -n 200 -c 1 -r 10 -q EVALSHA "$sha" "$@" >/dev/null 2>&1
  callgrind_control -z "$vg" >/dev/null 2>&1
  redis-benchmark -p "$port" -n "$N" -c 1 -r 10 -q EVALSHA "$sha" "$@" >/dev/null 2>&1
  rm -f "$dir"/cg."$vg".*
  callgrind_control -d "$vg" >/dev/null 2>&1
  sleep 0.5
  local out; out=$(ls -t "$dir"/cg."$vg".* | head -1)
  local ir; ir=$(callgrind_annotate --inclusive=yes "$out" 2>/dev/null | awk '/evalShaCommand/ && !done { gsub(",", "", $1); print $1; done = 1 }')
  printf '%-34s %8d instructions per EVALSHA\n' "$label" $((ir / N))
}

measure "seed script (reference), 1 rule" "$dir/seed.lua" 1 'seed:{__rand_int__}' 1700000000000 member 60000 1000000000
measure "sw: sliding script (decide_sw.lua)" "$dir/sliding.lua" 1 'k:{__rand_int__}:sw' 0 1 0123456789abcdef 60000000 1000000000
measure "reference GCRA script" benches/src/gcra_reference.lua 1 'ref:{__rand_int__}' 1000000000 1000000000 60 1
for alg in fw swc tb lb gcra; do
  measure "$alg: general script (decide.lua)" "$dir/general.lua" 1 "k:{__rand_int__}:$alg" 0 1 0123456789abcdef d 0 0 0 0 "$alg" 1 0 60000000 1000000000
  # decide_o1.lua takes neither the member nor the mode.
  measure "$alg: lean script (decide_o1.lua)" "$dir/o1.lua" 1 "k:{__rand_int__}:$alg" 0 1 "$alg" 1 0 60000000 1000000000
done
