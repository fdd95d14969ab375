//go:build !unix

package proxy

import (
	"io"
	"net"
)

// Only unix builds read and write by raw system calls (rawio_unix.go).
func rawConnIO(c net.Conn) io.ReadWriter { return c }

func pollableStdio(stdin io.Reader, stdout io.Writer) (io.Reader, io.Writer, func()) {
	return stdin, stdout, func() {}
}
