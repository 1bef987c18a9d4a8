-- Merges one rule's verdict into the call's decision, as deciding every rule at once would: a
-- refusal with the longest wait wins, the earlier on ties (waiting it is enough for every
-- rule); else the tightest rule, the one with the least remaining, the earlier on ties.
-- Reads: g and r (the limit and rule, 1-based), left (what the rule has left after the call;
-- < 0: refused), wait (refused: the retry-after), rst (admitted: the reset) and the decision.
if left < 0 then
  if allowed == 1 or wait > retry then
    allowed, at_g, at_r, retry, remaining, reset = 0, g, r, wait, 0, wait
  end
elseif allowed == 1 and (remaining < 0 or left < remaining) then
  at_g = g
  at_r = r
  remaining = left
  reset = rst
end
