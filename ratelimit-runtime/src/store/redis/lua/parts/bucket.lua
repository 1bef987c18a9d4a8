-- One rule of TokenBucket, LeakyBucket or Gcra: the three are one admission rule. The bucket
-- drains at count / w; a call passes iff level + cost <= cap. Its state is E, the instant the
-- bucket is empty (GCRA's theoretical arrival time; a token bucket's tokens are cap - level), an
-- exact fraction e + f / count (integers, 0 <= f < count), stored as struct.pack('<dd', e, f).
-- With T = w / count = q + rq / count and D = max(E, now) - now: a call passes iff
-- D + cost * T <= cap * T, i.e. iff ceil((D + cost * T) / T) <= cap, and then
-- E = now + D + cost * T. Spans are kept relative to now as (µs, numerator over count); an
-- admitted one is at most cap * T, which the limit's bounds keep under 2^45 µs.
-- Reads: w, count, cap, now, at (release: when the call was admitted), cost, more (release:
-- extra units), release, peek,
-- muldiv, under (the rules of the limit a runtime override overrides, w and count flat, or
-- false), and the stored state s (a 16-byte string, or false; 32 bytes when written under an
-- override: e, f and the rule's w and count). Sets: left (remaining after the
-- call; < 0: refused), wait (refused: the retry-after), rst (the reset: when the bucket is empty
-- again), till (when the new state stops mattering), held (when the stored one did; left nil
-- if there is none) and state (the new one, packed; left nil: nothing to write). Each is set by
-- a statement of its own where it counts: Lua assigns several locals at once through
-- temporaries, an instruction more per value.
local rq = w % count
local q = (w - rq) / count
local e, f, dI, dF = 0, 0, 0, 0
-- The new state (e, f), when there is one to write.
local sE, sF
-- The rule the state was kept under when it may not be this one (w0 nil: it is): its own
-- (32 bytes), else the limit's, which an override keeps the keys of. A state of another length
-- is none. The usual one (16 bytes, no override) is told by one comparison of numbers: each
-- costs the server a C call.
local w0, n0
if s and #s == 16 then
  e, f = sunpack('<dd', s)
  if under and under[2 * r] then w0, n0 = under[2 * r - 1], under[2 * r] end
elseif s and #s == 32 then
  e, f, w0, n0 = sunpack('<dddd', s)
else
  s = false
end
if s then
  if w0 and (w0 ~= w or n0 ~= count) then
    -- Carried to this rule (algorithm::carry_level): the units in the bucket, u = (D * n0 + f) /
    -- w0 with D = e - now, at most cap + count, stay u units: a span of ceil(u * w) / count µs.
    if e > now or (e == now and f > 0) then
      local qu, ru = muldiv(n0, e - now, w0)
      ru = ru + f
      if ru >= w0 then
        local x = ru % w0
        qu, ru = qu + (ru - x) / w0, x
      end
      if qu >= cap + count then qu, ru = cap + count, 0 end
      local sI, sF = muldiv(qu, w, count)
      local c, cr = muldiv(ru, w, w0)
      if cr > 0 then c = c + 1 end
      sF = sF + c
      local x = sF % count
      e, f = now + sI + (sF - x) / count, x
    else
      e, f = now, 0
    end
  end
  held = e
  if f > 0 then held = e + 1 end
  if e >= now then
    dI = e - now
    dF = f
  end
end
if cost > cap then
  -- Never fits (the caller refuses such a cost before asking), and was never admitted.
  left, wait, rst, till = -1, w, 0, now
else
  -- cost * T = cI + cF / count
  local cI, cF = q, rq
  if cost ~= 1 then
    cI, cF = muldiv(cost, rq, count)
    cI = cI + cost * q
  end
  if release and more > 0 then
    -- Extra units (a settle) are poured in now: E' = max(E, now) + more * T, at most
    -- now + cap * T + w (debt drains in at most a window past full), never before E. Past
    -- cap + count units the sum is clamped anyway: clamping first keeps the products small.
    local m = more
    if m > cap + count then m = cap + count end
    local mI, mF = muldiv(m, rq, count)
    local nI, nF = dI + mI + m * q, dF + mF
    if nF >= count then nI, nF = nI + 1, nF - count end
    local bI, bF = muldiv(cap, rq, count)
    bI = bI + cap * q + w
    if nI > bI or (nI == bI and nF > bF) then nI, nF = bI, bF end
    if nI < dI or (nI == dI and nF < dF) then nI, nF = dI, dF end
    till = now + nI
    if nF > 0 then till = till + 1 end
    sE, sF = now + nI, nF
  elseif release then
    -- Give back what this call added: E - cost * T, never before now (a bucket never holds
    -- more than its capacity), and nothing once the bucket is empty or the call's units have
    -- drained.
    -- A full bucket drains in cap * T: the call's units are gone by then, whatever came after.
    local fI, fF = muldiv(cap, rq, count)
    fI = fI + cap * q
    local since = now - at
    local fresh = since < fI or (since == fI and fF > 0)
    if held and fresh and (e > now or (e == now and f > 0)) then
      e, f = e - cI, f - cF
      if f < 0 then e, f = e - 1, f + count end
      if e < now then e, f = now, 0 end
      sE, sF = e, f
    end
  else
    -- D' = D + cost * T = nI + nF / count
    local nI, nF = dI + cI, dF + cF
    if nF >= count then
      nI = nI + 1
      nF = nF - count
    end
    rst = nI
    if nF > 0 then rst = nI + 1 end
    till = now + rst
    left = -1
    -- D' <= cap * T needs nI <= cap * (q + 1): past that (the clock went back) it is refused
    -- without the product, whose quotient then stays below 2^53.
    if nI <= cap * (q + 1) then
      -- u = ceil(D' / T) = ceil((nI * count + nF) / w): the units in the bucket after the call.
      local u, ur = muldiv(count, nI, w)
      ur = ur + nF
      local extra = ur % w
      u = u + (ur - extra) / w
      if extra > 0 then u = u + 1 end
      left = cap - u
    end
    if left < 0 then
      -- It passes once D' - cap * T has drained: wait = ceil(D' - cap * T) > 0.
      local bI, bF = muldiv(cap, rq, count)
      wait = nI - bI - cap * q
      if nF > bF then wait = wait + 1 end
    elseif not peek then
      sE = now + nI
      sF = nF
    end
  end
end
if sE then
  -- Under an override, the state says the rule it was kept under.
  if under then
    state = spack('<dddd', sE, sF, w, count)
  else
    state = spack('<dd', sE, sF)
  end
end
