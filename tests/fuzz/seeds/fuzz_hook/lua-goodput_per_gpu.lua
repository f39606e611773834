-- Search objective: goodput per GPU, so that a layout that meets the SLOs
-- with fewer GPUs wins over one that is slightly faster with many more.
-- Reads ctx.candidate.goodput (requests per second that meet the SLOs) and
-- ctx.candidate.gpus; a candidate without goodput scores 0.
return function(ctx)
  local c = ctx.candidate
  local gpus = c.gpus or 0
  if gpus <= 0 or not c.goodput then return 0 end
  return c.goodput / gpus
end
