#!/usr/bin/env bash
# Build every proof in formal/ with plain coqc, in _CoqProject order; prints the time taken.
# Usage: formal/build.sh   (from anywhere; needs coqc, e.g. apt-get install coq)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
SECONDS=0
for f in $(grep -E '\.v$' _CoqProject); do
  echo "coqc $f"
  coqc -q -R . VerifiedAttn "$f"
done
echo "built $(grep -cE '\.v$' _CoqProject) files in ${SECONDS} s"
