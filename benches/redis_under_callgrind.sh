# Sourced by the benches/lua_*instructions.sh scripts: checks the tools they need, then starts a
# redis-server under callgrind on a free port in a temp dir ($dir, $port; $vg its pid), killed
# and removed when the sourcing script exits, and waits until it answers.
for bin in redis-server redis-cli python3 valgrind callgrind_control callgrind_annotate; do
  command -v "$bin" >/dev/null || { echo "missing: $bin" >&2; exit 1; }
done
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
valgrind --tool=callgrind --callgrind-out-file="$dir/cg.%p" \
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" >"$dir/log" 2>&1 &
vg=$!
trap 'kill $vg 2>/dev/null; wait $vg 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.2; done
