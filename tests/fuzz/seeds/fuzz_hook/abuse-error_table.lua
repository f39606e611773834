return function(ctx)
  error({code = 42})
end
