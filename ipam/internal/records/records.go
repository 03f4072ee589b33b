// Package records keeps the registry's records in the API server: one
// coordination.k8s.io Lease per address in use in an allocation domain, in
// the manager's own namespace, named after the domain and the address, so
// the API server itself refuses to record an address twice; and one more
// per domain of a VRF, its marker (Mark), which says whether its records
// have spans of more than one length (see the registry's overlap.go).
//
// A Lease rather than a resource of our own: it is what a record is (who
// holds something, never expiring here), it costs the API server half the
// CPU of a custom resource per write (built-in types skip the schema
// validation and unstructured handling of CRDs), and a claim's record is
// one write of the four a claim costs. One namespace, because a domain spans
// namespaces (see docs/pools.md).
package records

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolref"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/registry"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/message"
)

// Store is the registry.Store of the API server.
type Store struct {
	// client writes.
	client client.Client
	// reader reads live: a record or an IPAddress the cache has not seen yet
	// must count.
	reader client.Reader
	// namespace holds the records.
	namespace string
	// writer is who creates the records.
	writer Writer

	// loading is held while the snapshot is read or handed out: seeds that
	// come at once wait for one read instead of each reading the cluster
	// (the lock order: see the registry's package doc).
	loading sync.Mutex
	loaded

	now func() time.Time
	// skipped is told of each object seeding cannot use (see OnSkip).
	skipped func(Skip)
	// staleFence is told of each record created past a stale fence (see
	// OnStaleFence).
	staleFence func(refusal error)

	// written are the records this process created or confirmed, by name
	// (see Free).
	written writtenRecords
}

var _ registry.Store = &Store{}

// loaded is what Store.loading guards.
type loaded struct {
	snap *snapshot
	// adopted is when seeding first asked for each companion's domain
	// (see notBefore).
	adopted map[string]time.Time
}

// Writer is the process that creates records.
type Writer struct {
	// Identity names it on every record it creates: its leader election
	// identity.
	Identity string
	// Lease is the leader election Lease, in the records' namespace, that
	// its controllers allocate under; empty without leader election, or
	// when the Lease lives elsewhere. The records its controllers create
	// then carry the fence (see v1alpha1.AllocationFencedLabel).
	Lease string
}

// New returns the store keeping its records in namespace, writing through
// c and reading through reader, creating them as writer.
func New(c client.Client, reader client.Reader, namespace string, writer Writer) *Store {
	return &Store{client: c, reader: reader, namespace: namespace, writer: writer, now: time.Now}
}

// name is the name of the record of ip in domain: a hash of the domain, so
// that any domain key fits, and the address, readable for IPv4 and in full
// hexadecimal for IPv6 (colons are not allowed in names).
func name(domain string, ip netip.Addr) string {
	addr := ip.String()
	if ip.Is6() {
		b := ip.As16()
		addr = hex.EncodeToString(b[:])
	}
	return domainHash(domain) + "." + addr
}

// domainHash labels the records of a domain; 64 bits leave no practical
// chance of two domains sharing it, and Records checks the domain anyway.
func domainHash(domain string) string {
	sum := sha256.Sum256([]byte(domain))
	return hex.EncodeToString(sum[:8])
}

// Records lists the records of a domain. A record whose claim no longer
// exists, and whose address no IPAddress of the domain names, is deleted
// on the way: it was left by a process that stopped between recording an
// address and creating its IPAddress, and the claim's release, which would
// have deleted it, has run already (see orphan for one an IPAddress names).
// A record that does not read as one was reported and left out when the
// snapshot was read (see usableRecord).
func (s *Store) Records(ctx context.Context, domain string) ([]registry.Record, error) {
	snap, err := s.current(ctx, s.notBefore(domain))
	if err != nil {
		return nil, err
	}
	items := snap.records[domainHash(domain)]
	records := make([]registry.Record, 0, len(items))
	var named map[netip.Addr]registry.Holder
	for i := range items {
		item := &items[i]
		rec, err := recordOf(item)
		if err != nil || item.Annotations[v1alpha1.AllocationDomainAnnotation] != domain {
			continue
		}
		if !rec.Holder.Retired && !snap.claims[rec.Holder.Claim.UID] {
			gone, err := s.claimGone(ctx, rec.Holder.Claim)
			if err != nil {
				return nil, err
			}
			if gone && named == nil {
				if named, err = s.named(ctx, snap, domain); err != nil {
					return nil, err
				}
			}
			if gone {
				if rec, err = s.orphan(ctx, domain, item, rec, named); err != nil {
					return nil, err
				}
				if !rec.Address.IsValid() {
					continue
				}
			}
		}
		records = append(records, rec)
	}
	return records, nil
}

// named maps each address an IPAddress of the domain's pools names to the
// IPAddress's holder.
func (s *Store) named(ctx context.Context, snap *snapshot, domain string) (map[netip.Addr]registry.Holder, error) {
	addresses, err := s.domainAddresses(ctx, snap, domain)
	named := make(map[netip.Addr]registry.Holder, len(addresses))
	for _, rec := range addresses {
		named[rec.Address] = rec.Holder
	}
	return named, err
}

// orphan settles the record of a claim that is gone. Without an IPAddress
// naming its address it is deleted (a zero Record): a process stopped
// between recording the address and creating its IPAddress. With one, it
// is kept, and rewritten in place for the IPAddress's holder when that is
// another claim: deleting it for seeding to record the IPAddress again
// would leave the address without a record in between, for any other
// writer (a standby replica's webhook, an old Pod of a rolling update) to
// record for another claim.
func (s *Store) orphan(ctx context.Context, domain string, item *coordinationv1.Lease, rec registry.Record, named map[netip.Addr]registry.Holder) (registry.Record, error) {
	holder, kept := named[rec.Address]
	switch {
	case !kept:
		return registry.Record{}, s.delete(ctx, item)
	case holder.Claim.Same(rec.Holder.Claim):
		return rec, nil
	}
	rec.Holder = holder
	obj := s.recordObject(domain, rec)
	obj.ResourceVersion, obj.UID = item.ResourceVersion, item.UID
	s.written.drop(obj.Name)
	if err := s.client.Update(ctx, obj); err != nil {
		return registry.Record{}, fmt.Errorf("recording address %s for claim %s, whose IPAddress names it: %w", rec.Address, holder.Claim.NamespacedName, err)
	}
	return rec, nil
}

// claimGone reads the claim live: a record is only made for a claim that
// exists, so a claim missing now, after its record was read, was deleted.
func (s *Store) claimGone(ctx context.Context, c registry.Claim) (bool, error) {
	uid, found, err := s.liveClaimUID(ctx, c.NamespacedName)
	if err != nil {
		return false, err
	}
	return !found || uid != c.UID, nil
}

// liveClaimUID reads the UID of the claim of that name live; found is false
// when there is none. A name no claim can have is not asked for: the
// request would fail before it is sent, every time seeding is retried.
func (s *Store) liveClaimUID(ctx context.Context, key types.NamespacedName) (uid types.UID, found bool, err error) {
	if !claimNameValid(key) {
		return "", false, nil
	}
	claim := &ipamv1.IPAddressClaim{}
	err = s.reader.Get(ctx, key, claim)
	if apierrors.IsNotFound(err) {
		return "", false, nil
	}
	return claim.UID, err == nil, err
}

// Reserve creates the record of r, or returns a *registry.TakenError
// naming who holds the address. A record of the controllers of a leader
// carries the fence: the API server refuses it once another process holds
// the writer's Lease (config/ipam/fence).
func (s *Store) Reserve(ctx context.Context, domain string, r registry.Record) error {
	obj := s.recordObject(domain, r)
	for {
		err := s.create(ctx, obj)
		if err == nil {
			s.written.set(obj.Name, obj.ResourceVersion, r.Holder.Claim)
		}
		if !apierrors.IsAlreadyExists(err) {
			return err
		}
		existing := &coordinationv1.Lease{}
		err = s.reader.Get(ctx, client.ObjectKeyFromObject(obj), existing)
		if apierrors.IsNotFound(err) {
			continue // released meanwhile: try again
		}
		if err != nil {
			return err
		}
		// One that does not read as a record holds the address all the same.
		rec, _ := recordOf(existing)
		return &registry.TakenError{Address: r.Address, Holder: rec.Holder}
	}
}

// create creates a record. A fenced record that the API server refuses
// while a live read shows this process holding the Lease it names, within
// the lease's duration, was refused by a stale fence: the API server stops
// its informer of Leases for good once no admission policy binding names the
// kind for a moment (kubernetes/kubernetes#130887), which `clusterctl
// upgrade` causes by deleting and re-creating the fence with the rest of
// the components. The fence then judges every record by a holder long gone
// and would refuse the leader's until the API server restarts; the record is
// created unfenced instead, as a manager without leader election writes
// them (the record's name still keeps the address unique), and reported.
func (s *Store) create(ctx context.Context, obj *coordinationv1.Lease) error {
	err := s.client.Create(ctx, obj)
	if !apierrors.IsForbidden(err) || obj.Labels[v1alpha1.AllocationFencedLabel] != "true" || !s.holdsLease(ctx) {
		return err
	}
	unfenced := obj.DeepCopy()
	delete(unfenced.Labels, v1alpha1.AllocationFencedLabel)
	delete(unfenced.Annotations, v1alpha1.AllocationFenceAnnotation)
	if err := s.client.Create(ctx, unfenced); err != nil {
		return err
	}
	obj.UID, obj.ResourceVersion = unfenced.UID, unfenced.ResourceVersion
	if s.staleFence != nil {
		s.staleFence(err)
	}
	return nil
}

// holdsLease reads the writer's leader election Lease live: held by this
// process and renewed within its duration.
func (s *Store) holdsLease(ctx context.Context) bool {
	lease := &coordinationv1.Lease{}
	if err := s.reader.Get(ctx, client.ObjectKey{Namespace: s.namespace, Name: s.writer.Lease}, lease); err != nil {
		return false
	}
	spec := lease.Spec
	return ptr.Deref(spec.HolderIdentity, "") == s.writer.Identity && spec.RenewTime != nil && spec.LeaseDurationSeconds != nil &&
		s.now().Before(spec.RenewTime.Add(time.Duration(*spec.LeaseDurationSeconds)*time.Second))
}

// OnStaleFence sets fn to be told, with the refusal, of each record created
// unfenced because the API server's fence was stale (see create).
func (s *Store) OnStaleFence(fn func(refusal error)) { s.staleFence = fn }

// recordObject is the Lease that records r in domain.
func (s *Store) recordObject(domain string, r registry.Record) *coordinationv1.Lease {
	claim := r.Holder.Claim.String()
	obj := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: s.namespace,
			Name:      name(domain, r.Address),
			Labels: map[string]string{
				v1alpha1.AllocationDomainLabel:   domainHash(domain),
				v1alpha1.AllocationClaimUIDLabel: uidLabel(r.Holder.Claim.UID),
			},
			Annotations: map[string]string{
				v1alpha1.AllocationDomainAnnotation:     domain,
				v1alpha1.AllocationAddressAnnotation:    r.Address.String(),
				v1alpha1.AllocationPoolAnnotation:       r.Holder.Pool.String(),
				v1alpha1.AllocationClaimAnnotation:      claim,
				v1alpha1.AllocationClaimUIDAnnotation:   string(r.Holder.Claim.UID),
				v1alpha1.AllocationRecordedByAnnotation: s.writer.Identity,
			},
		},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &claim},
	}
	if r.Holder.Bits > 0 {
		obj.Annotations[v1alpha1.AllocationPrefixLengthAnnotation] = strconv.Itoa(r.Holder.Bits)
	}
	if s.writer.Lease != "" && !r.ByAdmission {
		obj.Labels[v1alpha1.AllocationFencedLabel] = "true"
		obj.Annotations[v1alpha1.AllocationFenceAnnotation] = s.writer.Lease
	}
	return obj
}

// Unreserve deletes the record of r's address if r's claim holds it and it
// is not retired, and reports whether it did. With r.Recorded set (a record
// read before, see registry.Reap) it deletes it only if it was not
// confirmed since: the delete is made on the resourceVersion read, so a
// confirmation in between keeps it.
func (s *Store) Unreserve(ctx context.Context, domain string, r registry.Record) (bool, error) {
	existing := &coordinationv1.Lease{}
	err := s.reader.Get(ctx, client.ObjectKey{Namespace: s.namespace, Name: name(domain, r.Address)}, existing)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, err
	}
	rec, err := recordOf(existing)
	if err != nil || !rec.Holder.Claim.Same(r.Holder.Claim) || rec.Holder.Retired || !r.Recorded.IsZero() && !rec.Recorded.Equal(r.Recorded) {
		return false, nil
	}
	unchanged := client.Preconditions{UID: &existing.UID}
	if !r.Recorded.IsZero() {
		unchanged.ResourceVersion = &existing.ResourceVersion
	}
	s.written.drop(existing.Name)
	err = s.client.Delete(ctx, existing, unchanged)
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return false, nil
	}
	return err == nil, err
}

// Retire marks the record of r's address retired if r's claim holds it:
// labelled so, and no longer labelled with the claim, so that neither the
// claim's release nor the sweep of records without a claim deletes it.
func (s *Store) Retire(ctx context.Context, domain string, r registry.Record) error {
	existing := &coordinationv1.Lease{}
	if err := s.reader.Get(ctx, client.ObjectKey{Namespace: s.namespace, Name: name(domain, r.Address)}, existing); err != nil {
		return err
	}
	if !heldBy(existing, r.Holder.Claim) || existing.Labels[v1alpha1.AllocationRetiredLabel] == "true" {
		return nil
	}
	s.written.drop(existing.Name)
	patch := client.MergeFromWithOptions(existing.DeepCopy(), client.MergeFromWithOptimisticLock{})
	delete(existing.Labels, v1alpha1.AllocationClaimUIDLabel)
	existing.Labels[v1alpha1.AllocationRetiredLabel] = "true"
	existing.Annotations[v1alpha1.AllocationClaimUIDAnnotation] = string(r.Holder.Claim.UID)
	return s.client.Patch(ctx, existing, patch)
}

// ForgetRetired deletes the retired records of a domain once pool, being
// deleted, is its last pool: while another pool of the domain exists, it
// could hand out the addresses they keep out of use.
func (s *Store) ForgetRetired(ctx context.Context, domain string, pool poolref.Key) error {
	members, err := s.members(ctx, domain)
	if err != nil {
		return err
	}
	delete(members, pool)
	if len(members) > 0 {
		return nil
	}
	var list coordinationv1.LeaseList
	if err := s.reader.List(ctx, &list, client.InNamespace(s.namespace), client.MatchingLabels{
		v1alpha1.AllocationDomainLabel: domainHash(domain), v1alpha1.AllocationRetiredLabel: "true",
	}); err != nil {
		return err
	}
	var errs []error
	for i := range list.Items {
		errs = append(errs, s.delete(ctx, &list.Items[i]))
	}
	return errors.Join(errs...)
}

// Free deletes the claim's records, but the retired ones. Those of held, its
// addresses in domain as the registry knows them, are deleted by name: in
// one request when this process wrote the record last (see freeByName).
// Only when the registry knows none are the claim's records searched for,
// in every domain: a list by label, which the API server answers by
// filtering every record of the namespace.
func (s *Store) Free(ctx context.Context, claim registry.Claim, domain string, held []netip.Addr) error {
	if len(held) == 0 {
		return s.freeAll(ctx, claim)
	}
	var errs []error
	for _, ip := range held {
		errs = append(errs, s.freeByName(ctx, domain, claim, ip))
	}
	return errors.Join(errs...)
}

// freeByName deletes the claim's record of ip in domain. When this process
// wrote it last for the claim, the delete is made on the resourceVersion
// it wrote: that is the claim's record as written, neither retired nor
// rewritten for another claim nor created again since (any of which
// changes the resourceVersion). Otherwise (written by another process,
// confirmed by another replica's webhook since, or before a restart) a
// live read first shows whose it is (Unreserve).
func (s *Store) freeByName(ctx context.Context, domain string, claim registry.Claim, ip netip.Addr) error {
	key := client.ObjectKey{Namespace: s.namespace, Name: name(domain, ip)}
	if rv, ok := s.written.get(key.Name, claim); ok {
		obj := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
		err := s.client.Delete(ctx, obj, client.Preconditions{ResourceVersion: &rv})
		if err == nil || apierrors.IsNotFound(err) {
			s.written.drop(key.Name)
			return nil
		}
		if !apierrors.IsConflict(err) {
			return err
		}
	}
	_, err := s.Unreserve(ctx, domain, registry.Record{Address: ip, Holder: registry.Holder{Claim: claim}})
	return err
}

// freeAll deletes every record of the claim, found by its label.
func (s *Store) freeAll(ctx context.Context, claim registry.Claim) error {
	var list coordinationv1.LeaseList
	if err := s.reader.List(ctx, &list, client.InNamespace(s.namespace), client.MatchingLabels{v1alpha1.AllocationClaimUIDLabel: uidLabel(claim.UID)}); err != nil {
		return err
	}
	var errs []error
	for i := range list.Items {
		if heldBy(&list.Items[i], claim) {
			errs = append(errs, s.delete(ctx, &list.Items[i]))
		}
	}
	return errors.Join(errs...)
}

// uidLabel is the label value of a claim's UID: a hash, since a UID is
// whatever its writer put in an owner reference, not always a label value.
func uidLabel(uid types.UID) string {
	sum := sha256.Sum256([]byte(uid))
	return hex.EncodeToString(sum[:16])
}

// heldBy reports whether the record is the claim's: the same UID, in the
// same namespace under the same name. A UID alone is whatever an owner
// reference said when the record was made, which its writer chose: a
// record made for a forged one must not go with the claim that really has
// that UID, nor keep it from going.
func heldBy(obj *coordinationv1.Lease, claim registry.Claim) bool {
	rec, err := recordOf(obj)
	return err == nil && rec.Holder.Claim.Same(claim)
}

// delete deletes exactly this record, not one created since under its name.
func (s *Store) delete(ctx context.Context, obj *coordinationv1.Lease) error {
	s.written.drop(obj.Name)
	err := s.client.Delete(ctx, obj, client.Preconditions{UID: &obj.UID})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// Addresses lists the IPAddresses of every pool of the domain.
func (s *Store) Addresses(ctx context.Context, domain string) ([]registry.Record, error) {
	snap, err := s.current(ctx, s.notBefore(domain))
	if err != nil {
		return nil, err
	}
	return s.domainAddresses(ctx, snap, domain)
}

// domainAddresses lists the IPAddresses of every pool of the domain in snap.
func (s *Store) domainAddresses(ctx context.Context, snap *snapshot, domain string) ([]registry.Record, error) {
	var records []registry.Record
	for key, d := range snap.domains {
		if d != domain {
			continue
		}
		pool, err := s.addresses(ctx, key, snap.prefixLengths[key], snap.addresses[key])
		if err != nil {
			return nil, err
		}
		records = append(records, pool...)
	}
	return records, nil
}

// PoolAddresses lists the IPAddresses of one pool.
func (s *Store) PoolAddresses(ctx context.Context, pool poolref.Key) ([]registry.Record, error) {
	snap, err := s.current(ctx, s.notBefore("pool/"+pool.String()))
	if err != nil {
		return nil, err
	}
	return s.addresses(ctx, pool, snap.prefixLengths[pool], snap.addresses[pool])
}

// members are the pools of the domain, read live.
func (s *Store) members(ctx context.Context, domain string) (map[poolref.Key]bool, error) {
	members := map[poolref.Key]bool{}
	for _, kind := range []string{v1alpha1.MetalVRFIPPoolKind, v1alpha1.GlobalMetalVRFIPPoolKind} {
		err := pages(ctx, s.reader, func() client.ObjectList { return poolref.NewList(kind) }, func(l client.ObjectList) {
			for _, pool := range pools(l) {
				if registry.DomainOf(pool) == domain {
					members[poolref.KeyOf(pool)] = true
				}
			}
		})
		if err != nil {
			return nil, err
		}
	}
	return members, nil
}

// addresses are the IPAddresses of pool, as records. Those without an
// address were reported and left out when the snapshot was read (see
// usableAddress).
func (s *Store) addresses(ctx context.Context, pool poolref.Key, bits int, addresses []ipamv1.IPAddress) ([]registry.Record, error) {
	records := make([]registry.Record, 0, len(addresses))
	for i := range addresses {
		address := &addresses[i]
		ip, err := netip.ParseAddr(address.Spec.Address)
		if err != nil {
			continue
		}
		claim, err := s.claimOf(ctx, address)
		if err != nil {
			return nil, err
		}
		records = append(records, registry.Record{Address: ip, Holder: registry.Holder{Pool: pool, Claim: claim, Bits: bits}})
	}
	return records, nil
}

// claimOf is the claim holding the IPAddress's address: the one its owner
// reference names, else the claim itself, read live. An error reading it
// fails the seeding, which is retried: only a name no claim can have is an
// error of the object, and it is not asked for (see ownClaim).
func (s *Store) claimOf(ctx context.Context, address *ipamv1.IPAddress) (registry.Claim, error) {
	claim := AddressClaim(address)
	if !claimNameValid(claim.NamespacedName) {
		return ownClaim(address), nil
	}
	if _, ok := ClaimUID(address); ok {
		return claim, nil
	}
	uid, found, err := s.liveClaimUID(ctx, claim.NamespacedName)
	if found {
		claim.UID = uid
	}
	return claim, err
}

// AddressClaim is the claim an IPAddress was handed out to: its UID comes
// from the IPAddress's owner reference. One without such a reference is
// held by nobody who could release it: a UID of its own keeps its address
// recorded until the IPAddress goes.
func AddressClaim(address *ipamv1.IPAddress) registry.Claim {
	uid, ok := ClaimUID(address)
	if !ok {
		uid = ownUID(address)
	}
	return registry.Claim{NamespacedName: types.NamespacedName{Namespace: address.Namespace, Name: address.Spec.ClaimRef.Name}, UID: uid}
}

// ClaimUID returns the UID of the claim an IPAddress's owner reference names.
func ClaimUID(address *ipamv1.IPAddress) (types.UID, bool) {
	for _, ref := range address.OwnerReferences {
		if ref.Kind == "IPAddressClaim" && ref.Name == address.Spec.ClaimRef.Name &&
			strings.HasPrefix(ref.APIVersion, ipamv1.GroupVersion.Group+"/") {
			return ref.UID, true
		}
	}
	return "", false
}

// recordOf reads a record, or says why a Lease is not one.
func recordOf(obj *coordinationv1.Lease) (registry.Record, error) {
	annotation := func(key, want string) error {
		return fmt.Errorf("annotation %s %s is not %s", key, message.Quote(obj.Annotations[key]), want)
	}
	ip, err := netip.ParseAddr(obj.Annotations[v1alpha1.AllocationAddressAnnotation])
	if err != nil {
		return registry.Record{}, annotation(v1alpha1.AllocationAddressAnnotation, "an IP address")
	}
	pool, ok := poolref.Parse(obj.Annotations[v1alpha1.AllocationPoolAnnotation])
	if !ok {
		return registry.Record{}, annotation(v1alpha1.AllocationPoolAnnotation, "a pool")
	}
	namespace, name, ok := strings.Cut(obj.Annotations[v1alpha1.AllocationClaimAnnotation], "/")
	if !ok {
		return registry.Record{}, annotation(v1alpha1.AllocationClaimAnnotation, "<namespace>/<name>")
	}
	var bits int
	if v, ok := obj.Annotations[v1alpha1.AllocationPrefixLengthAnnotation]; ok {
		if bits, err = strconv.Atoi(v); err != nil || bits < 1 || bits > ip.BitLen() {
			return registry.Record{}, annotation(v1alpha1.AllocationPrefixLengthAnnotation, fmt.Sprintf("a prefix length of 1 to %d", ip.BitLen()))
		}
	}
	retired := obj.Labels[v1alpha1.AllocationRetiredLabel] == "true"
	uid := types.UID(obj.Annotations[v1alpha1.AllocationClaimUIDAnnotation])
	return registry.Record{Address: ip, Recorded: recordedAt(obj), Holder: registry.Holder{
		Pool: pool,
		Claim: registry.Claim{
			NamespacedName: types.NamespacedName{Namespace: namespace, Name: name},
			UID:            uid,
		},
		Retired: retired,
		Bits:    bits,
	}}, nil
}

// pools returns the items of a pool list.
func pools(list client.ObjectList) []v1alpha1.Pool {
	var out []v1alpha1.Pool
	switch l := list.(type) {
	case *v1alpha1.MetalVRFIPPoolList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *v1alpha1.GlobalMetalVRFIPPoolList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	}
	return out
}
