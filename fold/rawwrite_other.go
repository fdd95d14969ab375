//go:build !linux

package fold

import "os"

// WriteRaw is f.Write: only Linux builds write by raw system calls
// (rawwrite_linux.go).
func WriteRaw(f *os.File, p []byte) (int, error) { return f.Write(p) }
