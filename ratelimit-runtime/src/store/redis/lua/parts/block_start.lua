-- A refused call starts the blocks of the limits whose rules refused it: each refuses the
-- subject for its whole length from now, a verdict of the rule that started it, so the call's
-- retry-after is the longest wait. A limit already blocked starts nothing: refusals during a
-- block never extend it. Reads: starts, blocks, now and the decision (a refusal).
for i = 1, #starts do
  local g, r, blk = starts[i][1], starts[i][2], starts[i][3]
  local till = now + blk
  redis.call('SET', KEYS[g] .. ':blk', struct.pack('<dd', till, r), 'PXAT', math.ceil(till / 1000) + 1)
  blocks[g] = blk
  local left, wait, rst = -1, blk, 0
  --@verdict
end
