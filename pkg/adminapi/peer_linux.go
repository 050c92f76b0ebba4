package adminapi

import (
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// listenUnixPrivate listens; the caller chmods the socket to 0600 at once,
// and the peer check refuses other users in the moment between.
func listenUnixPrivate(path string) (net.Listener, error) { return net.Listen("unix", path) }

// peerAllowed reports whether the peer is root or the server's own user.
func peerAllowed(c net.Conn) (int, bool) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return -1, false
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return -1, false
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || credErr != nil {
		return -1, false
	}
	uid := int(cred.Uid)
	return uid, uid == 0 || uid == os.Getuid()
}
