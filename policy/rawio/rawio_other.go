//go:build !unix

// Package rawio: only unix builds read and write by raw system calls
// (rawio_unix.go); elsewhere File returns the file as it is.
package rawio

import (
	"io"
	"os"
)

// File returns f: only unix builds read and write by raw system calls.
func File(f *os.File) io.ReadWriter { return f }

// WriteFile is f.Write: only unix builds write by raw system calls.
func WriteFile(f *os.File, p []byte) (int, error) { return f.Write(p) }
