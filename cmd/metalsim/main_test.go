package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
)

func TestParseFlags(t *testing.T) {
	c, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.listen != "127.0.0.1:8099" || c.deviceDelay != 10*time.Second || c.batchDelay != 2*time.Second || c.latency != 0 {
		t.Errorf("defaults = %+v", c)
	}
	c, err = parseFlags([]string{"--listen", ":9000", "--seed", "s.yaml", "--example-seed", "--api-key", "k",
		"--device-provision-delay", "1m", "--batch-delay", "0", "--latency", "50ms"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.listen != ":9000" || c.seed != "s.yaml" || !c.example || c.apiKey != "k" || c.deviceDelay != time.Minute || c.batchDelay != 0 || c.latency != 50*time.Millisecond {
		t.Errorf("flags = %+v", c)
	}
	if _, err := parseFlags([]string{"extra"}, io.Discard); err == nil {
		t.Error("a stray argument was accepted")
	}
	if _, err := parseFlags([]string{"--nope"}, io.Discard); err == nil {
		t.Error("an unknown flag was accepted")
	}
}

func TestNewSimulatorNeedsAKey(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if _, err := newSimulator(config{}, log); err == nil {
		t.Error("a simulator nobody can call was built")
	}
	if _, err := newSimulator(config{seed: "missing.yaml", apiKey: "k"}, log); err == nil {
		t.Error("a missing seed file was ignored")
	}
}

func TestServe(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	s, err := newSimulator(config{example: true}, log)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- serve(ctx, ln, s, log) }()

	c, err := metal.NewClient(metal.Config{APIKey: simtest.APIKey, ProjectID: simtest.Project, BaseURL: "http://" + ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	vlans, err := c.ListVirtualNetworks(context.Background(), "da")
	if err != nil || len(vlans) != 3 {
		t.Fatalf("VLANs of the served seed = %d, %v", len(vlans), err)
	}

	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not return after cancellation")
	}
	for _, want := range []string{"loaded seed", "file=example", "vrfs=1", "hardwareReservations=2", "url=http://" + ln.Addr().String() + "/metal/v1", "shutting down"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs lack %q:\n%s", want, logs.String())
		}
	}
	if strings.Contains(logs.String(), simtest.APIKey) {
		t.Error("the logs show an API key")
	}
}
