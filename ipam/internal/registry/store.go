package registry

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"go4.org/netipx"
	"k8s.io/apimachinery/pkg/types"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolref"
)

// Claim identifies a claim. The UID tells a claim from one deleted and
// created again under the same name.
type Claim struct {
	types.NamespacedName
	UID types.UID
}

// Holder is who holds an address: a claim, served by a pool.
type Holder struct {
	Pool  poolref.Key
	Claim Claim
	// Retired: the claim's IPAddress was left without its claim (see
	// Registry.Retire); the address stays out of use, and no release of
	// the claim frees it.
	Retired bool
	// Bits, for a claim of a prefix pool, is the length of the prefix held,
	// whose first address is the one recorded: every address of it is in
	// use in the domain. 0 for a single address.
	Bits int
}

// span is the addresses h holds when the first one, or the only one, is ip.
func (h Holder) span(ip netip.Addr) netipx.IPRange {
	if h.Bits == 0 {
		return netipx.IPRangeFrom(ip, ip)
	}
	return netipx.RangeOfPrefix(netip.PrefixFrom(ip, h.Bits).Masked())
}

// Record is one address in use, as the API server keeps it.
type Record struct {
	Address netip.Addr
	Holder  Holder
	// Recorded is when the record was created or last confirmed (see
	// Store.Confirm), by the API server's clock; zero when not known.
	Recorded time.Time
	// ByAdmission: written by the IPAddress webhook, which every replica
	// serves, for an IPAddress another writer is creating (see Admit). Every
	// other record is written by the controllers, which run in the leader
	// alone, and the store fences it by the leader's Lease.
	ByAdmission bool
}

// Store is the API server's side of the registry: one record per address in
// use in a domain, which only one writer can create. The registry never
// hands out an address without first creating its record, so two processes
// that disagree in memory (a frozen leader and its successor, replicas
// without leader election) still never hand out the same address. Its
// writes are the transitions of a record (see "The life of a record" in
// the package doc); its reads are live.
type Store interface {
	// Confirm creates the record of an address whose IPAddress is about
	// to be created, or marks the claim's record of it recorded now. When
	// another claim's record holds the address it fails with a
	// *TakenError naming its holder.
	Confirm(ctx context.Context, domain string, r Record) error
	// Reserve creates the record of an address an IPAddress names already.
	// When the address has a record already it fails with a *TakenError
	// naming its holder.
	Reserve(ctx context.Context, domain string, r Record) error
	// Unreserve deletes the record of r's address if r's claim holds it
	// and it is not retired; with r.Recorded set, only if it was not
	// confirmed since. It reports whether it deleted it.
	Unreserve(ctx context.Context, domain string, r Record) (bool, error)
	// Free deletes the records the claim holds, but the retired ones:
	// those of held, the addresses the registry knows it holds in domain,
	// by name; when it knows none, every one the claim holds in any
	// domain. A pending record the registry never knew of (another
	// process's webhook wrote it) is Reap's and seeding's to delete.
	Free(ctx context.Context, claim Claim, domain string, held []netip.Addr) error
	// Retire marks the record of r's address retired, if r's claim holds it.
	Retire(ctx context.Context, domain string, r Record) error
	// ForgetRetired deletes the retired records of a domain once pool,
	// being deleted, is the last of its pools.
	ForgetRetired(ctx context.Context, domain string, pool poolref.Key) error
	// Mark makes the domain's marker say what Marked says once a record of
	// span length bits marked it, reading it live, and reports whether it
	// says mixed (see overlap.go).
	Mark(ctx context.Context, domain string, bits int) (mixed bool, err error)

	// Records lists the records of a domain, read live.
	Records(ctx context.Context, domain string) ([]Record, error)
	// LiveRecords lists the records of a domain as the API server has them
	// now, and does nothing else: the check after create (see
	// checkOverlap).
	LiveRecords(ctx context.Context, domain string) ([]Record, error)
	// ClaimRecords lists the records of a claim in a domain, read live.
	ClaimRecords(ctx context.Context, domain string, claim Claim) ([]Record, error)
	// Addresses lists the IPAddresses of the pools of a domain, read live,
	// as records: what was handed out before records existed.
	Addresses(ctx context.Context, domain string) ([]Record, error)
	// PoolAddresses lists the IPAddresses of one pool, read live.
	PoolAddresses(ctx context.Context, pool poolref.Key) ([]Record, error)
	// ClaimAddresses lists the addresses of the IPAddresses whose
	// spec.claimRef names the claim, whatever their owner reference says,
	// read live.
	ClaimAddresses(ctx context.Context, claim Claim) ([]netip.Addr, error)
}

// TakenError says that an address already has a record, and whose.
type TakenError struct {
	Address netip.Addr
	Holder  Holder
}

func (e *TakenError) Error() string {
	return fmt.Sprintf("address %s is already recorded for claim %s", e.Address, e.Holder.Claim.NamespacedName)
}

// Is makes errors.Is(err, ErrTaken) hold for a *TakenError.
func (e *TakenError) Is(target error) bool { return target == ErrTaken }

// Typed errors of the registry.
var (
	// ErrPoolNotReady wraps why a pool cannot serve claims.
	ErrPoolNotReady = errors.New("pool is not ready")
	// ErrRequestedUnavailable wraps why a claim cannot have the address it requested.
	ErrRequestedUnavailable = errors.New("requested address unavailable")
	// ErrConflict: an IPAddress says a claim holds an address that the
	// registry knows as another claim's.
	ErrConflict = errors.New("address held twice")
	// ErrTaken: an address has a record already (see TakenError).
	ErrTaken = errors.New("address already recorded")
	// ErrFenced: this process may not allocate now (see Registry.fence).
	ErrFenced = errors.New("allocation fenced")
	// ErrNotInPool: an IPAddress made elsewhere (not handed out here) holds
	// an address its pool does not hand out.
	ErrNotInPool = errors.New("address not handed out by the pool")
	// ErrTooManyPending: a claim has as many addresses recorded for
	// IPAddresses that do not exist as it may (see PendingError).
	ErrTooManyPending = errors.New("too many addresses recorded for IPAddresses that do not exist")
)
