-- One rule of a sliding-window limit, in the loop over the limit's rules (longest window
-- first): what the call would leave in the window. Reads: key, g, r, w (µs), count, now, cost,
-- format, card and the memo (sliding_memo.lua). Sets: left, wait and rst, the rule's verdict
-- (see verdict.lua).
-- What is in this window (scores are whole µs, so the units after now - w are those counted).
-- At the longest window, the first rule, the units at or before its start count in no window
-- of this limit: they are trimmed first, whatever the decision, and the log's size (ZCARD,
-- O(1)) is then the window's count. Trimming first saves a busy log a count on every call:
-- counting before the window and trimming it after an admission took one more command. At a
-- shorter window, the units at or before its start are counted from -inf, which ends near the
-- log's oldest unit (a count of the window itself, up to +inf, walks the skip list down to its
-- newest unit: about 0.4 µs more per rule on a log of 700 units).
local before = 0
if r == 1 then
  local gone = redis.call('ZREMRANGEBYSCORE', key, '-inf', format('%d', now - w))
  card = redis.call('ZCARD', key)
  -- Units left the log: its expiry moves to two windows after now (in whole ms, rounded up, and
  -- one more), refused or not. Every unit still counts when its key expires: the move before
  -- this one, at m, set m + 2L; a unit added at t needs t + L, so only units added after m + L
  -- need a move, and the first call after m + L finds the units that were in the log at m
  -- leaving it (every trim moves the expiry, so none left unseen), or the log empty, and the
  -- commit of an admission into an empty log moves it (sliding_commit.lua). A refund that
  -- removes units moves it to two windows after the newest unit left (sliding_release.lua). A
  -- busy key whose units leave on every call moves it on every call; one whose units stay in
  -- the window (a long window) about once per window. An emptied log is a deleted key: nothing
  -- to move.
  if gone > 0 and card > 0 then
    local ms = now + 2 * w + 1999
    redis.call('PEXPIREAT', key, format('%d', (ms - ms % 1000) / 1000))
  end
  if g == 1 then
    longest1, empty1 = w, card == 0
  else
    if not longest then longest, empty = {}, {} end
    longest[g], empty[g] = w, card == 0
  end
else
  before = redis.call('ZCOUNT', key, '-inf', format('%d', now - w))
end
local used = card - before
-- The rule's quota is whole again when this call's units leave it: the reset is a window.
local left, wait, rst = count - used - cost, w, w
if left < 0 and cost <= count then
  -- The oldest -left units in this window must leave before the call fits: it fits when the
  -- (-left)-th oldest leaves. (A cost above the count never fits: wait a whole window.)
  local e = redis.call('ZRANGEBYSCORE', key, format('%d', now - w + 1), '+inf', 'WITHSCORES', 'LIMIT', -left - 1, 1)
  wait = tonumber(e[2]) + w - now
end
