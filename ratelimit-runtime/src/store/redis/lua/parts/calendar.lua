-- Calendar months in UTC: the fixed windows of a rule counted in months (fixed_window.lua), by
-- the conversions of algorithm/calendar.rs (a year counted from March, so that the leap day ends
-- it; 400 years are 146 097 days). Times are µs since the Unix epoch, from 1970 on; every value
-- is an integer below 2^53 (a time before the year 2255), so every quotient, taken as exact.lua
-- says (`(a - a % b) / b`), is exact. Months are counted from 1970-01. The quotients are written
-- out: a Lua function call costs more than the arithmetic it would hold. The two functions are
-- made on a run's first window of months (fixed_window.lua), into locals the script declares at
-- its top: made there, the two closures cost every run about 1 300 instructions (2% of a lone
-- call), and few runs decide a window of months.
-- The first µs of month m.
month_start = function(m)
  local mon = m % 12
  local y = 1970 + (m - mon) / 12
  -- January and February belong to the March-based year before.
  if mon < 2 then y = y - 1 end
  local yoe = y % 400
  local mp = (mon + 10) % 12
  local doy = 153 * mp + 2
  local doe = yoe * 365 + (yoe - yoe % 4) / 4 - (yoe - yoe % 100) / 100 + (doy - doy % 5) / 5
  return ((y - yoe) / 400 * 146097 + doe - 719468) * 86400000000
end
-- The window of n months holding t: its index (windows of n months counted from 1970-01), its
-- first µs and the first µs after it. A window of one month is found from the day alone.
month_window = function(n, t)
  local z = (t - t % 86400000000) / 86400000000 + 719468
  local doe = z % 146097
  local y = (z - doe) / 146097 * 400
  local yoe = doe - (doe - doe % 1460) / 1460 + (doe - doe % 36524) / 36524 - (doe - doe % 146096) / 146096
  yoe = (yoe - yoe % 365) / 365
  y = y + yoe
  local doy = doe - (365 * yoe + (yoe - yoe % 4) / 4 - (yoe - yoe % 100) / 100)
  local mp = 5 * doy + 2
  mp = (mp - mp % 153) / 153
  local m
  if mp < 10 then m = (y - 1970) * 12 + mp + 2 else m = (y - 1969) * 12 + mp - 10 end
  if n == 1 then
    -- The month's first day, and its length: from one month start to the next in the
    -- March-based year, but February's (the year's last month) by the leap rule.
    local before = 153 * mp + 2
    before = (before - before % 5) / 5
    local first = z - 719468 - (doy - before)
    local length
    if mp == 11 then
      local cy = y + 1
      length = 28
      if cy % 4 == 0 and (cy % 100 ~= 0 or cy % 400 == 0) then length = 29 end
    else
      length = 153 * mp + 155
      length = (length - length % 5) / 5 - before
    end
    return m, first * 86400000000, (first + length) * 86400000000
  end
  m = m - m % n
  return m / n, month_start(m), month_start(m + n)
end
