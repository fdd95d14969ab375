package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"time"

	"github.com/foldproxy/foldproxy/fold"
	"github.com/foldproxy/foldproxy/fold/memory"
	membadger "github.com/foldproxy/foldproxy/fold/memory/badger"
	memqdrant "github.com/foldproxy/foldproxy/fold/memory/qdrant"
	foldstore "github.com/foldproxy/foldproxy/fold/store"
	"github.com/foldproxy/foldproxy/intercept/secrets"
	"github.com/foldproxy/foldproxy/policy"
)

// memoryDefaults fills the memory settings that depend on where foldproxy
// runs: the project (the config file's folder name) and the principal
// (the operating system user).
func memoryDefaults(m policy.Memory, cfgDir string) policy.Memory {
	if m.Project == "" {
		m.Project = filepath.Base(cfgDir)
	}
	if m.Principal == "" {
		if u, err := user.Current(); err == nil && u.Username != "" {
			m.Principal = u.Username
		} else {
			m.Principal = "local"
		}
	}
	if m.Qdrant.URL == "" {
		m.Qdrant.URL = os.Getenv("QDRANT_URL")
	}
	if m.Qdrant.APIKey == "" {
		m.Qdrant.APIKey = os.Getenv("QDRANT_API_KEY")
	}
	if m.Embeddings.APIKey == "" {
		m.Embeddings.APIKey = os.Getenv("EMBEDDINGS_API_KEY")
	}
	return m
}

// memoryDeps are what the memory service needs from the rest of the
// binary; scrub may be nil when scrubbing is off.
type memoryDeps struct {
	store  fold.Store // the embedded backend needs a *foldstore.BadgerStore
	scrub  func(ctx context.Context, text string) (string, error)
	count  func(string) int
	logger *slog.Logger
}

// openMemory opens the configured memory backend and the service over it.
// It returns a nil service when memories are disabled.
func openMemory(ctx context.Context, set policy.Memory, d memoryDeps) (*memory.Service, error) {
	if set.Disabled {
		return nil, nil
	}
	var store memory.Store
	switch set.Backend {
	case "qdrant":
		qs, err := memqdrant.Open(ctx, memqdrant.Options{Settings: set.Qdrant, Project: set.Project})
		if err != nil {
			return nil, err
		}
		store = qs
	default:
		db, ok := d.store.(*foldstore.BadgerStore)
		if !ok {
			d.logger.Warn("memories are off: the state store cannot hold them", "backend", set.Backend)
			return nil, nil
		}
		// Its changes go through the store's write-ahead log, as the
		// store's own do.
		bs, err := membadger.OpenWith(ctx, db.DB(), db.WriteKeys)
		if err != nil {
			return nil, err
		}
		store = bs
	}
	opts := memory.Options{Settings: set, Store: store, Scrub: d.scrub, Count: d.count, Logger: d.logger}
	if set.Embeddings.URL != "" {
		e, err := memory.NewOpenAIEmbedder(set.Embeddings, nil)
		if err != nil {
			store.Close()
			return nil, err
		}
		opts.Embed = e
	}
	svc, err := memory.New(opts)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("memory: %w", err)
	}
	return svc, nil
}

// scrubFunc adapts the scrubber to the memory service: every text is
// scanned within timeout; nil when scrubbing is off.
func scrubFunc(s *secrets.Scrubber, timeout time.Duration) func(context.Context, string) (string, error) {
	if s == nil || s.Disabled() {
		return nil
	}
	return func(ctx context.Context, text string) (string, error) {
		sctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		clean, _, err := s.ScrubText(sctx, text)
		return clean, err
	}
}

// ageMemories forgets aged-out memories at start and then hourly.
func ageMemories(ctx context.Context, mem *memory.Service, logger *slog.Logger) {
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		if n, err := mem.Age(ctx); err != nil {
			logger.Warn("ageing memories", "err", err)
		} else if n > 0 {
			logger.Info("memories aged out", "count", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
