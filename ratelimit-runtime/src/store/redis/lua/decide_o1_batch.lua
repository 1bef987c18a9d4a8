-- Assembled by store/redis/script/assembly.rs from lua/parts/decide_o1_batch.lua, each line
-- `--@name` of a part replaced by a comment naming lua/parts/name.lua, then that part.
-- Edit the parts, not this file, then re-assemble:
--     RATELIMIT_ASSEMBLE_SCRIPTS=1 cargo test -p ratelimit-runtime --lib scripts

-- The decisions of calls whose limits are all O(1) algorithms (fw, swc, tb, lb, gcra; no block,
-- no concurrency or shadow limit: those are decide.lua's), one after another, through the
-- parts decide.lua uses on the same HASH fields, each seeing every earlier one as if each had
-- been a script run of its own: a lone call (a batch of one), or concurrent calls on one
-- connection, coalesced (store/redis/batch.rs). A batch pays once what a run costs whatever
-- it decides: the EVALSHA's dispatch, the reply, and TIME.
--
-- KEYS     every call's keys (one HASH per limit), call after call.
-- ARGV[1] every number of the batch, little-endian doubles (as decide_sw_batch.lua takes its
--          own): the call count (not read here), then per call: cost, its key count m (its m
--          keys follow the previous call's in KEYS), or -1 - m when the caller gives the call's
--          time, which follows (µs; else the call takes the server's TIME, read once for the
--          batch: a time not sent is a number the server neither unpacks nor reads, about 500
--          instructions a decision), then per limit: algorithm (1 fw, 2 swc, 3 tb, lb or gcra,
--          which decide alike), rule count n, burst (0 = count), n x (window µs, or minus its
--          months, count), longest window first. One argument, not one per number: each
--          argument costs the server about 1 000 instructions to receive and each text number a
--          strtod to convert (under callgrind, 5 300 instructions per one-rule decision in all).
-- Returns, for a lone call, 48 bytes (decide.lua's answer without `why`):
-- struct.pack('<dddddd', allowed, limit, rule, remaining, reset_us, now), or for an admission
-- reported by the first limit's first rule the 24 bytes struct.pack('<ddd', -1 - remaining,
-- reset_us, now), as decide_sw_batch.lua answers. For several calls, per call in call order the
-- same without now (40 or 16 bytes), then the server's time (µs, 0 if no call took it): the
-- caller knows the time it gave a call (each double of a reply costs the server a table write
-- and about 20 instructions a byte to pack).

-- Globals are table lookups: locals are cheaper.
local KEYS, ARGV, redis, unpack, string, struct = KEYS, ARGV, redis, unpack, string, struct
-- The C functions every decision calls, looked up once: each lookup of a table's field costs the
-- server about 100 instructions (o1_limit.lua and the algorithms' parts call them by these names).
local rcall, spack, sunpack = redis.call, struct.pack, struct.unpack
local release, peek, statuses = false, false, nil
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
-- The server's clock, once read (server_time.lua), as a number alone (no state here is scored
-- by time as text).
local server_now, server_text, time_text = false, false, false
-- The replies of a batch of several calls, as numbers: packed by one struct.pack at the end, not
-- a string per call joined by table.concat (each string costs the server its interning and each
-- byte two copies). They are kept in A itself, whose numbers they replace once read: a call
-- takes at least 7 numbers and answers at most 5 (and the batch's time is written last), so
-- the k replies so far never reach a number not yet read, and no table is grown for them. A
-- batch of one answers without them.
local k = 0
-- The numbers, unpacked at once: one C call for the batch, not one per call (Lua's C stack takes
-- about 8 000 results; a batch past 4 000 numbers is unpacked one at a time).
local nums = ARGV[1]
local last = (#nums - 8) / 8
-- The format of n doubles, '<' and n times 'd'. Written out for up to 64 numbers (a lone call
-- sends fewer unless it has many limits): a literal costs the server nothing per run, where
-- building it did (string.rep copies a byte at a time, about 30 instructions a byte; with the
-- joins, 4 500 instructions a run, 8% of a lone call). Past 64, 64 at a time.
local f64 = '<dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd'
local function doubles(n)
  if n <= 64 then return string.sub(f64, 1, n + 1) end
  local r = n % 64
  local d64 = string.sub(f64, 2)
  return '<' .. string.rep(d64, (n - r) / 64) .. string.sub(d64, 1, r)
end
local A
if last <= 4000 then
  A = {struct.unpack(doubles(last), nums, 9)}
else
  A = {}
  for i = 1, last do A[i] = struct.unpack('<d', nums, 1 + 8 * i) end
end
local pos, base = 1, 0
-- The expiry's grid of the last limit's longest window (o1_limit.lua).
local grid_w, grid, grid_us = false, 0, 0
while pos <= last do
  local cost, m = A[pos], A[pos + 1]
  local now
  if m < 0 then
    m = -1 - m
    now = A[pos + 2]
    pos = pos + 3
  else
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
    now = server_now
    pos = pos + 2
  end
  -- parts/decision.lua
  -- The call's decision, built rule by rule (verdict.lua merges each rule's verdict into it):
  -- allowed (1/0), the limit and rule it reports (at_g, at_r, 1-based; 0: none yet), the
  -- retry-after, and that rule's remaining (-1: no rule yet) and reset (µs).
  local allowed, at_g, at_r, retry, remaining, reset = 1, 0, 0, 0, -1, 0
  local at = now
  -- The call's limits, over KEYS[base + 1] to KEYS[base + m]: each decided by o1_limit, then,
  -- if every one admits, each one's new state written and its expiry moved.
  -- Per limit: what HSET writes (o1_limit's set) and its new expiry in ms (false: unchanged).
  -- The first limit's in locals (key1, its rule count n1, set1 the state of a one-rule limit),
  -- the others' in tables, as HSET's arguments. Each is set by a statement of its own: Lua
  -- assigns several locals at once through temporaries, an instruction more per value.
  local key1, n1, set1, exp1, sets, exps
  for g = 1, m do
    local key = KEYS[base + g]
    -- No runtime override (see bucket.lua).
    local under = false
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
    if g == 1 then
      key1 = key
      n1 = n
      set1 = set
      exp1 = expiry
    else
      if n == 1 and set then set = {key, '1', set} end
      if not sets then sets, exps = {}, {} end
      sets[g], exps[g] = set, expiry
    end
  end

  if allowed == 1 then
    if n1 == 1 then rcall('HSET', key1, '1', set1) else rcall('HSET', unpack(set1)) end
    if exp1 then rcall('PEXPIREAT', key1, exp1) end
    if m > 1 then
      for g = 2, m do
        rcall('HSET', unpack(sets[g]))
        if exps[g] then rcall('PEXPIREAT', KEYS[base + g], exps[g]) end
      end
    end
  end
  base = base + m

  if allowed == 1 and at_g == 1 and at_r == 1 then
    if pos > last and k == 0 then return struct.pack('<ddd', -1 - remaining, reset, now) end
    A[k + 1] = -1 - remaining
    A[k + 2] = reset
    k = k + 2
  else
    if pos > last and k == 0 then
      return struct.pack('<dddddd', allowed, at_g, at_r, remaining, reset, now)
    end
    A[k + 1], A[k + 2], A[k + 3], A[k + 4], A[k + 5] = allowed, at_g, at_r, remaining, reset
    k = k + 5
  end
end
-- The server's time the calls without their own took (0: none did), once for the batch.
k = k + 1
A[k] = server_now or 0
-- Packed 4 000 at a time at most: Lua's C stack takes about 8 000 values.
if k <= 4000 then return struct.pack(doubles(k), unpack(A, 1, k)) end
local out = {}
for i = 1, k, 4000 do
  local j = i + 3999
  if j > k then j = k end
  out[#out + 1] = struct.pack(doubles(j - i + 1), unpack(A, i, j))
end
return table.concat(out)
