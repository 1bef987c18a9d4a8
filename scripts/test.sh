#!/usr/bin/env bash
# Runs every test of the workspace (`cargo test --workspace --all-features`, extra arguments
# passed on), after installing what the tests need when it is missing: redis-server and
# redis-cli (the suites start their own servers on free 127.0.0.1 ports), faketime (a client with
# a skewed clock), openssl (a private CA for the TLS tests), wrk (the benchmark harness) and curl
# (the docs' transcripts are run with it).
# Installs with apt-get, as root or through passwordless sudo; otherwise stops and says what to
# install. The tests never skip a missing binary: they fail.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
for pair in redis-server:redis-server redis-cli:redis-tools faketime:faketime openssl:openssl wrk:wrk curl:curl; do
  command -v "${pair%%:*}" >/dev/null || missing+=("${pair#*:}")
done

if ((${#missing[@]})); then
  echo "scripts/test.sh: installing what the tests need: ${missing[*]}" >&2
  if ! command -v apt-get >/dev/null; then
    echo "scripts/test.sh: cannot install ${missing[*]}: this system has no apt-get." \
      "Install those packages (or their equivalents) and run this again." >&2
    exit 1
  fi
  sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
      sudo=(sudo)
    else
      echo "scripts/test.sh: cannot install ${missing[*]}: not root, and no passwordless sudo." \
        "Run: sudo apt-get install -y ${missing[*]}  (then this script again), or run it as root." >&2
      exit 1
    fi
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
  # The package starts a system redis on 6379; the tests start their own, on free ports.
  "${sudo[@]}" service redis-server stop >/dev/null 2>&1 || true
fi

if ! command -v cargo >/dev/null; then
  echo "scripts/test.sh: cargo is not installed: install Rust (https://rustup.rs), then run this again." >&2
  exit 1
fi
# The property tests (tests/exact.rs, tests/exact_settle.rs) run their
# fixed seed, and a seed drawn here on every run, printed so that a failure can be replayed
# (tests/support/schedule.rs):
# RATELIMIT_PROPTEST_SEED=<the seed> scripts/test.sh --test exact --test exact_settle
if [ -z "${RATELIMIT_PROPTEST_SEED:-}" ]; then
  RATELIMIT_PROPTEST_SEED=$(od -An -N8 -tx8 /dev/urandom | tr -d ' \n')
fi
export RATELIMIT_PROPTEST_SEED
echo "scripts/test.sh: property tests seed RATELIMIT_PROPTEST_SEED=$RATELIMIT_PROPTEST_SEED" >&2
exec cargo test --workspace --all-features "$@"
