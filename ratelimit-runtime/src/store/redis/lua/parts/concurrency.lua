-- One concurrency limit (spliced where `--@concurrency` stands): a ZSET of the calls in flight,
-- each member a call's id scored by the end of its lease. Slots whose lease has ended (their
-- process died without freeing them) are dropped; a call passes iff fewer than conc remain.
-- In scope: key, g, conc, lease (µs), now, member, release, peek, writes and the decision's
-- locals. Admitted: writes[g] = lease (the commit adds the slot). Refused: the wait is a hint,
-- the time until the first lease ends but at most 100 ms (a slot frees when a call ends).
if release then
  redis.call('ZREM', key, member)
elseif not peek then
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  if redis.call('ZCARD', key) >= conc then
    local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    local wait = first[2] - now
    if wait > 100000 then wait = 100000 end
    if allowed == 1 or wait > retry then allowed, at_g, at_r, retry, remaining, reset = 0, g, 1, wait, 0, wait end
  else
    writes[g] = lease
  end
end
