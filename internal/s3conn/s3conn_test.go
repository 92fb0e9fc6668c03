package s3conn

import (
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
)

func TestFromEnv(t *testing.T) {
	for _, k := range []string{"AWS_ENDPOINT_URL_S3", "AWS_DEFAULT_REGION", "WANDA_S3_ADDRESSING"} {
		t.Setenv(k, "")
	}
	t.Setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000")
	t.Setenv("AWS_REGION", "eu-west-3")
	c := Conn{}.FromEnv()
	if c.Endpoint != "http://127.0.0.1:9000" || c.Region != "eu-west-3" || c.Addressing != AddressAuto {
		t.Errorf("FromEnv = %+v", c)
	}
	// The config wins over the environment.
	c = Conn{Endpoint: "https://s3.example.org", Region: "r"}.FromEnv()
	if c.Endpoint != "https://s3.example.org" || c.Region != "r" {
		t.Errorf("FromEnv over set fields = %+v", c)
	}
	t.Setenv("AWS_ENDPOINT_URL", "")
	t.Setenv("AWS_REGION", "")
	if c := (Conn{}).FromEnv(); c.Endpoint != "https://s3.us-east-1.amazonaws.com" || c.Region != "us-east-1" {
		t.Errorf("FromEnv with nothing set = %+v", c)
	}
}

func TestAddressing(t *testing.T) {
	for _, tc := range []struct {
		endpoint string
		addr     Addressing
		virtual  bool
	}{
		{"http://127.0.0.1:9000", AddressAuto, false},
		{"http://[::1]:9000", AddressAuto, false},
		{"http://localhost:9000", AddressAuto, false},
		{"https://s3.us-east-1.amazonaws.com", AddressAuto, true},
		{"https://s3.us-east-1.amazonaws.com", AddressPath, false},
		{"https://s3.example.org", AddressVirtual, true},
	} {
		c, err := NewClient(Conn{Endpoint: tc.endpoint, Region: "us-east-1", Addressing: tc.addr, AccessKey: "a", SecretKey: "b"})
		if err != nil {
			t.Fatal(err)
		}
		virtual := isVirtual(t, c)
		if virtual != tc.virtual {
			t.Errorf("%s %s: virtual host style %v, want %v", tc.endpoint, tc.addr, virtual, tc.virtual)
		}
	}
	if _, err := NewClient(Conn{Endpoint: "ftp://x", Region: "r"}); err == nil {
		t.Error("an ftp:// endpoint was accepted")
	}
	if _, err := NewClient(Conn{Endpoint: "http://x", Region: "r", Addressing: "sideways"}); err == nil || !strings.Contains(err.Error(), "sideways") {
		t.Errorf("a bad addressing: %v", err)
	}
}

// isVirtual asks minio-go how it would address bucket "bkt".
func isVirtual(t *testing.T, c *minio.Client) bool {
	u, err := c.PresignedGetObject(t.Context(), "bkt", "k", time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	return strings.HasPrefix(u.Host, "bkt.")
}

// TestClassify: an answer's code decides, its status when it has none
// (HEAD).
func TestClassify(t *testing.T) {
	for _, c := range []struct {
		er   minio.ErrorResponse
		want Kind
	}{
		{minio.ErrorResponse{Code: "NoSuchKey", StatusCode: 404}, NotFound},
		{minio.ErrorResponse{Code: "SignatureDoesNotMatch", StatusCode: 403}, Denied},
		{minio.ErrorResponse{Code: "SlowDown", StatusCode: 503}, Overloaded},
		{minio.ErrorResponse{StatusCode: 412}, Conflict},
		{minio.ErrorResponse{StatusCode: 404}, NotFound},
		{minio.ErrorResponse{Code: "InternalError", StatusCode: 500}, Other},
	} {
		if got := Classify(c.er); got != c.want {
			t.Errorf("Classify(%+v) = %v, want %v", c.er, got, c.want)
		}
	}
}
