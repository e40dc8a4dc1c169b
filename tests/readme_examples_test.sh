#!/usr/bin/env bash
# The README's first-hour commands, run exactly as written: the Quick start's scripts/quickstart.sh
# (it must end by printing the path of the curves it drew), then every line of the README's block
# marked "readme-examples" from the repository root; the generate example must print the sorted
# digits. They write runs/quickstart/ (the quickstart replaces that run each time): a run the user
# had there is moved aside first and put back at the end, whatever the outcome (after a kill it
# is left in runs/quickstart.kept-by-readme-test).
#   tests/readme_examples_test.sh REPOSITORY_ROOT
set -euo pipefail
cd "${1:?usage: readme_examples_test.sh REPOSITORY_ROOT}"
log=$(mktemp "${TMPDIR:-/tmp}/shardrl_readme.XXXXXX")
kept=runs/quickstart.kept-by-readme-test
[[ ! -e $kept ]] || { echo "readme_examples_test: $kept exists (an earlier test's kill left it): put it back first" >&2; exit 1; }
if [[ -e runs/quickstart ]]; then mv runs/quickstart "$kept"; fi
restore() {
  rm -f "$log"
  if [[ -e $kept ]]; then rm -rf runs/quickstart && mv "$kept" runs/quickstart; fi
}
trap restore EXIT

scripts/quickstart.sh >"$log" 2>&1 || { tail -30 "$log"; echo "readme_examples_test: scripts/quickstart.sh failed" >&2; exit 1; }
last=$(tail -n 1 "$log")
[[ $last == runs/quickstart/metrics.png && -s $last ]] ||
  { tail -5 "$log"; echo "readme_examples_test: the quickstart did not end with its curves ('$last')" >&2; exit 1; }

# The lines of the fenced block after the marker, until the fence closes.
mapfile -t commands < <(awk '/<!-- readme-examples -->/ {marked = 1; next}
                              marked && /^```/ {if (inside) exit; inside = 1; next}
                              inside && NF {print}' README.md)
[[ ${#commands[@]} -ge 3 ]] || { echo "readme_examples_test: no readme-examples block in README.md" >&2; exit 1; }
for command in "${commands[@]}"; do
  out=$(bash -c "$command" 2>&1) || { echo "$out"; echo "readme_examples_test: failed as written: $command" >&2; exit 1; }
  if [[ $command == *" generate "* && $out != "1 2 3 9" ]]; then
    echo "readme_examples_test: '$command' printed '$out', not the sorted digits '1 2 3 9'" >&2
    exit 1
  fi
  echo "ok: $command"
done
echo "readme_examples_test: ok (${#commands[@]} commands)"
