// Package metal is the project's client for the Equinix Metal API.
//
// It wraps the generated SDK (equinix-sdk-go, services/metalv1) with what both
// providers need and the SDK leaves to its callers:
//
//   - credentials from a Kubernetes Secret or the environment, with the API
//     token kept out of logs, errors and metrics;
//   - a deadline on every call, and retries with exponential backoff and
//     jitter that are only attempted when repeating the request is safe;
//   - typed errors (IsNotFound, IsUnprocessable, IsRateLimited,
//     IsUnauthorized) carrying the API's own messages;
//   - transparent pagination;
//   - Prometheus metrics per operation.
//
// Only the operations the providers use are exposed. Creates are made
// idempotent by looking the object up first (EnsureDevice,
// EnsureVRFIPReservation) rather than by retrying a POST whose outcome is
// unknown.
//
// The in-process simulator in package sim speaks the same wire protocol and is
// what the tests and `make run` point this client at.
package metal
