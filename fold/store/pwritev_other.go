//go:build !linux

package store

import "os"

// writeAtv writes bufs one after the other at off in f.
func writeAtv(f *os.File, bufs [][]byte, off int64) error {
	for _, b := range bufs {
		if _, err := f.WriteAt(b, off); err != nil {
			return err
		}
		off += int64(len(b))
	}
	return nil
}
