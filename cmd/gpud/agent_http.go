package main

import (
	"flag"

	"github.com/gpud/gpud/pkg/adminapi"
)

// httpOptions are the HTTP server's flags.
type httpOptions struct{ addr string }

func (o *httpOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.addr, "http-addr", "127.0.0.1:9400", "address of the HTTP server (/healthz, /readyz, /inventory, /metrics); empty disables it")
}

func (o *httpOptions) validate() []error {
	if err := validateAddr("http-addr", o.addr); err != nil {
		return []error{err}
	}
	return nil
}

// adminOptions are the admin API's flags.
type adminOptions struct{ socket string }

func (o *adminOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.socket, "admin-socket", adminapi.DefaultSocket, "unix socket of the local admin API (gpud mig plan/apply, GET and PUT /v1/sharing; with --simulate, POST /v1/sim/xid to inject an Xid and POST /v1/sim/memory/alloc and /free to allocate GPU memory as a container's process); mode 0600, root only; empty disables it")
}

func (o *adminOptions) validate() []error {
	if err := validateSocketPath("admin-socket", o.socket); err != nil {
		return []error{err}
	}
	return nil
}
