-- The time, the call, and the decision being built (spliced where `--@preamble` stands). In
-- scope: now (µs; 0 or "0": read the server's TIME) and cost, as the template read them from
-- its arguments: text (decide.lua) or numbers (decide_sw.lua). Strings are compared before they
-- are converted, and converted by the VM's own coercion where arithmetic needs them (each C
-- call such as tonumber costs far more than a comparison; a conversion, strtod, about 1 500
-- instructions).
-- Numbers given to redis.call go as text made by '%d' (exact below 2^53): the server formats a
-- number with snprintf("%.17g"), about 1 700 instructions more.
local format = string.format
local now_text
if now == 0 or now == '0' then
  local t = redis.call('TIME')
  -- The µs as text, for ZADD's score, built from TIME's two strings (the µs padded to six
  -- digits, which they have nine times in ten), then converted once.
  local us = t[2]
  if #us < 6 then us = string.sub('00000', #us) .. us end
  now_text = t[1] .. us
  now = now_text + 0
else
  now = now + 0
  now_text = format('%d', now)
end
if cost == 1 or cost == '1' then cost = 1 else cost = cost + 0 end
-- allowed (1/0), the limit and rule reported, retry-after, remaining and reset (µs)
local allowed, at_g, at_r, retry, remaining, reset = 1, 0, 0, 0, -1, 0
-- Per limit: its longest window (µs), which bounds what its log keeps and when it expires: the
-- first limit's in a local, the others' in a table made only for them (a table costs the
-- server about 1 400 instructions per call).
local longest1, longest = 0, false
-- Per limit: whether its log held no unit of its longest window (then its key's expiry must be
-- set), kept as the windows are.
local empty1, empty = false, false
