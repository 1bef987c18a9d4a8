-- A peek at a sliding-window limit: what is in each window and when its newest unit leaves it,
-- nothing trimmed. Reads: key, n (its rule count), pos (at its first window), now. Appends
-- remaining and reset (µs) per rule to statuses; leaves pos after the limit's arguments.
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
