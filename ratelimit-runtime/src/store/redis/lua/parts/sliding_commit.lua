-- One sliding-window limit's commit, once the call is admitted: what left the longest window
-- goes, a unique member per unit comes, and the key's expiry moves when needed. Reads: key, g,
-- now, now_text, cost, member, format and the memo (sliding_memo.lua).
local l, leave = longest1, leaving1
if g > 1 then l, leave = longest[g], leaving[g] end
-- The units before the window were counted by sliding_check, in this same run: none, no trim.
local gone = leave
if leave < 0 then gone = -1 - leave end
if gone > 0 then redis.call('ZREMRANGEBYSCORE', key, '-inf', format('%d', now - l)) end
if cost == 1 then
  redis.call('ZADD', key, now_text, member)
else
  for i = 1, cost do redis.call('ZADD', key, now_text, member .. ':' .. i) end
end
-- The expiry moves to two windows after now (in whole ms, rounded up, and one more), and only
-- when units left the window here or the log was empty. Every unit still counts when its key
-- expires: the admission that last moved the expiry, at r, set r + 2L; an admission at t needs
-- t + L, so only one after r + L needs a move, and the first such finds r's units leaving the
-- window (refused calls trim nothing, so no unit leaves unseen), or the log empty. A refund that
-- removes r's units moves the expiry to two windows after the newest unit left, which then
-- plays r's part (sliding_release.lua). A busy key whose units leave on every call moves it on
-- every call; one whose units stay in the window (a long window) moves it about once per window.
if leave ~= 0 then
  local ms = now + 2 * l + 1999
  redis.call('PEXPIREAT', key, format('%d', (ms - ms % 1000) / 1000))
end
