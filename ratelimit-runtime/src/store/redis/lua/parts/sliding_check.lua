-- One rule of a sliding-window limit, in the loop over the limit's rules (longest window
-- first): what the call would leave in the window. Reads: key, g, r, w (µs), count, now, cost,
-- format, card and the memo (sliding_memo.lua). Sets: left, wait and rst, the rule's verdict
-- (see verdict.lua).
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
-- The rule's quota is whole again when this call's units leave it: the reset is a window.
local left, wait, rst = count - used - cost, w, w
if left < 0 and cost <= count then
  -- The oldest -left units in this window must leave before the call fits: it fits when the
  -- (-left)-th oldest leaves. (A cost above the count never fits: wait a whole window.)
  local e = redis.call('ZRANGEBYSCORE', key, format('%d', now - w + 1), '+inf', 'WITHSCORES', 'LIMIT', -left - 1, 1)
  wait = tonumber(e[2]) + w - now
end
