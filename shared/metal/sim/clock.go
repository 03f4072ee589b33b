package sim

import "time"

// Clock is the simulator's source of time: devices and batches move through
// their states as it advances.
type Clock interface {
	Now() time.Time
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }
