#!/usr/bin/env bash
# bench-wan.sh — the client engine over an emulated WAN (see BENCHMARKS.md).
#
# Part 1 (seed 004's table): one large file through `wanda wan` (rate and
# window as on a long path) at several RTTs, with wanda cp at 1/4/8/16
# streams, curl (one stream), and xrdcp --streams against XRootD's own
# server on the same disk behind an identical relay. Every figure is also
# given as a fraction of the link rate.
# Part 2 (seed 001): many small files at one RTT: wanda cp -r --parallel M
# vs a sequential curl loop (a new curl per file, as scripts do) and one
# curl invocation with all URLs (keep-alive, still one file at a time).
#
# Run with `make bench-wan` (builds bin/wanda). It installs nothing; a
# missing peer (curl, xrootd/xrdcp) is skipped with a note. Loopback only.
#
# Environment:
#   RTTS        RTTs to sweep ("0 10 20 40 70", ms)
#   RATE        link rate for the relay (1Gbit)
#   WINDOW      per-connection window of the relay (4MiB)
#   SIZE        large file size (512M)
#   STREAMS     wanda stream counts ("1 4 8 16")
#   XRD_STREAMS xrdcp --streams values ("4 8")
#   SMALL_N     number of small files (1000)   SMALL_SIZE  their size (64K)
#   SMALL_RTT   RTT for part 2 (50)            PARALLEL    wanda --parallel (64)
#   CURL_LOOP_N files timed in the curl loop (200; extrapolated to SMALL_N)
#   PARTS       "1 2" (both), "1" or "2"
#   WANDA       wanda binary (bin/wanda)       OUT_DIR  results (bench-results)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WANDA=${WANDA:-$ROOT/bin/wanda}
OUT_DIR=${OUT_DIR:-$ROOT/bench-results}
RTTS=${RTTS:-"0 10 20 40 70"}
RATE=${RATE:-1Gbit}
WINDOW=${WINDOW:-4MiB}
SIZE=${SIZE:-512M}
STREAMS=${STREAMS:-"1 4 8 16"}
XRD_STREAMS=${XRD_STREAMS:-"4 8"}
SMALL_N=${SMALL_N:-1000}
SMALL_SIZE=${SMALL_SIZE:-64K}
SMALL_RTT=${SMALL_RTT:-50}
PARALLEL=${PARALLEL:-64}
CURL_LOOP_N=${CURL_LOOP_N:-200}
PARTS=${PARTS:-"1 2"}

log() { printf '[bench-wan] %s\n' "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}
have() { command -v "$1" >/dev/null 2>&1; }

to_bytes() {
	local v=$1 n u
	n=${v%[KkMmGg]}
	u=${v#"$n"}
	[[ $n =~ ^[0-9]+$ ]] || die "bad size '$v'"
	case $u in
	'') echo "$n" ;; [Kk]) echo $((n << 10)) ;; [Mm]) echo $((n << 20)) ;; [Gg]) echo $((n << 30)) ;;
	esac
}
rate_bits() {
	local v=${1,,} n
	n=${v%%[a-z]*}
	case ${v#"$n"} in
	g | gbit | gbps) echo $((n * 1000000000)) ;; m | mbit | mbps) echo $((n * 1000000)) ;;
	k | kbit | kbps) echo $((n * 1000)) ;; '' | bit) echo "$n" ;; *) die "bad RATE $1" ;;
	esac
}
SIZE_BYTES=$(to_bytes "$SIZE")
SMALL_BYTES=$(to_bytes "$SMALL_SIZE")
LINK_MBPS=$(awk -v b="$(rate_bits "$RATE")" 'BEGIN{printf "%.1f", b/8/1e6}')

[[ -x $WANDA ]] || die "$WANDA not built (make build)"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/bench-wan.XXXXXX")
chmod 755 "$WORK"
PIDS=()
cleanup() {
	local rc=$? p
	trap - EXIT INT TERM
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$WORK"
	exit "$rc"
}
trap cleanup EXIT INT TERM

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}
wait_port() {
	local port=$1 i
	for i in $(seq 1 200); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
		sleep 0.05
	done
	die "nothing listening on 127.0.0.1:$port"
}
now() { date +%s.%N; }
mbps() { awk -v b="$1" -v t="$2" 'BEGIN{printf "%.1f", b/1e6/t}'; }

mkdir -p "$WORK/data/small" "$WORK/out" "$OUT_DIR"
log "generating a $SIZE file and $SMALL_N files of $SMALL_SIZE in $WORK"
head -c "$SIZE_BYTES" /dev/urandom >"$WORK/data/big.bin"
for i in $(seq -w 1 "$SMALL_N"); do head -c "$SMALL_BYTES" /dev/urandom >"$WORK/data/small/f$i.bin"; done

# --- servers --------------------------------------------------------------
WPORT=$(free_port)
"$WANDA" server --export-ro "/data=$WORK/data" --listen "127.0.0.1:$WPORT" --log-level warn >"$WORK/wanda.log" 2>&1 &
PIDS+=($!)
wait_port "$WPORT"
# Warm the page cache and the server's checksum cache once.
"$WANDA" sum "http://127.0.0.1:$WPORT/data/big.bin" >/dev/null

XPORT=""
if have xrootd && have xrdcp && id xrootd >/dev/null 2>&1; then
	XPORT=$(free_port)
	mkdir -p "$WORK/xrd"
	chown -R xrootd:xrootd "$WORK/xrd"
	chmod -R a+rX "$WORK/data"
	cat >"$WORK/xrd/xrootd.cfg" <<EOF
all.role server
all.export /
oss.localroot $WORK/data
xrd.port $XPORT
xrd.allow host localhost
all.adminpath $WORK/xrd
all.pidpath $WORK/xrd
EOF
	setpriv --reuid=xrootd --regid=xrootd --init-groups xrootd -I v4 -c "$WORK/xrd/xrootd.cfg" -l "=$WORK/xrd/xrootd.log" >/dev/null 2>&1 &
	PIDS+=($!)
	wait_port "$XPORT"
	XRD_VERSION=$(xrootd -v 2>&1 | head -1)
	log "XRootD $XRD_VERSION on 127.0.0.1:$XPORT"
else
	log "note: xrootd/xrdcp not installed (apt-get install xrootd-server xrootd-client): xrdcp columns skipped"
fi

# relay RTT TARGETPORT -> prints the relay's port
relay() {
	local rtt=$1 to=$2 port
	port=$(free_port)
	"$WANDA" wan --listen "127.0.0.1:$port" --to "127.0.0.1:$to" --rtt "${rtt}ms" --rate "$RATE" --window "$WINDOW" --log-level warn >>"$WORK/wan.log" 2>&1 &
	PIDS+=($!)
	wait_port "$port"
	echo "$port"
}

RESULTS="$OUT_DIR/bench-wan-$(date +%Y%m%d-%H%M%S).md"
{
	echo "# bench-wan $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo
	echo "Host: $(nproc) cores, $(uname -r), $("$WANDA" --version 2>/dev/null | head -1). Relay: \`wanda wan --rate $RATE --window $WINDOW\` (link = $LINK_MBPS MB/s)."
	echo
} >"$RESULTS"

# --- part 1: RTT sweep -------------------------------------------------------
if [[ " $PARTS " == *" 1 "* ]]; then
	header="| RTT ms |"
	sep="|---|"
	for s in $STREAMS; do header+=" wanda $s |"; sep+="---|"; done
	have curl && { header+=" curl |"; sep+="---|"; }
	if [[ -n $XPORT ]]; then for s in $XRD_STREAMS; do header+=" xrdcp $s |"; sep+="---|"; done; fi
	{
		echo "## Large file ($SIZE) vs RTT: MB/s (fraction of the link)"
		echo
		echo "$header"
		echo "$sep"
	} >>"$RESULTS"
	cell() { # bytes seconds
		local r
		r=$(mbps "$1" "$2")
		awk -v r="$r" -v l="$LINK_MBPS" 'BEGIN{printf " %.1f (%.2f) |", r, r/l}'
	}
	for rtt in $RTTS; do
		wrelay=$(relay "$rtt" "$WPORT")
		row="| $rtt |"
		for s in $STREAMS; do
			rm -f "$WORK/out/big.bin"
			t0=$(now)
			"$WANDA" cp -q --streams "$s" "http://127.0.0.1:$wrelay/data/big.bin" "$WORK/out/big.bin"
			t1=$(now)
			cmp -s "$WORK/data/big.bin" "$WORK/out/big.bin" || die "wanda cp produced a different file"
			row+=$(cell "$SIZE_BYTES" "$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')")
			log "rtt $rtt ms: wanda $s streams done"
		done
		if have curl; then
			t0=$(now)
			curl -sSf --noproxy '*' -o "$WORK/out/curl.bin" "http://127.0.0.1:$wrelay/data/big.bin"
			t1=$(now)
			row+=$(cell "$SIZE_BYTES" "$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')")
			log "rtt $rtt ms: curl done"
		fi
		if [[ -n $XPORT ]]; then
			xrelay=$(relay "$rtt" "$XPORT")
			for s in $XRD_STREAMS; do
				rm -f "$WORK/out/xrd.bin"
				t0=$(now)
				xrdcp -s -f --streams "$s" "root://127.0.0.1:$xrelay//big.bin" "$WORK/out/xrd.bin"
				t1=$(now)
				row+=$(cell "$SIZE_BYTES" "$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')")
				log "rtt $rtt ms: xrdcp $s streams done"
			done
		fi
		echo "$row" >>"$RESULTS"
		# Stop this RTT's relays before the next ones start.
		pkill -f -- "--rtt ${rtt}ms --rate $RATE" 2>/dev/null || true
	done
	echo >>"$RESULTS"
fi

# --- part 2: small files ------------------------------------------------------
if [[ " $PARTS " == *" 2 "* ]]; then
	srelay=$(relay "$SMALL_RTT" "$WPORT")
	base="http://127.0.0.1:$srelay/data/small"
	total=$((SMALL_N * SMALL_BYTES))
	batches=$(((SMALL_N + PARALLEL - 1) / PARALLEL))
	ideal=$(awk -v b="$total" -v l="$LINK_MBPS" -v n="$batches" -v r="$SMALL_RTT" 'BEGIN{printf "%.2f", b/1e6/l + n*r/1000}')
	rm -rf "$WORK/out/small"
	t0=$(now)
	"$WANDA" cp -q -r --parallel "$PARALLEL" "$base/" "$WORK/out/small"
	t1=$(now)
	tw=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b-a}')
	diff -r "$WORK/data/small" "$WORK/out/small" >/dev/null || die "wanda cp -r produced different files"
	log "small files: wanda $tw s"
	{
		echo "## $SMALL_N files of $SMALL_SIZE at RTT $SMALL_RTT ms"
		echo
		echo "| client | seconds | files/s | MB/s | vs wanda |"
		echo "|---|---|---|---|---|"
		awk -v t="$tw" -v n="$SMALL_N" -v b="$total" -v p="$PARALLEL" 'BEGIN{printf "| wanda cp -r --parallel %d | %.2f | %.0f | %.1f | 1 |\n", p, t, n/t, b/1e6/t}'
	} >>"$RESULTS"
	if have curl; then
		mkdir -p "$WORK/out/curl1" "$WORK/out/curl2"
		t0=$(now)
		for i in $(seq -w 1 "$SMALL_N" | head -n "$CURL_LOOP_N"); do
			curl -sSf --noproxy '*' -o "$WORK/out/curl1/f$i.bin" "$base/f$i.bin"
		done
		t1=$(now)
		tl=$(awk -v a="$t0" -v b="$t1" -v k="$CURL_LOOP_N" -v n="$SMALL_N" 'BEGIN{printf "%.2f", (b-a)*n/k}')
		log "small files: curl loop (extrapolated from $CURL_LOOP_N) $tl s"
		args=()
		for i in $(seq -w 1 "$SMALL_N"); do args+=(-o "$WORK/out/curl2/f$i.bin" "$base/f$i.bin"); done
		t0=$(now)
		curl -sSf --noproxy '*' "${args[@]}"
		t1=$(now)
		tk=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b-a}')
		log "small files: curl keep-alive $tk s"
		{
			awk -v t="$tl" -v w="$tw" -v n="$SMALL_N" -v b="$total" -v k="$CURL_LOOP_N" 'BEGIN{printf "| curl loop (one process per file; %d timed, scaled) | %.2f | %.0f | %.1f | %.1fx slower |\n", k, t, n/t, b/1e6/t, t/w}'
			awk -v t="$tk" -v w="$tw" -v n="$SMALL_N" -v b="$total" 'BEGIN{printf "| curl, all URLs in one call (keep-alive) | %.2f | %.0f | %.1f | %.1fx slower |\n", t, n/t, b/1e6/t, t/w}'
		} >>"$RESULTS"
	fi
	{
		echo
		awk -v i="$ideal" -v w="$tw" -v p="$PARALLEL" -v nb="$batches" 'BEGIN{printf "Ideal (bytes / link rate + one RTT per batch of %d = %d batches): %.2f s; wanda is %.2fx of it.\n", p, nb, i, w/i}'
		echo
	} >>"$RESULTS"
fi
cat "$RESULTS"
log "results in $RESULTS"
