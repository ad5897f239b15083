# Sourced by the recipe's shell scripts after they set their defaults:
# turns "--some-option VALUE" (or "--some-option=VALUE") into some_option=VALUE,
# but only for variables the script defined, so a misspelt option is an error.
# "--help" prints the script's header comment (its lines starting with "# ").
#
# Pass-through: a script that sets pass_to=SCRIPT before sourcing this file (the
# recipes: pass_to=prepare.sh) takes SCRIPT's options too.  One it does not
# define itself goes, as "--name value", into the array passed_opts, for SCRIPT
# (tools/recipe.sh's prepare_data); SCRIPT's options are the variables it sets
# before it sources this file, as tools/check_args.py reads them.
passed_opts=()
_pass_names=" "
if [ -n "${pass_to:-}" ]; then
  _pass_names=" $(sed -n -e '/^\. tools\/parse_options\.sh/q' -e 's/^\([A-Za-z_][A-Za-z0-9_]*\)=.*/\1/p' \
    -e 's/^declare \([A-Za-z_][A-Za-z0-9_]*\) *\(#.*\)\{0,1\}$/\1/p' "$pass_to" | tr '\n' ' ')"
fi
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
  case "$_var" in pass_to|passed_opts|_*) _known=false ;; *) declare -p "$_var" >/dev/null 2>&1 && _known=true || _known=false ;; esac
  if [ "$_known" = true ]; then
    printf -v "$_var" '%s' "$_val"
  elif [[ "$_pass_names" == *" $_var "* ]]; then
    passed_opts+=("--${_var//_/-}" "$_val")
  else
    echo "$0: unknown option $_opt" >&2; exit 2
  fi
done
unset _opt _val _var _known _pass_names
