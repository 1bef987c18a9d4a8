-- One concurrency limit: a ZSET of the calls in flight, each member a call's id scored by the
-- end of its lease. Slots whose lease has ended (their process died without freeing them) are
-- dropped; a call passes iff fewer than conc remain. Reads: key, g, conc, lease (µs), now,
-- member, release, peek, writes and the decision. Admitted: writes[g] = lease (the commit adds
-- the slot), and the decision is left as it is (a limit on calls in flight has no quota to
-- report). Refused: the wait is a hint, the time until the first lease ends but at most 100 ms
-- (a slot frees when a call ends).
if release then
  redis.call('ZREM', key, member)
elseif not peek then
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  if redis.call('ZCARD', key) >= conc then
    local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    local r, left, wait, rst = 1, -1, oldest[2] - now, 0
    if wait > 100000 then wait = 100000 end
    --@verdict
  else
    writes[g] = lease
  end
end
