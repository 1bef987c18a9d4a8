-- The decision when every limit of a call is an O(1) algorithm (fw, swc, tb, lb, gcra), decide
-- mode only: the same arguments, answer and stored HASH fields as decide.lua (whose release mode,
-- and any other script, keep working on the same keys), with less work per call. Measured in
-- instructions of redis-server, each C function call from Lua (tonumber, math.*, unpack) costs
-- about as much as 50 VM instructions, and each redis.call as hundreds; so this script:
--  * converts strings with `s + 0` (the VM's own coercion, as tonumber) and rounds with `%`:
--    `x - x % 1` is floor(x) and `x + (-x) % 1` is ceil(x), both exact in doubles, so the
--    numbers are decide.lua's bit for bit; max and min are comparisons;
--  * builds no closures or tables of field names: literal names for one-rule limits, HGET for
--    GCRA's single field, each limit's writes in one table constructor;
--  * refreshes a key's expiry only when it moves. The window counters' expiry is the end of the
--    windows the stored indices name (unchanged while every rule stays in its window); the
--    buckets' and GCRA's lies on a grid of 1/64 of the longest window (decide.lua rounds up to
--    the same grid), so a busy key refreshes it about 64 times per window, not on every call.
-- The arithmetic is decide.lua's, operation for operation (and src/algorithm.rs'): the
-- differential tests hold all three to the same decisions.
--
-- KEYS[g]  one HASH per limit; ARGV as decide.lua: now (0 = TIME), cost, member (unused), mode
-- (unused: always "d"), then per limit: algorithm, rule count n, burst (0 = count), n x (window
-- µs, count), longest window first. Returns decide.lua's 40 bytes: struct.pack('<ddddd',
-- allowed, limit, rule, remaining, reset_us).

-- Globals are table lookups: locals are cheaper.
local KEYS, ARGV, redis = KEYS, ARGV, redis
local now = ARGV[1]
if now == '0' then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
else
  now = now + 0
end
local cost = 1
if ARGV[2] ~= '1' then cost = ARGV[2] + 0 end
local allowed, at_g, at_r, retry, remaining, reset = 1, 0, 0, 0, -1, 0
-- Per limit: its HSET arguments (key first) and its new expiry in ms (false: unchanged). The
-- first limit's in locals, the others' in tables.
local set1, exp1, sets, exps

local pos = 5
for g = 1, #KEYS do
  local key = KEYS[g]
  local alg = ARGV[pos]
  local n = 1
  if ARGV[pos + 1] ~= '1' then n = ARGV[pos + 1] + 0 end
  local burst = ARGV[pos + 2]
  if burst == '0' then burst = false else burst = burst + 0 end
  pos = pos + 3
  local set
  if n > 1 then set = {key} end
  -- How long the new state matters (µs from now); until when the stored state did (µs; false
  -- when a rule has none); the longest window (µs); the new expiry (ms; false: unchanged).
  local ttl, was, w1, e = 0, 0, 0, nil

  if alg == 'gcra' then
    local v
    if n == 1 then v = redis.call('HGET', key, '1a')
    else
      local f = {}
      for r = 1, n do f[r] = r .. 'a' end
      v = redis.call('HMGET', key, unpack(f))
    end
    for r = 1, n do
      local w, count = ARGV[pos] + 0, ARGV[pos + 1] + 0
      pos = pos + 2
      if r == 1 then w1 = w end
      local cap = burst or count
      local s = v
      if n > 1 then s = v[r] end
      local t = w / count
      local tat = now
      if s then
        s = s + 0
        if s > now then tat = s end
        if was and s > was then was = s end
      else
        was = false
      end
      local new_tat = tat + cost * t
      local tau = cap * t
      local left = (tau - (new_tat - now)) / t
      left = left - left % 1
      if left < 0 then
        local wait = w
        if cost <= cap then
          wait = new_tat - tau - now
          wait = wait + (-wait) % 1
        end
        if allowed == 1 or wait > retry then allowed, at_g, at_r, retry, remaining, reset = 0, g, r, wait, 0, wait end
      elseif allowed == 1 and (remaining < 0 or left < remaining) then
        local rs = new_tat - now
        at_g, at_r, remaining, reset = g, r, left, rs + (-rs) % 1
      end
      if n == 1 then set = {key, '1a', new_tat} else set[2 * r], set[2 * r + 1] = r .. 'a', new_tat end
      if new_tat - now > ttl then ttl = new_tat - now end
    end

  elseif alg == 'fw' or alg == 'swc' then
    -- The window counters: {window index, count in it (, the previous window's count)}.
    local swc = alg == 'swc'
    local k = 2
    local v
    if swc then
      k = 3
      if n == 1 then v = redis.call('HMGET', key, '1i', '1c', '1p')
      else
        local f = {}
        for r = 1, n do f[3 * r - 2], f[3 * r - 1], f[3 * r] = r .. 'i', r .. 'c', r .. 'p' end
        v = redis.call('HMGET', key, unpack(f))
      end
    elseif n == 1 then v = redis.call('HMGET', key, '1i', '1c')
    else
      local f = {}
      for r = 1, n do f[2 * r - 1], f[2 * r] = r .. 'i', r .. 'c' end
      v = redis.call('HMGET', key, unpack(f))
    end
    local moved = false
    for r = 1, n do
      local w, count = ARGV[pos] + 0, ARGV[pos + 1] + 0
      pos = pos + 2
      local b = (r - 1) * k
      local idx = now / w
      idx = idx - idx % 1
      local i = v[b + 1]
      if i then i = i + 0 end
      local left, wait, rule_ttl
      local cur, prev = 0, 0
      if swc then
        if i == idx then cur, prev = v[b + 2] + 0, v[b + 3] + 0
        elseif i == idx - 1 then prev = v[b + 2] + 0 end
        local elapsed = now - idx * w
        local est = prev * (w - elapsed) / w + cur
        left = count - est - cost
        left = left - left % 1
        wait = idx * w + w - now
        if count - est - cost < 0 then
          local c
          if cost > count then
            wait = w
          elseif cur + cost > count then
            c = w * (1 - (count - cost) / (cur + 0))
            wait = idx * w + w + (c + (-c) % 1) - now
          else
            c = w * (1 - (count - cost - cur) / prev)
            wait = idx * w + (c + (-c) % 1) - now
          end
        end
        rule_ttl = idx * w + 2 * w - now
      else
        if i == idx then cur = v[b + 2] + 0 end
        left = count - cur - cost
        wait = (idx + 1) * w - now
        if left < 0 and cost > count then wait = w end
        rule_ttl = (idx + 1) * w - now
      end
      if rule_ttl > ttl then ttl = rule_ttl end
      if left < 0 then
        if allowed == 1 or wait > retry then allowed, at_g, at_r, retry, remaining, reset = 0, g, r, wait, 0, wait end
      elseif allowed == 1 and (remaining < 0 or left < remaining) then
        at_g, at_r, remaining, reset = g, r, left, wait
      end
      -- A rule still in the window its stored index names keeps it (and the previous window's
      -- count), and the key keeps the expiry that the call which wrote the index gave it.
      if i ~= idx then moved = true end
      if n == 1 then
        if i == idx then set = {key, '1c', cur + cost}
        elseif swc then set = {key, '1i', idx, '1c', cur + cost, '1p', prev}
        else set = {key, '1i', idx, '1c', cur + cost} end
      else
        local m = #set
        set[m + 1], set[m + 2] = r .. 'c', cur + cost
        if i ~= idx then
          set[m + 3], set[m + 4] = r .. 'i', idx
          if swc then set[m + 5], set[m + 6] = r .. 'p', prev end
        end
      end
    end
    if moved then
      e = (now + ttl) / 1000
      e = e + (-e) % 1 + 1
    else
      e = false
    end

  elseif alg == 'tb' or alg == 'lb' then
    -- The buckets: {tokens (tb) or level (lb), when}.
    local tb = alg == 'tb'
    local v
    if n == 1 then
      if tb then v = redis.call('HMGET', key, '1t', '1s') else v = redis.call('HMGET', key, '1l', '1s') end
    else
      local a = 'l'
      if tb then a = 't' end
      local f = {}
      for r = 1, n do f[2 * r - 1], f[2 * r] = r .. a, r .. 's' end
      v = redis.call('HMGET', key, unpack(f))
    end
    for r = 1, n do
      local w, count = ARGV[pos] + 0, ARGV[pos + 1] + 0
      pos = pos + 2
      if r == 1 then w1 = w end
      local cap = burst or count
      local s = v[2 * r - 1]
      local at
      if s then
        s, at = s + 0, v[2 * r] + 0
      else
        was = false
      end
      local left, wait, value, rule_ttl, c
      if tb then
        local tokens = cap
        if s then
          tokens = s + (now - at) * count / w
          if tokens > cap then tokens = cap end
          c = (cap - s) * w / count
        end
        value = tokens - cost
        if value < 0 then
          if cost > cap then wait = w else
            wait = (cost - tokens) * w / count
            wait = wait + (-wait) % 1
          end
        else
          wait = (cap - value) * w / count
          wait = wait + (-wait) % 1
        end
        left = value - value % 1
        rule_ttl = (cap - value) * w / count
      else
        local level = 0
        if s then
          level = s - (now - at) * count / w
          if not (level > 0) then level = 0 end
          c = s * w / count
        end
        value = level + cost
        local room = cap - level - cost
        if room < 0 then
          if cost > cap then wait = w else
            wait = (level + cost - cap) * w / count
            wait = wait + (-wait) % 1
          end
        else
          wait = value * w / count
          wait = wait + (-wait) % 1
        end
        left = room - room % 1
        rule_ttl = value * w / count
      end
      rule_ttl = rule_ttl + (-rule_ttl) % 1
      if rule_ttl > ttl then ttl = rule_ttl end
      if was then
        c = at + (c + (-c) % 1)
        if c > was then was = c end
      end
      if left < 0 then
        if allowed == 1 or wait > retry then allowed, at_g, at_r, retry, remaining, reset = 0, g, r, wait, 0, wait end
      elseif allowed == 1 and (remaining < 0 or left < remaining) then
        at_g, at_r, remaining, reset = g, r, left, wait
      end
      if n == 1 then
        if tb then set = {key, '1t', value, '1s', now} else set = {key, '1l', value, '1s', now} end
      else
        local m = #set
        if tb then set[m + 1] = r .. 't' else set[m + 1] = r .. 'l' end
        set[m + 2], set[m + 3], set[m + 4] = value, r .. 's', now
      end
    end

  else
    return redis.error_reply('ratelimit: not an O(1) algorithm: ' .. tostring(alg))
  end

  if e == nil then
    -- The buckets and GCRA: the grid line after the state stops mattering, as decide.lua
    -- computes it: (floor(ceil(µs / 1000) / grid) + 1) * grid. The stored state was written
    -- with an expiry at least the grid line after `was` (a release only lowers `was`); 1 µs
    -- less absorbs the rounding of `now + ttl` in the call that wrote it.
    local grid = w1 / 64000
    grid = grid - grid % 1
    if grid < 1 then grid = 1 end
    e = (now + ttl) / 1000
    e = (e + (-e) % 1) / grid
    e = (e - e % 1 + 1) * grid
    if was then
      local x = (was - 1) / 1000
      x = (x + (-x) % 1) / grid
      if e <= (x - x % 1 + 1) * grid then e = false end
    end
  end
  if g == 1 then
    set1, exp1 = set, e
  else
    if not sets then sets, exps = {}, {} end
    sets[g], exps[g] = set, e
  end
end

if allowed == 1 then
  redis.call('HSET', unpack(set1))
  if exp1 then redis.call('PEXPIREAT', KEYS[1], exp1) end
  for g = 2, #KEYS do
    redis.call('HSET', unpack(sets[g]))
    if exps[g] then redis.call('PEXPIREAT', KEYS[g], exps[g]) end
  end
end

return struct.pack('<ddddd', allowed, at_g, at_r, remaining, reset)
