package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/goccy/go-yaml"

	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/topology"
)

func readInventory(f nvmlFlags) (gpu.Inventory, error) {
	if err := errors.Join(f.validate()...); err != nil {
		return gpu.Inventory{}, err
	}
	lib, sim, closeLib, err := openNVML(f)
	if err != nil {
		return gpu.Inventory{}, err
	}
	defer closeLib()
	node, err := resolveNodeName(f, sim)
	if err != nil {
		return gpu.Inventory{}, err
	}
	return discovery.New(lib, node, nil).Inventory()
}

func runInventory(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gpud inventory", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var nf nvmlFlags
	nf.register(fs)
	output := fs.String("o", "table", "output format: table, json or yaml")
	if err := parseOnlyFlags(fs, args); err != nil {
		return fmt.Errorf("inventory: %w", err)
	}
	if *output != "table" && *output != "json" && *output != "yaml" {
		return fmt.Errorf("inventory: -o %q: want table, json or yaml", *output)
	}
	inv, err := readInventory(nf)
	if err != nil {
		return err
	}
	return writeInventory(stdout, inv, *output)
}

func writeInventory(w io.Writer, inv gpu.Inventory, format string) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(inv)
	case "yaml":
		b, err := yaml.Marshal(inv)
		if err != nil {
			return fmt.Errorf("inventory: yaml: %w", err)
		}
		_, err = w.Write(b)
		return err
	}
	fmt.Fprintf(w, "Node %s  driver %s  CUDA %s\n\n", inv.Node.Name, inv.Node.DriverVersion, inv.Node.CUDADriverVersion)
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "GPU\tNAME\tUUID\tMEMORY\tPCI BUS ID\tNUMA\tMIG\tHEALTH")
	for _, g := range inv.GPUs {
		mig := "n/a"
		if g.MIGCapable {
			mig = map[bool]string{true: "enabled", false: "disabled"}[g.MIGEnabled]
			if g.MIGPending {
				mig += " (change pending reset)"
			}
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d MiB\t%s\t%d\t%s\t%s\n", g.Index, g.Name, g.UUID, g.MemoryBytes>>20, g.PCIBusID, g.NUMANode, mig, g.Health)
		for _, m := range g.MIGDevices {
			fmt.Fprintf(tw, "  %d/%d\t%s\t%s\t%d MiB\t\t\t\t\n", m.GPUInstanceID, m.ComputeInstanceID, "MIG "+m.Profile, m.UUID, m.MemoryBytes>>20)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(inv.Links) > 0 {
		fmt.Fprintln(w)
		var b strings.Builder
		if err := topology.Format(&b, inv); err != nil {
			return err
		}
		_, err := io.WriteString(w, strings.SplitN(b.String(), "\nLegend:", 2)[0])
		return err
	}
	return nil
}

func runTopo(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gpud topo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var nf nvmlFlags
	nf.register(fs)
	if err := parseOnlyFlags(fs, args); err != nil {
		return fmt.Errorf("topo: %w", err)
	}
	inv, err := readInventory(nf)
	if err != nil {
		return err
	}
	return topology.Format(stdout, inv)
}
