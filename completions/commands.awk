# The commands of `rankplan --help`: the first word of each line of its
# "commands:" block.
/^commands:/ { on = 1; next }
on && /^$/ { on = 0 }
on && /^  [a-z]/ { print $1 }
