-- A refund at a sliding-window limit: the call's entries go, if they have not left the log
-- (ZREM of a missing member is a no-op). Reads: key, n (its rule count), pos (at its first
-- window, the longest), cost, member, format. Leaves pos after the limit's arguments.
local l = ARGV[pos] + 0
pos = pos + 2 * n
local gone
if cost == 1 then gone = redis.call('ZREM', key, member) else
  gone = 0
  for i = 1, cost do gone = gone + redis.call('ZREM', key, member .. ':' .. i) end
end
-- The units that set the key's expiry may be these: it follows the newest unit left, two
-- windows after it, as an admission would have set it (see sliding_commit.lua).
if gone > 0 then
  local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if newest[2] then
    local ms = newest[2] + 2 * l + 1999
    redis.call('PEXPIREAT', key, format('%d', (ms - ms % 1000) / 1000))
  end
end
