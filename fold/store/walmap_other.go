//go:build !linux

package store

import (
	"errors"
	"os"
)

// mapWALFile maps log files on Linux only: elsewhere they are written by
// write(2).
func mapWALFile(*os.File, int) ([]byte, error) { return nil, nil }

func unmapWALFile([]byte) {}

func syncMapped([]byte, int, int) error {
	return errors.New("the write-ahead log is not mapped on this system")
}
