package deviceplugin

import (
	"os"
	"syscall"
)

// kubeletInstance identifies one start of the kubelet by its kubelet.sock:
// each start removes every socket in the plugin dir and listens on a new
// kubelet.sock, so a new file (device, inode, change time) is a new
// kubelet. The change time is the kernel's coarse clock (one tick, a few
// milliseconds): a kubelet start takes far longer, so two starts never share
// all three. The zero value is "none seen".
//
// gpud registers each resource once per instance. The kubelet refuses a
// second registration of a resource while the first is connected ("device
// plugin already connected") and then drops every client on that socket,
// the live one included, which left resources unregistered until a restart
// (issue 22): the socket-created event, the inode poll and the re-serve
// after the kubelet deleted our socket all say "kubelet is back" for the
// same start.
type kubeletInstance struct {
	dev, ino   uint64
	ctimeNanos int64
}

// currentKubelet returns the instance listening on path now, and false
// when there is no socket there.
func currentKubelet(path string) (kubeletInstance, bool) {
	fi, err := os.Stat(path)
	if err != nil || fi.Mode()&os.ModeSocket == 0 {
		return kubeletInstance{}, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return kubeletInstance{}, false
	}
	return kubeletInstance{dev: uint64(st.Dev), ino: st.Ino, ctimeNanos: st.Ctim.Nano()}, true
}
