package controllers

import (
	"fmt"
	"strings"

	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
)

// Attributes of a published failure domain, which placeDevice reads back.
const (
	attributeMetro    = "metro"
	attributeFacility = "facility"
)

// failureDomains are the failure domains a cluster publishes: those of
// spec.failureDomains (facilities of spec.metro, or metros), or else the
// one of the cluster itself, its facility when it has one (the finer
// placement), else its metro; none without either.
func failureDomains(pc *infrav1.PacketCluster) []clusterv1.FailureDomain {
	if len(pc.Spec.FailureDomains) > 0 {
		out := make([]clusterv1.FailureDomain, len(pc.Spec.FailureDomains))
		for i, f := range pc.Spec.FailureDomains {
			attrs := map[string]string{attributeMetro: f.Metro}
			if f.Facility != "" {
				attrs[attributeMetro], attrs[attributeFacility] = pc.Spec.Metro, f.Facility
			}
			out[i] = clusterv1.FailureDomain{Name: f.Name(), ControlPlane: ptr.To(ptr.Deref(f.ControlPlane, true)), Attributes: attrs}
		}
		return out
	}
	fd := clusterv1.FailureDomain{ControlPlane: ptr.To(true), Attributes: map[string]string{}}
	if pc.Spec.Metro != "" {
		fd.Name, fd.Attributes[attributeMetro] = pc.Spec.Metro, pc.Spec.Metro
	}
	if pc.Spec.Facility != "" {
		fd.Name, fd.Attributes[attributeFacility] = pc.Spec.Facility, pc.Spec.Facility
	}
	if fd.Name == "" {
		return nil
	}
	return []clusterv1.FailureDomain{fd}
}

// placement is where a machine's device is created: its metro (whose
// VLANs it can carry) and, finer, its facility, which the platform takes
// over the metro when set.
type placement struct {
	metro, facility string
	// failureDomain is the Machine's failure domain that chose them; empty
	// when the machine has none.
	failureDomain string
}

// failureDomainError: the Machine's failure domain cannot place the device.
type failureDomainError struct {
	// Name is the Machine's spec.failureDomain.
	Name string
	// Cluster is the PacketCluster's name.
	Cluster string
	// Known are the cluster's failure domains, when Name is none of them.
	Known []string
	// Field and Value are the PacketMachine's spec field that places the
	// device elsewhere, when Name is known.
	Field, Value string
	// In says where the failure domain is, for a conflict.
	In string
}

func (e *failureDomainError) Error() string {
	if e.Field == "" {
		known := "it has none"
		if len(e.Known) > 0 {
			known = "it has " + strings.Join(e.Known, ", ")
		}
		return fmt.Sprintf("the Machine's spec.failureDomain %q is not a failure domain of PacketCluster %s (%s): name one of its spec.failureDomains", e.Name, e.Cluster, known)
	}
	return fmt.Sprintf("spec.%s %q places the device outside the Machine's failure domain %q (%s): leave it empty, or set it to match",
		e.Field, e.Value, e.Name, e.In)
}

// reason is the DeviceReady reason of the refusal.
func (e *failureDomainError) reason() string {
	if e.Field != "" {
		return infrav1.FailureDomainConflictReason
	}
	return infrav1.FailureDomainNotFoundReason
}

// placeDevice returns where a machine's device goes: in the failure domain
// the Machine names (spec.failureDomain), which must be one the cluster
// publishes and agree with the PacketMachine's own metro and facility;
// without one, where the PacketMachine, or else the cluster, says.
func placeDevice(pm infrav1.PacketMachineSpec, pc *infrav1.PacketCluster, failureDomain string) (placement, *failureDomainError) {
	if failureDomain == "" {
		return placement{metro: firstOf(pm.Metro, pc.Spec.Metro), facility: firstOf(pm.Facility, pc.Spec.Facility)}, nil
	}
	published := failureDomains(pc)
	var fd *clusterv1.FailureDomain
	known := make([]string, len(published))
	for i := range published {
		known[i] = published[i].Name
		if published[i].Name == failureDomain {
			fd = &published[i]
		}
	}
	if fd == nil {
		return placement{}, &failureDomainError{Name: failureDomain, Cluster: pc.Name, Known: known}
	}
	p := placement{metro: fd.Attributes[attributeMetro], facility: fd.Attributes[attributeFacility], failureDomain: failureDomain}
	in := "metro " + p.metro
	switch {
	case p.facility != "" && p.metro != "":
		in = "facility " + p.facility + " of " + in
	case p.facility != "":
		in = "facility " + p.facility
	}
	switch {
	case pm.Metro != "" && p.metro != "" && pm.Metro != p.metro:
		return placement{}, &failureDomainError{Name: failureDomain, Cluster: pc.Name, Field: "metro", Value: pm.Metro, In: in}
	case pm.Facility != "" && p.facility != "" && pm.Facility != p.facility,
		pm.Facility != "" && p.facility == "" && !strings.HasPrefix(pm.Facility, p.metro):
		return placement{}, &failureDomainError{Name: failureDomain, Cluster: pc.Name, Field: "facility", Value: pm.Facility, In: in}
	}
	p.metro = firstOf(p.metro, pm.Metro)
	p.facility = firstOf(p.facility, pm.Facility)
	return p, nil
}
