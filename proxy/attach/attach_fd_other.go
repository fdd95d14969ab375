//go:build !linux

package attach

import (
	"errors"
	"net"
	"os"
)

// fdPassing is false: only Linux builds pass an attached agent's pipes to
// the daemon (attach_fd_linux.go); elsewhere the relay relays.
const fdPassing = false

var errNoFDPassing = errors.New("passing descriptors to the daemon needs Linux")

type journalFile struct{ f *os.File }

func newJournalFile(int64, []byte, bool) (*journalFile, error) { return nil, errNoFDPassing }
func (*journalFile) recover(bool) (journalRecovery, error) {
	return journalRecovery{}, errNoFDPassing
}
func (*journalFile) Close() error { return nil }

func mapJournal(*os.File, int64) (*journal, func(), error) { return nil, nil, errNoFDPassing }
func sendFDs(net.Conn, ...*os.File) error                  { return errNoFDPassing }
func recvFDs(net.Conn, int) ([]int, error)                 { return nil, errNoFDPassing }
func pollableFD(int, string) (*os.File, error)             { return nil, errNoFDPassing }
func isPipe(*os.File) bool                                 { return false }

func receiveSession(net.Conn, int64) (*attachedPipes, error) { return nil, errNoFDPassing }
