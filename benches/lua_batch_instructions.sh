#!/usr/bin/env bash
# Instructions redis-server spends per decision of decide_o1_batch.lua under load: batches of B
# one-rule GCRA calls (as the library coalesces 64 callers: about 25 a batch), over 1000 keys,
# under callgrind. Prints, per decision: the EVALSHA (what INFO commandstats times), everything
# the server ran but serverCron (receiving the command's arguments too), and the parts of the
# EVALSHA: redis.call's dispatch and commands (scriptCall: lookup, ACL, call(), HGET and HSET
# themselves), and the rest (the Lua VM and its C functions: struct, the arguments of redis.call
# and its replies turned into Lua values, TIME's call aside).
# The window is an hour, so that the key's expiry moves about once per key, as on a busy key
# (under valgrind a minute's grid line would pass during the run).
#
#     benches/lua_batch_instructions.sh [calls per batch, default 32] [batches, default 300]
#     SCRIPT=path/to/decide_o1_batch.lua benches/lua_batch_instructions.sh   # another version
#
# Needs redis-server, redis-cli, python3 and valgrind. Every call is admitted.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-32}
N=${2:-300}
script=${SCRIPT:-ratelimit-runtime/src/store/redis/lua/decide_o1_batch.lua}
# A redis-server under callgrind: $dir, $port, $vg.
source benches/redis_under_callgrind.sh

# Sends `n` batches of `b` calls, one EVALSHA at a time: keys drawn from 1000 subjects, every
# number of the batch packed as the library packs it (store/redis/batch/encode.rs).
cat >"$dir/send.py" <<'PY'
import random, socket, struct, sys
port, sha, n, b = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
sock = socket.create_connection(("127.0.0.1", port))
replies = sock.makefile("rb")
rnd = random.Random(1)
# cost, key count (no time: the server's); GCRA (3), one rule, no burst, an hour, 10^9.
call = struct.pack("<ddddddd", 1, 1, 3, 1, 0, 3600000000, 1000000000)
for _ in range(n):
    keys = [b"rl:g:{10.2.%d}" % rnd.randrange(1000) for _ in range(b)]
    parts = [b"EVALSHA", sha.encode(), b"%d" % b] + keys + [struct.pack("<d", b) + call * b]
    sock.sendall(b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts))
    line = replies.readline()
    if line.startswith(b"-"):
        sys.exit("error: " + line.decode().strip())
    if line.startswith(b"$") and int(line[1:]) >= 0:
        replies.read(int(line[1:]) + 2)
PY

sha=$(redis-cli -p "$port" script load "$(cat "$script")")
python3 "$dir/send.py" "$port" "$sha" 100 "$B"
callgrind_control -z "$vg" >/dev/null 2>&1
python3 "$dir/send.py" "$port" "$sha" "$N" "$B"
rm -f "$dir"/cg."$vg".*
callgrind_control -d "$vg" >/dev/null 2>&1
sleep 0.5
out=$(ls -t "$dir"/cg."$vg".* | head -1)
callgrind_annotate --inclusive=yes "$out" >"$dir/incl" 2>/dev/null
# The first line of `file` naming `fn` (a function of redis-server): its instructions / decision.
per() { awk -v fn="$2" -v d=$((N * B)) '$0 ~ fn && !done { gsub(",", "", $1); printf "%d", $1 / d; done = 1 }' "$1"; }
total=$(per "$dir/incl" 'PROGRAM TOTALS')
cron=$(per "$dir/incl" 'serverCron')
printf 'batches of %d calls: redis-server instructions per decision\n' "$B"
printf '  %-52s %6d\n' "EVALSHA (what INFO commandstats times)" "$(per "$dir/incl" 'evalShaCommand')"
printf '  %-52s %6d\n' "everything but serverCron" $((total - ${cron:-0}))
eval=$(per "$dir/incl" 'evalShaCommand')
calls=$(per "$dir/incl" 'scriptCall')
printf '  %-52s %6d\n' "  the script's own work (EVALSHA less scriptCall)" $((eval - calls))
printf '  %-52s %6d\n' "  redis.call, dispatch and command (scriptCall)" "$calls"
printf '  %-52s %6d\n' "    HGET's command" "$(per "$dir/incl" 'hgetCommand')"
printf '  %-52s %6d\n' "    HSET's command" "$(per "$dir/incl" 'hsetCommand')"
printf '  %-52s %6d\n' "  receiving the arguments (processMultibulkBuffer)" "$(per "$dir/incl" 'processMultibulkBuffer')"
