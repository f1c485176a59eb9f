#!/usr/bin/env bash
# Usage: wait-for-file.sh FILE LABEL -- COMMAND...
# Wait until FILE exists (the dev cluster writes it when ready), printing a progress line
# every 15 s, then exec COMMAND. Gives up after 30 minutes (a cold Go build takes ~10).
set -u
file=$1; label=$2; shift 2; [ "${1:-}" = "--" ] && shift
start=$(date +%s); next=15
while [ ! -f "$file" ]; do
  now=$(date +%s); waited=$((now - start))
  if [ "$waited" -ge 1800 ]; then echo "$label: gave up waiting for the dev cluster after 30 min" >&2; exit 1; fi
  if [ "$waited" -ge "$next" ]; then echo "$label: waiting for the dev cluster (${waited}s)..."; next=$((next + 15)); fi
  sleep 1
done
exec "$@"
