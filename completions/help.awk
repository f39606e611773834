# The options of a --help text, one per line: NAME, a tab, and the value
# word its help line shows (empty for a flag), e.g. "--format<TAB>text|json",
# "-o<TAB>PLAN". An option line starts with one to four spaces and a dash;
# its options are the comma-separated words before the first two spaces.
/^ +-/ && match($0, /^ +/) && RLENGTH <= 4 {
  line = substr($0, RLENGTH + 1)
  i = index(line, "  ")
  if (i) line = substr(line, 1, i - 1)
  n = split(line, items, ", ")
  value = ""
  if (split(items[n], w, " ") > 1) value = w[2]
  for (k = 1; k <= n; k++) {
    split(items[k], w, " ")
    if (w[1] ~ /^--?[A-Za-z]/) print w[1] "\t" value
  }
}
