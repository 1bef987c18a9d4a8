-- The decision when every limit of a call is a sliding window (the default, and the common
-- case): the same answer as decide.lua, and the same fragments for the sliding window, without
-- the machinery of the other algorithms and of release mode (about 3 µs of Redis CPU less per
-- call). Assembled by store/redis.rs: `--@name` lines become lua/name.lua.
--
-- ARGV[1]  member: the call's id (as decide.lua's ARGV[3])
-- ARGV[2]  the numbers, packed as little-endian doubles (integers below 2^53: exact): now (µs;
--          0: read the server's TIME), cost, then per KEYS[g]: its rule count n (only when there
--          are several keys; with one, n follows from the length) and n x (window µs, count),
--          longest window first.
-- Packed, the numbers cost the server one struct.unpack instead of an argument each to receive
-- (about 600 instructions) and a conversion each (strtod, about 1 500).
-- Returns decide.lua's answer without `why` (48 bytes): struct.pack('<dddddd', allowed, limit,
-- rule, remaining, reset_us, now); for an admitted call with one limit of one rule, only the
-- values the client cannot know (24 bytes): struct.pack('<ddd', remaining, reset_us, now), the
-- limit and rule being the first (each value packed costs the server about 250 instructions).
-- Calls with blocks or concurrency limits go to decide.lua.

-- Globals are table lookups: locals are cheaper.
local KEYS, ARGV, redis, string, struct = KEYS, ARGV, redis, string, struct
local member, nums = ARGV[1], ARGV[2]
local now, cost, p = struct.unpack('<dd', nums)
--@preamble
local keys = #KEYS
for g = 1, keys do
  local key = KEYS[g]
  local n
  if keys == 1 then
    n = (#nums - 16) / 16
  else
    n, p = struct.unpack('<d', nums, p)
  end
  for r = 1, n do
    local w, count
    w, count, p = struct.unpack('<dd', nums, p)
    --@sliding_check
  end
end

if allowed == 1 then
  for g = 1, keys do
    local key = KEYS[g]
    --@sliding_commit
  end
end

if allowed == 1 and keys == 1 and #nums == 32 then return struct.pack('<ddd', remaining, reset, now) end
return struct.pack('<dddddd', allowed, at_g, at_r, remaining, reset, now)
