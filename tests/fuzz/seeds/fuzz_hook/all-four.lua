-- One file serving all four hooks with valid results for the fuzz target's
-- context (plans/examples/qwen3-235b-ep.yaml): ranks in order on the GPUs,
-- layers split evenly with the rest on the first stages, experts round-robin
-- over the ep ranks, and a score from the candidate.
return {
  placement = function(ctx)
    local out = {}
    for r = 0, #ctx.ranks - 1 do
      out[#out + 1] = {rank = r, node = r // ctx.topology.gpus_per_node,
                       gpu = r % ctx.topology.gpus_per_node}
    end
    return out
  end,
  layer_partition = function(ctx)
    local pp, layers = ctx.pool.pp, ctx.model.layers
    local t = {}
    for s = 1, pp do t[s] = layers // pp + ((s <= layers % pp) and 1 or 0) end
    return t
  end,
  expert_placement = function(ctx)
    local t = {}
    for e = 1, ctx.model.experts do t[e] = {(e - 1) % ctx.pool.ep} end
    return t
  end,
  objective = function(ctx)
    return -(ctx.candidate.ttft_ms or 0)
  end,
}
