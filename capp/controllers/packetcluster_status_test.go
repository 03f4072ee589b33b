package controllers

import (
	"errors"
	"net/http"
	"testing"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
)

// Each fact a PacketCluster phase records becomes one condition.
func TestClusterConditionsFromFacts(t *testing.T) {
	notFound := &metal.APIError{StatusCode: http.StatusNotFound}
	checkConditions(t, []conditionCase{
		{"set by the user", controlPlaneEndpointReady(endpointSetByUser{endpoint: "192.0.2.10:6443"}), "True", infrav1.ControlPlaneEndpointSetByUserReason,
			"spec.controlPlaneEndpoint 192.0.2.10:6443 is set by the user"},
		{"reserved", controlPlaneEndpointReady(endpointReserved{endpoint: "198.51.100.1:6443", id: "r1", address: "198.51.100.1", metro: "da"}), "True",
			infrav1.ControlPlaneEndpointReservedReason, "spec.controlPlaneEndpoint 198.51.100.1:6443 is public IPv4 reservation r1 (198.51.100.1) in metro da"},
		{"reservation gone", controlPlaneEndpointReady(reservationGone{id: "r1", host: "198.51.100.1"}), "False", infrav1.EndpointReservationNotFoundReason,
			"reservation r1 of spec.controlPlaneEndpoint 198.51.100.1 is gone from the platform: the address cannot be had back"},
		{"reserve refused", controlPlaneEndpointReady(reservationRefused{metro: "da", messages: []string{"quota"}}), "False", infrav1.EndpointReservationRefusedReason,
			`the platform refused to reserve a public IPv4 address in metro "da" (spec.metro): quota`},
		{"project refused", controlPlaneEndpointReady(metalCallFailed{what: "listing", err: notFound, source: "Secret ns/c", project: "p1"}), "False",
			infrav1.ProjectNotFoundReason, "listing: project p1 (spec.projectID) does not exist or Secret ns/c cannot reach it: " + notFound.Error()},
		{"a 503", controlPlaneEndpointReady(metalCallFailed{what: "listing", err: errors.New("503")}), "False", infrav1.MetalAPIErrorReason, "listing: 503 (retrying)"},
		{"VIP waiting", controlPlaneEndpointReady(vipWaiting{claim: "c", kind: "InClusterIPPool", pool: "p"}), "False", infrav1.WaitingForVIPReason,
			"waiting for IPAddressClaim c on InClusterIPPool p (spec.vip.addressFromPool) to be bound"},
		{"VIP elsewhere", controlPlaneEndpointReady(vipEndpointMismatch{host: "10.0.0.1", vip: "10.0.0.2", claim: "c"}), "False", infrav1.VIPAddressInvalidReason,
			"spec.controlPlaneEndpoint.host 10.0.0.1 is not VIP 10.0.0.2 bound to IPAddressClaim c: the endpoint cannot move; recreate the cluster"},
		{"VIP claimed", controlPlaneEndpointReady(vipClaimed{endpoint: "10.0.0.2:6443", vip: "10.0.0.2", claim: "c", kind: "K", pool: "p"}), "True",
			infrav1.VIPClaimedReason, "spec.controlPlaneEndpoint 10.0.0.2:6443 is the VIP bound to IPAddressClaim c on K p"},
		{"IPAM missing", controlPlaneEndpointReady(ipamMissing{}), "False", infrav1.IPAMNotInstalledReason, ipamNotInstalledMessage},
		{"release without credentials", clusterDeleting(&setupError{infrav1.NoCredentialsReason, "no credentials"}), "True", infrav1.ReleasingEndpointReason,
			"cannot release the endpoint's reservation: no credentials"},
		{"reservations going", clusterDeleting(reservationsGoing{ids: []string{"r1", "r2"}}), "True", infrav1.ReleasingEndpointReason,
			"waiting for reservation r1, r2 to be gone"},
		{"VIP claim going", clusterDeleting(vipClaimGoing{claim: "c"}), "True", infrav1.ReleasingVIPReason, "waiting for IPAddressClaim c to be gone"},
	})
}

// status.vip and provisioned follow from the endpoint's fact.
func TestClusterStatusFields(t *testing.T) {
	s := &clusterScope{PacketCluster: &infrav1.PacketCluster{}}
	s.facts.endpoint = vipWaiting{claim: "c"}
	s.setStatus()
	if s.PacketCluster.Status.Initialization.Provisioned != nil || s.PacketCluster.Status.VIP != "" {
		t.Fatalf("status before the VIP is bound = %+v", s.PacketCluster.Status)
	}
	s.facts.endpoint = vipClaimed{vip: "10.0.0.2"}
	s.setStatus()
	if p := s.PacketCluster.Status.Initialization.Provisioned; p == nil || !*p || s.PacketCluster.Status.VIP != "10.0.0.2" {
		t.Errorf("status once the VIP is bound = %+v", s.PacketCluster.Status)
	}
}
