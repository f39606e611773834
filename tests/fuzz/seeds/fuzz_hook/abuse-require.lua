local socket = require("socket")
return function(ctx)
  return {}
end
