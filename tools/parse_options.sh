# Sourced by the recipe's shell scripts after they set their defaults:
# turns "--some-option VALUE" (or "--some-option=VALUE") into some_option=VALUE,
# but only for variables the script defined, so a misspelt option is an error.
# "--help" prints the script's header comment (its lines starting with "# ").
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help)
      sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"
      exit 0 ;;
    --*=*) _opt=${1%%=*}; _val=${1#*=}; shift ;;
    --*)
      _opt=$1
      if [ $# -lt 2 ]; then echo "$0: option $_opt needs a value" >&2; exit 2; fi
      _val=$2; shift 2 ;;
    *) echo "$0: unexpected argument '$1' (options look like --name value)" >&2; exit 2 ;;
  esac
  _var=${_opt#--}; _var=${_var//-/_}
  if ! declare -p "$_var" >/dev/null 2>&1; then
    echo "$0: unknown option $_opt" >&2; exit 2
  fi
  printf -v "$_var" '%s' "$_val"
done
unset _opt _val _var
