package records

import (
	"context"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolref"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolspace"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/registry"
)

// snapshotTTL is how long seeds share one read of the cluster, from the
// read's end: long enough for every domain seeded after a failover, short
// enough that what it misses (see snapshot) stays small. Counted from its
// start, a read of a large cluster that takes longer than this (50,000
// addresses on a busy API server do) would be stale when it ends, and each
// seed waiting for it would read the whole cluster again: pools × objects.
const snapshotTTL = 30 * time.Second

// pageSize is the page of every list the seeding reads.
const pageSize = 500

// snapshot is one paged read of every record, claim, pool and IPAddress,
// shared by the seeds of all domains while it is fresh: after a failover
// every domain seeds at once, and reading each kind once keeps the cost at
// objects, not pools × objects. What it can miss does not matter to
// seeding: a record created since still refuses a second record of its
// address (Confirm, Reserve), which is what keeps an address from being
// handed out twice, the registry's memory being only a cache of the
// records; an IPAddress created since has its record already (the registry
// and the IPAddress webhook record an address before it is handed out); a
// pool created since holds only such IPAddresses; a claim created since is
// read live before its record is taken for an orphan (see Records).
type snapshot struct {
	// started and at are when the read started and ended: the TTL runs
	// from its end, and a seed that needs a read made since a time (see
	// notBefore) needs one started since.
	started, at time.Time
	claims      map[types.UID]bool
	domains     map[poolref.Key]string
	// prefixLengths are those of the prefix pools (spec.allocationPrefixLength).
	prefixLengths map[poolref.Key]int
	// records by the hash of their domain (AllocationDomainLabel).
	records map[string][]coordinationv1.Lease
	// addresses by their pool.
	addresses map[poolref.Key][]ipamv1.IPAddress
}

// current returns the snapshot, read again when it is older than
// snapshotTTL or than notBefore. The lock is held across the read on
// purpose: the seeds that wait for it then share its result instead of
// each reading the cluster.
func (s *Store) current(ctx context.Context, notBefore time.Time) (*snapshot, error) {
	s.loading.Lock()
	defer s.loading.Unlock()
	if s.snap != nil && s.now().Sub(s.snap.at) < snapshotTTL && !s.snap.started.Before(notBefore) {
		return s.snap, nil
	}
	snap, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	s.snap = snap
	// A snapshot holds every record and IPAddress of the cluster: let it go
	// once no seed may use it, rather than keep it until the next failover.
	time.AfterFunc(snapshotTTL, func() { s.forget(snap) })
	return snap, nil
}

// notBefore is how old a snapshot the domain may seed from: any for most,
// but the domain of an adopted in-cluster pool's companion (an explicit
// pool, a domain of its own, named incluster-<name> or
// inclusterprefix-<name>) seeds from a snapshot
// read since it was first asked for. Its IPAddresses were made by the
// in-cluster provider, without records, until the pool was paused for
// adoption, so what the snapshot's reasoning counts on (an IPAddress made
// since has its record) does not hold for them: a snapshot read before the
// companion served, for another domain, would miss them, and the companion
// would hand their addresses out again. Seeding asks first when the
// companion serves, after the pause, and its few reads (records, then
// IPAddresses) then share one read; asked again snapshotTTL later, it is
// a seeding of its own. A pool merely named like a companion
// reads once more than it needs, which is harmless.
func (s *Store) notBefore(domain string) time.Time {
	rest, ok := strings.CutPrefix(domain, "pool/")
	if !ok {
		return time.Time{}
	}
	key, ok := poolref.Parse(rest)
	if !ok || !poolref.IsCompanionName(key.Name) {
		return time.Time{}
	}
	s.loading.Lock()
	defer s.loading.Unlock()
	if s.adopted == nil {
		s.adopted = map[string]time.Time{}
	}
	// Asked again after snapshotTTL is a seeding of its own (the pool
	// forgotten and adopted again): it reads again too.
	at, asked := s.adopted[domain]
	if now := s.now(); !asked || now.Sub(at) >= snapshotTTL {
		at = now
		s.adopted[domain] = at
	}
	return at
}

// forget drops snap if it is still the current snapshot.
func (s *Store) forget(snap *snapshot) {
	s.loading.Lock()
	defer s.loading.Unlock()
	if s.snap == snap {
		s.snap = nil
	}
}

// read lists every record, claim, pool and IPAddress, a page at a time.
// The records come first: a claim is read after its record, so that a
// record whose claim the read does not show is an orphan's or a claim's
// made since (see Records). Each object seeding cannot use is reported
// here, once per read however many domains seed from it.
func (s *Store) read(ctx context.Context) (*snapshot, error) {
	snap := &snapshot{
		started: s.now(), claims: map[types.UID]bool{}, domains: map[poolref.Key]string{}, prefixLengths: map[poolref.Key]int{},
		records: map[string][]coordinationv1.Lease{}, addresses: map[poolref.Key][]ipamv1.IPAddress{},
	}
	err := pages(ctx, s.reader, func() *coordinationv1.LeaseList { return &coordinationv1.LeaseList{} },
		func(l *coordinationv1.LeaseList) {
			for i := range l.Items {
				item := &l.Items[i]
				if hash, ok := item.Labels[v1alpha1.AllocationDomainLabel]; ok && s.usableRecord(item) {
					snap.records[hash] = append(snap.records[hash], *item)
				}
			}
		}, client.InNamespace(s.namespace), client.HasLabels{v1alpha1.AllocationDomainLabel})
	if err != nil {
		return nil, err
	}
	err = pages(ctx, s.reader, func() *ipamv1.IPAddressClaimList { return &ipamv1.IPAddressClaimList{} },
		func(l *ipamv1.IPAddressClaimList) {
			for i := range l.Items {
				snap.claims[l.Items[i].UID] = true
			}
		})
	if err != nil {
		return nil, err
	}
	for _, kind := range []string{v1alpha1.MetalVRFIPPoolKind, v1alpha1.GlobalMetalVRFIPPoolKind} {
		err := pages(ctx, s.reader, func() client.ObjectList { return poolref.NewList(kind) }, func(l client.ObjectList) {
			for _, pool := range pools(l) {
				snap.domains[poolref.KeyOf(pool)] = registry.DomainOf(pool)
				if bits := poolspace.PrefixLength(pool.PoolSpec()); bits > 0 {
					snap.prefixLengths[poolref.KeyOf(pool)] = bits
				}
			}
		})
		if err != nil {
			return nil, err
		}
	}
	err = pages(ctx, s.reader, func() *ipamv1.IPAddressList { return &ipamv1.IPAddressList{} },
		func(l *ipamv1.IPAddressList) {
			for i := range l.Items {
				address := &l.Items[i]
				if key, ok := poolref.For(address.Spec.PoolRef, address.Namespace); ok && s.usableAddress(address) {
					snap.addresses[key] = append(snap.addresses[key], *address)
				}
			}
		})
	if err != nil {
		return nil, err
	}
	snap.at = s.now()
	return snap, nil
}

// pages lists with newList a page at a time, handing each page to each.
func pages[L client.ObjectList](ctx context.Context, reader client.Reader, newList func() L, each func(L), opts ...client.ListOption) error {
	next := ""
	for {
		list := newList()
		if err := reader.List(ctx, list, append(opts, client.Limit(pageSize), client.Continue(next))...); err != nil {
			return err
		}
		each(list)
		if next = list.GetContinue(); next == "" {
			return nil
		}
	}
}
