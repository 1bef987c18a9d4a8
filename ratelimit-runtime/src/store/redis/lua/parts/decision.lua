-- The call's decision, built rule by rule (verdict.lua merges each rule's verdict into it):
-- allowed (1/0), the limit and rule it reports (at_g, at_r, 1-based; 0: none yet), the
-- retry-after, and that rule's remaining (-1: no rule yet) and reset (µs).
local allowed, at_g, at_r, retry, remaining, reset = 1, 0, 0, 0, -1, 0
