-- Unbounded recursion that is not a tail call.
local function down(n)
  return 1 + down(n + 1)
end
return function(ctx)
  return down(1)
end
