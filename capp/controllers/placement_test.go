package controllers

import (
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
)

// facilities are three failure domains of metro da, the second not for the
// control plane.
var facilities = []infrav1.FailureDomainSpec{{Facility: "da11"}, {Facility: "da12", ControlPlane: ptr.To(false)}, {Facility: "da13"}}

func TestFailureDomains(t *testing.T) {
	fd := func(name string, controlPlane bool, attrs ...string) clusterv1.FailureDomain {
		m := map[string]string{}
		for i := 0; i < len(attrs); i += 2 {
			m[attrs[i]] = attrs[i+1]
		}
		return clusterv1.FailureDomain{Name: name, ControlPlane: ptr.To(controlPlane), Attributes: m}
	}
	tests := []struct {
		name string
		spec infrav1.PacketClusterSpec
		want []clusterv1.FailureDomain
	}{
		{name: "metro", spec: infrav1.PacketClusterSpec{Metro: "da"}, want: []clusterv1.FailureDomain{fd("da", true, "metro", "da")}},
		{name: "facility is finer", spec: infrav1.PacketClusterSpec{Metro: "da", Facility: "da11"},
			want: []clusterv1.FailureDomain{fd("da11", true, "metro", "da", "facility", "da11")}},
		{name: "facility alone", spec: infrav1.PacketClusterSpec{Facility: "da11"}, want: []clusterv1.FailureDomain{fd("da11", true, "facility", "da11")}},
		{name: "neither"},
		{name: "facilities of the metro, in their order, controlPlane defaulting to true",
			spec: infrav1.PacketClusterSpec{Metro: "da", FailureDomains: facilities},
			want: []clusterv1.FailureDomain{
				fd("da11", true, "metro", "da", "facility", "da11"),
				fd("da12", false, "metro", "da", "facility", "da12"),
				fd("da13", true, "metro", "da", "facility", "da13"),
			}},
		{name: "metros replace the cluster's metro",
			spec: infrav1.PacketClusterSpec{Metro: "da", FailureDomains: []infrav1.FailureDomainSpec{{Metro: "sv"}, {Metro: "da"}}},
			want: []clusterv1.FailureDomain{fd("sv", true, "metro", "sv"), fd("da", true, "metro", "da")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := failureDomains(&infrav1.PacketCluster{Spec: tt.spec})
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("failureDomains = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestPlaceDevice(t *testing.T) {
	withFacilities := infrav1.PacketClusterSpec{Metro: "da", FailureDomains: facilities}
	withMetros := infrav1.PacketClusterSpec{Metro: "da", FailureDomains: []infrav1.FailureDomainSpec{{Metro: "da"}, {Metro: "sv"}}}
	tests := []struct {
		name          string
		cluster       infrav1.PacketClusterSpec
		machine       infrav1.PacketMachineSpec
		failureDomain string
		want          placement
		// reason is the condition's reason for a refusal, with messageHas
		// in its message.
		reason     string
		messageHas []string
	}{
		{name: "no failure domain: the machine's metro and facility", cluster: infrav1.PacketClusterSpec{Metro: "da", Facility: "da11"},
			machine: infrav1.PacketMachineSpec{Metro: "ny", Facility: "ny5"}, want: placement{metro: "ny", facility: "ny5"}},
		{name: "no failure domain: the cluster's", cluster: infrav1.PacketClusterSpec{Metro: "da", Facility: "da11"},
			want: placement{metro: "da", facility: "da11"}},
		{name: "no failure domain in a cluster with several: its metro", cluster: withFacilities, want: placement{metro: "da"}},
		{name: "a facility failure domain", cluster: withFacilities, failureDomain: "da12",
			want: placement{metro: "da", facility: "da12", failureDomain: "da12"}},
		{name: "a facility failure domain agrees with the machine's metro", cluster: withFacilities, failureDomain: "da13",
			machine: infrav1.PacketMachineSpec{Metro: "da", Facility: "da13"}, want: placement{metro: "da", facility: "da13", failureDomain: "da13"}},
		{name: "a metro failure domain", cluster: withMetros, failureDomain: "sv", want: placement{metro: "sv", failureDomain: "sv"}},
		{name: "a metro failure domain keeps the machine's facility in it", cluster: withMetros, failureDomain: "sv",
			machine: infrav1.PacketMachineSpec{Facility: "sv15"}, want: placement{metro: "sv", facility: "sv15", failureDomain: "sv"}},
		{name: "the cluster's own failure domain", cluster: infrav1.PacketClusterSpec{Metro: "da"}, failureDomain: "da",
			want: placement{metro: "da", failureDomain: "da"}},
		{name: "an unknown failure domain names it and the known ones", cluster: withFacilities, failureDomain: "da14",
			reason: infrav1.FailureDomainNotFoundReason, messageHas: []string{`spec.failureDomain "da14"`, "PacketCluster c", "it has da11, da12, da13"}},
		{name: "a failure domain of a cluster without any", failureDomain: "da11",
			reason: infrav1.FailureDomainNotFoundReason, messageHas: []string{`"da11"`, "it has none"}},
		{name: "the machine's metro elsewhere", cluster: withFacilities, failureDomain: "da11", machine: infrav1.PacketMachineSpec{Metro: "ny"},
			reason: infrav1.FailureDomainConflictReason, messageHas: []string{`spec.metro "ny"`, `"da11"`, "facility da11 of metro da"}},
		{name: "the machine's facility elsewhere", cluster: withFacilities, failureDomain: "da11", machine: infrav1.PacketMachineSpec{Facility: "da12"},
			reason: infrav1.FailureDomainConflictReason, messageHas: []string{`spec.facility "da12"`, `"da11"`}},
		{name: "the machine's facility in another metro", cluster: withMetros, failureDomain: "sv", machine: infrav1.PacketMachineSpec{Facility: "da11"},
			reason: infrav1.FailureDomainConflictReason, messageHas: []string{`spec.facility "da11"`, "metro sv"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := placeDevice(tt.machine, &infrav1.PacketCluster{Spec: tt.cluster, ObjectMeta: metav1.ObjectMeta{Name: "c"}}, tt.failureDomain)
			if tt.reason == "" {
				if err != nil || got != tt.want {
					t.Fatalf("placeDevice = %+v, %v; want %+v", got, err, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("placeDevice = %+v; want a refusal", got)
			}
			if err.reason() != tt.reason {
				t.Errorf("refused as %s, want %s", err.reason(), tt.reason)
			}
			for _, want := range tt.messageHas {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("message %q lacks %q", err, want)
				}
			}
		})
	}
}
