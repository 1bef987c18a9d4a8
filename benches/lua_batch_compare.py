# Compares two versions of decide_o1_batch.lua: the same random batches (1-64 calls of one to
# three limits of fw, swc and GCRA, one to three rules each, bursts, costs, refusals, clocks given
# by the caller) through each, on separate keys of one redis-server; stops at the first reply that
# differs by a byte, then compares every key's stored state and expiry.
#
#     python3 benches/lua_batch_compare.py OLD.lua NEW.lua [seed, default 7] [batches, default 3000]
#     git show main:ratelimit-runtime/src/store/redis/lua/decide_o1_batch.lua > /tmp/old.lua
#
# Every call gives its time. OLD_SENDS_NOW=1: OLD takes the numbers and answers as before
# 2026-11-28's third pass (each call's time first, then cost and key count; a batch's replies
# each with its time), NEW as now (cost, -1 - key count, time; a batch of several answers each
# call without its time, then the server's); NEW's replies are compared in OLD's form.
#
# Needs redis-server (7 or later: PEXPIRETIME).
import os, random, socket, struct, subprocess, sys, time, tempfile
old, new = open(sys.argv[1]).read(), open(sys.argv[2]).read()
probe = socket.socket(); probe.bind(("127.0.0.1", 0)); port = probe.getsockname()[1]; probe.close()
srv = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                        "--appendonly", "no", "--dir", tempfile.gettempdir()], stdout=subprocess.DEVNULL)
try:
    for _ in range(100):
        try:
            sock = socket.create_connection(("127.0.0.1", port)); break
        except OSError:
            time.sleep(0.1)
    rf = sock.makefile("rb")
    def cmd(*parts):
        parts = [p if isinstance(p, bytes) else str(p).encode() for p in parts]
        sock.sendall(b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts))
        return read()
    def read():
        line = rf.readline()
        t, rest = line[:1], line[1:-2]
        if t == b"+": return rest
        if t == b"-": raise Exception(rest.decode())
        if t == b":": return int(rest)
        if t == b"$":
            n = int(rest)
            if n < 0: return None
            d = rf.read(n + 2); return d[:-2]
        if t == b"*":
            n = int(rest); return [read() for _ in range(n)]
    sha_old = cmd("SCRIPT", "LOAD", old).decode(); sha_new = cmd("SCRIPT", "LOAD", new).decode()
    rnd = random.Random(int(sys.argv[3]) if len(sys.argv) > 3 else 7)
    now = int(time.time() * 1e6)
    checked = 0
    for it in range(int(sys.argv[4]) if len(sys.argv) > 4 else 3000):
        b = rnd.choice([1, 1, 2, 5, 32, 64])
        keys = []; nums = [b]; starts = []
        now += rnd.choice([0, 1, 7, 1000, 50_000, 3_000_000])
        for _ in range(b):
            m = rnd.choice([1, 1, 1, 2, 3])
            t, cost = rnd.choice([now, now, now - rnd.randrange(1000)]), rnd.choice([1, 1, 1, 2, 5])
            # Where the call's numbers start, in both layouts.
            starts.append(len(nums))
            nums += [cost, -1 - m, t]
            for g in range(m):
                alg = rnd.choice([3, 3, 3, 1, 2])
                n = rnd.choice([1, 1, 1, 2, 3])
                burst = rnd.choice([0, 0, 0, rnd.randrange(1, 20)])
                nums += [alg, n, burst]
                ws = sorted([rnd.choice([1_000_000, 10_000_000, 60_000_000, 3_600_000_000, 7]) for _ in range(n)], reverse=True)
                if rnd.random() < 0.03 and alg == 1: ws[0] = -1
                for w in ws: nums += [w, rnd.choice([1, 3, 10, 100, 1_000_000_000])]
                keys.append("k%d:%d" % (g, rnd.randrange(30)))
        pay = struct.pack("<%dd" % len(nums), *nums)
        old_nums = list(nums)
        if os.environ.get("OLD_SENDS_NOW") == "1":
            for s in starts:
                cost, m1, t = old_nums[s:s + 3]
                old_nums[s:s + 3] = [t, cost, -1 - m1]
        pay_old = struct.pack("<%dd" % len(old_nums), *old_nums)
        ra = cmd("EVALSHA", sha_old, len(keys), *["a:" + k for k in keys], pay_old)
        rb = cmd("EVALSHA", sha_new, len(keys), *["b:" + k for k in keys], pay)
        if os.environ.get("OLD_SENDS_NOW") == "1" and b > 1:
            # Each call's reply with its time put back (its first value < 0: 2 doubles, else 5).
            assert struct.unpack("<d", rb[-8:])[0] == 0, "no call took the server's time"
            body, out = rb[:-8], b""
            for s in starts:
                n = 16 if struct.unpack("<d", body[:8])[0] < 0 else 40
                out += body[:n] + struct.pack("<d", nums[s + 2]); body = body[n:]
            assert body == b"", (it, rb)
            rb = out
        assert ra == rb, (it, ra, rb)
        checked += b
    # the stored states and expiries equal, key by key
    ka = sorted(cmd("KEYS", "a:*"))
    for k in ka:
        kb = b"b:" + k[2:]
        assert cmd("HGETALL", k) == cmd("HGETALL", kb), k
        assert abs(cmd("PEXPIRETIME", k) - cmd("PEXPIRETIME", kb)) == 0, k
    print("equal: %d calls, %d keys" % (checked, len(ka)))
finally:
    srv.kill()
