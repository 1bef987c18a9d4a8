-- One atomic decision over every limit of a call. Assembled by store/redis.rs: each `--@name`
-- line is replaced by lua/name.lua (fragments may hold markers of their own).
--
-- KEYS[g]  one key per limit of the call: a ZSET log (sliding window) or a HASH (the others)
-- ARGV[1]  now in µs, or "0" to read the server's TIME (the usual case; tests pin time)
-- ARGV[2]  cost: units this call consumes
-- ARGV[3]  member: a process-unique id for this call (sliding window; unit i > 1 adds ":i")
-- ARGV[4]  mode: "d" decides; "r" releases what a "d" with the same member and cost admitted
--          (Redis Cluster: a later slot denied, so earlier slots give the call back); "p" peeks
--          (cost 0): reads every rule, writes nothing, and returns {remaining, reset_us} per rule
-- then per KEYS[g]: algorithm, rule count n, burst (0 = count), n x (window µs, count), longest
-- window first
--
-- Returns 40 bytes, struct.pack('<ddddd', allowed, limit, rule, remaining, reset_us): five
-- little-endian doubles (every value is an integer below 2^53: exact), one bulk string that the
-- client reads for a fraction of what an array of integers costs it to parse. When allowed,
-- `limit` and `rule` (1-based) name the tightest rule (least remaining) and the retry-after is 0;
-- else they name the denying rule with the longest wait, `remaining` is 0, and `reset_us` is the
-- retry-after: the least whole µs after which the same call passes, for every rule.
-- A denied call records nothing (it may drop entries that have left every window). Keys expire
-- (PEXPIREAT) when their state stops mattering: the sliding window's log when the call's units
-- leave its longest window; the O(1) algorithms' HASH on the grid line (1/64 of the longest
-- window) after it; with a pinned `now`, expiry follows the pinned clock. decide_o1.lua decides
-- O(1)-only calls on the same keys with the same fragments.

--@preamble
local release = ARGV[4] == 'r'
local peek = ARGV[4] == 'p'
-- Peek mode's answer: remaining, reset (µs) per rule, in key and rule order.
local statuses = {}
local unpack = unpack
--@exact

local pos = 5
-- Per limit: true (a sliding window's log), or its HSET arguments and new expiry.
local writes = {}
for g = 1, #KEYS do
  local key = KEYS[g]
  if ARGV[pos] ~= 'sw' then
    --@o1_limit
    if release then
      if set then redis.call('HSET', unpack(set)) end
    elseif not peek then
      writes[g] = {set, expiry}
    end
  else
    local n = ARGV[pos + 1] + 0
    pos = pos + 3
    if peek then
      -- What is in each window, and when the newest unit leaves it; nothing trimmed.
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
      pos = pos + 2 * n
      if cost == 1 then redis.call('ZREM', key, member) else
        for i = 1, cost do redis.call('ZREM', key, member .. ':' .. i) end
      end
    else
      --@sliding_check
      writes[g] = true
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
      redis.call('HSET', unpack(wr[1]))
      if wr[2] then redis.call('PEXPIREAT', key, wr[2]) end
    end
  end
end

return struct.pack('<ddddd', allowed, at_g, at_r, remaining, reset)
