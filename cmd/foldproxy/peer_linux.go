package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// checkPeer refuses a unix socket connection whose peer runs as another
// user (SO_PEERCRED). On the daemon's side the socket's mode (0600)
// already keeps other users out and this is the second lock on the door;
// a relay relies on it alone to know that the socket it found is its own
// user's daemon's.
func checkPeer(c net.Conn) error {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return errors.New("not a unix socket connection")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if cerr != nil {
		return cerr
	}
	if int(cred.Uid) != os.Getuid() {
		return fmt.Errorf("the peer (pid %d) runs as uid %d, not %d", cred.Pid, cred.Uid, os.Getuid())
	}
	return nil
}

// tcpPeerSupported: this system can tell which user owns the other end of
// a loopback TCP connection (tcpPeerUID).
const tcpPeerSupported = true

// tcpPeerUID returns the uid owning the socket at the other end of c, a
// TCP connection between two sockets of this machine (a loopback
// listener's): the socket whose local address is c's remote address and
// whose remote address is c's local address. The kernel keeps the uid of
// the process that made each socket; sock_diag (NETLINK_SOCK_DIAG) looks
// that one socket up by its addresses, and /proc/net/tcp (or tcp6), read
// whole, is the fallback where sock_diag is not available. A peer that
// cannot be found (it closed already) is an error.
func tcpPeerUID(c net.Conn) (int, error) {
	local, ok1 := c.LocalAddr().(*net.TCPAddr)
	remote, ok2 := c.RemoteAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return 0, errors.New("not a TCP connection")
	}
	// The peer's socket: local = our remote, remote = our local.
	uid, err := sockDiagUID(remote, local)
	if err == nil {
		return uid, nil
	}
	uid, perr := procNetUID(remote, local)
	if perr != nil {
		return 0, fmt.Errorf("finding the user of the peer %s: sock_diag: %v; /proc/net: %w", remote, err, perr)
	}
	return uid, nil
}

// sockDiagUID asks sock_diag for the uid of the TCP socket whose local
// address is src and whose remote address is dst.
func sockDiagUID(src, dst *net.TCPAddr) (int, error) {
	family, s, d := tcpFamily(src, dst)
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return 0, fmt.Errorf("netlink socket: %w", err)
	}
	defer unix.Close(fd)
	// The kernel answers while it handles the request; the timeout only
	// bounds a kernel that would not.
	tv := unix.Timeval{Sec: 1}
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	// struct nlmsghdr (16 bytes), then struct inet_diag_req_v2 (56).
	const reqLen = 16 + 56
	var req [reqLen]byte
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], reqLen)
	ne.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(req[8:], 1) // sequence
	r := req[16:]
	r[0] = byte(family)
	r[1] = unix.IPPROTO_TCP
	ne.PutUint32(r[4:], 0xffffffff) // every TCP state
	// struct inet_diag_sockid: ports and addresses in network order, then
	// the interface (any) and the cookie (INET_DIAG_NOCOOKIE).
	id := r[8:]
	binary.BigEndian.PutUint16(id[0:], uint16(src.Port))
	binary.BigEndian.PutUint16(id[2:], uint16(dst.Port))
	copy(id[4:20], s)
	copy(id[20:36], d)
	ne.PutUint32(id[40:], 0xffffffff)
	ne.PutUint32(id[44:], 0xffffffff)
	if err := unix.Sendto(fd, req[:], 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, fmt.Errorf("netlink request: %w", err)
	}
	var buf [512]byte
	n, _, err := unix.Recvfrom(fd, buf[:], 0)
	if err != nil {
		return 0, fmt.Errorf("netlink answer: %w", err)
	}
	if n < 16 {
		return 0, errors.New("netlink answer: too short")
	}
	switch ne.Uint16(buf[4:]) {
	case unix.NLMSG_ERROR:
		if n >= 20 {
			if errno := -int32(ne.Uint32(buf[16:])); errno > 0 {
				return 0, fmt.Errorf("sock_diag: %w", syscall.Errno(errno))
			}
		}
		return 0, errors.New("sock_diag: an error without its number")
	case unix.SOCK_DIAG_BY_FAMILY:
		// struct inet_diag_msg: family, state, timer, retrans (4), the
		// socket id (48), expires, rqueue, wqueue (12), then uid.
		const uidAt = 16 + 4 + 48 + 12
		if n < uidAt+4 {
			return 0, errors.New("sock_diag: answer too short")
		}
		return int(ne.Uint32(buf[uidAt:])), nil
	}
	return 0, fmt.Errorf("sock_diag: unexpected answer of type %d", ne.Uint16(buf[4:]))
}

// tcpFamily returns the address family of a connection between src and
// dst and their addresses as sock_diag and /proc/net spell them: 4 bytes
// for IPv4 (an IPv4-mapped IPv6 address included: the kernel keys such
// sockets by their IPv4 addresses), 16 for IPv6.
func tcpFamily(src, dst *net.TCPAddr) (family int, s, d []byte) {
	if s4, d4 := src.IP.To4(), dst.IP.To4(); s4 != nil && d4 != nil {
		return unix.AF_INET, s4, d4
	}
	return unix.AF_INET6, src.IP.To16(), dst.IP.To16()
}

// procNetUID finds the uid of the TCP socket whose local address is src
// and whose remote address is dst in /proc/net/tcp or /proc/net/tcp6.
func procNetUID(src, dst *net.TCPAddr) (int, error) {
	family, s, d := tcpFamily(src, dst)
	files := []string{"/proc/net/tcp", "/proc/net/tcp6"}
	if family == unix.AF_INET6 {
		files = files[1:]
	}
	want := procNetAddr(s, src.Port) + " " + procNetAddr(d, dst.Port)
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			return 0, err
		}
		v6 := strings.HasSuffix(name, "6")
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.Fields(line)
			// sl local rem st queues timer retrnsmt uid ...
			if len(f) < 8 {
				continue
			}
			if match := f[1] + " " + f[2]; match == want || v6 && family == unix.AF_INET && match == procNetAddr(v4mapped(s), src.Port)+" "+procNetAddr(v4mapped(d), dst.Port) {
				uid, err := strconv.Atoi(f[7])
				if err != nil {
					return 0, fmt.Errorf("%s: uid %q: %w", name, f[7], err)
				}
				return uid, nil
			}
		}
	}
	return 0, fmt.Errorf("no socket %s → %s in /proc/net", src, dst)
}

// procNetAddr spells an address and port as /proc/net/tcp does: each
// 32-bit word of the address in network order read as a host integer, in
// hex, then the port.
func procNetAddr(ip []byte, port int) string {
	var b strings.Builder
	for i := 0; i+4 <= len(ip); i += 4 {
		fmt.Fprintf(&b, "%08X", binary.NativeEndian.Uint32(ip[i:]))
	}
	fmt.Fprintf(&b, ":%04X", port)
	return b.String()
}

// v4mapped is the IPv4-mapped IPv6 form of a 4-byte address.
func v4mapped(ip4 []byte) []byte {
	return append([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff}, ip4...)
}
