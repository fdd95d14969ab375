package store

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// mapWALFile gives f, a new and empty log file, size bytes of disk space
// (fallocate(2): a full disk is an error here, never a fault on a later
// store) and maps them, shared: a store into the mapping is in the
// operating system's page cache, as a write(2) would be, and survives
// kill -9. A file system without fallocate gets nil and no error: the
// file is then written by write(2).
func mapWALFile(f *os.File, size int) ([]byte, error) {
	fd := int(f.Fd())
	for {
		err := unix.Fallocate(fd, 0, 0, int64(size))
		if err == nil {
			break
		}
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
			return nil, fmt.Errorf("%w: reserve %d bytes for the write-ahead log: %w", ErrStoreFull, size, err)
		}
		return nil, nil
	}
	m, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		// Give the space back: the file is written by write(2) instead.
		if terr := f.Truncate(0); terr != nil {
			return nil, fmt.Errorf("map the write-ahead log: %w (and truncating it back: %w)", err, terr)
		}
		return nil, nil
	}
	return m, nil
}

// unmapWALFile releases a mapping of mapWALFile.
func unmapWALFile(m []byte) {
	if m != nil {
		_ = unix.Munmap(m)
	}
}

// syncMapped flushes m[from:to] of a mapped log file to the disk.
func syncMapped(m []byte, from, to int) error {
	from &^= os.Getpagesize() - 1
	for {
		err := unix.Msync(m[from:to], unix.MS_SYNC)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}
