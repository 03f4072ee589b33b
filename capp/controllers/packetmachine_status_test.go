package controllers

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/device"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
)

// Each fact a phase records becomes one condition: its status, reason and
// message, as users read them.
func TestMachineConditionsFromFacts(t *testing.T) {
	notOwned := &device.NotOwnedError{Kind: "device", ID: "d1", Why: "it carries another machine's tag"}
	unauthorized := &metal.APIError{StatusCode: http.StatusUnauthorized, Messages: []string{"invalid token"}}
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	checkConditions(t, []conditionCase{
		{"no pool networks", ipAddressClaimed(claimsBound{}), "True", infrav1.NoIPAddressClaimsReason, "no network takes its address from a pool"},
		{"claims bound", ipAddressClaimed(claimsBound{claimCount: claimCount{2, 2}}), "True", infrav1.IPAddressClaimedReason, "2/2 bound"},
		{"claims being deleted", ipAddressClaimed(claimsDeleting{claimCount{1, 2}, []string{"a", "b"}}), "False", infrav1.IPAddressInvalidReason,
			"1/2 bound, IPAddressClaims a, b are being deleted while the machine exists: their addresses may be handed out again; delete the machine"},
		{"addresses unusable", ipAddressClaimed(addressesUnusable{claimCount{1, 1}, errors.New("no prefix")}), "False", infrav1.IPAddressInvalidReason,
			"1/1 bound, but unusable: no prefix"},
		{"claim just created", ipAddressClaimed(claimsWaiting{claimCount: claimCount{0, 1}, created: true,
			claims: []claimWait{{name: "c", pool: *poolReference(), kindServed: true}}}), "False", infrav1.IPAddressClaimsBeingCreatedReason,
			`0/1 bound; IPAddressClaim c waits on pool "pool" of kind "InClusterIPPool" (apiGroup "ipam.cluster.x-k8s.io")`},
		{"IPAM missing", ipAddressClaimed(ipamMissing{}), "False", infrav1.IPAMNotInstalledReason, ipamNotInstalledMessage},

		{"no bootstrap data", bootstrapDataRendered(waitingForBootstrap{}), "False", infrav1.WaitingForBootstrapDataReason,
			"waiting for the bootstrap provider to set the Machine's bootstrap data"},
		{"no VIP network", bootstrapDataRendered(vipNetworkMissing{cluster: "pc", vxlan: 1000}), "False", infrav1.VIPNetworkMissingReason,
			"the control-plane machine has no network with vxlan 1000 (PacketCluster pc spec.vip.vxlan) in spec.ports[].networks: kube-vip announces the VIP on its sub-interface"},
		{"VIP not bound", bootstrapDataRendered(waitingForClusterVIP{cluster: "pc"}), "False", infrav1.WaitingForVIPReason,
			"waiting for PacketCluster pc's VIP (spec.vip) to be bound"},
		{"endpoint not reserved", bootstrapDataRendered(waitingForClusterEndpoint{cluster: "pc"}), "False", infrav1.WaitingForControlPlaneEndpointReason,
			"waiting for PacketCluster pc to reserve its control-plane endpoint (vipManager CPEM), which the user-data binds to the node's lo"},
		{"reserved endpoint not an address", bootstrapDataRendered(clusterEndpointInvalid{cluster: "pc", host: "api.example"}), "False", infrav1.BootstrapDataInvalidReason,
			`PacketCluster pc spec.controlPlaneEndpoint.host "api.example" is not the IP address of the endpoint it reserved`},
		{"Secret name taken", bootstrapDataRendered(&foreignSecretError{secret: "m-user-data"}), "False", infrav1.UserDataSecretConflictReason,
			"Secret m-user-data exists and is not controlled by this PacketMachine; it is left as it is: delete or rename it"},
		{"set-up problem", bootstrapDataRendered(&setupError{infrav1.NoCredentialsReason, "no credentials"}), "False", infrav1.NoCredentialsReason, "no credentials"},
		{"rendered", bootstrapDataRendered(bootstrapRendered{secret: "s"}), "True", infrav1.BootstrapDataRenderedReason, ""},

		{"device active", deviceReady(deviceSeen{id: "d1", state: "active", active: true}), "True", infrav1.DeviceActiveReason, "device d1 is active"},
		{"device provisioning", deviceReady(deviceSeen{id: "d1", state: "queued"}), "False", infrav1.DeviceProvisioningReason, "device d1 is queued"},
		{"device gone", deviceReady(deviceGone{id: "d1"}), "False", infrav1.DeviceDeletedReason, "device d1 no longer exists: delete the Machine to replace it"},
		{"device not owned", deviceReady(deviceNotOwned{field: `spec.providerID "equinixmetal://d1"`, err: notOwned}), "False", infrav1.DeviceNotOwnedReason,
			`spec.providerID "equinixmetal://d1": device d1 is not this object's: it carries another machine's tag; the provider does nothing with it but read it, and deleting the machine leaves it alone`},
		{"VLAN missing in the failure domain's metro", deviceReady(vlansMissing{problems: []vlanProblem{{"spec.ports[0].networks[0] (vxlan 1000)", errors.New("not in metro da")}},
			failureDomain: "fd", metro: "da"}), "False", infrav1.VLANNotFoundReason,
			`the Machine's failure domain "fd" places the device in metro da: spec.ports[0].networks[0] (vxlan 1000): not in metro da`},
		{"create refused", deviceReady(createRefused{plan: "p", os: "o", metro: "da", reservation: "r", messages: []string{"no capacity", "try later"}}),
			"False", infrav1.DeviceCreateFailedReason,
			`the platform refused to create the device (plan "p", operating system "o", metro "da", facility "", hardwareReservationID "r"): no capacity; try later`},
		{"project refused", deviceReady(projectUnreachable{project: "p1", source: "Secret ns/creds", err: errors.New("404")}), "False", infrav1.ProjectNotFoundReason,
			"project p1 (spec.project, or the PacketCluster's spec.projectID) does not exist or Secret ns/creds cannot reach it: 404"},
		{"device failed", deviceReady(deviceFailed{message: "device d1 failed", platformReason: "no IP"}), "False", infrav1.DeviceFailedReason, "device d1 failed: no IP"},
		{"credentials refused", deviceReady(metalCallFailed{what: "reading the device", err: unauthorized, source: "Secret ns/creds"}), "False",
			infrav1.InvalidCredentialsReason, fmt.Sprintf("reading the device: the Metal API refused the credentials of Secret ns/creds: %v", unauthorized)},
		{"two devices", deviceReady(metalCallFailed{what: "reading the device", err: device.ErrAmbiguous}), "False", infrav1.AmbiguousDeviceReason,
			fmt.Sprintf("reading the device: %v (retrying)", device.ErrAmbiguous)},
		{"a 503", deviceReady(metalCallFailed{what: "reading the device", err: errors.New("503")}), "False", infrav1.MetalAPIErrorReason, "reading the device: 503 (retrying)"},

		{"VLANs attached", vlansAttachedCondition(vlansAttached{spec: device.Spec{Ports: []device.PortSpec{{Name: "eth1", VLANs: []device.VLAN{{VXLAN: 1000}, {VXLAN: 1001}}}}}}),
			"True", infrav1.VLANsAttachedReason, "eth1: 1000, 1001"},
		{"batch in flight", vlansAttachedCondition(batchInFlight{batch: "b", port: "eth1"}), "False", infrav1.VLANsAttachingReason, "VLAN assignment batch b of port eth1 is in flight"},
		{"port missing", vlansAttachedCondition(portFailed{notFound: true, index: 1, port: "eth3", message: "the device has no port eth3"}), "False",
			infrav1.PortNotFoundReason, `spec.ports[1].name "eth3": the device has no port eth3`},
		{"disbonding", vlansAttachedCondition(portStepSent{disbond: true, port: "eth1"}), "False", infrav1.PortDisbondingReason, "taking port eth1 out of bond0"},
		{"VLANs sent", vlansAttachedCondition(portStepSent{port: "eth1", vlans: []device.VLAN{{VXLAN: 1000}}}), "False", infrav1.VLANsAttachingReason, "attaching VLANs 1000 to port eth1"},

		{"endpoint here", endpointAssigned(endpointRouted{address: "198.51.100.1", device: "d1"}), "True", infrav1.EndpointAssignedReason,
			"the endpoint 198.51.100.1 is routed to device d1"},
		{"endpoint elsewhere", endpointAssigned(endpointRouted{address: "198.51.100.1", device: "d1", elsewhere: []string{"d2"}}), "True",
			infrav1.EndpointAssignedElsewhereReason, "the endpoint 198.51.100.1 is routed to device d2; once that device's machine is deleted, it goes to a control-plane machine whose node has joined"},
		{"endpoint routed nowhere", endpointAssigned(endpointNotRouted{address: "198.51.100.1"}), "False", infrav1.EndpointNotRoutedReason,
			"the endpoint 198.51.100.1 is routed to no device: it goes to a control-plane machine whose node has joined the cluster, which this one's has not yet"},
		{"kept True", endpointAssigned(alreadyTrue{reason: infrav1.EndpointAssignedReason, message: "as written"}), "True", infrav1.EndpointAssignedReason, "as written"},

		{"node configured", nodeNetworkConfigured(nodeReported{device: "d1", report: device.Report{State: device.UserStateSucceeded, Message: "ok", At: at}}),
			"True", infrav1.NodeNetworkConfiguredReason, "the node reported ok at 2026-03-01T12:00:00Z"},
		{"node failed, late or not", nodeNetworkConfigured(nodeReported{device: "d1", late: true, report: device.Report{State: device.UserStateFailed, Message: "bad", At: at}}),
			"False", infrav1.NodeNetworkFailedReason, "the node reported at 2026-03-01T12:00:00Z: bad"},
		{"node late", nodeNetworkConfigured(nodeReported{device: "d1", late: true, timeout: time.Minute}), "False", infrav1.TimeoutReason,
			"the node of device d1 has not reported its network configuration within 1m0s of the device becoming active (--node-report-timeout)"},
		{"node running", nodeNetworkConfigured(nodeReported{device: "d1", report: device.Report{State: device.UserStateRunning, At: at}}), "False",
			infrav1.WaitingForNodeReason, "the node of device d1 started configuring its network at 2026-03-01T12:00:00Z"},
		{"node silent", nodeNetworkConfigured(nodeReported{device: "d1"}), "False", infrav1.WaitingForNodeReason,
			"device d1 is active; its node has not reported its network configuration yet"},
		{"adopted device", nodeNetworkConfigured(nodeReportNotExpected{device: "d1", tag: "t"}), "True", infrav1.NodeReportNotExpectedReason,
			"device d1 was not created by this provider (it lacks the tag t): its node runs no network script to report"},

		{"deleting without credentials", machineDeleting(&setupError{infrav1.NoCredentialsReason, "no credentials"}), "True", infrav1.DeletingDeviceReason,
			"cannot delete the device: no credentials"},
		{"device left alone", machineDeleting(deviceLeftAlone{err: notOwned}), "True", infrav1.DeletingDeviceReason,
			"left device d1 alone: device d1 is not this object's: it carries another machine's tag"},
		{"delete failed", machineDeleting(metalCallFailed{what: "deleting device d1", err: errors.New("503")}), "True", infrav1.DeletingDeviceReason,
			"deleting device d1: 503 (retrying)"},
		{"claims releasing", machineDeleting(claimsReleasing{remaining: 2}), "True", infrav1.ReleasingAddressesReason, "the device is gone; releasing 2 IPAddressClaims"},
	})
}

// conditionCase is the condition a fact's derivation gave and the one it
// must give.
type conditionCase struct {
	name   string
	got    metav1.Condition
	status metav1.ConditionStatus
	reason string
	msg    string
}

func checkConditions(t *testing.T, cases []conditionCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.got
			if c.Status != tt.status || c.Reason != tt.reason || c.Message != tt.msg {
				t.Errorf("got %s/%s %q\nwant %s/%s %q", c.Status, c.Reason, c.Message, tt.status, tt.reason, tt.msg)
			}
		})
	}
}

// IPAddressClaimsFulfilled shares IPAddressClaimed's status and message and
// keeps the reasons that say what to fix.
func TestIPAddressClaimsFulfilled(t *testing.T) {
	for _, tt := range []struct {
		claimed metav1.Condition
		reason  string
	}{
		{trueCondition(infrav1.IPAddressClaimedCondition, infrav1.IPAddressClaimedReason, "1/1 bound"), infrav1.IPAddressClaimsFulfilledReason},
		{falseCondition(infrav1.IPAddressClaimedCondition, infrav1.WaitingForIPAddressReason, "0/1 bound"), infrav1.IPAddressClaimsNotFulfilledReason},
		{falseCondition(infrav1.IPAddressClaimedCondition, infrav1.PoolKindNotServedReason, "fix it"), infrav1.PoolKindNotServedReason},
		{falseCondition(infrav1.IPAddressClaimedCondition, infrav1.IPAMNotInstalledReason, "install"), infrav1.IPAMNotInstalledReason},
	} {
		got := ipAddressClaimsFulfilled(tt.claimed)
		if got.Type != infrav1.IPAddressClaimsFulfilledCondition || got.Status != tt.claimed.Status || got.Reason != tt.reason || got.Message != tt.claimed.Message {
			t.Errorf("ipAddressClaimsFulfilled(%s) = %+v, want reason %s", tt.claimed.Reason, got, tt.reason)
		}
	}
}

// status.addresses are written in one place: the VLANs' and the device's
// once the device was read, the VLANs' alone before it exists, and kept
// as they were when neither was observed.
func TestMachineAddresses(t *testing.T) {
	vlan := []clusterv1.MachineAddress{{Type: clusterv1.MachineInternalIP, Address: "10.0.0.5"}}
	kept := []clusterv1.MachineAddress{{Type: clusterv1.MachineHostName, Address: "old"}}
	dev := &device.Device{ID: "d1", Hostname: "m", Addresses: []device.Address{{Address: "198.51.100.7", Public: true}, {Address: "10.1.0.2"}}}
	bound := claimsBound{networks: resolvedNetworks{addresses: vlan}}
	for _, tt := range []struct {
		name       string
		providerID string
		facts      machineFacts
		dev        *device.Device
		want       []string
	}{
		{"device read", "equinixmetal://d1", machineFacts{claims: bound}, dev, []string{"10.0.0.5", "198.51.100.7", "10.1.0.2", "m"}},
		{"no device yet", "", machineFacts{claims: bound}, nil, []string{"10.0.0.5"}},
		{"device not read this time", "equinixmetal://d1", machineFacts{claims: bound}, nil, []string{"old"}},
		{"claims not bound", "", machineFacts{claims: claimsWaiting{}}, nil, []string{"old"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pm := &infrav1.PacketMachine{Spec: infrav1.PacketMachineSpec{ProviderID: tt.providerID}}
			pm.Status.Addresses = kept
			setMachineFields(pm, tt.facts, tt.dev)
			var got []string
			for _, a := range pm.Status.Addresses {
				got = append(got, a.Address)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("status.addresses = %v, want %v", got, tt.want)
			}
		})
	}
}

// unknownDeviceFact is a fact of DeviceReady its derivation does not know
// (a fact of another condition does not compile there).
type unknownDeviceFact struct{}

func (unknownDeviceFact) deviceFact() {}

// A fact no derivation knows is Unknown, never a guess.
func TestUnknownFact(t *testing.T) {
	if got := deviceReady(unknownDeviceFact{}); got.Status != metav1.ConditionUnknown || got.Reason != "UnknownFact" {
		t.Errorf("a fact its derivation does not know = %+v, want Unknown", got)
	}
}
