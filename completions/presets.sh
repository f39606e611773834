# The preset names of one catalog kind ($1: models or hardware) of the
# catalog that the binary $2 uses: $RANKPLAN_CATALOG, else the data
# directory its --version names. Shared by the bash and zsh completion.
_rankplan_presets() {
  local bin=${2:-rankplan} cat=$RANKPLAN_CATALOG
  if [ -z "$cat" ]; then
    cat=$("$bin" --version 2>/dev/null | sed -n 's/^data: //p')
    [ -n "$cat" ] && cat=$cat/plans/catalog
  fi
  [ -d "$cat/$1" ] || return 0
  find "$cat/$1" -maxdepth 1 -type f -name '*.yaml' | sed 's|.*/||; s/\.yaml$//' | LC_ALL=C sort
}
