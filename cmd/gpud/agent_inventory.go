package main

import (
	"context"
	"flag"
	"time"
)

// inventoryComponent rereads the node periodically and publishes changes.
type inventoryComponent struct {
	interval time.Duration
}

func (c *inventoryComponent) name() string { return "inventory" }

func (c *inventoryComponent) registerFlags(fs *flag.FlagSet) {
	fs.DurationVar(&c.interval, "rediscover-interval", 30*time.Second, "how often to reread the GPU inventory")
}

func (c *inventoryComponent) run(ctx context.Context, a *agent) error {
	log := a.log.With("component", "inventory")
	refresh := func() {
		inv, err := a.disc.Inventory()
		if err != nil {
			log.Warn("inventory read failed", "err", err)
			return
		}
		if a.setInventory(inv) {
			log.Info("inventory updated", "gpus", len(inv.GPUs), "links", len(inv.Links))
		}
	}
	refresh()
	t := time.NewTicker(max(c.interval, time.Second))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			refresh()
		}
	}
}
