module github.com/metal-vrf/cluster-api-metal-vrf/test/tools/deadcode

go 1.26.7

tool golang.org/x/tools/cmd/deadcode

require (
	golang.org/x/mod v0.42.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/telemetry v0.0.0-20261009151841-97e8ea77aa2a // indirect
	golang.org/x/tools v0.52.0 // indirect
)
