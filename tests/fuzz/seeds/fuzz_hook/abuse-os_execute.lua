return function(ctx)
  os.execute("echo escaped")
  return {}
end
