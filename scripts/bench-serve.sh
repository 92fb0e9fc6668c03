#!/usr/bin/env bash
# bench-serve.sh — wanda vs nginx vs iperf3 on loopback (see BENCHMARKS.md).
#
# Run it with `make bench-serve` (which builds bin/wanda first). It installs
# nothing: it wants nginx, curl, iperf3 and wrk (Debian/Ubuntu:
# `apt-get install nginx curl iperf3 wrk`) and skips, with a note, whatever
# part needs a missing tool. Everything binds 127.0.0.1 only.
#
# Environment:
#   SIZE          size of the test file: bytes or with a K/M/G suffix (1G)
#   RUNS          whole-file rounds, interleaved wanda/nginx (5)
#   RANGES        ranges in the multi-range request (1000)
#   RANGE_LEN     bytes per range (4096)
#   WRK_DURATION  wrk duration per run (10s); wrk rounds = RUNS/2+1
#   WRK_THREADS   wrk -t (2)     WRK_CONNS  wrk -c (8)   WRK_TIMEOUT  wrk --timeout (10s)
#   IPERF_TIME    iperf3 -t seconds (5)
#   NGINX_NOPUSH_OFF  also time a second nginx with tcp_nopush off (1; 0 = no)
#   WANDA         path of the wanda binary (bin/wanda)
#   OUT_DIR       where the results file goes (bench-results)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WANDA=${WANDA:-$ROOT/bin/wanda}
OUT_DIR=${OUT_DIR:-$ROOT/bench-results}
SIZE_ARG=${SIZE:-1G}
RUNS=${RUNS:-5}
RANGES=${RANGES:-1000}
RANGE_LEN=${RANGE_LEN:-4096}
WRK_DURATION=${WRK_DURATION:-10s}
WRK_THREADS=${WRK_THREADS:-2}
WRK_CONNS=${WRK_CONNS:-8}
WRK_TIMEOUT=${WRK_TIMEOUT:-10s}
IPERF_TIME=${IPERF_TIME:-5}
NGINX_NOPUSH_OFF=${NGINX_NOPUSH_OFF:-1}
WRK_RUNS=$((RUNS / 2 + 1))

log() { printf '[bench-serve] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# --- sizes --------------------------------------------------------------
to_bytes() {
	local v=$1 n u
	n=${v%[KkMmGgTt]}
	u=${v#"$n"}
	[[ $n =~ ^[0-9]+$ ]] || die "bad size '$v' (want bytes or N[KMGT])"
	case $u in
	'') echo "$n" ;;
	[Kk]) echo $((n << 10)) ;;
	[Mm]) echo $((n << 20)) ;;
	[Gg]) echo $((n << 30)) ;;
	[Tt]) echo $((n << 40)) ;;
	esac
}
SIZE_BYTES=$(to_bytes "$SIZE_ARG")
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "RUNS must be a positive integer"
((SIZE_BYTES >= RANGES * RANGE_LEN * 2)) ||
	die "SIZE ($SIZE_BYTES bytes) too small for $RANGES ranges of $RANGE_LEN bytes"

human_size() {
	awk -v b="$1" 'BEGIN {
		if (b >= 2^30 && b % 2^30 == 0) printf "%d GiB", b / 2^30
		else if (b >= 2^20) printf "%.0f MiB", b / 2^20
		else printf "%d bytes", b }'
}

# --- work dir and cleanup -----------------------------------------------
WORK=$(mktemp -d "${TMPDIR:-/tmp}/bench-serve.XXXXXX")
PIDS=()
cleanup() {
	local rc=$? p
	trap - EXIT INT TERM
	for p in "${PIDS[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	for p in "${PIDS[@]}"; do
		wait "$p" 2>/dev/null || true
	done
	rm -rf "$WORK"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
# nginx workers drop to 'nobody' when started as root: let them in.
chmod 755 "$WORK"

# --- tools --------------------------------------------------------------
[[ -x $WANDA ]] || die "$WANDA not found: run 'make build' (or 'make bench-serve')"
have() { command -v "$1" >/dev/null 2>&1; }
# Notes go to a file: note() is also called from $(...) subshells.
NOTES_FILE=$WORK/notes.md
note() { printf -- '- %s\n' "$*" >>"$NOTES_FILE"; log "note: $*"; }
MISSING=()
for t in nginx curl iperf3 wrk; do have "$t" || MISSING+=("$t"); done
HAVE_PY=0
have python3 && HAVE_PY=1
if ((${#MISSING[@]})); then
	note "missing: ${MISSING[*]} — install with: apt-get install ${MISSING[*]}; the parts that need them are skipped"
fi
have nginx && HAVE_NGINX=1 || HAVE_NGINX=0
have curl && HAVE_CURL=1 || HAVE_CURL=0
have iperf3 && HAVE_IPERF=1 || HAVE_IPERF=0
have wrk && HAVE_WRK=1 || HAVE_WRK=0

USED_PORTS=" "
# free_port VAR: sets VAR to a port nothing listens on (and not yet handed
# out by this run). Not in $(...): USED_PORTS must survive.
free_port() {
	local -n _port=$1
	local p i
	for i in $(seq 1 200); do
		if ((HAVE_PY)); then
			p=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
		else
			p=$((20000 + RANDOM % 40000))
			# Something answering means taken; refused means free.
			if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then continue; fi
		fi
		[[ $USED_PORTS == *" $p "* ]] && continue
		USED_PORTS+="$p "
		_port=$p
		return 0
	done
	die "no free port found"
}

# wait_http NAME PID URL: poll until URL answers 200 (or, without curl,
# until the port accepts), failing early if the process died.
wait_http() {
	local name=$1 pid=$2 url=$3 hostport i code
	hostport=${url#http://}
	hostport=${hostport%%/*}
	for i in $(seq 1 200); do
		kill -0 "$pid" 2>/dev/null || { log "$name exited during start-up"; return 1; }
		if ((HAVE_CURL)); then
			code=$(curl -s -o /dev/null -I --max-time 2 -w '%{http_code}' "$url" || true)
			[[ $code == 200 ]] && return 0
		elif (exec 3<>"/dev/tcp/${hostport%:*}/${hostport#*:}") 2>/dev/null; then
			return 0
		fi
		sleep 0.05
	done
	log "$name did not answer 200 on $url within 10 s"
	return 1
}

median() { # numbers as arguments
	printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END {
		if (NR == 0) { print "nan"; exit }
		if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
minof() { printf '%s\n' "$@" | sort -g | head -n1; }
maxof() { printf '%s\n' "$@" | sort -g | tail -n1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 > 0 && a != "" && a != "n/a") printf "%.3f", a / b; else print "n/a" }'; }
fmt0() { awk -v a="$1" 'BEGIN { if (a == "" || a == "n/a") print "n/a"; else printf "%.0f", a }'; }
fmt1() { awk -v a="$1" 'BEGIN { if (a == "" || a == "n/a") print "n/a"; else printf "%.1f", a }'; }

# Other work on the machine skews everything: record it.
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?")
if awk -v l="${LOAD_START%% *}" -v n="$(nproc)" 'BEGIN { exit !(l + 0 > n / 4) }'; then
	note "machine busy at start (load average $LOAD_START on $(nproc) CPUs): figures may be noisy"
fi

# --- data ---------------------------------------------------------------
DOCROOT=$WORK/root
DATA=$DOCROOT/store
FILE=$DATA/bench.bin
URLPATH=/store/bench.bin
mkdir -p "$DATA"
chmod -R 755 "$DOCROOT"
log "creating $(human_size "$SIZE_BYTES") of random data in $FILE"
head -c "$SIZE_BYTES" /dev/urandom >"$FILE"
chmod 644 "$FILE"
[[ $(stat -c %s "$FILE") == "$SIZE_BYTES" ]] || die "short test file"
log "warming the page cache"
cat "$FILE" >/dev/null
cat "$FILE" >/dev/null

# --- servers ------------------------------------------------------------
free_port WANDA_PORT
WANDA_URL=http://127.0.0.1:$WANDA_PORT$URLPATH
"$WANDA" server --export "/store=$DATA" --listen "127.0.0.1:$WANDA_PORT" --log-level warn \
	>"$WORK/wanda.log" 2>&1 &
WANDA_PID=$!
PIDS+=("$WANDA_PID")
wait_http wanda "$WANDA_PID" "$WANDA_URL" || { cat "$WORK/wanda.log" >&2; exit 1; }
log "wanda pid $WANDA_PID on 127.0.0.1:$WANDA_PORT"

# start_nginx DIR NOPUSH URLVAR: a throw-away nginx (config as in
# docs/development.md, Peers) serving DOCROOT; sets URLVAR to the file's URL.
start_nginx() {
	local dir=$WORK/$1 nopush=$2 port pid
	local -n _url=$3
	free_port port
	mkdir -p "$dir"
	cat >"$dir/nginx.conf" <<EOF
daemon off;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
worker_processes 2;
events {}
http {
    access_log off;
    default_type application/octet-stream;
    sendfile on;
    tcp_nopush $nopush;
    large_client_header_buffers 4 64k;
    client_body_temp_path $dir/client_body;
    proxy_temp_path $dir/proxy;
    fastcgi_temp_path $dir/fastcgi;
    uwsgi_temp_path $dir/uwsgi;
    scgi_temp_path $dir/scgi;
    server {
        listen 127.0.0.1:$port;
        root $DOCROOT;
        max_ranges 2000;
    }
}
EOF
	nginx -e "$dir/error.log" -p "$dir" -c "$dir/nginx.conf" >"$dir/stdout.log" 2>&1 &
	pid=$!
	PIDS+=("$pid")
	_url=http://127.0.0.1:$port$URLPATH
	wait_http "$1" "$pid" "$_url" || { cat "$dir/"*.log >&2; exit 1; }
	log "$1 (tcp_nopush $nopush) pid $pid on 127.0.0.1:$port"
}
NGINX_URL=
NGINX2_URL=
if ((HAVE_NGINX)); then
	start_nginx nginx on NGINX_URL
	# The same nginx without TCP_CORK: wanda does not cork, and on loopback
	# cork moves nginx's figure by tens of percent (see BENCHMARKS.md).
	if ((NGINX_NOPUSH_OFF)); then start_nginx nginx-nopush-off off NGINX2_URL; fi
else
	note "nginx missing: no nginx baseline (apt-get install nginx)"
fi

# --- whole-file throughput ----------------------------------------------
W_MBS=()
N_MBS=()
N2_MBS=()
# fetch URL: prints MB/s (10^6 bytes/s) of one whole-file download.
fetch() {
	local out size t
	out=$(curl -s -o /dev/null -w '%{http_code} %{size_download} %{time_total}' "$1") ||
		die "curl $1 failed"
	read -r code size t <<<"$out"
	[[ $code == 200 ]] || die "GET $1 answered $code"
	[[ $size == "$SIZE_BYTES" ]] || die "GET $1 gave $size bytes, want $SIZE_BYTES"
	awk -v s="$size" -v t="$t" 'BEGIN { printf "%.1f", s / t / 1e6 }'
}
if ((HAVE_CURL)); then
	log "whole-file GET: $RUNS interleaved rounds (curl -> /dev/null)"
	for i in $(seq 1 "$RUNS"); do
		# Alternate who goes first so neither always gets the warmer turn.
		if ((i % 2)); then order="w n n2"; else order="n2 n w"; fi
		for s in $order; do
			if [[ $s == w ]]; then
				v=$(fetch "$WANDA_URL")
				W_MBS+=("$v")
				log "  round $i wanda $v MB/s"
			elif [[ $s == n && -n $NGINX_URL ]]; then
				v=$(fetch "$NGINX_URL")
				N_MBS+=("$v")
				log "  round $i nginx $v MB/s"
			elif [[ $s == n2 && -n $NGINX2_URL ]]; then
				v=$(fetch "$NGINX2_URL")
				N2_MBS+=("$v")
				log "  round $i nginx (tcp_nopush off) $v MB/s"
			fi
		done
	done
else
	note "curl missing: whole-file throughput and multi-range checks skipped (apt-get install curl)"
fi

# --- iperf3 ceiling -----------------------------------------------------
IPERF_MBS=
if ((HAVE_IPERF)); then
	free_port IPORT
	iperf3 -s -1 -B 127.0.0.1 -p "$IPORT" >"$WORK/iperf3-server.log" 2>&1 &
	IPID=$!
	PIDS+=("$IPID")
	log "iperf3 loopback, 1 stream, ${IPERF_TIME}s"
	# iperf3_mbs FILE: receiver MB/s from iperf3 -J output, or nothing.
	iperf3_mbs() {
		if ((HAVE_PY)); then
			python3 -c 'import json, sys
try:
    print("%.1f" % (json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"] / 8e6))
except Exception:
    pass' "$1"
		else
			awk '/"sum_received"/ { f = 1 } f && /"bits_per_second"/ { gsub(/[^0-9.e+]/, "", $2); printf "%.1f\n", $2 / 8e6; exit }' "$1"
		fi
	}
	# Poll: a client that finds nobody listening fails at once (iperf3 3.12
	# -J still exits 0 then: judge by the JSON); a bare connect probe would
	# use up the one-off (-1) server.
	for i in $(seq 1 100); do
		kill -0 "$IPID" 2>/dev/null || break
		iperf3 -c 127.0.0.1 -p "$IPORT" -P 1 -t "$IPERF_TIME" -J >"$WORK/iperf3.json" 2>"$WORK/iperf3.err" || true
		IPERF_MBS=$(iperf3_mbs "$WORK/iperf3.json")
		[[ -n $IPERF_MBS ]] && break
		grep -q 'refused' "$WORK/iperf3.json" "$WORK/iperf3.err" 2>/dev/null || break
		sleep 0.05
	done
	if [[ -n $IPERF_MBS ]]; then
		log "  iperf3 $IPERF_MBS MB/s"
	else
		note "iperf3 run failed: $(grep -h '"error"' "$WORK/iperf3.json" 2>/dev/null | head -n1) $(cat "$WORK/iperf3.err" "$WORK/iperf3-server.log" 2>/dev/null | head -n3 | tr '\n' ' ')"
		kill "$IPID" 2>/dev/null || true
	fi
	wait "$IPID" 2>/dev/null || true
else
	note "iperf3 missing: no loopback ceiling (apt-get install iperf3)"
fi

# --- multi-range --------------------------------------------------------
STRIDE=$((SIZE_BYTES / RANGES))
RANGE_HDR=$(awk -v n="$RANGES" -v st="$STRIDE" -v l="$RANGE_LEN" 'BEGIN {
	printf "bytes="
	for (i = 0; i < n; i++) printf "%s%d-%d", (i ? "," : ""), i * st, i * st + l - 1 }')
log "multi-range: $RANGES ranges x $RANGE_LEN bytes, header ${#RANGE_HDR} bytes"

W_MR_OK=0
N_MR_OK=0
W_MR_BODY=
N_MR_BODY=
# check_multi NAME URL: one curl, want 206 multipart with RANGES parts.
check_multi() {
	local name=$1 url=$2 out code size ctype parts
	out=$(curl -s -D "$WORK/mr-$name.hdr" -o "$WORK/mr-$name.body" \
		-w '%{http_code} %{size_download}' -H "Range: $RANGE_HDR" "$url") || {
		note "$name: multi-range curl failed"
		return 1
	}
	read -r code size <<<"$out"
	ctype=$(grep -i '^content-type:' "$WORK/mr-$name.hdr" | tr -d '\r' | head -n1)
	parts=$(grep -aci '^content-range:' "$WORK/mr-$name.body" || true)
	rm -f "$WORK/mr-$name.body"
	log "  $name: status $code, $size bytes, $parts parts, ${ctype:-no Content-Type}"
	case $code in
	206) ;;
	200)
		note "$name answered 200 (the whole file) to the $RANGES-range request, not 206 multipart"
		return 1
		;;
	400)
		note "$name answered 400 to the $RANGES-range request (Range header ${#RANGE_HDR} bytes: header buffer too small?)"
		return 1
		;;
	*)
		note "$name answered $code to the $RANGES-range request"
		return 1
		;;
	esac
	if [[ ${ctype,,} != *multipart/byteranges* ]]; then
		note "$name: 206 but Content-Type '$ctype', not multipart/byteranges"
		return 1
	fi
	if [[ $parts != "$RANGES" ]]; then
		note "$name: 206 multipart with $parts parts, want $RANGES"
		return 1
	fi
	echo "$size"
}
if ((HAVE_CURL)); then
	W_MR_BODY=$(check_multi wanda "$WANDA_URL") && W_MR_OK=1
	if [[ -n $NGINX_URL ]]; then
		N_MR_BODY=$(check_multi nginx "$NGINX_URL") && N_MR_OK=1
	fi
elif ((HAVE_WRK)); then
	# No way to verify the answer shape; wrk still counts non-2xx answers.
	W_MR_OK=1
	[[ -n $NGINX_URL ]] && N_MR_OK=1
fi

W_RPS=()
N_RPS=()
# run_wrk NAME URL: prints requests/s; notes errors and non-2xx answers.
run_wrk() {
	local name=$1 url=$2 out rps bad
	out=$(wrk -t"$WRK_THREADS" -c"$WRK_CONNS" -d"$WRK_DURATION" --timeout "$WRK_TIMEOUT" -H "Range: $RANGE_HDR" "$url" 2>&1) || {
		note "$name: wrk failed: $(echo "$out" | tail -n2 | tr '\n' ' ')"
		return 1
	}
	rps=$(awk '/^Requests\/sec:/ { print $2 }' <<<"$out")
	bad=$(grep -E 'Non-2xx|Socket errors' <<<"$out" | tr -s ' ' | tr '\n' ' ' || true)
	[[ -n $bad ]] && note "$name wrk: $bad"
	[[ -n $rps ]] || {
		note "$name: no Requests/sec in wrk output"
		return 1
	}
	echo "$rps"
}
if ((HAVE_WRK)); then
	if ((W_MR_OK || N_MR_OK)); then
		log "multi-range load: $WRK_RUNS interleaved rounds of wrk -t$WRK_THREADS -c$WRK_CONNS -d$WRK_DURATION"
		for i in $(seq 1 "$WRK_RUNS"); do
			if ((i % 2)); then order="w n"; else order="n w"; fi
			for s in $order; do
				if [[ $s == w ]] && ((W_MR_OK)); then
					v=$(run_wrk wanda "$WANDA_URL") && W_RPS+=("$v") && log "  round $i wanda $v req/s"
				elif [[ $s == n ]] && ((N_MR_OK)); then
					v=$(run_wrk nginx "$NGINX_URL") && N_RPS+=("$v") && log "  round $i nginx $v req/s"
				fi
			done
		done
	fi
	((W_MR_OK)) || note "wanda multi-range answer wrong: wrk run against wanda skipped"
	if [[ -n $NGINX_URL ]] && ((!N_MR_OK)); then
		note "nginx multi-range answer wrong: wrk run against nginx skipped"
	fi
else
	note "wrk missing: multi-range load test skipped (apt-get install wrk)"
fi

# --- report -------------------------------------------------------------
W_MED=n/a W_MIN=n/a W_MAX=n/a N_MED=n/a N_MIN=n/a N_MAX=n/a
if ((${#W_MBS[@]})); then W_MED=$(median "${W_MBS[@]}") W_MIN=$(minof "${W_MBS[@]}") W_MAX=$(maxof "${W_MBS[@]}"); fi
if ((${#N_MBS[@]})); then N_MED=$(median "${N_MBS[@]}") N_MIN=$(minof "${N_MBS[@]}") N_MAX=$(maxof "${N_MBS[@]}"); fi
N2_MED=n/a N2_MIN=n/a N2_MAX=n/a
if ((${#N2_MBS[@]})); then N2_MED=$(median "${N2_MBS[@]}") N2_MIN=$(minof "${N2_MBS[@]}") N2_MAX=$(maxof "${N2_MBS[@]}"); fi
WR_MED=n/a WR_MIN=n/a WR_MAX=n/a NR_MED=n/a NR_MIN=n/a NR_MAX=n/a
if ((${#W_RPS[@]})); then WR_MED=$(median "${W_RPS[@]}") WR_MIN=$(minof "${W_RPS[@]}") WR_MAX=$(maxof "${W_RPS[@]}"); fi
if ((${#N_RPS[@]})); then NR_MED=$(median "${N_RPS[@]}") NR_MIN=$(minof "${N_RPS[@]}") NR_MAX=$(maxof "${N_RPS[@]}"); fi
IP=${IPERF_MBS:-n/a}
# Payload rate of the multi-range answers: body bytes x req/s.
mr_mbs() { awk -v b="$1" -v r="$2" 'BEGIN { if (b + 0 > 0 && r != "n/a") printf "%.0f", b * r / 1e6; else print "n/a" }'; }
verdict() { awk -v r="$1" -v g="$2" 'BEGIN { if (r == "n/a") print "not measured"; else if (r + 0 >= g + 0) print "met"; else print "NOT met" }'; }
R_WN=$(ratio "$W_MED" "$N_MED")
R_WI=$(ratio "$W_MED" "$IP")
R_NI=$(ratio "$N_MED" "$IP")
R_MR=$(ratio "$WR_MED" "$NR_MED")

nginx_v=$( (nginx -v 2>&1 || true) | head -n1)
curl_v=$( (curl --version 2>/dev/null || echo "curl: missing") | head -n1)
wrk_v=$( (wrk -v 2>&1 || true) | head -n1)
iperf_v=$( (iperf3 --version 2>/dev/null || echo "iperf3: missing") | head -n1)
go_v=$( (go version 2>/dev/null || echo "go: not on PATH") | head -n1)
cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null || true)
wanda_v=$("$WANDA" --version 2>/dev/null | head -n1 || true)

STAMP=$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$OUT_DIR"
RESULT=$OUT_DIR/serve-$STAMP.md
{
	echo "## Serving: wanda vs nginx vs iperf3 (loopback) — $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo
	echo "Command: \`make bench-serve\` (SIZE=$SIZE_ARG RUNS=$RUNS)"
	echo
	echo "Machine: $(nproc) CPUs (${cpu:-unknown CPU}), kernel $(uname -r), $go_v,"
	echo "$nginx_v, $curl_v, $wrk_v, $iperf_v, ${wanda_v:-wanda}."
	echo "Load average at start / end: $LOAD_START / $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?")."
	echo
	echo "### Whole-file GET, $(human_size "$SIZE_BYTES") page-cached, curl -> /dev/null, $RUNS interleaved rounds"
	echo
	echo "| | median MB/s | min | max | / nginx | / iperf3 |"
	echo "|---|---:|---:|---:|---:|---:|"
	echo "| wanda | $(fmt0 "$W_MED") | $(fmt0 "$W_MIN") | $(fmt0 "$W_MAX") | $R_WN | $R_WI |"
	echo "| nginx | $(fmt0 "$N_MED") | $(fmt0 "$N_MIN") | $(fmt0 "$N_MAX") | $(ratio "$N_MED" "$N_MED") | $R_NI |"
	if ((${#N2_MBS[@]})); then
		echo "| nginx, tcp_nopush off | $(fmt0 "$N2_MED") | $(fmt0 "$N2_MIN") | $(fmt0 "$N2_MAX") | $(ratio "$N2_MED" "$N_MED") | $(ratio "$N2_MED" "$IP") |"
	fi
	echo "| iperf3, 1 stream (${IPERF_TIME}s) | $(fmt0 "$IP") | | | | $(ratio "$IP" "$IP") |"
	echo
	echo "Runs (MB/s): wanda ${W_MBS[*]:-none}; nginx ${N_MBS[*]:-none}${N2_MBS[*]:+; nginx tcp_nopush off ${N2_MBS[*]}}. MB = 10^6 bytes."
	echo
	echo "### Multi-range GET, $RANGES ranges x $RANGE_LEN bytes spread over the file, wrk -t$WRK_THREADS -c$WRK_CONNS -d$WRK_DURATION, $WRK_RUNS interleaved rounds"
	echo
	echo "| | median req/s | min | max | body bytes | payload MB/s | / nginx |"
	echo "|---|---:|---:|---:|---:|---:|---:|"
	echo "| wanda | $(fmt1 "$WR_MED") | $(fmt1 "$WR_MIN") | $(fmt1 "$WR_MAX") | ${W_MR_BODY:-n/a} | $(mr_mbs "$W_MR_BODY" "$WR_MED") | $R_MR |"
	echo "| nginx | $(fmt1 "$NR_MED") | $(fmt1 "$NR_MIN") | $(fmt1 "$NR_MAX") | ${N_MR_BODY:-n/a} | $(mr_mbs "$N_MR_BODY" "$NR_MED") | $(ratio "$NR_MED" "$NR_MED") |"
	echo
	echo "Runs (req/s): wanda ${W_RPS[*]:-none}; nginx ${N_RPS[*]:-none}."
	echo
	echo "### Goals"
	echo
	echo "- wanda/nginx whole file >= 0.95: $R_WN — $(verdict "$R_WN" 0.95)"
	echo "- wanda/iperf3 >= 0.80: $R_WI — $(verdict "$R_WI" 0.80) (nginx/iperf3: $R_NI)"
	if ((${#N2_MBS[@]})); then
		echo "- wanda / nginx with tcp_nopush off (neither corks): $(ratio "$W_MED" "$N2_MED")"
	fi
	echo "- multi-range wanda/nginx req/s: $R_MR"
	if [[ -s $NOTES_FILE ]]; then
		echo
		echo "### Notes"
		echo
		cat "$NOTES_FILE"
	fi
} | tee "$RESULT"
log "results written to $RESULT"
