// Package metal is the project's client for the Equinix Metal API.
//
// It wraps the generated SDK (equinix-sdk-go, services/metalv1) with what both
// providers need and the SDK leaves to its callers:
//
//   - credentials from a Kubernetes Secret or the environment, with the API
//     token kept out of logs, errors and metrics;
//   - a deadline on every call, and retries with exponential backoff and
//     jitter that are only attempted when repeating the request is safe;
//   - typed errors (IsNotFound, IsUnprocessable, IsUnauthorized, and
//     ErrRateLimited for errors.Is) carrying the API's own messages;
//   - transparent pagination;
//   - Prometheus metrics per operation.
//
// The client exposes only the calls the providers make: CAPP's devices,
// hardware reservations, VLANs, port disbonds, VLAN assignment batches and
// public IPv4 reservations (capp/device), IPAM's reads of a VRF and its
// IP reservations, and the cloud controller manager's reads of devices
// (ccm/cloud). The calls only tests make are the tests' own.
//
// A create whose outcome is unknown (a server error, a dropped connection)
// is never retried: the caller finds what it asked for before asking again.
// A device carries an identifying tag (DeviceRequest.Tag) that ListDevices
// filters by, a public IPv4 reservation tags that ListPublicIPv4Reservations
// matches, and a port's batches are read with ListVLANAssignmentBatches
// before another is sent. Deletes take an object already gone as done.
//
// The in-process simulator in package sim speaks the same wire protocol and is
// what the tests and `make run` point this client at.
package metal
