-- One atomic decision over every limit of a call (spec §4, §6). Assembled by store/redis.rs:
-- each `--@name` line is replaced by lua/name.lua.
--
-- KEYS[g]  one key per limit of the call: a ZSET log (sliding window) or a HASH (the others)
-- ARGV[1]  now in µs, or "0" to read the server's TIME (the usual case; tests pin time)
-- ARGV[2]  cost: units this call consumes
-- ARGV[3]  member: a process-unique id for this call (sliding window; unit i > 1 adds ":i")
-- ARGV[4]  mode: "d" decides; "r" releases what a "d" with the same member and cost admitted
--          (Redis Cluster: a later slot denied, so earlier slots give the call back); "p" peeks
--          (cost 0): reads every rule, writes nothing, and returns {remaining, reset_us} per rule
-- then per KEYS[g]: algorithm, rule count n, parameter (burst; 0 = count), n x (window µs, count)
--
-- Returns 40 bytes, struct.pack('<ddddd', allowed, limit, rule, remaining, reset_us): five
-- little-endian doubles (every Lua number is one: exact), one bulk string that the client reads
-- for a fraction of what an array of integers costs it to parse. When allowed, `limit` and
-- `rule` (1-based) name the tightest rule (least remaining) and the retry-after is 0; else they
-- name the denying rule with the longest wait, `remaining` is 0, and `reset_us` is the
-- retry-after: waiting it is exactly enough for every rule.
-- A denied call records nothing (it may drop entries that have left every window). Keys expire
-- (PEXPIREAT) when their state stops mattering: at most the longest window after `now` (twice it
-- for the sliding window counter, whose previous window still counts; the buckets' and GCRA's
-- rounded up to a grid of 1/64 of the longest window); with a pinned `now`, expiry follows the
-- pinned clock. decide_o1.lua decides O(1)-only calls on the same keys. The arithmetic is
-- mirrored by src/algorithm.rs and store/memory.rs (the in-memory twin); differential tests hold
-- them to the same decisions.

--@preamble
local release = ARGV[4] == 'r'
local peek = ARGV[4] == 'p'
-- Peek mode's answer: remaining, reset (µs) per rule, in key and rule order.
local statuses = {}
local floor, ceil, max, min = math.floor, math.ceil, math.max, math.min

-- The O(1) algorithms report through these (the sliding window's fragment inlines the same).
local function deny(g, r, wait)
  if allowed == 1 or wait > retry then
    allowed, at_g, at_r, retry, remaining, reset = 0, g, r, wait, 0, wait
  end
end
local function room(g, r, left, rst)
  if allowed == 1 and (remaining < 0 or left < remaining) then
    at_g, at_r, remaining, reset = g, r, left, rst
  end
end

-- The O(1) algorithms, each defined when a call first uses it: a call pays for the closures of
-- its own algorithms only, and sliding-window calls for none.
-- Field names of each algorithm's HASH, per rule r.
local FIELDS = { fw = {'i', 'c'}, swc = {'i', 'c', 'p'}, tb = {'t', 's'}, lb = {'l', 's'}, gcra = {'a'} }
local STEP, UNDO = {}, {}
local function define(alg)
  -- STEP[alg]: one rule: returns left (units), wait or reset (µs), new state, ttl (µs).
  -- UNDO[alg]: one rule's release: the state before this call's units, or nil to leave it.
  -- `v` holds the rule's stored fields (false when absent).
  if alg == 'fw' then
    STEP.fw = function(w, count, cap, v)
      local idx = floor(now / w)
      local used = 0
      if tonumber(v[1]) == idx then used = tonumber(v[2]) end
      local left = count - used - cost
      local wait = (idx + 1) * w - now
      if left < 0 and cost > count then wait = w end
      return left, wait, {idx, used + cost}, (idx + 1) * w - now
    end
    UNDO.fw = function(w, count, cap, v)
      if v[1] and tonumber(v[1]) == floor(now / w) then return {v[1], max(0, tonumber(v[2]) - cost)} end
    end
  elseif alg == 'swc' then
    STEP.swc = function(w, count, cap, v)
      local idx = floor(now / w)
      local i, cur, prev = tonumber(v[1]), 0, 0
      if i == idx then cur, prev = tonumber(v[2]), tonumber(v[3])
      elseif i == idx - 1 then prev = tonumber(v[2]) end
      local elapsed = now - idx * w
      local est = prev * (w - elapsed) / w + cur
      local left = floor(count - est - cost)
      local wait = idx * w + w - now
      if count - est - cost < 0 then
        if cost > count then
          wait = w
        elseif cur + cost > count then
          -- Not before the next window, once this window's count has decayed enough.
          wait = idx * w + w + ceil(w * (1 - (count - cost) / (cur + 0))) - now
        else
          wait = idx * w + ceil(w * (1 - (count - cost - cur) / prev)) - now
        end
      end
      return left, wait, {idx, cur + cost, prev}, idx * w + 2 * w - now
    end
    UNDO.swc = function(w, count, cap, v)
      local i = tonumber(v[1])
      if i and i >= floor(now / w) - 1 then return {v[1], max(0, tonumber(v[2]) - cost), v[3]} end
    end
  elseif alg == 'tb' then
    STEP.tb = function(w, count, cap, v)
      local tokens = cap
      if v[1] then tokens = min(cap, tonumber(v[1]) + (now - tonumber(v[2])) * count / w) end
      local left = tokens - cost
      local wait
      if left < 0 then
        if cost > cap then wait = w else wait = ceil((cost - tokens) * w / count) end
      else
        wait = ceil((cap - left) * w / count)
      end
      return floor(left), wait, {left, now}, ceil((cap - left) * w / count)
    end
    UNDO.tb = function(w, count, cap, v)
      if v[1] then return {min(cap, tonumber(v[1]) + cost), v[2]} end
    end
  elseif alg == 'lb' then
    STEP.lb = function(w, count, cap, v)
      local level = 0
      if v[1] then level = max(0, tonumber(v[1]) - (now - tonumber(v[2])) * count / w) end
      local left = cap - level - cost
      local wait
      if left < 0 then
        if cost > cap then wait = w else wait = ceil((level + cost - cap) * w / count) end
      else
        wait = ceil((level + cost) * w / count)
      end
      return floor(left), wait, {level + cost, now}, ceil((level + cost) * w / count)
    end
    UNDO.lb = function(w, count, cap, v)
      if v[1] then return {max(0, tonumber(v[1]) - cost), v[2]} end
    end
  elseif alg == 'gcra' then
    STEP.gcra = function(w, count, cap, v)
      local t = w / count
      local tat = now
      if v[1] then tat = max(tonumber(v[1]), now) end
      local new_tat = tat + cost * t
      local tau = cap * t
      local left = floor((tau - (new_tat - now)) / t)
      local wait
      if new_tat - now > tau then
        if cost > cap then wait = w else wait = ceil(new_tat - tau - now) end
      else
        wait = ceil(new_tat - now)
      end
      return left, wait, {new_tat}, new_tat - now
    end
    UNDO.gcra = function(w, count, cap, v)
      if v[1] then return {tonumber(v[1]) - cost * w / count} end
    end
  end
end

local pos = 5
local writes = {}
for g = 1, #KEYS do
  local key = KEYS[g]
  local alg = ARGV[pos]
  local n = tonumber(ARGV[pos + 1])
  local param = tonumber(ARGV[pos + 2])
  pos = pos + 3
  if alg == 'sw' and peek then
    -- What is in each window, and when the newest unit leaves it; nothing trimmed.
    local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    for r = 1, n do
      local w = tonumber(ARGV[pos])
      local count = tonumber(ARGV[pos + 1])
      pos = pos + 2
      local used = redis.call('ZCOUNT', key, now - w + 1, '+inf')
      local rst = 0
      if used > 0 then rst = tonumber(newest[2]) + w - now end
      statuses[#statuses + 1] = max(0, count - used)
      statuses[#statuses + 1] = rst
    end
  elseif alg == 'sw' then
    if release then
      pos = pos + 2 * n
      if cost == 1 then redis.call('ZREM', key, member) else
        for i = 1, cost do redis.call('ZREM', key, member .. ':' .. i) end
      end
    else
      --@sliding_check
      writes[g] = true
    end
  else
    local names = FIELDS[alg]
    if not names then return redis.error_reply('ratelimit: unknown algorithm ' .. tostring(alg)) end
    if not STEP[alg] then define(alg) end
    local k = #names
    local fields = {}
    for r = 1, n do
      for j = 1, k do fields[(r - 1) * k + j] = r .. names[j] end
    end
    local stored = redis.call('HMGET', key, unpack(fields))
    local hset = {}
    local ttl = 0
    -- The buckets' and GCRA's expiry lies on a grid of 1/64 of the longest window (ms), which
    -- lets decide_o1.lua skip refreshing it until it moves; the window counters' is exact.
    local grid = false
    if alg == 'tb' or alg == 'lb' or alg == 'gcra' then grid = max(1, floor(tonumber(ARGV[pos]) / 64000)) end
    for r = 1, n do
      local w = tonumber(ARGV[pos])
      local count = tonumber(ARGV[pos + 1])
      pos = pos + 2
      local cap = count
      if param > 0 then cap = param end
      local v = {}
      for j = 1, k do v[j] = stored[(r - 1) * k + j] end
      if peek then
        -- The step of a call of cost 0: what is left, and when the quota is whole again
        -- (the sliding window counter's current window still counts through the next one).
        local left, wait, state, rule_ttl = STEP[alg](w, count, cap, v)
        local full = count
        if alg == 'tb' or alg == 'lb' or alg == 'gcra' then full = cap end
        local rst = wait
        if left >= full then rst = 0 elseif alg == 'swc' and state[2] > 0 then rst = rule_ttl end
        statuses[#statuses + 1] = max(0, left)
        statuses[#statuses + 1] = rst
      elseif release then
        local undone = UNDO[alg](w, count, cap, v)
        if undone then
          for j = 1, k do hset[#hset + 1] = fields[(r - 1) * k + j]; hset[#hset + 1] = undone[j] end
        end
      else
        local left, wait, state, rule_ttl = STEP[alg](w, count, cap, v)
        if left < 0 then deny(g, r, wait) else room(g, r, left, wait) end
        for j = 1, k do hset[#hset + 1] = fields[(r - 1) * k + j]; hset[#hset + 1] = state[j] end
        ttl = max(ttl, rule_ttl)
      end
    end
    if peek then
      -- nothing to write
    elseif release then
      if #hset > 0 then redis.call('HSET', key, unpack(hset)) end
    else
      writes[g] = {hset = hset, ttl = ttl, grid = grid}
    end
  end
end

if peek then return statuses end
if release then return struct.pack('<ddddd', 1, 0, 0, 0, 0) end

if allowed == 1 then
  for g = 1, #KEYS do
    local key, wr = KEYS[g], writes[g]
    if wr == true then
      --@sliding_commit
    else
      redis.call('HSET', key, unpack(wr.hset))
      local at = ceil((now + wr.ttl) / 1000)
      if wr.grid then at = (floor(at / wr.grid) + 1) * wr.grid else at = at + 1 end
      redis.call('PEXPIREAT', key, at)
    end
  end
end

return struct.pack('<ddddd', allowed, at_g, at_r, remaining, reset)
