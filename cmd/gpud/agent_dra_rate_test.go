package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// claimServer is an API server that answers every ResourceClaim GET, as
// the kubelet plugin helper sends one per claim it prepares; gets counts
// them.
func claimServer(t *testing.T) (kubeconfig string, gets *atomic.Int64) {
	t.Helper()
	gets = &atomic.Int64{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
		gets.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&resourceapi.ResourceClaim{TypeMeta: metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceClaim"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}})
	}))
	t.Cleanup(srv.Close)
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: srv.URL}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "t"}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "c"
	kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}
	return kubeconfig, gets
}

// readClaims times n claim reads through the driver's API client built
// from args (the agent's DRA flags).
func readClaims(t *testing.T, kubeconfig string, n int, args ...string) time.Duration {
	t.Helper()
	var o draOptions
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.register(fs)
	if err := fs.Parse(append([]string{"--kubeconfig", kubeconfig}, args...)); err != nil {
		t.Fatal(err)
	}
	client, err := draClient(&o)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := range n {
		if _, err := client.ResourceV1().ResourceClaims("ns").Get(t.Context(), fmt.Sprintf("c-%d", i), metav1.GetOptions{}); err != nil {
			t.Fatalf("get claim %d: %v", i, err)
		}
	}
	return time.Since(start)
}

// TestDRAClientRate: the driver's API client is not held to client-go's
// default 5 queries/s (burst 10), under which reading the 32 claims of one
// prepare took 32-10 = 22 tokens at 5/s, about 4.4 s, before any device
// was touched. With the defaults one prepare of 32 claims, and even of
// dra.MaxClaimsPerCall, fits in the burst; the old rate, set with the
// flags, is still as slow as it was.
func TestDRAClientRate(t *testing.T) {
	kubeconfig, gets := claimServer(t)
	const claims = 32
	fast := readClaims(t, kubeconfig, claims)
	t.Logf("%d claim reads at the defaults (--kube-api-qps %d --kube-api-burst %d): %v", claims, defaultKubeAPIQPS, defaultKubeAPIBurst, fast)
	if fast > time.Second {
		t.Errorf("%d claim reads took %v at the default rate, want well under a second", claims, fast)
	}
	if testing.Short() {
		return
	}
	slow := readClaims(t, kubeconfig, claims, "--kube-api-qps", "5", "--kube-api-burst", "10")
	t.Logf("%d claim reads at client-go's default rate (5/s, burst 10): %v", claims, slow)
	if slow < 4*time.Second {
		t.Errorf("%d claim reads took %v at 5/s burst 10, want about 4.4s (is the rate applied?)", claims, slow)
	}
	if got := gets.Load(); got != 2*claims {
		t.Errorf("server saw %d GETs, want %d", got, 2*claims)
	}
}

// TestDRAClientRateFlagsChecked: a rate that would stall or flood the API
// server is refused, naming the flag.
func TestDRAClientRateFlagsChecked(t *testing.T) {
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--kube-api-qps", "0"}, "kube-api-qps"},
		{[]string{"--kube-api-qps", "-3"}, "kube-api-qps"},
		{[]string{"--kube-api-burst", "0"}, "kube-api-burst"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var o draOptions
			fs := flag.NewFlagSet("agent", flag.ContinueOnError)
			o.register(fs)
			if err := fs.Parse(append([]string{"--kubelet-api", "dra", "--kubelet-registry-dir", t.TempDir()}, tc.args...)); err != nil {
				t.Fatal(err)
			}
			errs := o.validate("node", t.TempDir())
			var msgs []string
			for _, err := range errs {
				msgs = append(msgs, err.Error())
			}
			if all := strings.Join(msgs, "\n"); strings.Count(all, "--"+tc.flag+":") != 1 {
				t.Fatalf("validate(%v) = %q, want one error naming --%s", tc.args, all, tc.flag)
			}
		})
	}
}
