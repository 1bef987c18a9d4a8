-- One sliding-window limit's commit (spliced where `--@sliding_commit` stands): a unique member
-- per unit, and the key expires when the call's units leave the longest window. In scope: key,
-- g, now, now_text (now as text), cost, member, longest.
if cost == 1 then
  redis.call('ZADD', key, now_text, member)
else
  for i = 1, cost do redis.call('ZADD', key, now_text, member .. ':' .. i) end
end
redis.call('PEXPIREAT', key, math.ceil((now + longest[g]) / 1000) + 1)
