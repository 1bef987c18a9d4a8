-- The server's clock, read once per run into server_now (µs): the calls of a batch that ask for
-- it share one reading (false until read). A script that stores now as a score (the sliding
-- window's ZADD, with time_text set) also gets it as text in server_text. Each converts TIME's
-- two strings the way that costs it least: with the text, the µs are padded to six digits
-- (which they have nine times in ten), joined to the seconds and converted once, a conversion
-- (strtod) costing the server about 1 500 instructions; without, joining would cost about 550
-- more than converting both strings.
if not server_now then
  local t = redis.call('TIME')
  if time_text then
    local us = t[2]
    if #us < 6 then us = string.sub('00000', #us) .. us end
    server_text = t[1] .. us
    server_now = server_text + 0
  else
    server_now = t[1] * 1000000 + t[2]
  end
end
