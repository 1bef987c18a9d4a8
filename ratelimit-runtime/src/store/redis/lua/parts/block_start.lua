-- A refused call starts the blocks of the limits whose rules refused it (spliced where
-- `--@block_start` stands): each refuses the subject for its whole length from now, and the
-- call's retry-after is the longest wait. A limit already blocked starts nothing: refusals
-- during a block never extend it. In scope: starts, blocks, now and the decision's locals.
for i = 1, #starts do
  local g, rule, blk = starts[i][1], starts[i][2], starts[i][3]
  local till = now + blk
  redis.call('SET', KEYS[g] .. ':blk', struct.pack('<dd', till, rule), 'PXAT', math.ceil(till / 1000) + 1)
  blocks[g] = blk
  if blk > retry then at_g, at_r, retry, reset = g, rule, blk, blk end
end
