return function(ctx)
  error(nil)
end
