package device

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
)

// VLANCache shares a project's VLAN list between the machines being
// reconciled: it is read once per key per TTL, and a reader that finds a
// read in flight waits for it instead of reading again. Locks are held only
// around the map; the read itself is outside them.
type VLANCache struct {
	TTL time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time

	mu      sync.Mutex
	entries map[any]*vlanEntry
}

type vlanEntry struct {
	done chan struct{} // closed once the read is over
	at   time.Time
	list []metalv1.VirtualNetwork
	err  error
}

// NewVLANCache returns a cache whose lists are kept for ttl.
func NewVLANCache(ttl time.Duration) *VLANCache {
	return &VLANCache{TTL: ttl, entries: map[any]*vlanEntry{}}
}

// get returns key's list, read by read when there is none fresh. A failed
// read is not kept.
func (c *VLANCache) get(ctx context.Context, key any, read func(context.Context) ([]metalv1.VirtualNetwork, error)) ([]metalv1.VirtualNetwork, error) {
	e, reader := c.entry(key)
	if reader {
		e.list, e.err = read(ctx)
		c.finish(key, e)
	}
	select {
	case <-e.done:
		return e.list, e.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// entry returns key's entry, and whether the caller must read it: a new
// entry is made when there is none, or the last one is stale or failed.
func (c *VLANCache) entry(key any) (*vlanEntry, bool) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[key]; ok {
		select {
		case <-e.done:
			if e.err == nil && now.Sub(e.at) < c.TTL {
				return e, false
			}
		default:
			return e, false // a read is in flight: wait for it
		}
	}
	e := &vlanEntry{done: make(chan struct{}), at: now}
	c.entries[key] = e
	return e, true
}

func (c *VLANCache) finish(key any, e *vlanEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	close(e.done)
	if e.err != nil && c.entries[key] == e {
		delete(c.entries, key)
	}
}

func (c *VLANCache) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// vlans is the project's VLAN list, from the cache when the executor has
// one.
func (x Executor) vlans(ctx context.Context) ([]metalv1.VirtualNetwork, error) {
	read := func(ctx context.Context) ([]metalv1.VirtualNetwork, error) { return x.API.ListVirtualNetworks(ctx, "") }
	if x.VLANs == nil {
		return read(ctx)
	}
	return x.VLANs.get(ctx, x.VLANKey, read)
}

// VLANError: a network's VLAN cannot be attached to the device.
type VLANError struct {
	VXLAN int32
	// ID is the VLAN's UUID when the network names one.
	ID string
	// Metro is the device's metro.
	Metro string
	// FoundIn are the metros the VLAN exists in instead, if any.
	FoundIn []string
	// OtherVXLAN is the tag of the VLAN named by ID when it is not VXLAN.
	OtherVXLAN int32
}

func (e *VLANError) Error() string {
	name := fmt.Sprintf("VLAN %d", e.VXLAN)
	if e.ID != "" {
		name = fmt.Sprintf("VLAN %s (vxlan %d)", e.ID, e.VXLAN)
	}
	switch {
	case e.OtherVXLAN != 0:
		return fmt.Sprintf("%s: the VLAN with that id has vxlan %d", name, e.OtherVXLAN)
	case len(e.FoundIn) > 0:
		return fmt.Sprintf("%s is in metro %s, not in the device's metro %s", name, strings.Join(e.FoundIn, ", "), e.Metro)
	}
	return fmt.Sprintf("%s not found in metro %s", name, e.Metro)
}

// ResolveVLANs fills in the ID of every VLAN of spec (given by vxlan, and by
// ID where the network names one) from the project's VLANs in one read, and
// checks each is in metro. Every VLAN that cannot be used is reported (a
// *VLANError each, joined) and left out of the returned spec.
func (x Executor) ResolveVLANs(ctx context.Context, metro string, spec Spec) (Spec, error) {
	if !slices.ContainsFunc(spec.Ports, func(p PortSpec) bool { return len(p.VLANs) > 0 }) {
		return spec, nil
	}
	all, err := x.vlans(ctx)
	if err != nil {
		return Spec{}, err
	}
	out := spec
	out.Ports = make([]PortSpec, len(spec.Ports))
	var errs []error
	for i, p := range spec.Ports {
		out.Ports[i] = PortSpec{Name: p.Name, Unbonded: p.Unbonded}
		for _, v := range p.VLANs {
			id, err := resolveVLAN(all, metro, v)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			out.Ports[i].VLANs = append(out.Ports[i].VLANs, VLAN{ID: id, VXLAN: v.VXLAN})
		}
	}
	return out, errors.Join(errs...)
}

func resolveVLAN(all []metalv1.VirtualNetwork, metro string, v VLAN) (string, error) {
	verr := &VLANError{VXLAN: v.VXLAN, ID: v.ID, Metro: metro}
	for _, vn := range all {
		switch {
		case v.ID != "" && vn.GetId() == v.ID && vn.GetVxlan() != v.VXLAN:
			verr.OtherVXLAN = vn.GetVxlan()
			return "", verr
		case v.ID != "" && vn.GetId() != v.ID, vn.GetVxlan() != v.VXLAN:
			continue
		case strings.EqualFold(metroOf(vn), metro):
			return vn.GetId(), nil
		default:
			verr.FoundIn = append(verr.FoundIn, metroOf(vn))
		}
	}
	slices.Sort(verr.FoundIn)
	return "", verr
}

func metroOf(vn metalv1.VirtualNetwork) string {
	if code := vn.GetMetroCode(); code != "" {
		return code
	}
	m := vn.GetMetro()
	return m.GetCode()
}
