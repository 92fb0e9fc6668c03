#!/usr/bin/env bash
# bench-mount-seq.sh — a whole file read through `wanda mount` (dd, 1 MiB
# reads, cold) against `wanda cp --checksum none` of it, on loopback, each
# in its own process (BENCHMARKS.md, "The mount"). The server's file is in
# the page cache for both. Prints MB/s of each.
#
# Environment: SIZE_MB (1024), ROUNDS (1), WANDA (bin/wanda)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SIZE_MB=${SIZE_MB:-1024}
ROUNDS=${ROUNDS:-1}
# shellcheck source=mount-bench-lib.sh
. "$ROOT/scripts/mount-bench-lib.sh"
serve_file "$SIZE_MB" error
cat "$work/data/file.bin" >/dev/null
rate() { python3 -c "import sys; print('%s %.0f' % (sys.argv[1], $SIZE_MB*1048576/1e6/(float(sys.argv[3])-float(sys.argv[2]))))" "$@"; }
for _ in $(seq "$ROUNDS"); do
	"$WANDA" mount "http://127.0.0.1:$port/data" "$work/mnt" --cache-dir "$work/cache" 2>/dev/null &
	mnt_pid=$!
	for _ in $(seq 100); do mountpoint -q "$work/mnt" && break; sleep 0.1; done
	t0=$(date +%s.%N)
	dd if="$work/mnt/file.bin" of=/dev/null bs=1M status=none
	rate mount "$t0" "$(date +%s.%N)"
	kill "$mnt_pid" && wait "$mnt_pid" || true
	mnt_pid=
	rm -rf "$work/cache"
	t0=$(date +%s.%N)
	"$WANDA" cp --checksum none "http://127.0.0.1:$port/data/file.bin" "$work/cp.bin" >/dev/null 2>&1
	rate cp "$t0" "$(date +%s.%N)"
	rm -f "$work/cp.bin"
done
