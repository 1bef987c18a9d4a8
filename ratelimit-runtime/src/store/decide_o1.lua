-- The decision when every limit of a call is an O(1) algorithm (fw, swc, tb, lb, gcra), decide
-- mode only: decide.lua's answer on the same HASH fields, through the same fragments, without
-- what it needs for the sliding window and its other modes (the preamble's member and text of
-- now, which cost a C call or two). Assembled by store/redis.rs: `--@name` lines become
-- lua/name.lua.
--
-- KEYS[g]  one HASH per limit; ARGV[1] now (0 = TIME), ARGV[2] cost, then per limit: algorithm,
-- rule count n, burst (0 = count), n x (window µs, count), longest window first: decide.lua's
-- arguments without the member and the mode, which this script would not read (each argument
-- costs the server about 1 000 instructions to receive). Returns decide.lua's answer without
-- `why` (48 bytes): struct.pack('<dddddd', allowed, limit, rule, remaining, reset_us, now).

-- Globals are table lookups: locals are cheaper.
local KEYS, ARGV, redis, unpack = KEYS, ARGV, redis, unpack
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
local release, peek, statuses, at = false, false, nil, now
--@exact
local pos, base, m = 3, 0, #KEYS
--@o1_call

return struct.pack('<dddddd', allowed, at_g, at_r, remaining, reset, now)
