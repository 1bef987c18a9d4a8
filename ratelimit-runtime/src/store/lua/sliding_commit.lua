-- One sliding-window limit's commit (spliced where `--@sliding_commit` stands): a unique member
-- per unit, and the key expires when the call's units leave the longest window. In scope: key,
-- g, now, now_text (now as text), cost, member, longest1, longest, format.
if cost == 1 then
  redis.call('ZADD', key, now_text, member)
else
  for i = 1, cost do redis.call('ZADD', key, now_text, member .. ':' .. i) end
end
-- The ms after the last µs the units count in, and one more: ceil((now + L) / 1000) + 1 in
-- integers (math.ceil is a C call).
local ms = longest1
if g > 1 then ms = longest[g] end
ms = now + ms + 1999
redis.call('PEXPIREAT', key, format('%d', (ms - ms % 1000) / 1000))
