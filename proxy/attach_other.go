//go:build !unix

package proxy

import (
	"bufio"
	"io"
	"net"
)

// attachReader returns br: only unix builds read an attached relay by
// blocking system calls (attach_unix.go).
func attachReader(c net.Conn, br *bufio.Reader) (io.Reader, func()) { return br, func() {} }
