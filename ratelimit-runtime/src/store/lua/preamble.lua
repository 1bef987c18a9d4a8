-- The time, the call, and the decision being built (spliced where `--@preamble` stands).
local now, now_text = tonumber(ARGV[1]), ARGV[1]
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  -- The same µs as text, for ZADD's score: a number given to redis.call is formatted with
  -- snprintf("%.17g") by the server, which costs more than building the text from TIME's.
  now_text = t[1] .. string.sub('00000', #t[2]) .. t[2]
end
local cost = tonumber(ARGV[2])
local member = ARGV[3]
-- allowed (1/0), the limit and rule reported, retry-after, remaining and reset (µs)
local allowed, at_g, at_r, retry, remaining, reset = 1, 0, 0, 0, -1, 0
-- Per limit: its longest window (µs), which bounds what its log keeps.
local longest = {}
