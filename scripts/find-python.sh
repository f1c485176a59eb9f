#!/usr/bin/env bash
# Print the path of a Python >= 3.12 interpreter (3.13 preferred), or explain what to install.
# Looks at python3.13/python3.12 on PATH, pyenv's versions, then python3.
set -u
ok() { "$1" -c 'import sys, venv; sys.exit(0 if sys.version_info >= (3, 12) else 1)' >/dev/null 2>&1; }
candidates=(python3.13 python3.12)
for dir in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.13* "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*; do
  [ -x "$dir/bin/python3" ] && candidates+=("$dir/bin/python3")
done
candidates+=(/usr/local/bin/python3.13 /usr/bin/python3.13 /usr/bin/python3.12 python3)
for c in "${candidates[@]}"; do
  if ok "$c"; then
    command -v "$c" 2>/dev/null || echo "$c"
    exit 0
  fi
done
cat >&2 <<'MSG'
error: no Python >= 3.12 found (the portal needs 3.12 or newer; 3.13 is what CI uses).
Install one of:
  - pyenv install 3.13          (then re-run make)
  - apt-get install python3.13 python3.13-venv   (Debian trixie or newer)
or point the Makefile at one: make PYTHON=/path/to/python3.13 ...
MSG
exit 1
