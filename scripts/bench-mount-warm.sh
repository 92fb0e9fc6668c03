#!/usr/bin/env bash
# bench-mount-warm.sh — warm random reads on `wanda mount` against the same
# file on local disk, page cache kept (BENCHMARKS.md, "The mount").
#
# A wanda server on loopback exports a directory holding a SIZE file; it is
# mounted (root or fusermount3), read once whole (cat), then fio reads it
# at random (psync, --invalidate=0: the page cache is kept) through the
# mount and directly from the exported directory, for each block size,
# the two in turn. Prints one line per run: target, bs, MB/s.
#
# Environment:
#   SIZE       file size for fio (64m)          RUNTIME  fio seconds (3)
#   BS         block sizes ("4k 64k 1m")         ROUNDS   rounds (1)
#   MOUNT_ARGS extra `wanda mount` flags (e.g. --passthrough=false)
#   WANDA      the binary (bin/wanda)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SIZE=${SIZE:-64m}
RUNTIME=${RUNTIME:-3}
BS=${BS:-4k 64k 1m}
ROUNDS=${ROUNDS:-1}
MOUNT_ARGS=${MOUNT_ARGS:-}
command -v fio >/dev/null || { echo "fio not installed" >&2; exit 1; }

# shellcheck source=mount-bench-lib.sh
. "$ROOT/scripts/mount-bench-lib.sh"
serve_file $(($(numfmt --from=iec "${SIZE^^}") >> 20)) warn
# shellcheck disable=SC2086
"$WANDA" mount "http://127.0.0.1:$port/data" "$work/mnt" --cache-dir "$work/cache" $MOUNT_ARGS 2>"$work/mount.log" &
mnt_pid=$!
for _ in $(seq 100); do mountpoint -q "$work/mnt" && break; sleep 0.1; done
mountpoint -q "$work/mnt" || { cat "$work/mount.log" >&2; exit 1; }
cat "$work/mnt/file.bin" >/dev/null
cat "$work/data/file.bin" >/dev/null
one() { # target file bs
	fio --name=w --filename="$2" --rw=randread --bs="$3" --size="$SIZE" --ioengine=psync \
		--runtime="$RUNTIME" --time_based --readonly --invalidate=0 --output-format=json 2>/dev/null |
		python3 -c 'import json,sys; j=json.load(sys.stdin); print("%s %s %.0f" % (sys.argv[1], sys.argv[2], j["jobs"][0]["read"]["bw_bytes"]/1e6))' "$1" "$3"
}
for _ in $(seq "$ROUNDS"); do
	for bs in $BS; do
		one mount "$work/mnt/file.bin" "$bs"
		one local "$work/data/file.bin" "$bs"
	done
done
