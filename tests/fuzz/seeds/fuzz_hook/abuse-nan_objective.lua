return function(ctx)
  return 0 / 0
end
