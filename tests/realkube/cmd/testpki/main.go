// Command testpki writes the keys and certificates a test kube-apiserver needs, into one directory:
//
//	ca.crt            the CA that signed the serving certificate (the kubeconfig's certificate-authority)
//	server.crt/.key   the serving certificate for localhost, 127.0.0.1, ::1 and every --ip given
//	sa.key, sa.pub    the ServiceAccount token signing key pair
//
// Keys are ECDSA P-256: quick to generate, accepted by kube-apiserver for TLS and token signing.
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"log"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

func write(dir, name, kind string, der []byte, mode os.FileMode) {
	data := pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
	if err := os.WriteFile(filepath.Join(dir, name), data, mode); err != nil {
		log.Fatalf("testpki: %v", err)
	}
}

func key() *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		log.Fatalf("testpki: %v", err)
	}
	return k
}

func writeKey(dir, name string, k *ecdsa.PrivateKey) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		log.Fatalf("testpki: %v", err)
	}
	write(dir, name, "PRIVATE KEY", der, 0o600)
}

func main() {
	dir := flag.String("dir", "", "output directory (required)")
	ips := flag.String("ip", "", "extra IP addresses for the serving certificate, comma-separated")
	flag.Parse()
	if *dir == "" {
		log.Fatal("testpki: --dir is required")
	}
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		log.Fatalf("testpki: %v", err)
	}
	now := time.Now().Add(-time.Hour)

	caKey := key()
	ca := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "ferrolb-test-ca"},
		NotBefore:             now,
		NotAfter:              now.Add(10 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		log.Fatalf("testpki: %v", err)
	}
	write(*dir, "ca.crt", "CERTIFICATE", caDER, 0o644)

	addrs := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}
	for _, s := range strings.Split(*ips, ",") {
		if s = strings.TrimSpace(s); s != "" {
			ip := net.ParseIP(s)
			if ip == nil {
				log.Fatalf("testpki: %q is not an IP address", s)
			}
			addrs = append(addrs, ip)
		}
	}
	srvKey := key()
	srv := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now,
		NotAfter:     now.Add(10 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPAddresses:  addrs,
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srv, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		log.Fatalf("testpki: %v", err)
	}
	write(*dir, "server.crt", "CERTIFICATE", srvDER, 0o644)
	writeKey(*dir, "server.key", srvKey)

	saKey := key()
	writeKey(*dir, "sa.key", saKey)
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		log.Fatalf("testpki: %v", err)
	}
	write(*dir, "sa.pub", "PUBLIC KEY", pub, 0o644)
}
