-- Prefill/decode pairs on one node: replica i of the prefill pool and
-- replica i of the decode pool share a node, so the KV cache a prefill
-- instance hands to its decode partner moves over NVLink rather than the
-- scale-out network.
--
-- Needs one prefill and one decode pool with the same number of replicas,
-- and a pair (prefill instance + decode instance) that fits in one node;
-- several pairs share a node when they fit. Other pools follow on the GPUs
-- left, in rank order.
return function(ctx)
  local topo = ctx.topology
  local prefill, decode
  for _, p in ipairs(ctx.pools) do
    if p.role == "prefill" and not prefill then prefill = p end
    if p.role == "decode" and not decode then decode = p end
  end
  if not prefill or not decode then
    error("pd_same_node needs a prefill pool and a decode pool")
  end
  if prefill.replicas ~= decode.replicas then
    error(string.format("pd_same_node pairs replicas: prefill has %d, decode has %d",
                        prefill.replicas, decode.replicas))
  end
  local pair = prefill.size + decode.size
  if pair > topo.gpus_per_node then
    error(string.format("a prefill/decode pair needs %d GPUs, nodes have %d",
                        pair, topo.gpus_per_node))
  end
  local per_node = topo.gpus_per_node // pair
  if (prefill.replicas + per_node - 1) // per_node > topo.nodes then
    error(string.format("%d pairs of %d GPUs need more than %d nodes",
                        prefill.replicas, pair, topo.nodes))
  end

  local out, used = {}, {}
  for n = 1, topo.nodes do used[n] = 0 end
  local function put(rank, node)
    out[#out + 1] = {rank = rank, node = node, gpu = used[node + 1]}
    used[node + 1] = used[node + 1] + 1
  end
  for i = 0, prefill.replicas - 1 do
    local node = i // per_node
    for k = 0, prefill.size - 1 do put(prefill.first_rank + i * prefill.size + k, node) end
    for k = 0, decode.size - 1 do put(decode.first_rank + i * decode.size + k, node) end
  end
  -- Any other pool: instance by instance on the first node with room, so
  -- that an instance never straddles nodes.
  for _, p in ipairs(ctx.pools) do
    if p ~= prefill and p ~= decode then
      for i = 0, p.replicas - 1 do
        local node
        for n = 0, topo.nodes - 1 do
          if topo.gpus_per_node - used[n + 1] >= p.size then
            node = n
            break
          end
        end
        if not node then
          error(string.format("no node has room for replica %d of pool `%s`", i, p.name))
        end
        for k = 0, p.size - 1 do put(p.first_rank + i * p.size + k, node) end
      end
    end
  end
  return out
end
