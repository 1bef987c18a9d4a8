-- A release at a sliding-window limit. Fewer units (a refund, a settle below the cost): the
-- call's last `cost` entries go, if they have not left the log (ZREM of a missing member is a
-- no-op). More (a settle above it): the extra units are recorded at the call's admission time,
-- with members after its own, while that time is inside the longest window (in a log that may be
-- empty or gone: the units count all the same); past the largest
-- count + 1 of them they refuse nothing more (all leave together), so no more are written.
-- Reads: key, n (its rule count), pos (at its first window, the longest), now, at, est (the
-- call's cost), cost, more, member, format. Leaves pos after the limit's arguments.
local l = ARGV[pos] + 0
local gone = 0
if more > 0 then
  if at + l > now then
    local m = 0
    for r = 1, n do
      local c = ARGV[pos + 2 * r - 1] + 0
      if c > m then m = c end
    end
    m = m + 1
    if more < m then m = more end
    local at_text = format('%d', at)
    for i = est + 1, est + m do redis.call('ZADD', key, at_text, member .. ':' .. i) end
    gone = m
  end
elseif est == 1 then
  if cost == 1 then gone = redis.call('ZREM', key, member) end
else
  for i = est - cost + 1, est do gone = gone + redis.call('ZREM', key, member .. ':' .. i) end
end
pos = pos + 2 * n
-- The units that set the key's expiry may be these (or, added, they may need it later): it
-- follows the newest unit left, two windows after it, as an admission would have set it (see
-- sliding_commit.lua).
if gone > 0 then
  local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if newest[2] then
    local ms = newest[2] + 2 * l + 1999
    redis.call('PEXPIREAT', key, format('%d', (ms - ms % 1000) / 1000))
  end
end
