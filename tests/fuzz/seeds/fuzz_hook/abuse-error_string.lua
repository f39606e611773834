local function check(ctx)
  if ctx.topology.nodes < 100 then
    error("need at least 100 nodes, got " .. ctx.topology.nodes)
  end
end
return function(ctx)
  check(ctx)
  return {}
end
