# mount-bench-lib.sh — sourced by the bench-mount-*.sh scripts: a work
# directory cleaned on exit (mount, server, files), a random file of
# $1 MiB written in 1 MiB writes (as the block cache writes its data
# file: the page cache's folio sizes follow the writes), and a wanda
# server exporting it as /data on a free loopback port ($port).
WANDA=${WANDA:-$ROOT/bin/wanda}
work=$(mktemp -d)
srv_pid= mnt_pid=
cleanup() {
	[[ -n $mnt_pid ]] && kill "$mnt_pid" 2>/dev/null && wait "$mnt_pid" 2>/dev/null
	[[ -n $srv_pid ]] && kill "$srv_pid" 2>/dev/null && wait "$srv_pid" 2>/dev/null
	mountpoint -q "$work/mnt" && fusermount3 -u -z "$work/mnt"
	rm -rf "$work"
}
trap cleanup EXIT

# serve_file MB LOGLEVEL
serve_file() {
	mkdir -p "$work/data" "$work/mnt"
	dd if=/dev/urandom of="$work/data/file.bin" bs=1M count="$1" status=none
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	"$WANDA" server --export "/data=$work/data" --listen "127.0.0.1:$port" --log-level "$2" &
	srv_pid=$!
	for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
}
