#!/usr/bin/env bash
# Formats the project's C++ with clang-format-22 (LLVM style, .clang-format).
# Usage: tools/format.sh [--check]   (--check: fail on any difference)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
FMT="${CLANG_FORMAT:-clang-format-22}"
mapfile -t files < <(git ls-files '*.cpp' '*.h')
if [ "${1:-}" = "--check" ]; then
  "$FMT" --dry-run -Werror "${files[@]}"
else
  "$FMT" -i "${files[@]}"
fi
