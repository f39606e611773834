-- Places ranks round-robin over nodes: every tp group spans nodes.
return function(ctx)
  local n = ctx.topology.nodes
  local out = {}
  for r = 0, ctx.world_size - 1 do
    out[#out + 1] = {rank = r, node = r % n, gpu = r // n}
  end
  return out
end
