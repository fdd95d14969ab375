package qdrant

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	qc "github.com/qdrant/go-client/qdrant"

	"github.com/foldproxy/foldproxy/fold/memory"
	"github.com/foldproxy/foldproxy/fold/memory/storetest"
	"github.com/foldproxy/foldproxy/policy"
)

// TestSuiteStandIn runs the backend suite against the in-memory Qdrant
// stand-in over a real gRPC connection.
func TestSuiteStandIn(t *testing.T) {
	_, cfg := startStandIn(t)
	storetest.Run(t, func(t *testing.T) memory.Store {
		s, err := Open(t.Context(), Options{Settings: policy.Qdrant{Collection: "fp_" + randHex()}, Project: "p", Config: cfg})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestSuiteRealQdrant runs the same suite against a real Qdrant when
// QDRANT_URL is set (for example: docker run -p 6334:6334 qdrant/qdrant,
// then QDRANT_URL=localhost:6334). Its collections are deleted afterwards.
func TestSuiteRealQdrant(t *testing.T) {
	url := os.Getenv("QDRANT_URL")
	if url == "" {
		t.Skip("QDRANT_URL is not set: no real Qdrant to test against")
	}
	cfg, err := ParseURL(url, os.Getenv("QDRANT_API_KEY"))
	if err != nil {
		t.Fatal(err)
	}
	storetest.Run(t, func(t *testing.T) memory.Store {
		prefix := "fptest_" + randHex()
		s, err := Open(t.Context(), Options{Settings: policy.Qdrant{Collection: prefix}, Project: "p", Config: cfg})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			c, err := qc.NewClient(cfg)
			if err != nil {
				return
			}
			defer c.Close()
			names, _ := c.ListCollections(t.Context())
			for _, n := range names {
				if strings.HasPrefix(n, prefix) {
					_ = c.DeleteCollection(t.Context(), n)
				}
			}
		})
		return s
	})
}

func randHex() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func TestParseURL(t *testing.T) {
	tests := []struct {
		in      string
		host    string
		port    int
		tls, ok bool
	}{
		{"", "localhost", 6334, false, true},
		{"qdrant:6334", "qdrant", 6334, false, true},
		{"http://qdrant.internal:7000", "qdrant.internal", 7000, false, true},
		{"https://cloud.example", "cloud.example", 6334, true, true},
		{"ftp://x", "", 0, false, false},
		{"host:notaport", "", 0, false, false},
		{":6334", "", 0, false, false},
	}
	for _, tt := range tests {
		cfg, err := ParseURL(tt.in, "")
		if (err == nil) != tt.ok {
			t.Errorf("ParseURL(%q) error %v, want ok %v", tt.in, err, tt.ok)
			continue
		}
		if err == nil && (cfg.Host != tt.host || cfg.Port != tt.port || cfg.UseTLS != tt.tls) {
			t.Errorf("ParseURL(%q) = %s:%d tls %v", tt.in, cfg.Host, cfg.Port, cfg.UseTLS)
		}
	}
}

func TestCollectionNames(t *testing.T) {
	s := &Store{prefix: "fm"}
	if got := s.Collection("myproj"); got != "fm_myproj" {
		t.Errorf("Collection(myproj) = %q", got)
	}
	a, b := s.Collection("my proj"), s.Collection("my/proj")
	if a == b || !strings.HasPrefix(a, "fm_my_proj_") {
		t.Errorf("sanitized names collide or are malformed: %q %q", a, b)
	}
	if got := s.Collection(""); !strings.HasPrefix(got, "fm_default") {
		t.Errorf("Collection(\"\") = %q", got)
	}
}
