#!/usr/bin/env bash
# bench-s3.sh — an S3 export and s3:// (issue 19, BENCHMARKS.md): reading
# an object through wanda's HTTP and root:// front-ends vs reading it
# directly from the S3 server with the same client (curl on a presigned
# URL), and `wanda cp` uploads vs awscli's, with peak memory.
#
# It wants the MinIO the tests build (internal/s3test; `go test
# ./internal/storage/s3` builds it), curl, xrdcp and awscli (`pip install
# awscli`). Everything binds 127.0.0.1. Environment: SIZE (1G), RUNS (5),
# WANDA (bin/wanda), MINIO (the cached build).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WANDA=${WANDA:-$ROOT/bin/wanda}
SIZE=${SIZE:-1G}
RUNS=${RUNS:-5}
ver=$(sed -n 's/^const MinioVersion = "\(.*\)"$/\1/p' "$ROOT/internal/s3test/s3test.go")
MINIO=${MINIO:-${WANDA_TEST_CACHE:-$HOME/.cache/wanda-test}/minio-$ver/minio}
for tool in curl xrdcp aws "$MINIO" "$WANDA"; do
  command -v "$tool" >/dev/null || { echo "bench-s3: $tool missing" >&2; exit 1; }
done

work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

export AWS_ACCESS_KEY_ID=bench$RANDOM AWS_SECRET_ACCESS_KEY=secret$RANDOM$RANDOM AWS_REGION=us-east-1
MINIO_ROOT_USER=$AWS_ACCESS_KEY_ID MINIO_ROOT_PASSWORD=$AWS_SECRET_ACCESS_KEY MINIO_BROWSER=off MINIO_UPDATE=off \
  "$MINIO" server --address 127.0.0.1:0 "$work/data" >"$work/minio.log" 2>&1 &
pids+=($!)
url_of() { # the first http://127.0.0.1:PORT in a log, waiting for it
  for _ in $(seq 200); do
    u=$(grep -o "$2" "$1" 2>/dev/null | head -1 || true)
    [ -n "$u" ] && { echo "$u"; return; }
    sleep 0.1
  done
  echo "bench-s3: nothing in $1" >&2; exit 1
}
export AWS_ENDPOINT_URL=$(url_of "$work/minio.log" 'http://127\.0\.0\.1:[0-9]*')
for _ in $(seq 100); do curl -sf "$AWS_ENDPOINT_URL/minio/health/ready" && break; sleep 0.1; done
aws s3 mb s3://bench >/dev/null
head -c "$SIZE" /dev/urandom >"$work/file"
aws s3 cp --only-show-errors "$work/file" s3://bench/pre/file
"$WANDA" server --listen 127.0.0.1:0 --export /store=s3://bench/pre --log-format json >"$work/wanda.log" 2>&1 &
wpid=$!
pids+=($wpid)
W=$(url_of "$work/wanda.log" '"url":"http://[^"]*"' | cut -d'"' -f4)
mkdir "$work/px" && ln "$work/file" "$work/px/file"
"$WANDA" server --listen 127.0.0.1:0 --export /px="$work/px" --log-format json >"$work/px.log" 2>&1 &
pids+=($!)
P=$(url_of "$work/px.log" '"url":"http://[^"]*"' | cut -d'"' -f4)
direct=$(aws s3 presign s3://bench/pre/file)
bytes=$(stat -c %s "$work/file")
# A peer for the cost of one proxy hop on this machine: nginx as a
# buffered reverse proxy in front of MinIO (the presigned URL's Host kept).
N=""
if command -v nginx >/dev/null; then
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  mhost=${AWS_ENDPOINT_URL#http://}
  mkdir "$work/ngtmp"
  cat >"$work/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $work/nginx.pid;
error_log $work/nginx.err;
events { worker_connections 64; }
http {
  access_log off;
  client_body_temp_path $work/ngtmp;
  proxy_temp_path $work/ngtmp;
  upstream s3 { server $mhost; keepalive 8; }
  server {
    listen 127.0.0.1:$port;
    location / {
      proxy_pass http://s3; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_set_header Host $mhost;
      proxy_buffering on; proxy_buffers 16 1m; proxy_buffer_size 64k; proxy_max_temp_file_size 0;
    }
  }
}
EOF
  nginx -c "$work/nginx.conf" >/dev/null 2>&1 &
  pids+=($!)
  N="http://127.0.0.1:$port${direct#"$AWS_ENDPOINT_URL"}"
  for _ in $(seq 100); do curl -sf -o /dev/null -r 0-0 "$N" && break; sleep 0.1; done
fi

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
rate() { awk -v b="$bytes" -v s="$1" 'BEGIN {printf "%.0f", b/s/1e6}'; }
cpu() { awk '{print $14+$15}' "/proc/$1/stat"; }

echo "# $(date -u '+%F %H:%M') UTC, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), object $SIZE, $RUNS runs, MB/s medians"
d=(); h=(); r=(); x=(); n=()
c0=$(cpu $wpid)
for _ in $(seq "$RUNS"); do
  d+=("$(curl -s -o /dev/null -w '%{time_total}' "$direct")")
  if [ -n "$N" ]; then n+=("$(curl -s -o /dev/null -w '%{time_total}' "$N")"); fi
  h+=("$(curl -s -o /dev/null -w '%{time_total}' "$W/store/file")")
  s=$(date +%s.%N); xrdcp -f -s "root://${W#http://}//store/file" /dev/null; e=$(date +%s.%N)
  r+=("$(awk -v s="$s" -v e="$e" 'BEGIN {print e-s}')")
  s=$(date +%s.%N); xrdcp -f -s "root://${P#http://}//px/file" /dev/null; e=$(date +%s.%N)
  x+=("$(awk -v s="$s" -v e="$e" 'BEGIN {print e-s}')")
done
c1=$(cpu $wpid)
xm=$(printf '%s\n' "${x[@]}" | median); dm=$(printf '%s\n' "${d[@]}" | median); hm=$(printf '%s\n' "${h[@]}" | median); rm=$(printf '%s\n' "${r[@]}" | median)
echo "read, curl direct from MinIO (presigned):  $(rate "$dm") MB/s"
echo "read, curl through wanda's HTTP:           $(rate "$hm") MB/s  ($(awk -v a="$dm" -v b="$hm" 'BEGIN {printf "%.2f", a/b}')x direct)"
if [ -n "$N" ]; then
  nm=$(printf '%s\n' "${n[@]}" | median)
  echo "read, curl through nginx (reverse proxy):  $(rate "$nm") MB/s  ($(awk -v a="$dm" -v b="$nm" 'BEGIN {printf "%.2f", a/b}')x direct; wanda $(awk -v a="$nm" -v b="$hm" 'BEGIN {printf "%.2f", a/b}')x nginx)"
fi
echo "read, xrdcp through wanda's root://:       $(rate "$rm") MB/s"
echo "read, xrdcp from a wanda POSIX export:    $(rate "$xm") MB/s  (the same file on local disk: xrdcp's own ceiling here)"
echo "wanda CPU per GiB read (HTTP + root://):   $(awk -v t=$((c1 - c0)) -v n="$RUNS" -v b="$bytes" 'BEGIN {printf "%.2f s", t/100/(2*n)/(b/2^30)}')"
echo "wanda server peak RSS:                     $(awk '/VmHWM/ {print $2/1024 " MiB"}' /proc/$wpid/status)"
a=(); w=(); am=0; wm=0
for _ in $(seq "$RUNS"); do
  a+=("$( { /usr/bin/time -f '%e %M' aws s3 cp --only-show-errors "$work/file" s3://bench/up/aws; } 2>&1 | tail -1)")
  w+=("$( { /usr/bin/time -f '%e %M' "$WANDA" cp "$work/file" s3://bench/up/wanda >/dev/null; } 2>&1 | tail -1)")
done
am=$(printf '%s\n' "${a[@]}" | cut -d' ' -f1 | median); wm=$(printf '%s\n' "${w[@]}" | cut -d' ' -f1 | median)
echo "upload, aws s3 cp:                         $(rate "$am") MB/s, peak RSS $(printf '%s\n' "${a[@]}" | cut -d' ' -f2 | sort -n | tail -1) KiB"
echo "upload, wanda cp (4 parts in parallel):    $(rate "$wm") MB/s, peak RSS $(printf '%s\n' "${w[@]}" | cut -d' ' -f2 | sort -n | tail -1) KiB  ($(awk -v a="$am" -v b="$wm" 'BEGIN {printf "%.2f", a/b}')x awscli)"
