-- One rule of a sliding-window limit (spliced where `--@sliding_check` stands, in the template's
-- loop over the limit's rules, longest window first). In scope: key, g, r, w (µs), count, now,
-- cost, card, longest1, longest, leaving1, leaving, format and the decision's locals.
-- What is in this window: the log's units less those before it (scores are whole µs, so the
-- units after now - w are those counted). Both counts are cheap: ZCARD is O(1), and a range
-- from -inf ends near the log's oldest unit. ZCOUNT of the window itself, up to +inf, walks the
-- skip list down to its newest unit, which cost the server about 0.4 µs more per rule on a log
-- of 700 units. The log is trimmed only when a call is admitted (sliding_commit): a refused call
-- writes nothing.
if r == 1 then card = redis.call('ZCARD', key) end
local before = redis.call('ZCOUNT', key, '-inf', format('%d', now - w))
local used = card - before
if r == 1 then
  -- What the commit does to this log: the units before the longest window leave it, and the
  -- key's expiry moves when some leave or the window held none. Kept in one number: how many
  -- leave, or -1 less that when the window held none.
  local leave = before
  if used == 0 then leave = -1 - before end
  if g == 1 then
    longest1, leaving1 = w, leave
  else
    if not longest then longest, leaving = {}, {} end
    longest[g], leaving[g] = w, leave
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
