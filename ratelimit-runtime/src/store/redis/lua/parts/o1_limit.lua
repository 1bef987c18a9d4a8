-- One limit of an O(1) algorithm (fw, swc, tb, lb, gcra) over its HASH: reads its rules'
-- states, runs each rule's algorithm, and leaves what the call would write. Rule r's state is
-- the field named r (1-based, longest window first), its integers packed as little-endian
-- doubles by the algorithm's part (bucket.lua, window_counter.lua, fixed_window.lua).
-- Measured in instructions of redis-server, a number given to redis.call costs the server a
-- printf (about 4 000 instructions for a time in µs), a field more in HMGET/HSET about 2 500,
-- and each C function call from Lua about as much as 50 VM instructions: packed states are read
-- and written as they are; strings become numbers by the VM's coercion (`s + 0`), rounding is
-- `%`, max and min are comparisons, and a one-rule limit takes no table at all (a table costs
-- about 1 400 instructions).
-- Its arguments are A[pos], A[pos + 1], ...: decide.lua's ARGV (text, converted by the VM), or
-- the numbers decide_o1_batch.lua unpacked (its algorithm a number: 1 fw, 2 swc, 3 the buckets).
-- Reads: A, key, g, pos (at the limit's algorithm argument), now, at, cost, more, release, peek,
-- statuses, muldiv and the decision; reads and sets grid_w, grid and grid_us (false, 0, 0 at
-- first). Leaves pos after the limit's arguments, n (its rule count), set (what HSET writes: for
-- one rule (n = 1) its packed state, field '1'; for several, HSET's arguments, key first; nil:
-- nothing to write) and expiry (the key's new expiry in ms, or false: unchanged). A peek appends
-- remaining and reset (µs) per rule to statuses.
-- Each is compared as a number first (the batch's case, one comparison), then as text.
local alg, n, burst = A[pos], A[pos + 1], A[pos + 2]
if burst == 0 or burst == '0' then burst = false else burst = burst + 0 end
pos = pos + 3
local bucket = alg == 3 or alg == 'gcra' or alg == 'tb' or alg == 'lb'
-- (A comparison of two numbers costs the server a C call: swc is not compared for a bucket.)
local swc = not bucket and (alg == 2 or alg == 'swc')
if not (bucket or swc or alg == 1 or alg == 'fw') then
  return redis.error_reply('ratelimit: unknown algorithm ' .. tostring(alg))
end
local v
if n == 1 or n == '1' then
  n = 1
  v = rcall('HGET', key, '1')
else
  n = n + 0
  local fields = {}
  for r = 1, n do fields[r] = r .. '' end
  v = rcall('HMGET', key, unpack(fields))
end
-- The expiry lies on a grid of 1/64 of the longest window (ms): a busy key refreshes it about
-- 64 times per window, not on every call (a window of calendar months, -months: 31 days a
-- month). The grid depends on that window alone: it is found again only when the window
-- differs from the previous limit's (grid_w, grid and its step in µs, grid_us, kept by the
-- script: a batch's calls mostly share their limits). `was`: when the stored state stops
-- mattering (false if a rule has none); `newest`: when the new state does.
if A[pos] ~= grid_w then
  grid_w = A[pos]
  grid = grid_w + 0
  if grid < 0 then grid = -grid * 2678400000000 end
  grid = grid / 64000
  grid = grid - grid % 1
  if grid < 1 then grid = 1 end
  grid_us = grid * 1000
end
local set, was, newest = nil, 0, now
for r = 1, n do
  local w, count = A[pos] + 0, A[pos + 1] + 0
  pos = pos + 2
  local cap = burst or count
  local s = v
  if n > 1 then s = v[r] end
  -- nil until the rule's part sets them: held and state stay nil when there is none (one
  -- instruction for all six, where setting them to false took three more).
  local left, wait, rst, till, held, state
  if bucket then
    --@bucket
  elseif swc then
    --@window_counter
  else
    --@fixed_window
  end
  if not held then was = false elseif was and held > was then was = held end
  if peek then
    if left < 0 then left = 0 end
    statuses[#statuses + 1] = left
    statuses[#statuses + 1] = rst
  else
    if not release then
      --@verdict
    end
    if till and till > newest then newest = till end
    if state then
      if n == 1 then
        set = state
      else
        if not set then set = {key} end
        local m = #set
        set[m + 1], set[m + 2] = r .. '', state
      end
    end
  end
end
local expiry = false
-- A release moves the expiry only when extra units filled a bucket past its stored state.
if not peek and (newest > now or not release) then
  -- The grid line after the instant (ms, rounded up) the new state stops mattering; unchanged
  -- when the stored state's line is no earlier (a release only lowers the stored state). For
  -- integers, floor(ceil(t / 1000) / grid) = floor((t + 999) / (1000 * grid)): the line is
  -- found in µs with one `%` (the expiry cost 2 200 instructions a decision in ms). The new
  -- line, a multiple of grid_us, is later than the stored one (the last multiple at or before
  -- was + 999) iff it is later than was + 999: the stored line is not computed.
  local line = newest + 999
  line = line - line % grid_us
  if not was or line > was + 999 then expiry = line / 1000 + grid end
end
