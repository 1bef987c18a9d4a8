-- One FixedWindow rule: windows start at multiples of w since the epoch, or, for w < 0, are -w
-- calendar months (calendar.lua); a call passes iff the window's count + cost <= count. State:
-- the index of the window counted and its count, struct.pack('<dd', i, c). Reads: w, count,
-- now, at (release: when the call was admitted), cost, more (release: extra units), release,
-- peek, and the stored state s (a 16-byte string, or false). Sets: left (remaining after the
-- call; < 0: refused), wait (refused: the retry-after), rst (the reset), till (when the new state
-- stops mattering), held (when the stored one did; left nil if none), state (the new one, packed; left nil:
-- nothing to write).
-- A window of months needs the calendar's conversions, made on the run's first such window.
if w < 0 and not month_window then
  --@calendar
end
local idx, start, stop
if w > 0 then
  start = now - now % w
  idx, stop = start / w, start + w
else
  idx, start, stop = month_window(-w, now)
end
local cur, same = 0, false
if s and #s == 16 then
  local i, c = sunpack('<dd', s)
  if i == idx then
    cur, same, held = c, true, stop
  elseif w > 0 then
    held = (i + 1) * w
  else
    held = month_start((i + 1) * -w)
  end
end
if release then
  -- The call's units count only in the window it was admitted in (at), while it lasts; extra
  -- units (a settle) count there too, up to twice the count.
  local ai
  if w > 0 then ai = (at - at % w) / w else ai = month_window(-w, at) end
  if same and ai == idx and (more > 0 or cost > 0) then
    cur = cur - cost
    if cur < 0 then cur = 0 end
    cur = cur + more
    if cur > 2 * count then cur = 2 * count end
    state = spack('<dd', idx, cur)
  end
else
  left = count - cur - cost
  -- A cost over the count never fits (the caller refuses it before asking).
  wait = stop - now
  if cost > count then wait = stop - start end
  -- The reset: the window's end (a peek of an empty window: 0).
  rst = stop - now
  if peek and cur == 0 then rst = 0 end
  till = stop
  if left >= 0 and not peek then state = spack('<dd', idx, cur + cost) end
end
