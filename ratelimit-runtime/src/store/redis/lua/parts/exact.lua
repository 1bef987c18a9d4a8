-- Exact integer arithmetic on Lua's doubles. Every value the scripts compute is an integer
-- below 2^53, where doubles are exact. For such x and an integer m > 0, `x % m` and
-- `(x - x % m) / m` are exact too: the rounded quotient x / m errs by less than 1 / m, never
-- enough to cross an integer, so its floor is the true one. A product of two such integers is
-- exact while it stays below 2^53; muldiv handles the others.
--
-- muldiv(a, b, m): floor(a * b / m) and (a * b) mod m, for integers 0 <= a, b with m + b < 2^50
-- and a quotient below 2^53 (in use: a <= 10^9, b and m below 2^46). A product past 2^53 is
-- taken apart by the digits of a in a base chosen so that each step, remainder * base +
-- digit * b, stays below 2^52.
local function muldiv(a, b, m)
  local x = a * b
  if x < 9007199254740992 then
    local r = x % m
    return (x - r) / m, r
  end
  local base = 4503599627370496 / (m + b)
  base = base - base % 1
  local lo = a % base
  local q, r = muldiv((a - lo) / base, b, m)
  x = r * base + lo * b
  local r2 = x % m
  return q * base + (x - r2) / m, r2
end
