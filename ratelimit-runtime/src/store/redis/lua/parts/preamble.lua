-- The time, the call, and the decision being built (spliced where `--@preamble` stands). In
-- scope: now (µs; 0 or "0": read the server's TIME) and cost, as the template read them from
-- its arguments (text or numbers). Strings are compared before they
-- are converted, and converted by the VM's own coercion where arithmetic needs them (each C
-- call such as tonumber costs far more than a comparison; a conversion, strtod, about 1 500
-- instructions).
-- Numbers given to redis.call go as text made by '%d' (exact below 2^53): the server formats a
-- number with snprintf("%.17g"), about 1 700 instructions more.
local format = string.format
local now_text
if now == 0 or now == '0' then
  --@server_time
else
  now = now + 0
  now_text = format('%d', now)
end
if cost == 1 or cost == '1' then cost = 1 else cost = cost + 0 end
--@decision
