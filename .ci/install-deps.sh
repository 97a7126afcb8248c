#!/usr/bin/env bash
# Installs everything the K3 compiler needs on a fresh Debian 12 machine.
# Idempotent: packages already present are skipped; the Python venv is reused.
set -euo pipefail

DEB_PACKAGES=(
  libmlir-22-dev mlir-22-tools llvm-22-dev llvm-22-tools clang-22 libclang-rt-22-dev
  lld-22 ninja-build cmake libgtest-dev libzstd-dev zlib1g-dev clang-format-22
  openmpi-bin
)

missing=()
for p in "${DEB_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: Debian packages present"
fi

# Python dependencies for the oracle and tests, pinned, in a project venv.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${K3_VENV:-$ROOT/.venv}"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$ROOT/python/requirements.txt"
echo "install-deps: python venv at $VENV"
