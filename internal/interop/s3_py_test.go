package interop

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/wanda-fed/wanda/internal/demo"
	"github.com/wanda-fed/wanda/internal/s3test"
)

// uproot reads the demo ROOT file stored in a bucket through a wanda
// server's HTTP (fsspec: one range per request; HTTPSource: multipart
// byteranges) and root:// front-ends.
func TestS3Uproot(t *testing.T) {
	requirePython(t)
	s := s3test.Start(t)
	bucket := s.Bucket(t)
	if _, err := s.Client.FPutObject(t.Context(), bucket, "pre/"+demo.RootPath, filepath.Join(demoData(t), demo.RootPath), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	p := startS3Server(t, s, bucket)
	for _, mode := range []string{"fsspec", "http"} {
		t.Run(mode, func(t *testing.T) {
			uprootCheck(t, p.URL+"/store/"+demo.RootPath, mode)
		})
	}
	t.Run("root", func(t *testing.T) {
		if r := runFor(t, time.Minute, "", "python3", "-c", "import fsspec_xrootd"); r.Err != nil {
			missing(t, "python3 cannot import fsspec_xrootd (pip install fsspec-xrootd)")
		}
		script := `
import sys, json, uproot
t = uproot.open(sys.argv[1])["events"]
a = t.arrays(["px", "nhits"])
print(json.dumps({"entries": t.num_entries, "px10": float(a["px"][10]), "nhits7": int(a["nhits"][7])}))
`
		r := runFor(t, 2*time.Minute, t.TempDir(), "python3", "-c", script, "root://"+p.Addr+"//store/"+demo.RootPath)
		if r.Err != nil {
			t.Fatalf("uproot over root://: %v\n%s\n%s", r.Err, r.Stdout, r.Stderr)
		}
		var out struct {
			Entries int64
			Px10    float64
			Nhits7  int
		}
		lines := bytes.Split(bytes.TrimSpace(r.Stdout), []byte("\n"))
		if err := json.Unmarshal(lines[len(lines)-1], &out); err != nil {
			t.Fatalf("output %q: %v", r.Stdout, err)
		}
		ev10, ev7 := demo.MakeEvent(10), demo.MakeEvent(7)
		if out.Entries != demo.RootEntries || out.Px10 != ev10.Px || out.Nhits7 != int(ev7.NHits) {
			t.Errorf("uproot over root://: %+v, want %d entries, px[10]=%v, nhits[7]=%d", out, demo.RootEntries, ev10.Px, ev7.NHits)
		}
	})
}

// boto3 (the AWS SDK for Python) reads what wanda's S3 export stored
// (a multipart PUT through wanda, with its checksum metadata) and writes
// an object wanda then serves.
func TestS3Boto3(t *testing.T) {
	requireTool(t, "python3")
	if r := runFor(t, time.Minute, "", "python3", "-c", "import boto3"); r.Err != nil {
		missing(t, "python3 cannot import boto3 (pip install boto3)")
	}
	s := s3test.Start(t)
	bucket := s.Bucket(t)
	p := startS3Server(t, s, bucket)
	dir := t.TempDir()
	data := randomBytes(13<<20+1, 21)
	src := filepath.Join(dir, "w.bin")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := curl(t, "-T", src, p.URL+"/store/sub/w.bin"); r.Status != 201 && r.Status != 204 {
		t.Fatalf("PUT status %d", r.Status)
	}
	script := `
import sys, boto3
from botocore.config import Config
s3 = boto3.client("s3", config=Config(s3={"addressing_style": "path"}))
bucket, out, src = sys.argv[1], sys.argv[2], sys.argv[3]
o = s3.get_object(Bucket=bucket, Key="pre/sub/w.bin")
open(out, "wb").write(o["Body"].read())
print("meta", sorted(o["Metadata"].items()))
s3.upload_file(src, bucket, "pre/from-boto3.bin")
`
	got := filepath.Join(dir, "got.bin")
	r := run(t, dir, "env", append(append([]string{"-i"}, s3Env(s)...), "python3", "-c", script, bucket, got, src)...)
	if r.Err != nil {
		t.Fatalf("boto3: %v\n%s\n%s", r.Err, r.Stdout, r.Stderr)
	}
	sameBytes(t, "boto3 get_object of wanda's upload", readFile(t, got), data)
	t.Logf("boto3: %s", r.Stdout)
	r2 := curl(t, p.URL+"/store/from-boto3.bin")
	if r2.Status != 200 {
		t.Fatalf("GET of boto3's object: %d", r2.Status)
	}
	sameBytes(t, "GET through wanda of boto3's upload", r2.Body, data)
	if !strings.Contains(string(r.Stdout), "meta") {
		t.Errorf("boto3 printed %q", r.Stdout)
	}
}

// davix (its S3 support, path style, v4 signatures) reads from the bucket
// what wanda stored there (a multipart PUT) and writes an object wanda
// then serves.
func TestS3Davix(t *testing.T) {
	requireTool(t, "davix-get")
	requireTool(t, "davix-put")
	s := s3test.Start(t)
	bucket := s.Bucket(t)
	p := startS3Server(t, s, bucket)
	dir := t.TempDir()
	data := randomBytes(17<<20+3, 33)
	src := filepath.Join(dir, "w.bin")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := curl(t, "-T", src, p.URL+"/store/w.bin"); r.Status != 201 && r.Status != 204 {
		t.Fatalf("PUT status %d", r.Status)
	}
	auth := []string{"--s3accesskey", s.AccessKey, "--s3secretkey", s.SecretKey, "--s3region", s.Region, "--s3alternate"}
	got := filepath.Join(dir, "got.bin")
	mustRun(t, dir, "davix-get", append(auth, "s3://"+s.Host+"/"+bucket+"/pre/w.bin", got)...)
	sameBytes(t, "davix-get of wanda's upload", readFile(t, got), data)
	mustRun(t, dir, "davix-put", append(auth, src, "s3://"+s.Host+"/"+bucket+"/pre/from-davix.bin")...)
	r := curl(t, p.URL+"/store/from-davix.bin")
	if r.Status != 200 {
		t.Fatalf("GET of davix's object: %d", r.Status)
	}
	sameBytes(t, "GET through wanda of davix's upload", r.Body, data)
}
