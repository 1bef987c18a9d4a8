-- One rule of a sliding-window limit (spliced where `--@sliding_check` stands, in the template's
-- loop over the limit's rules, longest window first). In scope: key, g, r, w (µs), count, now,
-- cost, longest1, longest, format and the decision's locals.
local used
-- What is in this window. The log is trimmed only when a call is admitted (sliding_commit): a
-- refused call writes nothing.
used = redis.call('ZCOUNT', key, format('%d', now - w + 1), '+inf')
if r == 1 then
  if g == 1 then
    longest1, empty1 = w, used == 0
  else
    if not longest then longest, empty = {}, {} end
    longest[g], empty[g] = w, used == 0
  end
end
if used + cost > count then
  -- The oldest `need` units in this window must leave before the call fits: it fits when
  -- the need-th oldest leaves. (A cost above the count never fits: wait a whole window.)
  local wait = w
  if cost <= count then
    local e = redis.call('ZRANGEBYSCORE', key, format('%d', now - w + 1), '+inf', 'WITHSCORES', 'LIMIT', used + cost - count - 1, 1)
    wait = tonumber(e[2]) + w - now
  end
  -- The denying rule with the longest wait is reported: waiting it is enough for every rule.
  if allowed == 1 or wait > retry then
    allowed, at_g, at_r, retry, remaining, reset = 0, g, r, wait, 0, wait
  end
elseif allowed == 1 and (remaining < 0 or count - used - cost < remaining) then
  -- The tightest rule so far. Its quota is whole again when this call's units leave it.
  at_g, at_r, remaining, reset = g, r, count - used - cost, w
end
