package schedbench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/gpud/gpud/internal/testkit/schedtest"
	"github.com/gpud/gpud/pkg/dra"
	"github.com/gpud/gpud/pkg/trace"
	"github.com/gpud/gpud/test/k8senv"
)

var (
	flagCompare     = flag.Bool("compare", false, "run the side-by-side comparison (needs the k8s binaries; not part of make test)")
	flagData        = flag.String("data", "", "openb trace directory (default ../shared/data/openb-gpu-v2023 beside the repository)")
	flagPodList     = flag.String("pod-list", "openb_pod_list_default.csv", "pod list in -data")
	flagNodeList    = flag.String("node-list", "openb_node_list_gpu_node.csv", "node list in -data")
	flagPods        = flag.Int("pods", 2000, "pods sampled from the pod list")
	flagFill        = flag.Float64("fill", 0.8, "cluster GPUs as a fraction of the sample's GPU demand (below 1 overfills the cluster)")
	flagSeed        = flag.Uint64("seed", 42, "sampling seed")
	flagGpud        = flag.String("gpud", "", "gpud binary; empty runs kube-scheduler alone")
	flagSchedulers  = flag.String("schedulers", "kube-scheduler,gpud", "schedulers to run, in order (kube-scheduler, gpud); the ratio divides by kube-scheduler's rate")
	flagQPS         = flag.Float64("kube-qps", 200, "kube-scheduler's client QPS (clientConnection.qps): gpud scheduler's, so that neither is throttled more")
	flagBurst       = flag.Int("kube-burst", 400, "kube-scheduler's client burst (gpud scheduler's)")
	flagGpudArgs    = flag.String("gpud-args", "", "extra flags for gpud scheduler, space-separated")
	flagIdle        = flag.Duration("idle", 10*time.Second, "the burst ends when no pod was bound for this long")
	flagFeedWait    = flag.Duration("feed-timeout", 60*time.Second, "how long a fed pod may stay neither bound nor unschedulable")
	flagLogDir      = flag.String("logdir", "", "where scheduler logs go (default: the environment's temp dir)")
	flagOut         = flag.String("out", "", "also write the table to this file")
	flagNodes       = flag.Int("nodes", 0, "synthetic cluster of this many GPU nodes built from -node-list's models (make scale-bench); 0 sizes the cluster from -pods and -fill")
	flagFeed        = flag.Int("feed", 0, "pods fed one at a time after the burst (the sample's first, in trace order); 0 feeds them all")
	flagConstrained = flag.Float64("constrained", 0, "share of the pods, in groups of 4 replicas, with required anti-affinity or a DoNotSchedule spread on hostnames")
)

const namespace = "schedbench"

// TestCompare runs kube-scheduler and gpud scheduler in turn against one
// API server with the same nodes, slices and pods, and prints the table.
// It runs only with -compare (make sched-bench).
func TestCompare(t *testing.T) {
	if !*flagCompare || testing.Short() {
		t.Skip("the scheduler comparison runs with -compare (make sched-bench)")
	}
	dataDir := *flagData
	if dataDir == "" {
		_, file, _, _ := runtime.Caller(0)
		dataDir = filepath.Join(filepath.Dir(file), "..", "..", "..", "shared", "data", "openb-gpu-v2023")
	}
	allPods, err := trace.ReadPodsFile(filepath.Join(dataDir, *flagPodList))
	if err != nil {
		t.Fatal(err)
	}
	allNodes, err := trace.ReadNodesFile(filepath.Join(dataDir, *flagNodeList))
	if err != nil {
		t.Fatal(err)
	}
	// The cluster is sized by a first draw; the pods are then drawn again
	// (same seed) from those that fit on one of its nodes when empty.
	var nodes []trace.Node
	var pods []trace.Pod
	if *flagNodes > 0 {
		// make scale-bench: the node count is given; the pods are drawn
		// (with copies past the list's length) from those that fit.
		nodes = ScaleNodes(allNodes, *flagNodes, *flagSeed)
		pods = SampleScaled(Fitting(allPods, nodes), *flagPods, *flagSeed)
	} else {
		nodes = PickNodes(allNodes, int(GPUDemand(Sample(allPods, *flagPods, *flagSeed))**flagFill), *flagSeed)
		pods = Sample(Fitting(allPods, nodes), *flagPods, *flagSeed)
	}
	demand := GPUDemand(pods)
	totalGPUs := 0
	for _, n := range nodes {
		totalGPUs += n.NumGPU
	}
	classes, err := schedtest.ReadClasses(schedtest.ShippedClassesPath())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("schedbench: %d pods from %s (seed %d, GPU demand %.1f), %d nodes with %d GPUs from %s",
		len(pods), *flagPodList, *flagSeed, demand, len(nodes), totalGPUs, *flagNodeList)

	env := k8senv.Start(t, k8senv.WithoutScheduler())
	logDir := *flagLogDir
	if logDir == "" {
		logDir = env.Dir
	}
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	b := newBench(t, env, pods, totalGPUs)
	b.nodes, b.logDir = nodes, logDir
	b.constraints = Constrain(len(pods), *flagConstrained, *flagSeed)
	b.setup(nodes, classes)

	var results []Result
	for _, name := range strings.Split(*flagSchedulers, ",") {
		s, ok := b.scheduler(strings.TrimSpace(name), logDir)
		if !ok {
			t.Logf("schedbench: skipping %s (no -gpud binary)", name)
			continue
		}
		r := b.run(s)
		t.Logf("schedbench: %s: %+v", s.name, r)
		results = append(results, r)
	}
	table := fmt.Sprintf("schedbench: %d pods sampled from %s (seed %d, %.0f GPUs asked), %d nodes / %d GPUs (%s), Kubernetes %s\n%s\n%s",
		len(pods), *flagPodList, *flagSeed, demand, len(nodes), totalGPUs, *flagNodeList, k8senv.KubeVersion(), Table(results), ScaleTable(results))
	fmt.Print(table)
	if *flagOut != "" {
		if err := os.WriteFile(*flagOut, []byte(table), 0o644); err != nil {
			t.Error(err)
		}
	}
}

type bench struct {
	t         *testing.T
	env       *k8senv.Env
	client    kubernetes.Interface
	pods      []trace.Pod
	totalGPUs int
	nodes     []trace.Node
	logDir    string
	tr        *tracker
	// constraints change pods by index (-constrained).
	constraints map[int]func(*corev1.Pod)
}

func newBench(t *testing.T, env *k8senv.Env, pods []trace.Pod, totalGPUs int) *bench {
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = 2000, 4000
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b := &bench{t: t, env: env, client: client, pods: pods, totalGPUs: totalGPUs}
	b.tr = startTracker(t, client)
	return b
}

func (b *bench) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(b.t.Context(), 2*time.Minute)
}

// setup creates the namespace, the DeviceClasses, the nodes and their
// slices.
func (b *bench) setup(nodes []trace.Node, classes []*resourceapi.DeviceClass) {
	t := b.t
	ctx, cancel := b.ctx()
	defer cancel()
	if _, err := b.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range classes {
		if _, err := b.client.ResourceV1().DeviceClasses().Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatalf("device class %s: %v", c.Name, err)
		}
	}
	err := parallel(8, len(nodes), func(i int) error {
		n := nodes[i]
		node := NodeObject(n)
		status := node.Status
		created, err := b.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("node %s: %w", node.Name, err)
		}
		created.Status = status
		if _, err := b.client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("node %s status: %w", node.Name, err)
		}
		sl, err := Slices(n)
		if err != nil {
			return err
		}
		for _, s := range sl {
			if _, err := b.client.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("slice %s: %w", s.Name, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// parallel runs fn(0..n-1) on workers goroutines and returns the first
// error.
func parallel(workers, n int, fn func(i int) error) error {
	var (
		mu    sync.Mutex
		first error
		next  int
		wg    sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			for {
				mu.Lock()
				if next >= n || first != nil {
					mu.Unlock()
					return
				}
				i := next
				next++
				mu.Unlock()
				if err := fn(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return first
}

type sched struct {
	name          string // in the table
	schedulerName string // pods' spec.schedulerName
	// start starts the scheduler; pid then gives its process id.
	start func() (*k8senv.Proc, error)
	pid   func() int
}

// pidOf is a [k8senv.ProcOptions] Setup that remembers the command, and the
// process id it has once started.
func pidOf() (setup func(*exec.Cmd), pid func() int) {
	var cmd *exec.Cmd
	return func(c *exec.Cmd) { cmd = c }, func() int {
		if cmd == nil || cmd.Process == nil {
			return 0
		}
		return cmd.Process.Pid
	}
}

func (b *bench) scheduler(name, logDir string) (sched, bool) {
	setup, pid := pidOf()
	switch name {
	case "kube-scheduler":
		return sched{name: name, schedulerName: corev1.DefaultSchedulerName, pid: pid, start: func() (*k8senv.Proc, error) {
			return b.startKubeScheduler(logDir, setup)
		}}, true
	case "gpud":
		if *flagGpud == "" {
			return sched{}, false
		}
		return sched{name: "gpud scheduler", schedulerName: "gpud-scheduler", pid: pid, start: func() (*k8senv.Proc, error) {
			args := []string{"scheduler", "--kubeconfig=" + b.env.Kubeconfig, "--leader-elect=false",
				"--metrics-addr=127.0.0.1:0"}
			args = append(args, strings.Fields(*flagGpudArgs)...)
			return k8senv.StartProc("gpud scheduler", *flagGpud, args, filepath.Join(logDir, "gpud-scheduler.log"), k8senv.ProcOptions{Truncate: true, Setup: setup})
		}}, true
	}
	b.t.Fatalf("unknown scheduler %q (kube-scheduler, gpud)", name)
	return sched{}, false
}

// startKubeScheduler runs kube-scheduler with its default profile and
// plugins; only the client rate limits are set (-kube-qps, -kube-burst).
func (b *bench) startKubeScheduler(logDir string, setup func(*exec.Cmd)) (*k8senv.Proc, error) {
	conf := filepath.Join(logDir, "kube-scheduler.yaml")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %q
  qps: %g
  burst: %d
leaderElection:
  leaderElect: false
`, b.env.Kubeconfig, *flagQPS, *flagBurst)), 0o644); err != nil {
		return nil, err
	}
	var gates []string
	for k, v := range k8senv.DefaultFeatureGates {
		gates = append(gates, fmt.Sprintf("%s=%t", k, v))
	}
	slices.Sort(gates)
	_, port, _ := strings.Cut(k8senv.FreeAddr(b.t), ":")
	return k8senv.StartProc("kube-scheduler", b.env.Binaries.Scheduler, []string{
		"--config=" + conf,
		"--bind-address=127.0.0.1",
		"--secure-port=" + port,
		"--cert-dir=" + filepath.Join(logDir, "kube-scheduler-certs"),
		"--feature-gates=" + strings.Join(gates, ","),
		"--v=1",
	}, filepath.Join(logDir, "kube-scheduler.log"), k8senv.ProcOptions{Truncate: true, Setup: setup})
}

// run measures one scheduler: the burst, then the feed.
func (b *bench) run(s sched) Result {
	t := b.t
	r := Result{Scheduler: s.name, Pods: len(b.pods)}

	// Burst: every claim and pod exists before the scheduler starts.
	b.reset()
	uids := b.createAll(s.schedulerName)
	t.Logf("schedbench: %s: %d pods created, starting it", s.name, len(uids))
	p, err := s.start()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(10 * time.Second)
	begin := time.Now()
	lastN, lastChange := 0, begin
	for {
		time.Sleep(100 * time.Millisecond)
		if exited, err := p.Exited(); exited {
			t.Fatalf("%s exited: %v\n%s", s.name, err, p.Tail(40))
		}
		n, first, last := b.tr.boundStats(uids)
		if n != lastN {
			lastN, lastChange = n, time.Now()
		}
		if n == len(uids) || (n > 0 && time.Since(lastChange) > *flagIdle) {
			r.Bound, r.FirstBind, r.LastBind = n, first.Sub(begin), last.Sub(begin)
			times := b.tr.bindTimes(uids)
			r.Bind90 = times[Count90(n)-1].Sub(begin)
			r.LongestPause = LongestPause(times)
			break
		}
		if n == 0 && time.Since(begin) > 3*time.Minute {
			t.Fatalf("%s bound no pod in 3 minutes\n%s\n%s", s.name, b.env.DescribePod(namespace, ObjectName(b.pods[0])), p.Tail(40))
		}
	}
	if u, err := ReadProcUsage(s.pid()); err != nil {
		t.Errorf("%s: %v", s.name, err)
	} else {
		r.PeakRSSBytes, r.BurstCPU = u.PeakRSSBytes, u.CPU
	}
	r.UnallocatedAfterBurst, r.OverAllocated = b.unallocated()
	t.Logf("schedbench: %s: burst: %d/%d bound, %.1f pods/s", s.name, r.Bound, r.Pods, r.PodsPerSecond())

	// Feed: in trace order, one at a time. The first pod that does not
	// fit gives the figure; as FGD's simulator does, a pod that
	// does not fit is then dropped and the feed goes on to the end.
	b.reset()
	var lat []time.Duration
	placed := 0
	feed := b.pods
	if *flagFeed > 0 && *flagFeed < len(feed) {
		feed = feed[:*flagFeed]
	}
	for i, tp := range feed {
		start := time.Now()
		uid := b.create(tp, s.schedulerName, b.constraints[i])
		bound, msg := b.tr.waitDecided(t, uid, *flagFeedWait)
		if bound {
			lat = append(lat, time.Since(start))
			placed++
			continue
		}
		r.FeedFailed++
		if r.FirstFailure == "" {
			r.FirstFailure = fmt.Sprintf("#%d %s (%d GPU x %d milli, %d mCPU, %d MiB): %s", i, tp.Name, tp.NumGPU, tp.GPUMilli, tp.CPUMilli, tp.MemoryMiB, msg)
			r.FedBound = placed
			var over int
			r.Unallocated, over = b.unallocated()
			r.OverAllocated += over
			t.Logf("schedbench: %s: first pod that did not fit after %d bound: %.2f%% GPUs unallocated", s.name, placed, r.Unallocated)
			b.dumpState(filepath.Join(b.logDir, strings.ReplaceAll(s.name, " ", "-")+"-at-first-failure.txt"))
		}
		b.drop(tp)
	}
	if r.FirstFailure == "" {
		r.FirstFailure = "none: every pod fit (lower -fill)"
		r.FedBound = placed
	}
	r.FeedPlaced = placed
	var over int
	r.UnallocatedEnd, over = b.unallocated()
	r.OverAllocated = max(r.OverAllocated, over)
	slices.Sort(lat)
	if len(lat) > 0 {
		r.FeedLatencyP50 = lat[len(lat)/2]
		r.FeedLatencyP99 = lat[len(lat)*99/100]
	}
	return r
}

// unallocated lists the claims and computes the unallocated GPU %.
func (b *bench) unallocated() (float64, int) {
	ctx, cancel := b.ctx()
	defer cancel()
	claims, err := b.client.ResourceV1().ResourceClaims(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		b.t.Fatal(err)
	}
	return UnallocatedPercent(claims.Items, b.totalGPUs)
}

// dumpState writes each node's CPU, memory and per-GPU allocation.
func (b *bench) dumpState(path string) {
	ctx, cancel := b.ctx()
	defer cancel()
	claims, err := b.client.ResourceV1().ResourceClaims(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		b.t.Fatal(err)
	}
	pods, err := b.client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		b.t.Fatal(err)
	}
	cpu, mem, count := map[string]int64{}, map[string]int64{}, map[string]int{}
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" {
			continue
		}
		r := p.Spec.Containers[0].Resources.Requests
		cpu[p.Spec.NodeName] += r.Cpu().MilliValue()
		mem[p.Spec.NodeName] += r.Memory().Value() >> 20
		count[p.Spec.NodeName]++
	}
	alloc := Allocated(claims.Items, GPUMemoryBytes)
	var sb strings.Builder
	for _, n := range b.nodes {
		name := NodeName(n)
		fmt.Fprintf(&sb, "%s %-8s pods %3d cpu %6d/%6d mem %7d/%7d gpus", name, n.Model, count[name], cpu[name], n.CPUMilli, mem[name], n.MemoryMiB)
		for i := range n.NumGPU {
			fmt.Fprintf(&sb, " %.2f", alloc[fmt.Sprintf("%s/%s", name, dra.GPUDeviceName(i))])
		}
		sb.WriteString("\n")
	}
	if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
		b.t.Error(err)
	}
}

// drop deletes p and its claim, as a simulator drops a pod that does not
// fit.
func (b *bench) drop(p trace.Pod) {
	ctx, cancel := b.ctx()
	defer cancel()
	zero := int64(0)
	name := ObjectName(p)
	if err := b.client.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		b.t.Fatalf("drop pod %s: %v", name, err)
	}
	if p.NumGPU == 0 {
		return
	}
	_, err := b.client.ResourceV1().ResourceClaims(namespace).Patch(ctx, name, types.MergePatchType,
		[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	if err == nil {
		err = b.client.ResourceV1().ResourceClaims(namespace).Delete(ctx, name, metav1.DeleteOptions{})
	}
	if err != nil && !apierrors.IsNotFound(err) {
		b.t.Fatalf("drop claim %s: %v", name, err)
	}
}

// createAll creates every claim and pod, claims first.
func (b *bench) createAll(schedulerName string) []types.UID {
	uids := make([]types.UID, len(b.pods))
	err := parallel(16, len(b.pods), func(i int) error {
		uids[i] = b.createIndexed(i, schedulerName)
		return nil
	})
	if err != nil {
		b.t.Fatal(err)
	}
	return uids
}

// createIndexed creates the i-th pod with its constraints (-constrained).
func (b *bench) createIndexed(i int, schedulerName string) types.UID {
	return b.create(b.pods[i], schedulerName, b.constraints[i])
}

// create creates p's claim (if any) and then p, changed by mod (nil: as
// the trace has it).
func (b *bench) create(p trace.Pod, schedulerName string, mod func(*corev1.Pod)) types.UID {
	ctx, cancel := b.ctx()
	defer cancel()
	claim, err := Claim(p, namespace)
	if err != nil {
		b.t.Fatal(err)
	}
	if claim != nil {
		if claim, err = b.client.ResourceV1().ResourceClaims(namespace).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
			b.t.Fatalf("claim %s: %v", p.Name, err)
		}
	}
	kp := Pod(p, namespace, schedulerName, claim)
	if mod != nil {
		mod(kp)
	}
	pod, err := b.client.CoreV1().Pods(namespace).Create(ctx, kp, metav1.CreateOptions{})
	if err != nil {
		b.t.Fatalf("pod %s: %v", p.Name, err)
	}
	return pod.UID
}

// reset deletes every pod and claim of the namespace (pods at once: there
// is no kubelet; claims without their finalizers: there is no controller
// manager) and waits until the tracker has seen them go.
func (b *bench) reset() {
	t := b.t
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	zero := int64(0)
	// A loaded API server may time out a collection delete while it goes
	// on deleting ("unable to return a response in the time allotted", or
	// the stream reset when its handler times out): the wait below sees
	// what is left, and deletes again, until the reset's deadline.
	deleteAll := func(ctx context.Context) error {
		err := b.client.CoreV1().Pods(namespace).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
		if err != nil {
			t.Logf("reset: deleting pods: %v (deleted again while any are left)", err)
		}
		err = b.client.ResourceV1().ResourceClaims(namespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		if err != nil {
			t.Logf("reset: deleting claims: %v (deleted again while any are left)", err)
		}
		return ctx.Err()
	}
	if err := deleteAll(ctx); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		// Errors of a loaded API server are retried until the deadline.
		claims, err := b.client.ResourceV1().ResourceClaims(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Logf("reset: listing claims: %v (retried)", err)
			return false, nil
		}
		err = parallel(8, len(claims.Items), func(i int) error {
			c := claims.Items[i]
			if len(c.Finalizers) == 0 {
				return nil
			}
			_, err := b.client.ResourceV1().ResourceClaims(namespace).Patch(ctx, c.Name, types.MergePatchType,
				[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		})
		if err != nil {
			t.Logf("reset: removing claims' finalizers: %v (retried)", err)
			return false, nil
		}
		pods, err := b.client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Logf("reset: listing pods: %v (retried)", err)
			return false, nil
		}
		undeleted := slices.ContainsFunc(pods.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp == nil }) ||
			slices.ContainsFunc(claims.Items, func(c resourceapi.ResourceClaim) bool { return c.DeletionTimestamp == nil })
		if undeleted {
			if err := deleteAll(ctx); err != nil { // an earlier delete timed out
				return false, err
			}
		}
		return len(claims.Items) == 0 && len(pods.Items) == 0 && b.tr.empty(), nil
	})
	if err != nil {
		t.Fatalf("reset: %v", err)
	}
	b.tr.clear()
}

// tracker records, from a pod informer, when each pod was first seen bound
// and whether it was marked unschedulable.
type tracker struct {
	store   cache.Store
	mu      sync.Mutex
	bound   map[types.UID]time.Time
	unsched map[types.UID]string
	changed chan struct{}
}

func startTracker(t *testing.T, client kubernetes.Interface) *tracker {
	tr := &tracker{bound: map[types.UID]time.Time{}, unsched: map[types.UID]string{}, changed: make(chan struct{}, 1)}
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(namespace))
	inf := f.Core().V1().Pods().Informer()
	tr.store = inf.GetStore()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    tr.observe,
		UpdateFunc: func(_, obj any) { tr.observe(obj) },
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("pod informer did not sync")
	}
	return tr
}

func (tr *tracker) observe(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	now := time.Now()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if pod.Spec.NodeName != "" {
		if _, seen := tr.bound[pod.UID]; !seen {
			tr.bound[pod.UID] = now
		}
	} else {
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				tr.unsched[pod.UID] = c.Reason + ": " + c.Message
			}
		}
	}
	select {
	case tr.changed <- struct{}{}:
	default:
	}
}

func (tr *tracker) empty() bool { return len(tr.store.ListKeys()) == 0 }

func (tr *tracker) clear() {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	clear(tr.bound)
	clear(tr.unsched)
}

// boundStats counts uids bound and the first and last bind times.
func (tr *tracker) boundStats(uids []types.UID) (n int, first, last time.Time) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, u := range uids {
		at, ok := tr.bound[u]
		if !ok {
			continue
		}
		n++
		if first.IsZero() || at.Before(first) {
			first = at
		}
		if at.After(last) {
			last = at
		}
	}
	return n, first, last
}

// bindTimes are the bind times of uids, sorted.
func (tr *tracker) bindTimes(uids []types.UID) []time.Time {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var out []time.Time
	for _, u := range uids {
		if at, ok := tr.bound[u]; ok {
			out = append(out, at)
		}
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return out
}

// waitDecided waits until uid is bound (true) or marked unschedulable
// (false, with the scheduler's reason).
func (tr *tracker) waitDecided(t *testing.T, uid types.UID, timeout time.Duration) (bool, string) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		tr.mu.Lock()
		_, bound := tr.bound[uid]
		msg, unsched := tr.unsched[uid]
		tr.mu.Unlock()
		switch {
		case bound:
			return true, ""
		case unsched:
			return false, msg
		}
		select {
		case <-tr.changed:
		case <-time.After(50 * time.Millisecond):
		case <-deadline.C:
			return false, fmt.Sprintf("neither bound nor unschedulable after %s", timeout)
		case <-t.Context().Done():
			t.Fatal(errors.New("test ended"))
		}
	}
}
