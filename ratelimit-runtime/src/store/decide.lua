-- One atomic decision over every limit of a call (spec §4).
--
-- KEYS[g]  one log per limit of the call (a ZSET: score = admit time in µs, member unique per unit)
-- ARGV[1]  now in µs, or 0 to read the server's TIME (the usual case; tests pin time)
-- ARGV[2]  cost: units this call consumes
-- ARGV[3]  member: a process-unique id for this call (unit i > 1 gets the suffix ":i")
-- then for each KEYS[g]: algorithm code, rule count n, then n pairs (window µs, count)
--
-- Returns {allowed, limit, rule, retry_after_us, remaining, reset_us}: when allowed, `limit` and
-- `rule` (1-based) name the tightest rule (least remaining), else the rule that denied (the one
-- with the longest wait, so that waiting `retry_after_us` is exactly enough for every rule).
-- A denied call writes nothing but the trimming of entries that were already outside every
-- window.

local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local cost = tonumber(ARGV[2])

local pos = 4
local longest = {}
local allowed = 1
local limit_at, rule_at, retry, remaining, reset = 0, 0, 0, -1, 0

for g = 1, #KEYS do
  local key = KEYS[g]
  local n = tonumber(ARGV[pos + 1])
  pos = pos + 2
  -- Rules are sorted by window, longest first: trim by the longest, count it with ZCARD.
  local maxw = tonumber(ARGV[pos])
  longest[g] = maxw
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - maxw)
  for r = 1, n do
    local w = tonumber(ARGV[pos])
    local count = tonumber(ARGV[pos + 1])
    pos = pos + 2
    local used
    if r == 1 then
      used = redis.call('ZCARD', key)
    else
      used = redis.call('ZCOUNT', key, now - w + 1, '+inf')
    end
    local left = count - used - cost
    if left < 0 then
      -- The oldest `need` units in this window must leave before the call fits.
      local wait = w
      local need = used + cost - count
      if cost <= count then
        local e = redis.call('ZRANGEBYSCORE', key, now - w + 1, '+inf', 'WITHSCORES', 'LIMIT', need - 1, 1)
        wait = tonumber(e[2]) + w - now
      end
      if allowed == 1 or wait > retry then
        allowed, limit_at, rule_at, retry, remaining, reset = 0, g, r, wait, 0, wait
      end
    elseif allowed == 1 and (remaining < 0 or left < remaining) then
      limit_at, rule_at, remaining = g, r, left
      -- Reset: when the oldest unit of this window leaves (this call's own if it is the first).
      reset = w
      if used > 0 then
        local e = redis.call('ZRANGEBYSCORE', key, now - w + 1, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
        reset = tonumber(e[2]) + w - now
      end
    end
  end
end

if allowed == 1 then
  local member = ARGV[3]
  for g = 1, #KEYS do
    local key = KEYS[g]
    if cost == 1 then
      redis.call('ZADD', key, now, member)
    else
      for i = 1, cost do
        redis.call('ZADD', key, now, member .. ':' .. i)
      end
    end
    redis.call('PEXPIRE', key, math.ceil(longest[g] / 1000) + 1)
  end
end

return {allowed, limit_at, rule_at, retry, remaining, reset}
