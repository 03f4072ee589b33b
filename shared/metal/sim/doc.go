// Package sim is an in-process simulator of the Equinix Metal API, faithful
// enough that the real SDK (equinix-sdk-go metalv1) talks to it unchanged.
// Equinix Metal reached its end of life, so this simulator is how the
// providers are tested, demonstrated (`make run`, bin/metalsim) and tried out.
//
// A Server is an http.Handler serving /metal/v1: wrap it in an
// httptest.Server in tests. It keeps projects, VRFs, VRF IP reservations,
// public IPv4 reservations (/32s from the documentation range 198.51.100.0/24,
// a /28 per metro), Metal Gateways, VLANs, devices with their ports, VLAN assignment batches and
// device events, and enforces the platform's rules: reservations inside a
// VRF range, of an allowed size and not overlapping (422 otherwise); VLAN IDs
// unique per metro; the port network types and which of them accept VLANs;
// one VLAN batch at a time per port. Devices and batches move through their
// states as time passes (Options delays, simtest.FakeClock for deterministic
// tests). Answers are the SDK's own model types marshalled to JSON, so their
// shape matches what the SDK decodes by construction.
//
// It also serves the metadata service a booted node sees (GET /metadata,
// POST /events), answering the device bound to the request's source address
// (BindNode).
//
// For tests it offers seeding (Seed, LoadSeed, ExampleSeed; package simtest
// serves the example world), fault injection (FailNext, SetLatency, a device
// plan that fails provisioning, MaxDevicesInFlight), per-operation counters
// (Calls, Answers) and PostUserState to play the node reporting its state.
// The same controls are served over HTTP under /_sim for bin/metalsim users.
package sim
