-- One SlidingWindowCounter rule: with cur and prev the counts of the current and the previous
-- fixed window and e the time into the current one, a call passes iff
-- prev * (w - e) + (cur + cost) * w <= count * w, i.e. iff
-- cur + cost + ceil(prev * (w - e) / w) <= count. State: the index of the window counted, its
-- count and the count of the window before it, struct.pack('<ddd', i, c, p). Reads: w, count,
-- now, at (release: when the call was admitted), cost, more (release: extra units), release, peek, muldiv, and the stored
-- state s (a 24-byte string, or false). Sets: left (remaining after the call; < 0: refused),
-- wait (refused: the retry-after), rst (the reset), till (when the new state stops mattering),
-- held (when the stored one did; left nil if none), state (the new one, packed; left nil: nothing to
-- write).
local e = now % w
local idx = (now - e) / w
local cur, prev = 0, 0
if s and #s == 24 then
  local i, c, p = sunpack('<ddd', s)
  held = (i + 2) * w
  if i == idx then cur, prev = c, p
  elseif i == idx - 1 then prev = c end
  if release then
    -- The call's units are in the window it was admitted in (at), which still weighs while it
    -- is the current or the previous one: stored as i's count, or as the previous count of
    -- the window after it (whatever now is: a refund at a pinned time before the stored
    -- window still finds it there; later, that count weighs nowhere and changing it is moot).
    local ae = at % w
    local ai = (at - ae) / w
    -- Extra units (a settle) count there too, up to twice the count.
    if i == ai and ai >= idx - 1 then
      c = c - cost
      if c < 0 then c = 0 end
      c = c + more
      if c > 2 * count then c = 2 * count end
      state = spack('<ddd', i, c, p)
    elseif i == ai + 1 then
      p = p - cost
      if p < 0 then p = 0 end
      p = p + more
      if p > 2 * count then p = 2 * count end
      state = spack('<ddd', i, c, p)
    end
  end
end
if not release then
  -- The previous window's weight now, rounded up.
  local weight = 0
  if prev > 0 then
    local r
    weight, r = muldiv(prev, w - e, w)
    if r > 0 then weight = weight + 1 end
  end
  left = count - cur - cost - weight
  rst = 0
  if cur + cost > 0 then rst = 2 * w - e elseif prev > 0 then rst = w - e end
  till = now - e + 2 * w
  if left < 0 then
    if cost > count then
      -- Never fits (the caller refuses such a cost before asking).
      wait = w
    elseif cur + cost > count then
      -- Not in this window. In the next one (prev = cur, cur = 0) it passes from the least e'
      -- with cur * (w - e') <= (count - cost) * w: e' = w - floor((count - cost) * w / cur).
      wait = 2 * w - e - muldiv(count - cost, w, cur)
    else
      -- Later in this window: from e' = w - floor((count - cur - cost) * w / prev).
      wait = w - e - muldiv(count - cur - cost, w, prev)
    end
  elseif not peek then
    state = spack('<ddd', idx, cur + cost, prev)
  end
end
