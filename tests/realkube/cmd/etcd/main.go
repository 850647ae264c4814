// Command etcd serves a single-member etcd for tests: no durability (no fsync), loopback only.
//
//	etcd --data-dir DIR --listen-client http://127.0.0.1:PORT --listen-peer http://127.0.0.1:PORT
package main

import (
	"flag"
	"log"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func mustURL(s string) url.URL {
	u, err := url.Parse(s)
	if err != nil {
		log.Fatalf("etcd: bad URL %q: %v", s, err)
	}
	return *u
}

func main() {
	dataDir := flag.String("data-dir", "", "directory for etcd's data (required)")
	client := flag.String("listen-client", "http://127.0.0.1:2379", "client URL")
	peer := flag.String("listen-peer", "http://127.0.0.1:2380", "peer URL")
	flag.Parse()
	if *dataDir == "" {
		log.Fatal("etcd: --data-dir is required")
	}

	cfg := embed.NewConfig()
	cfg.Name = "test"
	cfg.Dir = *dataDir
	cfg.LogLevel = "error"
	// Tests need no durability; fsync dominates etcd's latency on a busy disk.
	cfg.UnsafeNoFsync = true
	// 0 would log every request as slow.
	cfg.WarningApplyDuration = time.Second
	cfg.WarningUnaryRequestDuration = time.Second
	c, p := mustURL(*client), mustURL(*peer)
	cfg.ListenClientUrls = []url.URL{c}
	cfg.AdvertiseClientUrls = []url.URL{c}
	cfg.ListenPeerUrls = []url.URL{p}
	cfg.AdvertisePeerUrls = []url.URL{p}
	cfg.InitialCluster = cfg.Name + "=" + p.String()

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		log.Fatalf("etcd: %v", err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
		log.Printf("etcd: ready on %s", c.String())
	case <-time.After(60 * time.Second):
		e.Server.Stop()
		log.Fatal("etcd: not ready after 60 s")
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case <-sig:
	case err := <-e.Err():
		log.Fatalf("etcd: %v", err)
	}
}
