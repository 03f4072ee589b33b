package controllers

import (
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/conditions"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
)

// The conditions a reconcile writes follow from what its phases observed.
func TestSetConditions(t *testing.T) {
	type want struct {
		status metav1.ConditionStatus
		reason string
	}
	tests := []struct {
		name    string
		before  map[string]string // condition type -> reason, as last written (status True)
		observe func(*machineScope)
		want    map[string]*want // nil: absent
	}{
		{
			name: "a phase that waits: the later ones say what they wait for",
			observe: func(s *machineScope) {
				s.facts.claims = claimsBound{claimCount: claimCount{bound: 1, total: 1}}
				s.facts.bootstrap = waitingForBootstrap{}
				s.run.stoppedAt = 1
			},
			want: map[string]*want{
				infrav1.IPAddressClaimsFulfilledCondition: {metav1.ConditionTrue, infrav1.IPAddressClaimsFulfilledReason},
				infrav1.BootstrapDataRenderedCondition:    {metav1.ConditionFalse, infrav1.WaitingForBootstrapDataReason},
				infrav1.DeviceReadyCondition:              {metav1.ConditionFalse, infrav1.WaitingForPreviousReason},
				infrav1.NodeNetworkConfiguredCondition:    {metav1.ConditionFalse, infrav1.WaitingForPreviousReason},
				infrav1.ReadyCondition:                    {metav1.ConditionFalse, ""},
			},
		},
		{
			name:   "a phase that failed: what was not observed keeps its last value",
			before: map[string]string{infrav1.VLANsAttachedCondition: infrav1.VLANsAttachedReason},
			observe: func(s *machineScope) {
				s.facts.device = metalCallFailed{what: "reading the device", err: errors.New("503")}
				s.run = phaseRun{stoppedAt: 2, failed: true}
			},
			want: map[string]*want{
				infrav1.DeviceReadyCondition:           {metav1.ConditionFalse, infrav1.MetalAPIErrorReason},
				infrav1.VLANsAttachedCondition:         {metav1.ConditionTrue, infrav1.VLANsAttachedReason},
				infrav1.NodeNetworkConfiguredCondition: nil,
			},
		},
		{
			name: "every phase done: Ready",
			observe: func(s *machineScope) {
				s.facts = machineFacts{claims: claimsBound{}, bootstrap: bootstrapRendered{}, device: deviceSeen{active: true},
					ports: vlansAttached{}, endpoint: alreadyTrue{reason: "Done"}, node: alreadyTrue{reason: "Done"}}
				s.run.stoppedAt = len(lifecycle)
			},
			want: map[string]*want{infrav1.ReadyCondition: {metav1.ConditionTrue, ""}},
		},
		{
			name:   "deleting: only Deleting is written",
			before: map[string]string{infrav1.DeviceReadyCondition: infrav1.DeviceActiveReason},
			observe: func(s *machineScope) {
				s.deleting = true
				s.facts.deletion = deviceGoing{id: "d"}
			},
			want: map[string]*want{
				infrav1.DeletingCondition:    {metav1.ConditionTrue, infrav1.DeletingDeviceReason},
				infrav1.DeviceReadyCondition: {metav1.ConditionTrue, infrav1.DeviceActiveReason},
				infrav1.ReadyCondition:       nil,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &machineScope{PacketMachine: &infrav1.PacketMachine{ObjectMeta: metav1.ObjectMeta{Generation: 4}}}
			for typ, reason := range tt.before {
				conditions.Set(s.PacketMachine, metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: reason})
			}
			tt.observe(s)
			s.setStatus()
			for typ, w := range tt.want {
				got := conditions.Get(s.PacketMachine, typ)
				switch {
				case w == nil && got != nil:
					t.Errorf("%s = %+v, want none", typ, got)
				case w == nil:
				case got == nil:
					t.Errorf("%s missing", typ)
				case got.Status != w.status || (w.reason != "" && got.Reason != w.reason) || got.ObservedGeneration != 4:
					t.Errorf("%s = %s/%s (generation %d), want %s/%s (4)", typ, got.Status, got.Reason, got.ObservedGeneration, w.status, w.reason)
				}
			}
			if g := s.PacketMachine.Status.ObservedGeneration; g != 4 {
				t.Errorf("status.observedGeneration = %d, want 4", g)
			}
		})
	}
}

func TestCreateMayHaveRun(t *testing.T) {
	for reason, want := range map[string]bool{
		"":                                      false,
		infrav1.WaitingForPreviousReason:        false,
		infrav1.CredentialsSecretNotFoundReason: false,
		infrav1.ProjectNotFoundReason:           false,
		infrav1.VLANNotFoundReason:              false,
		infrav1.WaitingForCreationSlotReason:    false,
		infrav1.MetalAPIErrorReason:             true,
		infrav1.DeviceCreateFailedReason:        true,
		infrav1.DeviceProvisioningReason:        true,
	} {
		pm := &infrav1.PacketMachine{}
		if reason != "" {
			conditions.Set(pm, metav1.Condition{Type: infrav1.DeviceReadyCondition, Status: metav1.ConditionFalse, Reason: reason})
		}
		if got := createMayHaveRun(pm); got != want {
			t.Errorf("createMayHaveRun(DeviceReady %q) = %v, want %v", reason, got, want)
		}
	}
}
