package controllers

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/device"
)

// The derivations of a PacketMachine's conditions from the device onwards,
// and of its Deleting condition (see packetmachine_status.go).

func deviceReady(f deviceFact) metav1.Condition {
	const t = infrav1.DeviceReadyCondition
	switch f := f.(type) {
	case deviceSeen:
		if f.active {
			return trueCondition(t, infrav1.DeviceActiveReason, fmt.Sprintf("device %s is active", f.id))
		}
		return falseCondition(t, infrav1.DeviceProvisioningReason, fmt.Sprintf("device %s is %s", f.id, f.state))
	case deviceGone:
		return falseCondition(t, infrav1.DeviceDeletedReason, fmt.Sprintf("device %s no longer exists: delete the Machine to replace it", f.id))
	case deviceNotOwned:
		return falseCondition(t, infrav1.DeviceNotOwnedReason, fmt.Sprintf(
			"%s: %v; the provider does nothing with it but read it, and deleting the machine leaves it alone", f.field, f.err))
	case *failureDomainError:
		return falseCondition(t, f.reason(), f.Error())
	case vlansMissing:
		return falseCondition(t, infrav1.VLANNotFoundReason, f.message())
	case waitingForSlot:
		return falseCondition(t, infrav1.WaitingForCreationSlotReason, f.waiting)
	case reservationUnavailable:
		return falseCondition(t, infrav1.HardwareReservationUnavailableReason, fmt.Sprintf("spec.hardwareReservationID %q: %v", f.id, f.err))
	case createRefused:
		return falseCondition(t, infrav1.DeviceCreateFailedReason, fmt.Sprintf(
			"the platform refused to create the device (plan %q, operating system %q, metro %q, facility %q, hardwareReservationID %q): %s",
			f.plan, f.os, f.metro, f.facility, f.reservation, strings.Join(f.messages, "; ")))
	case projectUnreachable:
		return falseCondition(t, infrav1.ProjectNotFoundReason, fmt.Sprintf(
			"project %s (spec.project, or the PacketCluster's spec.projectID) does not exist or %s cannot reach it: %v",
			f.project, f.source, f.err))
	case deviceFailed:
		reason := infrav1.DeviceFailedReason
		if f.deleted {
			reason = infrav1.DeviceDeletedReason
		}
		msg := f.message
		if f.platformReason != "" {
			msg += ": " + f.platformReason
		}
		return falseCondition(t, reason, msg)
	}
	return commonCondition(t, f)
}

// message names the networks whose VLANs cannot be used, by field, and the
// failure domain that chose the metro.
func (f vlansMissing) message() string {
	parts := make([]string, len(f.problems))
	for i, p := range f.problems {
		parts[i] = p.err.Error()
		if p.field != "" {
			parts[i] = fmt.Sprintf("%s: %v", p.field, p.err)
		}
	}
	msg := strings.Join(parts, "; ")
	if f.failureDomain != "" {
		msg = fmt.Sprintf("the Machine's failure domain %q places the device in metro %s: %s", f.failureDomain, f.metro, msg)
	}
	return msg
}

func vlansAttachedCondition(f portsFact) metav1.Condition {
	const t = infrav1.VLANsAttachedCondition
	switch f := f.(type) {
	case vlansMissing:
		return falseCondition(t, infrav1.VLANNotFoundReason, f.message())
	case vlansAttached:
		return trueCondition(t, infrav1.VLANsAttachedReason, attachedMessage(f.spec))
	case batchInFlight:
		return falseCondition(t, infrav1.VLANsAttachingReason, fmt.Sprintf("VLAN assignment batch %s of port %s is in flight", f.batch, f.port))
	case portFailed:
		if f.notFound {
			return falseCondition(t, infrav1.PortNotFoundReason, fmt.Sprintf("spec.ports[%d].name %q: %s", f.index, f.port, f.message))
		}
		return falseCondition(t, infrav1.VLANAttachFailedReason, f.message)
	case portStepSent:
		if f.disbond {
			return falseCondition(t, infrav1.PortDisbondingReason, fmt.Sprintf("taking port %s out of bond0", f.port))
		}
		return falseCondition(t, infrav1.VLANsAttachingReason, fmt.Sprintf("attaching VLANs %s to port %s", vxlans(f.vlans), f.port))
	}
	return commonCondition(t, f)
}

func endpointAssigned(f endpointFact) metav1.Condition {
	const t = infrav1.ControlPlaneEndpointAssignedCondition
	switch f := f.(type) {
	case endpointNotOwned:
		return falseCondition(t, infrav1.EndpointReservationNotOwnedReason, fmt.Sprintf(
			"PacketCluster %s metadata.annotations[%s] %q: %v; it is not routed to the device",
			f.cluster, infrav1.EndpointReservationAnnotation, f.id, f.err))
	case endpointRouted:
		if len(f.elsewhere) > 0 {
			return trueCondition(t, infrav1.EndpointAssignedElsewhereReason, fmt.Sprintf(
				"the endpoint %s is routed to device %s; once that device's machine is deleted, it goes to a control-plane machine whose node has joined",
				f.address, strings.Join(f.elsewhere, ", ")))
		}
		return trueCondition(t, infrav1.EndpointAssignedReason, fmt.Sprintf("the endpoint %s is routed to device %s", f.address, f.device))
	case endpointAssignRefused:
		return falseCondition(t, infrav1.EndpointAssignRefusedReason, fmt.Sprintf("the platform refused to route the endpoint %s to device %s: %s",
			f.address, f.device, strings.Join(f.messages, "; ")))
	case endpointNotRouted:
		return falseCondition(t, infrav1.EndpointNotRoutedReason, fmt.Sprintf(
			"the endpoint %s is routed to no device: it goes to a control-plane machine whose node has joined the cluster, which this one's has not yet", f.address))
	}
	return commonCondition(t, f)
}

func nodeNetworkConfigured(f nodeFact) metav1.Condition {
	const t = infrav1.NodeNetworkConfiguredCondition
	switch f := f.(type) {
	case nodeReportNotExpected:
		return trueCondition(t, infrav1.NodeReportNotExpectedReason, fmt.Sprintf(
			"device %s was not created by this provider (it lacks the tag %s): its node runs no network script to report", f.device, f.tag))
	case nodeReported:
		at := f.report.At.UTC().Format(time.RFC3339)
		switch {
		case f.report.State == device.UserStateSucceeded:
			return trueCondition(t, infrav1.NodeNetworkConfiguredReason, fmt.Sprintf("the node reported %s at %s", f.report.Message, at))
		case f.report.State == device.UserStateFailed:
			return falseCondition(t, infrav1.NodeNetworkFailedReason, fmt.Sprintf("the node reported at %s: %s", at, f.report.Message))
		case f.late:
			return falseCondition(t, infrav1.TimeoutReason, fmt.Sprintf(
				"the node of device %s has not reported its network configuration within %s of the device becoming active (--node-report-timeout)", f.device, f.timeout))
		case f.report.State == device.UserStateRunning:
			return falseCondition(t, infrav1.WaitingForNodeReason, fmt.Sprintf("the node of device %s started configuring its network at %s", f.device, at))
		}
		return falseCondition(t, infrav1.WaitingForNodeReason, fmt.Sprintf("device %s is active; its node has not reported its network configuration yet", f.device))
	}
	return commonCondition(t, f)
}

// machineDeleting is the Deleting condition: True with what the deletion
// waits for.
func machineDeleting(f deletionFact) metav1.Condition {
	const t = infrav1.DeletingCondition
	switch f := f.(type) {
	case *setupError:
		return trueCondition(t, infrav1.DeletingDeviceReason, "cannot delete the device: "+f.message)
	case deviceLeftAlone:
		return trueCondition(t, infrav1.DeletingDeviceReason, fmt.Sprintf("left device %s alone: %v", f.err.ID, f.err))
	case metalCallFailed:
		return trueCondition(t, infrav1.DeletingDeviceReason, fmt.Sprintf("%s: %v (retrying)", f.what, f.err))
	case deviceGoing:
		return trueCondition(t, infrav1.DeletingDeviceReason, fmt.Sprintf("waiting for device %s to be gone", f.id))
	case claimsReleasing:
		return trueCondition(t, infrav1.ReleasingAddressesReason, fmt.Sprintf("the device is gone; releasing %d IPAddressClaims", f.remaining))
	}
	return commonCondition(t, f)
}
