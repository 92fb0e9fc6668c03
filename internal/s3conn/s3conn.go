// Package s3conn makes minio-go clients for S3 servers from wanda's
// settings and the standard AWS environment: the server side's S3 exports
// (internal/storage/s3) and the client's s3:// transport share it.
package s3conn

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Addressing selects how the bucket is put in request URLs.
type Addressing string

const (
	// AddressAuto: path style for IP addresses, localhost and non-AWS
	// endpoints, virtual-host style for AWS.
	AddressAuto Addressing = "auto"
	// AddressPath: http://ENDPOINT/BUCKET/KEY.
	AddressPath Addressing = "path"
	// AddressVirtual: http://BUCKET.ENDPOINT/KEY.
	AddressVirtual Addressing = "virtual"
)

// Conn says where the S3 server is and how to sign requests. Empty fields
// come from the standard AWS environment (see FromEnv).
type Conn struct {
	// Endpoint is the server's URL (http://127.0.0.1:9000,
	// https://s3.example.org); empty: AWS_ENDPOINT_URL_S3,
	// AWS_ENDPOINT_URL, or AWS's regional endpoint.
	Endpoint string
	// Region; empty: AWS_REGION, AWS_DEFAULT_REGION, or us-east-1.
	Region     string
	Addressing Addressing
	// AccessKey and SecretKey; empty: the environment
	// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), then
	// the shared credentials file (AWS_SHARED_CREDENTIALS_FILE or
	// ~/.aws/credentials, profile AWS_PROFILE), then anonymous requests.
	AccessKey    string
	SecretKey    string
	SessionToken string
	// Transport, when set, carries the requests (tests).
	Transport http.RoundTripper
	// Wrap, when set, wraps the transport (metrics).
	Wrap func(http.RoundTripper) http.RoundTripper
}

// String shows where the connection goes, never its secrets.
func (c Conn) String() string { return fmt.Sprintf("s3 endpoint %s region %s", c.Endpoint, c.Region) }

// FromEnv fills c's empty fields from the AWS environment.
func (c Conn) FromEnv() Conn {
	if c.Endpoint == "" {
		c.Endpoint = firstEnv("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
	}
	if c.Region == "" {
		c.Region = firstEnv("AWS_REGION", "AWS_DEFAULT_REGION")
	}
	if c.Region == "" {
		c.Region = "us-east-1"
	}
	if c.Endpoint == "" {
		c.Endpoint = "https://s3." + c.Region + ".amazonaws.com"
	}
	if c.Addressing == "" {
		c.Addressing = Addressing(os.Getenv("WANDA_S3_ADDRESSING"))
	}
	if c.Addressing == "" {
		c.Addressing = AddressAuto
	}
	return c
}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}

// NewClient makes a minio-go client for c (after FromEnv).
func NewClient(c Conn) (*minio.Client, error) {
	c = c.FromEnv()
	u, err := url.Parse(c.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("s3 endpoint %q: want http(s)://HOST[:PORT]", c.Endpoint)
	}
	var lookup minio.BucketLookupType
	switch c.Addressing {
	case AddressAuto:
		lookup = minio.BucketLookupAuto
		if isLocal(u.Hostname()) {
			lookup = minio.BucketLookupPath
		}
	case AddressPath:
		lookup = minio.BucketLookupPath
	case AddressVirtual:
		lookup = minio.BucketLookupDNS
	default:
		return nil, fmt.Errorf("s3 addressing %q: want auto, path or virtual", c.Addressing)
	}
	var creds *credentials.Credentials
	if c.AccessKey != "" || c.SecretKey != "" {
		creds = credentials.NewStaticV4(c.AccessKey, c.SecretKey, c.SessionToken)
	} else {
		creds = credentials.NewChainCredentials([]credentials.Provider{
			&credentials.EnvAWS{},
			&credentials.FileAWSCredentials{},
		})
	}
	tr := c.Transport
	if tr == nil {
		t, err := minio.DefaultTransport(u.Scheme == "https")
		if err != nil {
			return nil, err
		}
		t.MaxIdleConnsPerHost = 64
		t.DisableCompression = true
		tr = t
	}
	if c.Wrap != nil {
		tr = c.Wrap(tr)
	}
	return minio.New(u.Host, &minio.Options{
		Creds:        creds,
		Secure:       u.Scheme == "https",
		Region:       c.Region,
		BucketLookup: lookup,
		Transport:    tr,
	})
}

func isLocal(host string) bool {
	return net.ParseIP(host) != nil || host == "localhost" || strings.HasSuffix(host, ".localhost")
}
