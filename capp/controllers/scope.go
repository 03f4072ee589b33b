package controllers

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/cloudinit"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/device"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/internal/pacing"
)

// machineScope is what the phases of one reconcile share: the objects read
// before the phases run, what each phase found for the next, and what they
// observed for the conditions.
type machineScope struct {
	PacketMachine *infrav1.PacketMachine
	// Machine and Cluster are nil while CAPI has not linked the machine yet
	// (and may be nil when a machine is deleted).
	Machine *clusterv1.Machine
	Cluster *clusterv1.Cluster

	// Networks are the machine's networks with their addresses, set by
	// reconcileIPAddresses.
	Networks []cloudinit.Network
	// UserData is the rendered user-data, set by reconcileBootstrapData.
	UserData []byte
	// access reaches the machine's device, set by the first phase that
	// needs the Metal API.
	access *metalAccess
	// Device is the machine's device as the platform shows it, proven the
	// machine's; nil when it has none or it was not read.
	Device *device.Device
	// spec is what the machine wants of the platform and step the next
	// step device.Plan gave for it, both set by reconcileDevice (deleteDevice
	// sets step to device.PlanDelete's once it has read the device);
	// reconcilePorts carries out a step of the ports. hold says what a
	// WaitCreate or WaitVLANs step waits for.
	spec device.Spec
	step device.Step
	hold hold
	// placement is where the device is created, set by creationReady.
	placement placement

	// facts are what the phases observed, for setStatus; run is where
	// they stopped; turn is the reconcile at the machine's Metal gate.
	facts    machineFacts
	run      phaseRun
	turn     *pacing.Turn
	deleting bool
}

// hold is what keeps a machine's next step from being taken: the fact that
// says so, of the device (a failure domain, a VLAN or a creation slot
// missing: WaitCreate) or of its ports (a VLAN missing: WaitVLANs), and when
// to look again.
type hold struct {
	device deviceFact
	ports  portsFact
	retry  time.Duration
}

// phaseRun is where a run of phases stopped: the index of the phase that
// stopped it, and whether on an error rather than waiting.
type phaseRun struct {
	stoppedAt int
	failed    bool
}

// reasonChanges reports whether the condition's reason, as last written,
// differs from reason: events are emitted on such changes only.
func (s *machineScope) reasonChanges(conditionType, reason string) bool {
	return conditions.GetReason(s.PacketMachine, conditionType) != reason
}

// warnOnChange emits a Warning event with the condition's reason and
// message when the reason differs from the one last written: a problem is
// told once, not on every retry.
func warnOnChange(rec events.EventRecorder, obj interface {
	conditions.Getter
	runtime.Object
}, c metav1.Condition, action string) {
	if conditions.GetReason(obj, c.Type) != c.Reason {
		rec.Eventf(obj, nil, corev1.EventTypeWarning, c.Reason, action, "%s", c.Message)
	}
}
