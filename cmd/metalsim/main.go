// Command metalsim serves the Equinix Metal API simulator of package
// shared/metal/sim over HTTP: what `make run` points the managers at, and a
// way to try the providers now that Equinix Metal itself is gone.
//
//	metalsim --example-seed
//	metalsim --seed shared/metal/sim/testdata/example-seed.yaml
//
// Point a client at it with METAL_API_URL=http://127.0.0.1:8099 and one of
// the seed's API keys (or --api-key). See docs/metal.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "metalsim:", err)
		os.Exit(1)
	}
}

// config is what the flags set.
type config struct {
	listen      string
	seed        string
	example     bool
	apiKey      string
	deviceDelay time.Duration
	batchDelay  time.Duration
	latency     time.Duration
}

func parseFlags(args []string, output io.Writer) (config, error) {
	fs := flag.NewFlagSet("metalsim", flag.ContinueOnError)
	fs.SetOutput(output)
	var c config
	fs.StringVar(&c.listen, "listen", "127.0.0.1:8099", "address to serve the API on")
	fs.StringVar(&c.seed, "seed", "", "YAML or JSON file with the world to start from (projects, VRFs, reservations, gateways, VLANs, devices)")
	fs.BoolVar(&c.example, "example-seed", false, "start from the built-in example world (shared/metal/sim/testdata/example-seed.yaml); --seed is added to it")
	fs.StringVar(&c.apiKey, "api-key", "", "API key valid for every project, in addition to the keys of the seed's projects")
	fs.DurationVar(&c.deviceDelay, "device-provision-delay", 10*time.Second, "time a new device takes to become active (queued for the first half, provisioning for the second)")
	fs.DurationVar(&c.batchDelay, "batch-delay", 2*time.Second, "time a VLAN assignment batch takes to complete (queued, then in_progress)")
	fs.DurationVar(&c.latency, "latency", 0, "delay added to every API answer")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	return c, nil
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	c, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	s, err := newSimulator(c, log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return err
	}
	return serve(ctx, ln, s, log)
}

// newSimulator builds the simulator the flags describe and loads the seed.
func newSimulator(c config, log *slog.Logger) (*sim.Server, error) {
	opts := sim.Options{DeviceProvisionDelay: c.deviceDelay, BatchDelay: c.batchDelay, Latency: c.latency}
	if c.apiKey != "" {
		opts.APIKeys = []string{c.apiKey}
	}
	s := sim.New(opts)
	keys := len(opts.APIKeys)
	var seeds []*sim.SeedFile
	var names []string
	if c.example {
		seeds, names = append(seeds, sim.ExampleSeed()), append(names, "example")
	}
	if c.seed != "" {
		seed, err := sim.LoadSeed(c.seed)
		if err != nil {
			return nil, err
		}
		seeds, names = append(seeds, seed), append(names, c.seed)
	}
	for i, seed := range seeds {
		if err := s.Seed(seed); err != nil {
			return nil, err
		}
		var vrfs, reservations, gateways, vlans, devices, hardware int
		for _, p := range seed.Projects {
			keys += len(p.APIKeys)
			vrfs += len(p.VRFs)
			reservations += len(p.IPReservations)
			gateways += len(p.MetalGateways)
			vlans += len(p.VirtualNetworks)
			devices += len(p.Devices)
			hardware += len(p.HardwareReservations)
		}
		log.Info("loaded seed", "file", names[i], "projects", len(seed.Projects), "vrfs", vrfs,
			"ipReservations", reservations, "metalGateways", gateways, "virtualNetworks", vlans, "devices", devices,
			"hardwareReservations", hardware)
	}
	if keys == 0 {
		return nil, errors.New("no API key would be accepted: pass --api-key or seed a project with apiKeys")
	}
	return s, nil
}

// serve serves h on ln until ctx is done, then shuts down gracefully.
func serve(ctx context.Context, ln net.Listener, h http.Handler, log *slog.Logger) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("serving the Equinix Metal API simulator", "url", "http://"+ln.Addr().String()+"/metal/v1")

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return err
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
