//go:build !unix

package proxy

import (
	"io"
	"net"
	"os"
)

// Only unix builds read and write by raw system calls (rawio_unix.go).
func rawConnIO(c net.Conn) io.ReadWriter { return c }

func pollableStdio(stdin io.Reader, stdout io.Writer) (io.Reader, io.Writer, func()) {
	return stdin, stdout, func() {}
}

type stdioPipes struct {
	in              io.Reader
	out             io.Writer
	inFile, outFile *os.File
	restore, drop   func()
}

func pollablePipes(stdin io.Reader, stdout io.Writer) stdioPipes {
	return stdioPipes{in: stdin, out: stdout, restore: func() {}, drop: func() {}}
}
