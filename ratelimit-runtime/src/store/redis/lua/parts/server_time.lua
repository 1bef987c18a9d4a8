-- The server's clock as now (µs) and now_text (spliced where `--@server_time` stands; both
-- declared by the template).
local t = redis.call('TIME')
-- The µs as text, for ZADD's score, built from TIME's two strings (the µs padded to six
-- digits, which they have nine times in ten), then converted once.
local us = t[2]
if #us < 6 then us = string.sub('00000', #us) .. us end
now_text = t[1] .. us
now = now_text + 0
