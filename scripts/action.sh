#!/usr/bin/env bash
# The run logic of planc's GitHub Action (action.yml), kept here so it can be tested.
#
# Runs `planc check` twice over the same files: once writing SARIF to INPUT_SARIF_FILE, once
# printing INPUT_FORMAT (github annotations, or text) to stdout. Writes `exit-code` and, when
# planc wrote the report, `sarif-file` to $GITHUB_OUTPUT, appends the summary to
# $GITHUB_STEP_SUMMARY, and exits with planc's exit code (0 passed, 1 findings failed, 2 unusable
# input or a bad input of the action).
#
# Inputs (environment): INPUT_PATHS (default "."), INPUT_FORMAT (github | text), INPUT_FAIL_ON
# (error | warning | never), INPUT_SARIF_FILE (default planc.sarif), INPUT_ARGS (more arguments
# for planc check). Paths and arguments are split on whitespace.
set -u

paths_text=${INPUT_PATHS:-.}
format=${INPUT_FORMAT:-github}
fail_on=${INPUT_FAIL_ON:-error}
sarif=${INPUT_SARIF_FILE:-planc.sarif}
output=${GITHUB_OUTPUT:-/dev/null}
summary=${GITHUB_STEP_SUMMARY:-/dev/null}

refuse() {
  echo "::error title=planc action::$1"
  echo "exit-code=2" >>"$output"
  exit 2
}

case "$format" in
  github | text) ;;
  *) refuse "format must be github or text, not '$format'" ;;
esac
# `level` decides the exit code; the shown run always exits 0 (only the SARIF run's code counts)
# but says "failed" under the same terms.
case "$fail_on" in
  error) level=() shown_level=() ;;
  warning) level=(--strict) shown_level=(--strict) ;;
  never) level=(--exit-zero) shown_level=() ;;
  *) refuse "fail-on must be error, warning or never, not '$fail_on'" ;;
esac

read -r -a paths <<<"$paths_text"
read -r -a extra <<<"${INPUT_ARGS:-}"
if [ "${#paths[@]}" -eq 0 ]; then
  paths=(.)
fi

rm -f -- "$sarif"
# ${a[@]+"${a[@]}"}: an empty array under `set -u` in bash before 4.4 (macOS's bash 3.2) too.
planc check --format sarif --output-file "$sarif" ${level[@]+"${level[@]}"} \
  ${extra[@]+"${extra[@]}"} -- "${paths[@]}"
code=$?

shown=$(planc check --format "$format" --exit-zero ${shown_level[@]+"${shown_level[@]}"} \
  ${extra[@]+"${extra[@]}"} -- "${paths[@]}")
printf '%s\n' "$shown"

echo "exit-code=$code" >>"$output"
if [ -f "$sarif" ]; then
  echo "sarif-file=$sarif" >>"$output"
fi

last=$(printf '%s\n' "$shown" | tail -n 1)
{
  echo "### planc check"
  echo
  case "$code" in
    0) echo "Passed (exit 0): $last" ;;
    1) echo "Failed (exit 1): $last" ;;
    *) echo "Unusable input or usage error (exit $code): $last" ;;
  esac
} >>"$summary"

exit "$code"
