-- The decision when every limit of a call is a sliding window (the default, and the common
-- case): the same answer as decide.lua, and the same fragments for the sliding window, without
-- the machinery of the other algorithms and of release mode (about 3 µs of Redis CPU less per
-- call). Assembled by store/redis.rs: `--@name` lines become lua/name.lua.
-- Its arguments are decide.lua's without those it would not read (each costs the server about
-- 600 instructions to receive): no mode (ARGV[4]), and per limit no algorithm and no burst:
-- ARGV[1..3] now, cost, member, then per KEYS[g]: rule count n, n x (window µs, count); with a
-- single key, no rule count either (it is (#ARGV - 3) / 2).
-- Returns decide.lua's answer without `why` (48 bytes): struct.pack('<dddddd', allowed, limit,
-- rule, remaining, reset_us, now). Calls with blocks or concurrency limits go to decide.lua.

-- Globals are table lookups: locals are cheaper.
local KEYS, ARGV, redis, string, struct = KEYS, ARGV, redis, string, struct
--@preamble
local pos, keys = 4, #KEYS
for g = 1, keys do
  local key = KEYS[g]
  local n
  if keys == 1 then
    n = (#ARGV - 3) / 2
  else
    n = 1
    if ARGV[pos] ~= '1' then n = ARGV[pos] + 0 end
    pos = pos + 1
  end
  --@sliding_check
end

if allowed == 1 then
  for g = 1, keys do
    local key = KEYS[g]
    --@sliding_commit
  end
end

return struct.pack('<dddddd', allowed, at_g, at_r, remaining, reset, now)
