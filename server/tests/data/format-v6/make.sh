#!/usr/bin/env bash
# Remakes flushed/ and wal/ with a profiledb binary of the release whose format
# they keep (segment format 6: commit fa85469):
#   git worktree add /tmp/pdb-v6 fa85469 && (cd /tmp/pdb-v6 && cargo build -p profiledb)
#   server/tests/data/format-v6/make.sh /tmp/pdb-v6/target/debug/profiledb
# flushed/: the workload uploaded, then SIGTERM (the head flushed to segments).
# wal/: the same uploads, then SIGKILL at once (everything still in the WAL).
set -euo pipefail
bin=${1:?usage: make.sh PATH-TO-OLD-profiledb}
here=$(cd "$(dirname "$0")" && pwd)
port=47391
run() { # $1: directory, $2: signal
  rm -rf "${here:?}/$1"
  "$bin" serve --data-dir "$here/$1" --listen 127.0.0.1:$port \
    --compaction-interval-minutes 0 --ready-warm-up-secs 0 --memory-mb 256 2>"$here/$1.log" &
  pid=$!
  until curl -sf "http://127.0.0.1:$port/ready" >/dev/null; do sleep 0.1; done
  grep -v '^#' "$here/workload.txt" | while read -r tenant service at stack count; do
    printf '%s %s\n' "$stack" "$count" | curl -sf -X POST -H "X-Scope-OrgID: $tenant" \
      --data-binary @- "http://127.0.0.1:$port/ingest?name=$service.cpu&from=$at" >/dev/null
  done
  kill -s "$2" $pid
  wait $pid || true
  rm -f "$here/$1.log" "$here/$1/LOCK"
}
run flushed TERM
run wal KILL
du -sh "$here/flushed" "$here/wal"
