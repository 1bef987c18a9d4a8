-- Calendar months in UTC: the fixed windows of a rule counted in months (fixed_window.lua), by
-- the arithmetic of algorithm/calendar.rs (a year counted from March, so that the leap day ends
-- it; 400 years are 146 097 days). Times are µs since the Unix epoch, from 1970 on; every value
-- is an integer below 2^53 (a time before the year 2255), so every quotient, taken as exact.lua
-- says, is exact. Months are counted from 1970-01.
local function quot(a, b)
  return (a - a % b) / b
end
-- The first µs of month m.
local function month_start(m)
  local mon = m % 12
  local y = 1970 + (m - mon) / 12
  -- January and February belong to the March-based year before.
  if mon < 2 then y = y - 1 end
  local yoe = y % 400
  local mp = (mon + 10) % 12
  local doe = yoe * 365 + quot(yoe, 4) - quot(yoe, 100) + quot(153 * mp + 2, 5)
  return ((y - yoe) / 400 * 146097 + doe - 719468) * 86400000000
end
-- The window of n months holding t: its index (windows of n months counted from 1970-01), its
-- first µs and the first µs after it.
local function month_window(n, t)
  local z = quot(t, 86400000000) + 719468
  local doe = z % 146097
  local y = (z - doe) / 146097 * 400
  local yoe = quot(doe - quot(doe, 1460) + quot(doe, 36524) - quot(doe, 146096), 365)
  local doy = doe - (365 * yoe + quot(yoe, 4) - quot(yoe, 100))
  local mp = quot(5 * doy + 2, 153)
  local m
  if mp < 10 then m = (y + yoe - 1970) * 12 + mp + 2 else m = (y + yoe - 1969) * 12 + mp - 10 end
  m = m - m % n
  return m / n, month_start(m), month_start(m + n)
end
