-- GCRA as go-redis/redis_rate publishes the algorithm, written from its facts (see
-- gcra_reference.rs): one string key holding the theoretical arrival time (seconds since
-- 2017-01-01, a float), TIME, GET, and SET with an EX expiry when admitted.
-- KEYS[1] the key; ARGV: burst, rate (per period), period (s), cost.
-- Returns {admitted units, remaining, retry-after (s, text), reset-after (s, text)}.
redis.replicate_commands()
local key = KEYS[1]
local burst, rate, period = ARGV[1], ARGV[2], ARGV[3]
local cost = tonumber(ARGV[4])
local interval = period / rate
local tolerance = interval * burst
local t = redis.call('TIME')
local now = (t[1] - 1483228800) + t[2] / 1000000
local tat = redis.call('GET', key)
if tat then tat = math.max(tonumber(tat), now) else tat = now end
local new_tat = tat + interval * cost
local diff = now - (new_tat - tolerance)
local remaining = diff / interval
if remaining < 0 then
  return {0, 0, tostring(-diff), tostring(tat - now)}
end
local reset_after = new_tat - now
if reset_after > 0 then
  redis.call('SET', key, new_tat, 'EX', math.ceil(reset_after))
end
return {cost, remaining, tostring(-1), tostring(reset_after)}
