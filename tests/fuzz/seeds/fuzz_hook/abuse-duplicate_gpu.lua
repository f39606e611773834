return function(ctx)
  local g = ctx.topology.gpus_per_node
  local out = {}
  for r = 0, ctx.world_size - 1 do
    out[#out + 1] = {rank = r, node = r // g, gpu = r % g}
  end
  out[2].gpu = 0
  return out
end
