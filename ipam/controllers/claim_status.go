package controllers

import (
	"fmt"
	"net/netip"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/message"
)

// This file derives an IPAddressClaim's Ready condition from the fact its
// reconcile recorded: a pure function, the one place the reasons and
// messages of a claim are decided.

// Claim condition reasons beyond CAPI's own.
const (
	// claimBoundReason: the claim holds an address.
	claimBoundReason = "Bound"
	// clusterNotFoundReason: the claim names a Cluster that does not exist.
	clusterNotFoundReason = "ClusterNotFound"
)

// poolID names a claim's pool in messages.
type poolID struct{ kind, name string }

func (p poolID) String() string { return fmt.Sprintf("%s %q", p.kind, p.name) }

// Facts of where a claim stands (its Ready condition).
type (
	// clusterMissing: the claim's Cluster does not exist; field is where
	// the claim names it.
	clusterMissing struct{ field, name, namespace string }
	poolMissing    struct{ pool poolID }
	poolDeleting   struct{ pool poolID }
	poolExhausted  struct{ pool poolID }
	// poolCannotServe: the pool's address space does not resolve; why is
	// what its sources failed with when they gave it nothing, else the
	// spec's error.
	poolCannotServe struct {
		pool poolID
		why  string
	}
	// allocationFailed: the claim's request (its requested-address
	// annotation, the pool's spec.preAllocations), the IPAddress it has or
	// the registry refused it an address; err names what to fix.
	allocationFailed struct{ err error }
	// adoptionRefused: the address of the IPAddress the claim already has
	// was refused (by the registry, or pinned to another owner).
	adoptionRefused struct {
		ipAddress string
		err       error
	}
	// requestedUnavailable: the address the claim asks for is not free.
	requestedUnavailable struct {
		pool    poolID
		address netip.Addr
		// pinnedBy names the spec.preAllocations entry that pins the
		// address to the claim's owner; empty when the claim's annotation
		// requests it.
		pinnedBy string
		// ruledOut completes "<address> ..." with the rule of the pool that
		// keeps the address out; empty when none does, and held says which
		// claim holds it.
		ruledOut string
		held     error
	}
	addressBound struct{ address string }
)

// claimReady derives the claim's Ready condition from f; a fact it does
// not know is Unknown, which the table test catches.
func claimReady(f fact) metav1.Condition {
	const t = ipamv1.IPAddressClaimReadyCondition
	switch f := f.(type) {
	case addressBound:
		return trueCondition(t, claimBoundReason, "Bound to "+f.address)
	case clusterMissing:
		return falseCondition(t, clusterNotFoundReason, fmt.Sprintf("%s %s: no Cluster of that name in namespace %s; the claim is served once the Cluster exists",
			f.field, message.Quote(f.name), f.namespace))
	case poolMissing:
		return falseCondition(t, ipamv1.IPAddressClaimReadyPoolNotReadyReason, f.pool.String()+" not found")
	case poolDeleting:
		return falseCondition(t, ipamv1.IPAddressClaimReadyPoolNotReadyReason, f.pool.String()+" is being deleted")
	case poolExhausted:
		return falseCondition(t, ipamv1.IPAddressClaimReadyPoolExhaustedReason,
			f.pool.String()+" has no free address; the claim is served as soon as one is released or the pool grows")
	case poolCannotServe:
		return falseCondition(t, ipamv1.IPAddressClaimReadyPoolNotReadyReason, fmt.Sprintf("%s cannot serve claims: %s", f.pool, f.why))
	case allocationFailed:
		return falseCondition(t, ipamv1.IPAddressClaimReadyAllocationFailedReason, f.err.Error())
	case adoptionRefused:
		return falseCondition(t, ipamv1.IPAddressClaimReadyAllocationFailedReason, fmt.Sprintf("IPAddress %s: %v", f.ipAddress, f.err))
	case requestedUnavailable:
		return falseCondition(t, ipamv1.IPAddressClaimReadyAllocationFailedReason, f.message())
	}
	return unknownFact(t, f)
}

// message says why the claim cannot have the address it asks for: the one
// rule of the pool that keeps it out, or else the claim that holds it,
// which releasing serves the claim.
func (f requestedUnavailable) message() string {
	switch {
	case f.ruledOut == "" && f.pinnedBy != "":
		return fmt.Sprintf("%s pins %s to the claim's owner, but %v; the claim is served once it is released", f.pinnedBy, f.address, f.held)
	case f.ruledOut == "":
		return fmt.Sprintf("%v; the claim is served once it is released", f.held)
	case f.pinnedBy != "":
		return fmt.Sprintf("%s pins %s to the claim's owner, but it %s in %s: pin an address the pool hands out", f.pinnedBy, f.address, f.ruledOut, f.pool)
	}
	return fmt.Sprintf("annotation %s: requested address %s %s in %s: request an address the pool hands out, or remove the annotation",
		v1alpha1.RequestedAddressAnnotation, f.address, f.ruledOut, f.pool)
}
