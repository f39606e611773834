-- Rack-aware placement: spreads the replicas of every pool over the racks,
-- so that losing one rack (its power feed or top-of-rack switch) takes down
-- at most ceil(replicas / racks) replicas of any pool.
--
-- Replica i of a pool goes to rack i mod racks, or to the next rack with
-- room; inside a rack every tp group stays on one node, on consecutive
-- GPUs. Racks come from hardware.nodes_per_rack (without it every node is a
-- rack of its own).
return function(ctx)
  local topo = ctx.topology
  local per_rack = topo.nodes_per_rack or 1
  local racks = (topo.nodes + per_rack - 1) // per_rack
  local used = {} -- used[node + 1]: GPUs taken on that node
  for n = 1, topo.nodes do used[n] = 0 end

  -- The tp groups of each instance, keyed "pool/instance".
  local tp_groups = {}
  for _, g in ipairs(ctx.groups) do
    if g.kind == "tp" then
      local key = g.pool .. "/" .. g.instance
      tp_groups[key] = tp_groups[key] or {}
      table.insert(tp_groups[key], g.ranks)
    end
  end

  -- Tries to put every group on nodes of one rack; on success records the
  -- GPUs in out and returns true, else changes nothing.
  local function fit(rack, groups, out)
    local first = rack * per_rack
    local last = math.min(first + per_rack, topo.nodes) - 1
    local trial = {}
    for n = first, last do trial[n] = used[n + 1] end
    local spots = {}
    for i, ranks in ipairs(groups) do
      local node
      for n = first, last do
        if topo.gpus_per_node - trial[n] >= #ranks then
          node = n
          break
        end
      end
      if not node then return false end
      spots[i] = {node, trial[node]}
      trial[node] = trial[node] + #ranks
    end
    for n = first, last do used[n + 1] = trial[n] end
    for i, ranks in ipairs(groups) do
      for k, r in ipairs(ranks) do
        out[#out + 1] = {rank = r, node = spots[i][1], gpu = spots[i][2] + k - 1}
      end
    end
    return true
  end

  local out = {}
  for _, pool in ipairs(ctx.pools) do
    for inst = 0, pool.replicas - 1 do
      local groups = tp_groups[pool.name .. "/" .. inst]
      local placed = false
      for k = 0, racks - 1 do
        if fit((inst + k) % racks, groups, out) then
          placed = true
          break
        end
      end
      if not placed then
        error(string.format("no rack has room for replica %d of pool `%s` (%d GPUs)",
                            inst, pool.name, pool.size))
      end
    end
  end
  return out
end
