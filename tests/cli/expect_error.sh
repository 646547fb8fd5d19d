# Shared by the CLI error tests (source it after setting $tide and fail=0):
# expect_error "<pattern>" args...  runs `tide args...` and expects exit code 1 and exactly one
# line `tide: error: ...` matching the pattern, with no raw library exception text and no blank
# line (an error used to begin with one).
expect_error() {  # expect_error "<pattern>" args...
  local pattern=$1; shift
  local out rc
  out=$("$tide" "$@" 2>&1); rc=$?
  if [ $rc -ne 1 ] || ! grep -q -- "tide: error: .*$pattern" <<<"$out" \
      || [ "$(grep -c 'tide: error' <<<"$out")" -ne 1 ] || grep -q "json.exception\|basic_filebuf" <<<"$out" \
      || grep -q '^$' <<<"$out"; then
    echo "FAILED: tide $* -> rc $rc, output:"; echo "$out"; fail=1
  else
    echo "ok: tide $* -> $(grep 'tide: error' <<<"$out")"
  fi
}
