package dra

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// The publish check: the kubelet plugin library publishes ResourceSlices in
// the background and reports only failures (through HandleError), never a
// success, and its first publish waits, silently, until the API server
// answers. So the driver asks the API server itself: every
// Options.PublishCheck it lists its node's slices and compares their
// devices with the ones it built. That is what a pod scheduler sees, so it
// is what readiness means for a DRA driver.

const (
	// defaultPublishCheck is how often the API server's slices are
	// compared with the driver's when Options.PublishCheck is zero.
	defaultPublishCheck = 10 * time.Second
	// publishFailures is how many checks in a row must fail before a
	// driver that was published is said not to be: one failed list (an API
	// server restarting, a republish the controller has not written yet)
	// does not make the agent unready.
	publishFailures = 3
)

// publishState is the outcome of the publish checks; the zero value is
// "not checked yet".
type publishState struct {
	mu       sync.Mutex
	verified bool  // some check found the slices
	failures int   // failed checks since the last good one
	err      error // the latest failed check's reason
	libErr   error // the plugin library's latest publish error since the last good check
}

// Published returns nil while the API server holds the node's
// ResourceSlices as the driver last built them, else why not, naming the
// error (the API server's answer, or the library's latest publish error).
// Until a check finds them it returns why not yet; once found, it fails
// again only after several checks in a row failed (30s at the default
// interval), so one transient failure does not flip it. Safe for
// concurrent use; meant for the agent's /readyz.
func (d *Driver) Published() error {
	s := &d.published
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.verified && s.failures < publishFailures {
		return nil
	}
	err := s.err
	if err == nil {
		err = errors.New("not checked yet")
	}
	if s.libErr != nil {
		err = fmt.Errorf("%w; last publish error: %w", err, s.libErr)
	}
	if s.verified {
		return fmt.Errorf("dra: resource slices not in the API server for %d checks: %w", s.failures, err)
	}
	return fmt.Errorf("dra: resource slices not published yet: %w", err)
}

// notePublishError keeps the plugin library's latest publish error, which
// /readyz names while the slices are not published.
func (d *Driver) notePublishError(msg string, err error) {
	s := &d.published
	s.mu.Lock()
	defer s.mu.Unlock()
	s.libErr = fmt.Errorf("%s: %w", msg, err)
}

// checkPublished runs the publish check at once and every interval until
// ctx ends; every second (at most) until a check first finds the slices,
// so a new agent is ready about a second after its first publish.
func (d *Driver) checkPublished(ctx context.Context) {
	interval := d.opts.PublishCheck
	if interval == 0 {
		interval = defaultPublishCheck
	}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := d.verifyPublished(ctx)
		if ctx.Err() != nil {
			return
		}
		d.recordCheck(err)
		next := interval
		if !d.verifiedOnce() {
			next = min(interval, time.Second)
		}
		t.Reset(next)
	}
}

// verifiedOnce reports whether some check found the slices.
func (d *Driver) verifiedOnce() bool {
	d.published.mu.Lock()
	defer d.published.mu.Unlock()
	return d.published.verified
}

// recordCheck records one check's outcome and logs a change of verdict.
func (d *Driver) recordCheck(err error) {
	s := &d.published
	s.mu.Lock()
	was := s.verified && s.failures < publishFailures
	if err == nil {
		s.verified, s.failures, s.err, s.libErr = true, 0, nil, nil
	} else {
		s.failures++
		s.err = err
	}
	now := s.verified && s.failures < publishFailures
	failures := s.failures
	s.mu.Unlock()
	switch {
	case now && !was:
		d.log.Info("resource slices published")
	case !now && was:
		d.log.Warn("resource slices not published", "checks", failures, "err", err)
	case err != nil:
		d.log.Debug("resource slices check failed", "checks", failures, "err", err)
	}
}

// verifyPublished compares the devices of the node's pool in the API
// server (the newest generation) with the ones the driver built.
func (d *Driver) verifyPublished(ctx context.Context) error {
	d.mu.Lock()
	pool, built := d.pub.Resources.Pools[d.opts.NodeName]
	d.mu.Unlock()
	if !built {
		return errors.New("no slices built yet: waiting for the inventory")
	}
	var want []string
	for _, s := range pool.Slices {
		for _, dev := range s.Devices {
			want = append(want, dev.Name)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	list, err := d.opts.KubeClient.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
		FieldSelector: fields.Set{resourceapi.ResourceSliceSelectorDriver: DriverName, resourceapi.ResourceSliceSelectorNodeName: d.opts.NodeName}.String(),
	})
	if err != nil {
		return fmt.Errorf("list resource slices: %w", err)
	}
	var gen int64 = -1
	var got []string
	for _, s := range list.Items {
		if s.Spec.Driver != DriverName || s.Spec.Pool.Name != d.opts.NodeName {
			continue
		}
		switch {
		case s.Spec.Pool.Generation > gen:
			gen, got = s.Spec.Pool.Generation, nil
		case s.Spec.Pool.Generation < gen:
			continue
		}
		for _, dev := range s.Spec.Devices {
			got = append(got, dev.Name)
		}
	}
	slices.Sort(want)
	slices.Sort(got)
	if slices.Equal(want, got) {
		return nil
	}
	var missing []string
	for _, n := range want {
		if _, found := slices.BinarySearch(got, n); !found {
			missing = append(missing, n)
		}
	}
	if len(missing) == 0 {
		return fmt.Errorf("the API server has %d devices for the pool, %d built: some no longer are", len(got), len(want))
	}
	return fmt.Errorf("the API server has %d of the %d devices built; %s missing (%d in all)", len(want)-len(missing), len(want), missing[0], len(missing))
}
