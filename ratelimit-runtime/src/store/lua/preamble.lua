-- The time, the call, and the decision being built (spliced where `--@preamble` stands).
-- Strings are compared before they are converted, and converted by the VM's own coercion
-- where arithmetic needs them (each C call such as tonumber costs far more than a comparison).
local now, now_text = 0, ARGV[1]
if now_text == '0' then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
  -- The same µs as text, for ZADD's score: a number given to redis.call is formatted with
  -- snprintf("%.17g") by the server, which costs more than building the text from TIME's.
  now_text = t[1] .. string.sub('00000', #t[2]) .. t[2]
else
  now = now_text + 0
end
local cost = 1
if ARGV[2] ~= '1' then cost = ARGV[2] + 0 end
local member = ARGV[3]
-- allowed (1/0), the limit and rule reported, retry-after, remaining and reset (µs)
local allowed, at_g, at_r, retry, remaining, reset = 1, 0, 0, 0, -1, 0
-- Per limit: its longest window (µs), which bounds what its log keeps and when it expires: the
-- first limit's in a local, the others' in a table made only for them (a table costs the
-- server about 1 400 instructions per call).
local longest1, longest = 0, false
-- Numbers given to redis.call as text made by '%d' (exact below 2^53): the server formats a
-- number with snprintf("%.17g"), about 1 700 instructions more.
local format = string.format
