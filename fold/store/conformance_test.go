package store_test

import (
	"testing"

	"github.com/foldproxy/foldproxy/fold/store"
	"github.com/foldproxy/foldproxy/fold/store/storetest"
)

func TestMemStoreConformance(t *testing.T) {
	storetest.Run(t, func(*testing.T) storetest.Store { return store.NewMemStore() })
}

func TestBadgerStoreConformance(t *testing.T) {
	storetest.RunDurable(t, func(t *testing.T, dir string) storetest.Store {
		s, err := store.OpenBadger(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// The store as serve opens it by default (fold.fsync false).
func TestBadgerStoreNoFsyncConformance(t *testing.T) {
	storetest.RunDurable(t, func(t *testing.T, dir string) storetest.Store {
		s, err := store.OpenBadgerFsync(dir, nil, false)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
