package scheduler

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	fwk "k8s.io/kube-scheduler/framework"
)

// storageEvents are the volume objects whose changes may make room for a
// pod the volume plugins refused (VolumeBinding, VolumeRestrictions,
// VolumeZone, NodeVolumeLimits), with the informer that carries each, as
// kube-scheduler registers them (eventhandlers.go): a claim created or
// bound, a PersistentVolume added, a StorageClass, CSINode, CSIDriver or
// CSIStorageCapacity changed, a VolumeAttachment gone.
func (s *Scheduler) storageEvents() map[fwk.EventResource]cache.SharedIndexInformer {
	core, storage := s.factory.Core().V1(), s.factory.Storage().V1()
	return map[fwk.EventResource]cache.SharedIndexInformer{
		fwk.PersistentVolumeClaim: core.PersistentVolumeClaims().Informer(),
		fwk.PersistentVolume:      core.PersistentVolumes().Informer(),
		fwk.StorageClass:          storage.StorageClasses().Informer(),
		fwk.CSINode:               storage.CSINodes().Informer(),
		fwk.CSIDriver:             storage.CSIDrivers().Informer(),
		fwk.CSIStorageCapacity:    storage.CSIStorageCapacities().Informer(),
		fwk.VolumeAttachment:      storage.VolumeAttachments().Informer(),
	}
}

// watchStorage wakes, on each volume object event, the backed-off pods
// that only kube-scheduler's plugins refused and whose plugins' queueing
// hints accept the event (a pod waiting for its missing claim comes back
// when that claim is created, not when its backoff ends). Pods that
// failed for gpud's reasons (devices, queues, CPU) are left waiting: no
// volume event makes GPUs free.
func (s *Scheduler) watchStorage() error {
	for res, inf := range s.storageEvents() {
		if _, err := inf.AddEventHandler(s.storageHandler(res)); err != nil {
			return fmt.Errorf("scheduler: %s informer handler: %w", res, err)
		}
	}
	return nil
}

// storageHandler turns res's informer events into cluster events for the
// queueing hints.
func (s *Scheduler) storageHandler(res fwk.EventResource) cache.ResourceEventHandlerFuncs {
	on := func(at fwk.ActionType, old, new any) {
		if t, ok := old.(cache.DeletedFinalStateUnknown); ok {
			old = t.Obj
		}
		ev := []fwk.ClusterEvent{{Resource: res, ActionType: at}}
		if s.backoff.wake(func(pod *corev1.Pod, by []string) bool { return s.rules.MayHelp(pod, by, ev, old, new) }, false) > 0 {
			s.poke()
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { on(fwk.Add, nil, obj) },
		UpdateFunc: func(old, obj any) { on(fwk.Update, old, obj) },
		DeleteFunc: func(obj any) { on(fwk.Delete, obj, nil) },
	}
}
