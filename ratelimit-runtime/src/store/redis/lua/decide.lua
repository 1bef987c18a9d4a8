-- Assembled by store/redis/script/assembly.rs from lua/parts/decide.lua, each line
-- `--@name` of a part replaced by a comment naming lua/parts/name.lua, then that part.
-- Edit the parts, not this file, then re-assemble:
--     RATELIMIT_ASSEMBLE_SCRIPTS=1 cargo test -p ratelimit-runtime --lib scripts

-- One atomic decision over every limit of a call.
--
-- KEYS[g]  one key per limit of the call: a ZSET log (sliding window), a HASH (the others), or
--          a ZSET of slots (a concurrency limit); a limit's block is the key `KEYS[g]:blk`
--          (same hash tag, same slot)
-- ARGV[1]  now in µs, or "0" to read the server's TIME (the usual case; tests pin time)
-- ARGV[2]  cost: units this call consumes
-- ARGV[3]  member: a process-unique id for this call (sliding window; unit i > 1 adds ":i"; a
--          concurrency slot)
-- ARGV[4]  mode: "d" decides; "o" decides once the runtime overrides are checked (see
--          override_check.lua); "r" releases what a "d" with the same member and cost admitted
--          (a refund; the end of a call, which frees its slots; on a Redis Cluster, a later slot
--          denied, so earlier slots give the call back); "s<units>" releases as "r" does, the
--          call settled to <units> (decimal): fewer than its cost give the difference back, more
--          take the extra past the limit (debt); "p" peeks (cost 0): reads every rule, writes
--          nothing, and returns {remaining, reset_us} per rule
-- ARGV[5]  "r", "s": when the call was admitted (µs; "0": now): the window its units count in;
--          "d": how many of the keys, at the end, are shadow limits ("0": none). The others
--          decide the call; if they admit it, the shadow limits are decided as a group of their
--          own: the call is recorded in all of them if all have room, else in none of them (their
--          refusal is reported, and starts their blocks). If the others refuse, the shadow limits
--          are not even read.
-- then per KEYS[g]: block µs (0 = none), concurrency (0 = a rate limit), lease µs, algorithm
-- ("cc" for a concurrency limit), rule count n, burst (0 = count), n x (window µs, count),
-- longest window first
--
-- Returns 56 bytes, struct.pack('<ddddddd', allowed, limit, rule, remaining, reset_us, now, why):
-- seven little-endian doubles (every value is an integer below 2^53: exact), one bulk string
-- that the client reads for a fraction of what an array of integers costs it to parse. When
-- allowed, `limit` and `rule` (1-based) name the tightest rule (least remaining) and the
-- retry-after is 0; else they name the denying rule with the longest wait, `remaining` is 0,
-- and `reset_us` is the retry-after: the least whole µs after which the same call passes, for
-- every rule. `now` is the time decided at (a refund finds the call's window by it); `why` says
-- what refused: 0 a rule, 1 a block, 2 a full concurrency limit. The decision is the limits'
-- before the shadow ones; when those would have refused, 80 bytes: three more doubles, the
-- shadow limit (1-based among the shadow limits), its refusing rule and its wait (µs).
-- A denied call records nothing (it may drop entries that have left every window) but the
-- blocks it starts. Keys expire (PEXPIREAT) when their state stops mattering: the sliding
-- window's log when the call's units leave its longest window; the O(1) algorithms' HASH on the
-- grid line (1/64 of the longest window) after it; a block when it ends; slots when the last
-- lease ends; with a pinned `now`, expiry follows the pinned clock. decide_sw_batch.lua and
-- decide_o1_batch.lua decide calls without blocks, slots or shadow limits on the same keys with
-- the same parts.

-- parts/override_check.lua
-- Mode "o" decides as "d" does once every runtime override the caller decides with is the one
-- in force. After the limits' arguments, three per key: its override's key ('' when there is
-- nothing to check), the override's text the caller decides with ('' for none), and the rules
-- of the limit it overrides, as the override's text ('' for none; bucket.lua reads them). When one
-- differs, nothing is decided: the reply is each such key and the text in force ('' for none),
-- for the caller to decide again with them.
if ARGV[4] == 'o' then
  local stale, base = false, #ARGV - 3 * #KEYS
  for g = 1, #KEYS do
    local key = ARGV[base + 3 * g - 2]
    if key ~= '' then
      local in_force = redis.call('GET', key) or ''
      if in_force ~= ARGV[base + 3 * g - 1] then
        stale = stale or {}
        stale[#stale + 1] = key
        stale[#stale + 1] = in_force
      end
    end
  end
  if stale then return stale end
end
local now, cost, member = ARGV[1], ARGV[2], ARGV[3]
-- o1_limit.lua reads its arguments from A.
local A = ARGV
-- Strings are compared before they are converted, and converted by the VM's own coercion where
-- arithmetic needs them (each C call such as tonumber costs far more than a comparison). Numbers
-- given to redis.call go as text made by '%d' (exact below 2^53): the server formats a number
-- with snprintf("%.17g"), about 1 700 instructions more.
local format = string.format
-- The call's time (as text: the score of its units in a sliding window's log).
local now_text, server_now, server_text, time_text = false, false, false, true
if now == '0' then
  -- parts/server_time.lua
  -- The server's clock, read once per run into server_now (µs): the calls of a batch that ask for
  -- it share one reading (false until read). A script that stores now as a score (the sliding
  -- window's ZADD, with time_text set) also gets it as text in server_text. Each converts TIME's
  -- two strings the way that costs it least: with the text, the µs are padded to six digits
  -- (which they have nine times in ten), joined to the seconds and converted once, a conversion
  -- (strtod) costing the server about 1 500 instructions; without, joining would cost about 550
  -- more than converting both strings.
  if not server_now then
    local t = redis.call('TIME')
    if time_text then
      local us = t[2]
      if #us < 6 then us = string.sub('00000', #us) .. us end
      server_text = t[1] .. us
      server_now = server_text + 0
    else
      server_now = t[1] * 1000000 + t[2]
    end
  end
  now, now_text = server_now, server_text
else
  now = now + 0
  now_text = format('%d', now)
end
if cost == '1' then cost = 1 else cost = cost + 0 end
-- parts/decision.lua
-- The call's decision, built rule by rule (verdict.lua merges each rule's verdict into it):
-- allowed (1/0), the limit and rule it reports (at_g, at_r, 1-based; 0: none yet), the
-- retry-after, and that rule's remaining (-1: no rule yet) and reset (µs).
local allowed, at_g, at_r, retry, remaining, reset = 1, 0, 0, 0, -1, 0
-- parts/sliding_memo.lua
-- What sliding_check.lua notes about each sliding-window limit for sliding_commit.lua, once per
-- call: its longest window (µs), which bounds what its log keeps and when it expires, and
-- whether its log was empty (then the commit's ZADD makes the key, and its expiry is set after
-- it). The first limit's in locals, the others' in tables made only for them (a table costs the
-- server about 1 400 instructions).
local longest1, longest, empty1, empty = 0, false, false, false
-- The units in the log of the limit being checked (counted at its first rule, once trimmed).
local card = 0
local mode = ARGV[4]
local release = mode == 'r'
local peek = mode == 'p'
-- A release gives back `cost` units of the call's `est` (all of them: a refund), or takes `more`
-- past them (a settle to more units than the cost).
local est, more = cost, 0
if #mode > 1 then
  release = true
  local actual = string.sub(mode, 2) + 0
  if actual < cost then cost = cost - actual else cost, more = 0, actual - cost end
end
local at, shadow = now, 0
if ARGV[5] ~= '0' then
  if release then at = ARGV[5] + 0 elseif not peek then shadow = ARGV[5] + 0 end
end
-- Peek mode's answer: remaining, reset (µs) per rule, in key and rule order.
local statuses = {}
local unpack = unpack
-- The C functions the algorithms' parts and o1_limit.lua call by these names.
local rcall, spack, sunpack = redis.call, struct.pack, struct.unpack
-- parts/exact.lua
-- Exact integer arithmetic on Lua's doubles. Every value the scripts compute is an integer
-- below 2^53, where doubles are exact. For such x and an integer m > 0, `x % m` and
-- `(x - x % m) / m` are exact too: the rounded quotient x / m errs by less than 1 / m, never
-- enough to cross an integer, so its floor is the true one. A product of two such integers is
-- exact while it stays below 2^53; muldiv handles the others.
--
-- muldiv(a, b, m): floor(a * b / m) and (a * b) mod m, for integers 0 <= a, b with m + b < 2^50
-- and a quotient below 2^53 (in use: a <= 10^9, b and m below 2^46). A product past 2^53 is
-- taken apart by the digits of a in a base chosen so that each step, remainder * base +
-- digit * b, stays below 2^52.
local function muldiv(a, b, m)
  local x = a * b
  if x < 9007199254740992 then
    local r = x % m
    return (x - r) / m, r
  end
  local base = 4503599627370496 / (m + b)
  base = base - base % 1
  local lo = a % base
  local q, r = muldiv((a - lo) / base, b, m)
  x = r * base + lo * b
  local r2 = x % m
  return q * base + (x - r2) / m, r2
end
-- Calendar months' conversions, made when first needed (fixed_window.lua, calendar.lua).
local month_start, month_window

local pos = 6
-- The expiry's grid of the last limit's longest window (o1_limit.lua).
local grid_w, grid, grid_us = false, 0, 0
-- Per limit: true (a sliding window's log), its HSET arguments and new expiry, or its lease
-- (a concurrency limit's slot).
local writes = {}
-- Per limit: the wait of its block, when it blocks the call; whether it is a concurrency limit.
local blocks, slots = {}, {}
-- The blocks the call starts if refused: {limit, refusing rule, length}, in limit order.
local starts = {}
-- The limits that decide, then (once they admit the call) the shadow ones, the decision of
-- the former kept meanwhile.
local enforced = #KEYS - shadow
local first, last, kept = 1, enforced, false
while true do
  for g = first, last do
    local key = KEYS[g]
    local blk, conc, lease = ARGV[pos] + 0, ARGV[pos + 1] + 0, ARGV[pos + 2] + 0
    pos = pos + 3
    if conc > 0 then
      pos = pos + 3
      slots[g] = true
      -- parts/concurrency.lua
      -- One concurrency limit: a ZSET of the calls in flight, each member a call's id scored by the
      -- end of its lease. Slots whose lease has ended (their process died without freeing them) are
      -- dropped; a call passes iff fewer than conc remain. Reads: key, g, conc, lease (µs), now,
      -- member, release, peek, writes and the decision. Admitted: writes[g] = lease (the commit adds
      -- the slot), and the decision is left as it is (a limit on calls in flight has no quota to
      -- report). Refused: the wait is a hint, the time until the first lease ends but at most 100 ms
      -- (a slot frees when a call ends).
      if release then
        redis.call('ZREM', key, member)
      elseif not peek then
        redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
        if redis.call('ZCARD', key) >= conc then
          local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
          local r, left, wait, rst = 1, -1, oldest[2] - now, 0
          if wait > 100000 then wait = 100000 end
          -- parts/verdict.lua
          -- Merges one rule's verdict into the call's decision, as deciding every rule at once would: a
          -- refusal with the longest wait wins, the earlier on ties (waiting it is enough for every
          -- rule); else the tightest rule, the one with the least remaining, the earlier on ties.
          -- Reads: g and r (the limit and rule, 1-based), left (what the rule has left after the call;
          -- < 0: refused), wait (refused: the retry-after), rst (admitted: the reset) and the decision.
          if left < 0 then
            if allowed == 1 or wait > retry then
              allowed, at_g, at_r, retry, remaining, reset = 0, g, r, wait, 0, wait
            end
          elseif allowed == 1 and (remaining < 0 or left < remaining) then
            at_g = g
            at_r = r
            remaining = left
            reset = rst
          end
        else
          writes[g] = lease
        end
      end
    else
      local outer, blocked = false, false
      if blk > 0 and not (peek or release) then
        -- parts/block_check.lua
        -- A limit's block, before its rules. The limit is decided on its own (the decision so far saved
        -- in outer, merged back by block_merge.lua), so that it is known whether its rules refused the
        -- call. Its block, `key:blk`, holds struct.pack('<dd', end µs, refusing rule): while it lasts,
        -- the limit refuses with the rest of the block as its wait, a verdict of that rule. Reads: key,
        -- g, now, blocks and the decision. Sets: outer, blocked.
        outer = {allowed, at_g, at_r, retry, remaining, reset}
        allowed, at_g, at_r, retry, remaining, reset = 1, 0, 0, 0, -1, 0
        local b = redis.call('GET', key .. ':blk')
        if b and #b == 16 then
          local till, r = struct.unpack('<dd', b)
          if till > now then
            blocked = true
            blocks[g] = till - now
            local left, wait, rst = -1, till - now, 0
            -- parts/verdict.lua
            -- Merges one rule's verdict into the call's decision, as deciding every rule at once would: a
            -- refusal with the longest wait wins, the earlier on ties (waiting it is enough for every
            -- rule); else the tightest rule, the one with the least remaining, the earlier on ties.
            -- Reads: g and r (the limit and rule, 1-based), left (what the rule has left after the call;
            -- < 0: refused), wait (refused: the retry-after), rst (admitted: the reset) and the decision.
            if left < 0 then
              if allowed == 1 or wait > retry then
                allowed, at_g, at_r, retry, remaining, reset = 0, g, r, wait, 0, wait
              end
            elseif allowed == 1 and (remaining < 0 or left < remaining) then
              at_g = g
              at_r = r
              remaining = left
              reset = rst
            end
          end
        end
      end
      if ARGV[pos] ~= 'sw' then
        -- Under a runtime override: the rules of the limit it overrides, w and count flat.
        local under = false
        if mode == 'o' then
          local text = ARGV[#ARGV - 3 * #KEYS + 3 * g]
          if text ~= '' then
            under = {}
            for bw, bn in string.gmatch(text, '(%d+):(%d+)') do
              under[#under + 1], under[#under + 2] = bw + 0, bn + 0
            end
          end
        end
        -- parts/o1_limit.lua
        -- One limit of an O(1) algorithm (fw, swc, tb, lb, gcra) over its HASH: reads its rules'
        -- states, runs each rule's algorithm, and leaves what the call would write. Rule r's state is
        -- the field named r (1-based, longest window first), its integers packed as little-endian
        -- doubles by the algorithm's part (bucket.lua, window_counter.lua, fixed_window.lua).
        -- Measured in instructions of redis-server, a number given to redis.call costs the server a
        -- printf (about 4 000 instructions for a time in µs), a field more in HMGET/HSET about 2 500,
        -- and each C function call from Lua about as much as 50 VM instructions: packed states are read
        -- and written as they are; strings become numbers by the VM's coercion (`s + 0`), rounding is
        -- `%`, max and min are comparisons, and a one-rule limit takes no table at all (a table costs
        -- about 1 400 instructions).
        -- Its arguments are A[pos], A[pos + 1], ...: decide.lua's ARGV (text, converted by the VM), or
        -- the numbers decide_o1_batch.lua unpacked (its algorithm a number: 1 fw, 2 swc, 3 the buckets).
        -- Reads: A, key, g, pos (at the limit's algorithm argument), now, at, cost, more, release, peek,
        -- statuses, muldiv and the decision; reads and sets grid_w, grid and grid_us (false, 0, 0 at
        -- first). Leaves pos after the limit's arguments, n (its rule count), set (what HSET writes: for
        -- one rule (n = 1) its packed state, field '1'; for several, HSET's arguments, key first; nil:
        -- nothing to write) and expiry (the key's new expiry in ms, or false: unchanged). A peek appends
        -- remaining and reset (µs) per rule to statuses.
        -- Each is compared as a number first (the batch's case, one comparison), then as text.
        local alg, n, burst = A[pos], A[pos + 1], A[pos + 2]
        if burst == 0 or burst == '0' then burst = false else burst = burst + 0 end
        pos = pos + 3
        local bucket = alg == 3 or alg == 'gcra' or alg == 'tb' or alg == 'lb'
        -- (A comparison of two numbers costs the server a C call: swc is not compared for a bucket.)
        local swc = not bucket and (alg == 2 or alg == 'swc')
        if not (bucket or swc or alg == 1 or alg == 'fw') then
          return redis.error_reply('ratelimit: unknown algorithm ' .. tostring(alg))
        end
        local v
        if n == 1 or n == '1' then
          n = 1
          v = rcall('HGET', key, '1')
        else
          n = n + 0
          local fields = {}
          for r = 1, n do fields[r] = r .. '' end
          v = rcall('HMGET', key, unpack(fields))
        end
        -- The expiry lies on a grid of 1/64 of the longest window (ms): a busy key refreshes it about
        -- 64 times per window, not on every call (a window of calendar months, -months: 31 days a
        -- month). The grid depends on that window alone: it is found again only when the window
        -- differs from the previous limit's (grid_w, grid and its step in µs, grid_us, kept by the
        -- script: a batch's calls mostly share their limits). `was`: when the stored state stops
        -- mattering (false if a rule has none); `newest`: when the new state does.
        if A[pos] ~= grid_w then
          grid_w = A[pos]
          grid = grid_w + 0
          if grid < 0 then grid = -grid * 2678400000000 end
          grid = grid / 64000
          grid = grid - grid % 1
          if grid < 1 then grid = 1 end
          grid_us = grid * 1000
        end
        local set, was, newest = nil, 0, now
        for r = 1, n do
          local w, count = A[pos] + 0, A[pos + 1] + 0
          pos = pos + 2
          local cap = burst or count
          local s = v
          if n > 1 then s = v[r] end
          -- nil until the rule's part sets them: held and state stay nil when there is none (one
          -- instruction for all six, where setting them to false took three more).
          local left, wait, rst, till, held, state
          if bucket then
            -- parts/bucket.lua
            -- One rule of TokenBucket, LeakyBucket or Gcra: the three are one admission rule. The bucket
            -- drains at count / w; a call passes iff level + cost <= cap. Its state is E, the instant the
            -- bucket is empty (GCRA's theoretical arrival time; a token bucket's tokens are cap - level), an
            -- exact fraction e + f / count (integers, 0 <= f < count), stored as struct.pack('<dd', e, f).
            -- With T = w / count = q + rq / count and D = max(E, now) - now: a call passes iff
            -- D + cost * T <= cap * T, i.e. iff ceil((D + cost * T) / T) <= cap, and then
            -- E = now + D + cost * T. Spans are kept relative to now as (µs, numerator over count); an
            -- admitted one is at most cap * T, which the limit's bounds keep under 2^45 µs.
            -- Reads: w, count, cap, now, at (release: when the call was admitted), cost, more (release:
            -- extra units), release, peek,
            -- muldiv, under (the rules of the limit a runtime override overrides, w and count flat, or
            -- false), and the stored state s (a 16-byte string, or false; 32 bytes when written under an
            -- override: e, f and the rule's w and count). Sets: left (remaining after the
            -- call; < 0: refused), wait (refused: the retry-after), rst (the reset: when the bucket is empty
            -- again), till (when the new state stops mattering), held (when the stored one did; left nil
            -- if there is none) and state (the new one, packed; left nil: nothing to write). Each is set by
            -- a statement of its own where it counts: Lua assigns several locals at once through
            -- temporaries, an instruction more per value.
            local rq = w % count
            local q = (w - rq) / count
            local e, f, dI, dF = 0, 0, 0, 0
            -- The new state (e, f), when there is one to write.
            local sE, sF
            -- The rule the state was kept under when it may not be this one (w0 nil: it is): its own
            -- (32 bytes), else the limit's, which an override keeps the keys of. A state of another length
            -- is none. The usual one (16 bytes, no override) is told by one comparison of numbers: each
            -- costs the server a C call.
            local w0, n0
            if s and #s == 16 then
              e, f = sunpack('<dd', s)
              if under and under[2 * r] then w0, n0 = under[2 * r - 1], under[2 * r] end
            elseif s and #s == 32 then
              e, f, w0, n0 = sunpack('<dddd', s)
            else
              s = false
            end
            if s then
              if w0 and (w0 ~= w or n0 ~= count) then
                -- Carried to this rule (algorithm::carry_level): the units in the bucket, u = (D * n0 + f) /
                -- w0 with D = e - now, at most cap + count, stay u units: a span of ceil(u * w) / count µs.
                if e > now or (e == now and f > 0) then
                  local qu, ru = muldiv(n0, e - now, w0)
                  ru = ru + f
                  if ru >= w0 then
                    local x = ru % w0
                    qu, ru = qu + (ru - x) / w0, x
                  end
                  if qu >= cap + count then qu, ru = cap + count, 0 end
                  local sI, sF = muldiv(qu, w, count)
                  local c, cr = muldiv(ru, w, w0)
                  if cr > 0 then c = c + 1 end
                  sF = sF + c
                  local x = sF % count
                  e, f = now + sI + (sF - x) / count, x
                else
                  e, f = now, 0
                end
              end
              held = e
              if f > 0 then held = e + 1 end
              if e >= now then
                dI = e - now
                dF = f
              end
            end
            if cost > cap then
              -- Never fits (the caller refuses such a cost before asking), and was never admitted.
              left, wait, rst, till = -1, w, 0, now
            else
              -- cost * T = cI + cF / count
              local cI, cF = q, rq
              if cost ~= 1 then
                cI, cF = muldiv(cost, rq, count)
                cI = cI + cost * q
              end
              if release and more > 0 then
                -- Extra units (a settle) are poured in now: E' = max(E, now) + more * T, at most
                -- now + cap * T + w (debt drains in at most a window past full), never before E. Past
                -- cap + count units the sum is clamped anyway: clamping first keeps the products small.
                local m = more
                if m > cap + count then m = cap + count end
                local mI, mF = muldiv(m, rq, count)
                local nI, nF = dI + mI + m * q, dF + mF
                if nF >= count then nI, nF = nI + 1, nF - count end
                local bI, bF = muldiv(cap, rq, count)
                bI = bI + cap * q + w
                if nI > bI or (nI == bI and nF > bF) then nI, nF = bI, bF end
                if nI < dI or (nI == dI and nF < dF) then nI, nF = dI, dF end
                till = now + nI
                if nF > 0 then till = till + 1 end
                sE, sF = now + nI, nF
              elseif release then
                -- Give back what this call added: E - cost * T, never before now (a bucket never holds
                -- more than its capacity), and nothing once the bucket is empty or the call's units have
                -- drained.
                -- A full bucket drains in cap * T: the call's units are gone by then, whatever came after.
                local fI, fF = muldiv(cap, rq, count)
                fI = fI + cap * q
                local since = now - at
                local fresh = since < fI or (since == fI and fF > 0)
                if held and fresh and (e > now or (e == now and f > 0)) then
                  e, f = e - cI, f - cF
                  if f < 0 then e, f = e - 1, f + count end
                  if e < now then e, f = now, 0 end
                  sE, sF = e, f
                end
              else
                -- D' = D + cost * T = nI + nF / count
                local nI, nF = dI + cI, dF + cF
                if nF >= count then
                  nI = nI + 1
                  nF = nF - count
                end
                rst = nI
                if nF > 0 then rst = nI + 1 end
                till = now + rst
                left = -1
                -- D' <= cap * T needs nI <= cap * (q + 1): past that (the clock went back) it is refused
                -- without the product, whose quotient then stays below 2^53.
                if nI <= cap * (q + 1) then
                  -- u = ceil(D' / T) = ceil((nI * count + nF) / w): the units in the bucket after the call.
                  local u, ur = muldiv(count, nI, w)
                  ur = ur + nF
                  local extra = ur % w
                  u = u + (ur - extra) / w
                  if extra > 0 then u = u + 1 end
                  left = cap - u
                end
                if left < 0 then
                  -- It passes once D' - cap * T has drained: wait = ceil(D' - cap * T) > 0.
                  local bI, bF = muldiv(cap, rq, count)
                  wait = nI - bI - cap * q
                  if nF > bF then wait = wait + 1 end
                elseif not peek then
                  sE = now + nI
                  sF = nF
                end
              end
            end
            if sE then
              -- Under an override, the state says the rule it was kept under.
              if under then
                state = spack('<dddd', sE, sF, w, count)
              else
                state = spack('<dd', sE, sF)
              end
            end
          elseif swc then
            -- parts/window_counter.lua
            -- One SlidingWindowCounter rule: with cur and prev the counts of the current and the previous
            -- fixed window and e the time into the current one, a call passes iff
            -- prev * (w - e) + (cur + cost) * w <= count * w, i.e. iff
            -- cur + cost + ceil(prev * (w - e) / w) <= count. State: the index of the window counted, its
            -- count and the count of the window before it, struct.pack('<ddd', i, c, p). Reads: w, count,
            -- now, at (release: when the call was admitted), cost, more (release: extra units), release, peek, muldiv, and the stored
            -- state s (a 24-byte string, or false). Sets: left (remaining after the call; < 0: refused),
            -- wait (refused: the retry-after), rst (the reset), till (when the new state stops mattering),
            -- held (when the stored one did; left nil if none), state (the new one, packed; left nil: nothing to
            -- write).
            local e = now % w
            local idx = (now - e) / w
            local cur, prev = 0, 0
            if s and #s == 24 then
              local i, c, p = sunpack('<ddd', s)
              held = (i + 2) * w
              if i == idx then cur, prev = c, p
              elseif i == idx - 1 then prev = c end
              if release then
                -- The call's units are in the window it was admitted in (at), which still weighs while it
                -- is the current or the previous one: stored as i's count, or as the previous count of
                -- the window after it (whatever now is: a refund at a pinned time before the stored
                -- window still finds it there; later, that count weighs nowhere and changing it is moot).
                local ae = at % w
                local ai = (at - ae) / w
                -- Extra units (a settle) count there too, up to twice the count.
                if i == ai and ai >= idx - 1 then
                  c = c - cost
                  if c < 0 then c = 0 end
                  c = c + more
                  if c > 2 * count then c = 2 * count end
                  state = spack('<ddd', i, c, p)
                elseif i == ai + 1 then
                  p = p - cost
                  if p < 0 then p = 0 end
                  p = p + more
                  if p > 2 * count then p = 2 * count end
                  state = spack('<ddd', i, c, p)
                end
              end
            end
            if not release then
              -- The previous window's weight now, rounded up.
              local weight = 0
              if prev > 0 then
                local r
                weight, r = muldiv(prev, w - e, w)
                if r > 0 then weight = weight + 1 end
              end
              left = count - cur - cost - weight
              rst = 0
              if cur + cost > 0 then rst = 2 * w - e elseif prev > 0 then rst = w - e end
              till = now - e + 2 * w
              if left < 0 then
                if cost > count then
                  -- Never fits (the caller refuses such a cost before asking).
                  wait = w
                elseif cur + cost > count then
                  -- Not in this window. In the next one (prev = cur, cur = 0) it passes from the least e'
                  -- with cur * (w - e') <= (count - cost) * w: e' = w - floor((count - cost) * w / cur).
                  wait = 2 * w - e - muldiv(count - cost, w, cur)
                else
                  -- Later in this window: from e' = w - floor((count - cur - cost) * w / prev).
                  wait = w - e - muldiv(count - cur - cost, w, prev)
                end
              elseif not peek then
                state = spack('<ddd', idx, cur + cost, prev)
              end
            end
          else
            -- parts/fixed_window.lua
            -- One FixedWindow rule: windows start at multiples of w since the epoch, or, for w < 0, are -w
            -- calendar months (calendar.lua); a call passes iff the window's count + cost <= count. State:
            -- the index of the window counted and its count, struct.pack('<dd', i, c). Reads: w, count,
            -- now, at (release: when the call was admitted), cost, more (release: extra units), release,
            -- peek, and the stored state s (a 16-byte string, or false). Sets: left (remaining after the
            -- call; < 0: refused), wait (refused: the retry-after), rst (the reset), till (when the new state
            -- stops mattering), held (when the stored one did; left nil if none), state (the new one, packed; left nil:
            -- nothing to write).
            -- A window of months needs the calendar's conversions, made on the run's first such window.
            if w < 0 and not month_window then
              -- parts/calendar.lua
              -- Calendar months in UTC: the fixed windows of a rule counted in months (fixed_window.lua), by
              -- the conversions of algorithm/calendar.rs (a year counted from March, so that the leap day ends
              -- it; 400 years are 146 097 days). Times are µs since the Unix epoch, from 1970 on; every value
              -- is an integer below 2^53 (a time before the year 2255), so every quotient, taken as exact.lua
              -- says (`(a - a % b) / b`), is exact. Months are counted from 1970-01. The quotients are written
              -- out: a Lua function call costs more than the arithmetic it would hold. The two functions are
              -- made on a run's first window of months (fixed_window.lua), into locals the script declares at
              -- its top: made there, the two closures cost every run about 1 300 instructions (2% of a lone
              -- call), and few runs decide a window of months.
              -- The first µs of month m.
              month_start = function(m)
                local mon = m % 12
                local y = 1970 + (m - mon) / 12
                -- January and February belong to the March-based year before.
                if mon < 2 then y = y - 1 end
                local yoe = y % 400
                local mp = (mon + 10) % 12
                local doy = 153 * mp + 2
                local doe = yoe * 365 + (yoe - yoe % 4) / 4 - (yoe - yoe % 100) / 100 + (doy - doy % 5) / 5
                return ((y - yoe) / 400 * 146097 + doe - 719468) * 86400000000
              end
              -- The window of n months holding t: its index (windows of n months counted from 1970-01), its
              -- first µs and the first µs after it. A window of one month is found from the day alone.
              month_window = function(n, t)
                local z = (t - t % 86400000000) / 86400000000 + 719468
                local doe = z % 146097
                local y = (z - doe) / 146097 * 400
                local yoe = doe - (doe - doe % 1460) / 1460 + (doe - doe % 36524) / 36524 - (doe - doe % 146096) / 146096
                yoe = (yoe - yoe % 365) / 365
                y = y + yoe
                local doy = doe - (365 * yoe + (yoe - yoe % 4) / 4 - (yoe - yoe % 100) / 100)
                local mp = 5 * doy + 2
                mp = (mp - mp % 153) / 153
                local m
                if mp < 10 then m = (y - 1970) * 12 + mp + 2 else m = (y - 1969) * 12 + mp - 10 end
                if n == 1 then
                  -- The month's first day, and its length: from one month start to the next in the
                  -- March-based year, but February's (the year's last month) by the leap rule.
                  local before = 153 * mp + 2
                  before = (before - before % 5) / 5
                  local first = z - 719468 - (doy - before)
                  local length
                  if mp == 11 then
                    local cy = y + 1
                    length = 28
                    if cy % 4 == 0 and (cy % 100 ~= 0 or cy % 400 == 0) then length = 29 end
                  else
                    length = 153 * mp + 155
                    length = (length - length % 5) / 5 - before
                  end
                  return m, first * 86400000000, (first + length) * 86400000000
                end
                m = m - m % n
                return m / n, month_start(m), month_start(m + n)
              end
            end
            local idx, start, stop
            if w > 0 then
              start = now - now % w
              idx, stop = start / w, start + w
            else
              idx, start, stop = month_window(-w, now)
            end
            local cur, same = 0, false
            if s and #s == 16 then
              local i, c = sunpack('<dd', s)
              if i == idx then
                cur, same, held = c, true, stop
              elseif w > 0 then
                held = (i + 1) * w
              else
                held = month_start((i + 1) * -w)
              end
            end
            if release then
              -- The call's units count only in the window it was admitted in (at), while it lasts; extra
              -- units (a settle) count there too, up to twice the count.
              local ai
              if w > 0 then ai = (at - at % w) / w else ai = month_window(-w, at) end
              if same and ai == idx and (more > 0 or cost > 0) then
                cur = cur - cost
                if cur < 0 then cur = 0 end
                cur = cur + more
                if cur > 2 * count then cur = 2 * count end
                state = spack('<dd', idx, cur)
              end
            else
              left = count - cur - cost
              -- A cost over the count never fits (the caller refuses it before asking).
              wait = stop - now
              if cost > count then wait = stop - start end
              -- The reset: the window's end (a peek of an empty window: 0).
              rst = stop - now
              if peek and cur == 0 then rst = 0 end
              till = stop
              if left >= 0 and not peek then state = spack('<dd', idx, cur + cost) end
            end
          end
          if not held then was = false elseif was and held > was then was = held end
          if peek then
            if left < 0 then left = 0 end
            statuses[#statuses + 1] = left
            statuses[#statuses + 1] = rst
          else
            if not release then
              -- parts/verdict.lua
              -- Merges one rule's verdict into the call's decision, as deciding every rule at once would: a
              -- refusal with the longest wait wins, the earlier on ties (waiting it is enough for every
              -- rule); else the tightest rule, the one with the least remaining, the earlier on ties.
              -- Reads: g and r (the limit and rule, 1-based), left (what the rule has left after the call;
              -- < 0: refused), wait (refused: the retry-after), rst (admitted: the reset) and the decision.
              if left < 0 then
                if allowed == 1 or wait > retry then
                  allowed, at_g, at_r, retry, remaining, reset = 0, g, r, wait, 0, wait
                end
              elseif allowed == 1 and (remaining < 0 or left < remaining) then
                at_g = g
                at_r = r
                remaining = left
                reset = rst
              end
            end
            if till and till > newest then newest = till end
            if state then
              if n == 1 then
                set = state
              else
                if not set then set = {key} end
                local m = #set
                set[m + 1], set[m + 2] = r .. '', state
              end
            end
          end
        end
        local expiry = false
        -- A release moves the expiry only when extra units filled a bucket past its stored state.
        if not peek and (newest > now or not release) then
          -- The grid line after the instant (ms, rounded up) the new state stops mattering; unchanged
          -- when the stored state's line is no earlier (a release only lowers the stored state). For
          -- integers, floor(ceil(t / 1000) / grid) = floor((t + 999) / (1000 * grid)): the line is
          -- found in µs with one `%` (the expiry cost 2 200 instructions a decision in ms). The new
          -- line, a multiple of grid_us, is later than the stored one (the last multiple at or before
          -- was + 999) iff it is later than was + 999: the stored line is not computed.
          local line = newest + 999
          line = line - line % grid_us
          if not was or line > was + 999 then expiry = line / 1000 + grid end
        end
        if n == 1 and set then set = {key, '1', set} end
        if release then
          if set then redis.call('HSET', unpack(set)) end
          if expiry then redis.call('PEXPIREAT', key, expiry) end
        elseif not peek then
          writes[g] = {set, expiry}
        end
      else
        local n = ARGV[pos + 1] + 0
        pos = pos + 3
        if peek then
          -- parts/sliding_peek.lua
          -- A peek at a sliding-window limit: what is in each window and when its newest unit leaves it,
          -- nothing trimmed. Reads: key, n (its rule count), pos (at its first window), now. Appends
          -- remaining and reset (µs) per rule to statuses; leaves pos after the limit's arguments.
          local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
          for r = 1, n do
            local w, count = ARGV[pos] + 0, ARGV[pos + 1] + 0
            pos = pos + 2
            local used = redis.call('ZCOUNT', key, now - w + 1, '+inf')
            local rst = 0
            if used > 0 then rst = newest[2] + w - now end
            local left = count - used
            if left < 0 then left = 0 end
            statuses[#statuses + 1] = left
            statuses[#statuses + 1] = rst
          end
        elseif release then
          -- parts/sliding_release.lua
          -- A release at a sliding-window limit. Fewer units (a refund, a settle below the cost): the
          -- call's last `cost` entries go, if they have not left the log (ZREM of a missing member is a
          -- no-op). More (a settle above it): the extra units are recorded at the call's admission time,
          -- with members after its own, while that time is inside the longest window (in a log that may be
          -- empty or gone: the units count all the same); past the largest
          -- count + 1 of them they refuse nothing more (all leave together), so no more are written.
          -- Reads: key, n (its rule count), pos (at its first window, the longest), now, at, est (the
          -- call's cost), cost, more, member, format. Leaves pos after the limit's arguments.
          local l = ARGV[pos] + 0
          local gone = 0
          if more > 0 then
            if at + l > now then
              local m = 0
              for r = 1, n do
                local c = ARGV[pos + 2 * r - 1] + 0
                if c > m then m = c end
              end
              m = m + 1
              if more < m then m = more end
              local at_text = format('%d', at)
              for i = est + 1, est + m do redis.call('ZADD', key, at_text, member .. ':' .. i) end
              gone = m
            end
          elseif est == 1 then
            if cost == 1 then gone = redis.call('ZREM', key, member) end
          else
            for i = est - cost + 1, est do gone = gone + redis.call('ZREM', key, member .. ':' .. i) end
          end
          pos = pos + 2 * n
          -- The units that set the key's expiry may be these (or, added, they may need it later): it
          -- follows the newest unit left, two windows after it, as an admission would have set it (see
          -- sliding_commit.lua).
          if gone > 0 then
            local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
            if newest[2] then
              local ms = newest[2] + 2 * l + 1999
              redis.call('PEXPIREAT', key, format('%d', (ms - ms % 1000) / 1000))
            end
          end
        else
          for r = 1, n do
            local w, count = ARGV[pos] + 0, ARGV[pos + 1] + 0
            pos = pos + 2
            -- parts/sliding_check.lua
            -- One rule of a sliding-window limit, in the loop over the limit's rules (longest window
            -- first): what the call would leave in the window. Reads: key, g, r, w (µs), count, now, cost,
            -- format, card and the memo (sliding_memo.lua). Sets: left, wait and rst, the rule's verdict
            -- (see verdict.lua).
            -- What is in this window (scores are whole µs, so the units after now - w are those counted).
            -- At the longest window, the first rule, the units at or before its start count in no window
            -- of this limit: they are trimmed first, whatever the decision, and the log's size (ZCARD,
            -- O(1)) is then the window's count. Trimming first saves a busy log a count on every call:
            -- counting before the window and trimming it after an admission took one more command. At a
            -- shorter window, the units at or before its start are counted from -inf, which ends near the
            -- log's oldest unit (a count of the window itself, up to +inf, walks the skip list down to its
            -- newest unit: about 0.4 µs more per rule on a log of 700 units).
            local before = 0
            if r == 1 then
              local gone = redis.call('ZREMRANGEBYSCORE', key, '-inf', format('%d', now - w))
              card = redis.call('ZCARD', key)
              -- Units left the log: its expiry moves to two windows after now (in whole ms, rounded up, and
              -- one more), refused or not. Every unit still counts when its key expires: the move before
              -- this one, at m, set m + 2L; a unit added at t needs t + L, so only units added after m + L
              -- need a move, and the first call after m + L finds the units that were in the log at m
              -- leaving it (every trim moves the expiry, so none left unseen), or the log empty, and the
              -- commit of an admission into an empty log moves it (sliding_commit.lua). A refund that
              -- removes units moves it to two windows after the newest unit left (sliding_release.lua). A
              -- busy key whose units leave on every call moves it on every call; one whose units stay in
              -- the window (a long window) about once per window. An emptied log is a deleted key: nothing
              -- to move.
              if gone > 0 and card > 0 then
                local ms = now + 2 * w + 1999
                redis.call('PEXPIREAT', key, format('%d', (ms - ms % 1000) / 1000))
              end
              if g == 1 then
                longest1, empty1 = w, card == 0
              else
                if not longest then longest, empty = {}, {} end
                longest[g], empty[g] = w, card == 0
              end
            else
              before = redis.call('ZCOUNT', key, '-inf', format('%d', now - w))
            end
            local used = card - before
            -- The rule's quota is whole again when this call's units leave it: the reset is a window.
            local left, wait, rst = count - used - cost, w, w
            if left < 0 and cost <= count then
              -- The oldest -left units in this window must leave before the call fits: it fits when the
              -- (-left)-th oldest leaves. (A cost above the count never fits: wait a whole window.)
              local e = redis.call('ZRANGEBYSCORE', key, format('%d', now - w + 1), '+inf', 'WITHSCORES', 'LIMIT', -left - 1, 1)
              wait = tonumber(e[2]) + w - now
            end
            -- parts/verdict.lua
            -- Merges one rule's verdict into the call's decision, as deciding every rule at once would: a
            -- refusal with the longest wait wins, the earlier on ties (waiting it is enough for every
            -- rule); else the tightest rule, the one with the least remaining, the earlier on ties.
            -- Reads: g and r (the limit and rule, 1-based), left (what the rule has left after the call;
            -- < 0: refused), wait (refused: the retry-after), rst (admitted: the reset) and the decision.
            if left < 0 then
              if allowed == 1 or wait > retry then
                allowed, at_g, at_r, retry, remaining, reset = 0, g, r, wait, 0, wait
              end
            elseif allowed == 1 and (remaining < 0 or left < remaining) then
              at_g = g
              at_r = r
              remaining = left
              reset = rst
            end
          end
          writes[g] = true
        end
      end
      if outer then
        -- parts/block_merge.lua
        -- After a limit with a block: if its rules refused the call (and no block did), its block starts
        -- should the call be refused (block_start.lua). Then the limit's decision is merged into the one
        -- before it (outer) as one verdict, which is what merging its rules' verdicts into outer one by
        -- one would have given. Reads: g, blk, outer, blocked, starts and the decision.
        if allowed == 0 and not blocked then starts[#starts + 1] = {g, at_r, blk} end
        local r, left, wait, rst = at_r, remaining, retry, reset
        if allowed == 0 then left = -1 end
        allowed, at_g, at_r, retry, remaining, reset = unpack(outer)
        -- parts/verdict.lua
        -- Merges one rule's verdict into the call's decision, as deciding every rule at once would: a
        -- refusal with the longest wait wins, the earlier on ties (waiting it is enough for every
        -- rule); else the tightest rule, the one with the least remaining, the earlier on ties.
        -- Reads: g and r (the limit and rule, 1-based), left (what the rule has left after the call;
        -- < 0: refused), wait (refused: the retry-after), rst (admitted: the reset) and the decision.
        if left < 0 then
          if allowed == 1 or wait > retry then
            allowed, at_g, at_r, retry, remaining, reset = 0, g, r, wait, 0, wait
          end
        elseif allowed == 1 and (remaining < 0 or left < remaining) then
          at_g = g
          at_r = r
          remaining = left
          reset = rst
        end
      end
    end
  end
  if last == #KEYS or allowed == 0 then break end
  kept = {allowed, at_g, at_r, retry, remaining, reset}
  allowed, at_g, at_r, retry, remaining, reset = 1, 0, 0, 0, -1, 0
  first, last = enforced + 1, #KEYS
end

if peek then return statuses end
if release then return struct.pack('<ddddddd', 1, 0, 0, 0, 0, now, 0) end

if allowed == 0 then
  -- parts/block_start.lua
  -- A refused call starts the blocks of the limits whose rules refused it: each refuses the
  -- subject for its whole length from now, a verdict of the rule that started it, so the call's
  -- retry-after is the longest wait. A limit already blocked starts nothing: refusals during a
  -- block never extend it. Reads: starts, blocks, now and the decision (a refusal).
  for i = 1, #starts do
    local g, r, blk = starts[i][1], starts[i][2], starts[i][3]
    local till = now + blk
    redis.call('SET', KEYS[g] .. ':blk', struct.pack('<dd', till, r), 'PXAT', math.ceil(till / 1000) + 1)
    blocks[g] = blk
    local left, wait, rst = -1, blk, 0
    -- parts/verdict.lua
    -- Merges one rule's verdict into the call's decision, as deciding every rule at once would: a
    -- refusal with the longest wait wins, the earlier on ties (waiting it is enough for every
    -- rule); else the tightest rule, the one with the least remaining, the earlier on ties.
    -- Reads: g and r (the limit and rule, 1-based), left (what the rule has left after the call;
    -- < 0: refused), wait (refused: the retry-after), rst (admitted: the reset) and the decision.
    if left < 0 then
      if allowed == 1 or wait > retry then
        allowed, at_g, at_r, retry, remaining, reset = 0, g, r, wait, 0, wait
      end
    elseif allowed == 1 and (remaining < 0 or left < remaining) then
      at_g = g
      at_r = r
      remaining = left
      reset = rst
    end
  end
end
-- Shadow limits that would refuse record nothing; the call stands as the others decided it.
local commit, refused_in_shadow = #KEYS, false
if kept then
  if allowed == 0 then
    refused_in_shadow = {at_g - enforced, at_r, retry}
    commit = enforced
  end
  allowed, at_g, at_r, retry, remaining, reset = unpack(kept)
end

if allowed == 1 then
  for g = 1, commit do
    local key, wr = KEYS[g], writes[g]
    if wr == true then
      -- parts/sliding_commit.lua
      -- One sliding-window limit's commit, once the call is admitted: a unique member per unit comes
      -- (sliding_check.lua trimmed what left the longest window, and moved the key's expiry if any
      -- did). Reads: key, g, now, now_text, cost, member, format and the memo (sliding_memo.lua).
      if cost == 1 then
        redis.call('ZADD', key, now_text, member)
      else
        for i = 1, cost do redis.call('ZADD', key, now_text, member .. ':' .. i) end
      end
      -- Into an empty log, the ZADD made the key: its expiry is two windows after now, as a trim sets
      -- it (the reasons are sliding_check.lua's).
      local l, fresh = longest1, empty1
      if g > 1 then l, fresh = longest[g], empty[g] end
      if fresh then
        local ms = now + 2 * l + 1999
        redis.call('PEXPIREAT', key, format('%d', (ms - ms % 1000) / 1000))
      end
    elseif type(wr) == 'number' then
      redis.call('ZADD', key, now + wr, member)
      redis.call('PEXPIREAT', key, math.ceil((now + wr) / 1000) + 1)
    elseif wr then
      redis.call('HSET', unpack(wr[1]))
      if wr[2] then redis.call('PEXPIREAT', key, wr[2]) end
    end
  end
end

local why = 0
if allowed == 0 then
  if slots[at_g] then why = 2 elseif blocks[at_g] == retry then why = 1 end
end
if refused_in_shadow then
  local sg, sr, sw = unpack(refused_in_shadow)
  return struct.pack('<dddddddddd', allowed, at_g, at_r, remaining, reset, now, why, sg, sr, sw)
end
return struct.pack('<ddddddd', allowed, at_g, at_r, remaining, reset, now, why)
