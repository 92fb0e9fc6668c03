package x509auth_test

import (
	"crypto/tls"
	"crypto/x509/pkix"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"strings"

	"github.com/wanda-fed/wanda/internal/auth/x509auth"
)

func ExampleFormatDN() {
	fmt.Println(x509auth.FormatDN(pkix.Name{Country: []string{"DE"}, Organization: []string{"GridKa"}, CommonName: "Jörg/Admin"}))
	// Output: /C=DE/O=GridKa/CN=J\xC3\xB6rg\/Admin
}

// A server that asks for grid certificates and proxies, verified after
// the handshake.
func ExampleVerifier() {
	v, err := x509auth.New(x509auth.Config{
		CADir:   "/etc/grid-security/certificates",
		GridMap: "/etc/grid-security/grid-mapfile",
		VOMSDir: "/etc/grid-security/vomsdir",
		Log:     slog.Default(),
	})
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{
		Addr:      ":8443",
		TLSConfig: v.ServerTLS(&tls.Config{MinVersion: tls.VersionTLS12}),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id, err := v.Verify(r.TLS.PeerCertificates)
			if err != nil {
				http.Error(w, err.Error(), http.StatusUnauthorized)
				return
			}
			fmt.Fprintf(w, "hello %s (%s), groups %s\n", id.DN, id.Name, strings.Join(id.FQANs, " "))
		}),
	}
	log.Fatal(srv.ListenAndServeTLS("/etc/grid-security/hostcert.pem", "/etc/grid-security/hostkey.pem"))
}
