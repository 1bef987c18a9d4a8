-- One sliding-window limit's commit, once the call is admitted: a unique member per unit comes
-- (sliding_check.lua trimmed what left the longest window, and moved the key's expiry if any
-- did). Reads: key, g, now, now_text, cost, member, format and the memo (sliding_memo.lua).
if cost == 1 then
  redis.call('ZADD', key, now_text, member)
else
  for i = 1, cost do redis.call('ZADD', key, now_text, member .. ':' .. i) end
end
-- Into an empty log, the ZADD made the key: its expiry is two windows after now, as a trim sets
-- it (the reasons are sliding_check.lua's).
local l, fresh = longest1, empty1
if g > 1 then l, fresh = longest[g], empty[g] end
if fresh then
  local ms = now + 2 * l + 1999
  redis.call('PEXPIREAT', key, format('%d', (ms - ms % 1000) / 1000))
end
