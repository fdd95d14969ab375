//go:build unix && !linux

package proxy

import "syscall"

// On unix systems other than Linux, system calls go through libc and are
// made the ordinary way.
func rawRead(fd int, p []byte) (int, error)  { return syscall.Read(fd, p) }
func rawWrite(fd int, p []byte) (int, error) { return syscall.Write(fd, p) }

func dupCloexec(fd int) (int, error) {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	n, err := syscall.Dup(fd)
	if err != nil {
		return -1, err
	}
	syscall.CloseOnExec(n)
	return n, nil
}
