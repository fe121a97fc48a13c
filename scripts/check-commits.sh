#!/usr/bin/env bash
# scripts/check-commits.sh — every commit after the project adopted short subjects has a
# subject of at most 72 characters, so `git log --oneline` stays readable; the why goes in
# the body (docs/operating.md's contributing notes and CHANGELOG.md say the same).
#
#   scripts/check-commits.sh [BASE]    check BASE..HEAD (default: the last commit before
#                                      the rule, below)
#
# Commits up to and including BASE keep their long subjects: history is not rewritten.
# A shallow clone that lacks BASE checks the commits it has, and says so.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# Characters, not bytes: a subject may hold `§` or `—`.
export LC_ALL=C.UTF-8

# The last commit with the old, long subjects (issue 46 set the limit after it).
BASE=${1:-2edf6f3be944e07e7f180db4f79dec64974df319}
MAX=72

if git cat-file -e "$BASE^{commit}" 2>/dev/null; then
  range="$BASE..HEAD"
elif [[ $(git rev-parse --is-shallow-repository) == true ]]; then
  echo "check-commits: $BASE is not in this shallow clone; checking every commit it has" >&2
  range=HEAD
else
  echo "check-commits: $BASE is not in this repository's history" >&2
  exit 1
fi
# Read first, so that a failing `git log` fails the script (a process
# substitution's status is lost).
subjects=$(git log --no-merges --format='%h%x09%s' "$range")

bad=0
while IFS=$'\t' read -r hash subject; do
  if ((${#subject} > MAX)); then
    printf 'check-commits: %s: subject of %d characters (at most %d): %s\n' \
      "$hash" "${#subject}" "$MAX" "$subject" >&2
    bad=$((bad + 1))
  fi
done <<<"$subjects"

if ((bad > 0)); then
  echo "check-commits: $bad commit subject(s) too long: a short subject, the why in the body" >&2
  exit 1
fi
echo "check-commits: every subject in $range is at most $MAX characters"
